//! The signal a process is told to stop with: SIGTERM (Kubernetes, ECS, systemd, `docker
//! stop`) or Ctrl-C.

use std::future::Future;

/// Completes when the process is asked to stop: on SIGTERM (what Kubernetes, ECS, systemd and
/// `docker stop` send) or SIGINT (Ctrl-C); where there is no SIGTERM (Windows), on Ctrl-C
/// alone. Logs which one came, at `info`. Give it to [`Consumer::run_until`](crate::Consumer::run_until)
/// (or [`run_batch_until`](crate::Consumer::run_batch_until),
/// [`stream_until`](crate::Consumer::stream_until)) for a graceful stop.
///
/// Called inside a Tokio runtime, it takes over both signals at once, so a SIGTERM that
/// comes before the future is first polled still stops it gracefully; outside one, when it is
/// first polled. From then on the process no longer dies of those signals: the stop is up
/// to the future's owner. If the operating system refuses to hand a signal over (rare), that
/// is logged at `warn` and the other one still works.
///
/// Needs feature `signal` (on by default), which turns on Tokio's `signal` feature.
///
/// ```no_run
/// use sqs_consumer::{BoxError, Consumer, Delivery};
///
/// # async fn example(consumer: Consumer) -> Result<(), BoxError> {
/// let handler = |delivery: Delivery| async move { delivery.ack().await };
/// // Until SIGTERM or Ctrl-C, then a graceful stop: within 28 s with the default settings.
/// consumer.run_until(handler, sqs_consumer::shutdown_signal()).await?;
/// # Ok(()) }
/// ```
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let taken = tokio::runtime::Handle::try_current()
        .ok()
        .map(|_| unix::Signals::take());
    async move {
        #[cfg(unix)]
        {
            let signals = match taken {
                Some(signals) => signals,
                None => unix::Signals::take(),
            };
            signals.first().await;
        }
        #[cfg(not(unix))]
        match tokio::signal::ctrl_c().await {
            Ok(()) => tracing::info!("Ctrl-C received: stopping"),
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for Ctrl-C; it will not stop the consumer gracefully");
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(unix)]
mod unix {
    use tokio::signal::unix::{signal, Signal, SignalKind};

    /// SIGTERM and SIGINT, each taken over, or why it could not be.
    pub(super) struct Signals {
        terminate: std::io::Result<Signal>,
        interrupt: std::io::Result<Signal>,
    }

    impl Signals {
        /// Takes both over now: from here on they no longer end the process.
        pub(super) fn take() -> Self {
            Self {
                terminate: take(SignalKind::terminate()),
                interrupt: take(SignalKind::interrupt()),
            }
        }

        /// Completes on the first of the two (never if neither could be taken over).
        pub(super) async fn first(self) {
            let terminate = received(self.terminate, "SIGTERM");
            let interrupt = received(self.interrupt, "SIGINT (Ctrl-C)");
            tokio::select! {
                name = terminate => tracing::info!("{name} received: stopping"),
                name = interrupt => tracing::info!("{name} received: stopping"),
            }
        }
    }

    /// `kind` taken over. Tokio panics where its runtime has no I/O driver (one built without
    /// `enable_io`): that is an error here, not a panic of the caller's.
    fn take(kind: SignalKind) -> std::io::Result<Signal> {
        std::panic::catch_unwind(|| signal(kind)).unwrap_or_else(|_| {
            Err(std::io::Error::other(
                "the Tokio runtime has no I/O driver: build it with enable_all() or enable_io()",
            ))
        })
    }

    /// Completes with `name` when the signal comes; never if it could not be taken over
    /// (logged).
    async fn received(signal: std::io::Result<Signal>, name: &'static str) -> &'static str {
        match signal {
            Ok(mut signal) => {
                signal.recv().await;
                name
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for {name}: it will not stop the consumer gracefully");
                std::future::pending().await
            }
        }
    }
}
