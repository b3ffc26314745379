//! One run of the engine (a `run_until`, or a stream): its handler tasks and late arrivals,
//! its receive loop on a task of its own, and its shutdown.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{self, ready, Poll};

use futures_util::future::BoxFuture;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::instrument::WithSubscriber;
use tracing::Instrument;

use crate::delivery::run_ties::RunTies;
use crate::delivery::Delivery;
use crate::error::Error;
use crate::handler::batch_window::Collector;
use crate::lease::Lease;
use crate::readable::{Count, Secs};

/// One run of the engine: a `run_until`, or a stream.
#[derive(Debug)]
pub(crate) struct Run {
    /// Its shutdown signal and runtime, and its deliveries' count.
    pub(super) ties: Arc<RunTies>,
    /// The tasks handing out the run's deliveries (one per FIFO group, or per delivery).
    pub(super) groups: JoinSet<()>,
    /// Cancelled once the shutdown timeout has passed (or the stream is dropped): what is
    /// received after it goes to `late_arrivals`, not to a handler.
    pub(super) late: CancellationToken,
    /// Deliveries received too late to be handed out, released once receiving has ended.
    pub(super) late_arrivals: Vec<Delivery>,
    /// The filling batch of a batch handler with a window, once one was received.
    pub(super) collector: Option<Collector>,
    /// The leases of an event's deliveries (none for the consumer's own receives): its end
    /// reads how each ended, and lets go of those kept hidden after their ack.
    pub(super) event_leases: Vec<Arc<Lease>>,
}

impl Run {
    /// Cancelled once the run's shutdown timeout has passed.
    pub(crate) fn late(&self) -> &CancellationToken {
        &self.late
    }

    /// Releases the deliveries received too late to be handed out (visibility 0), so that
    /// they go to the next consumer at once rather than stay hidden for a visibility timeout.
    pub(super) async fn release_late(&mut self) {
        let late = std::mem::take(&mut self.late_arrivals);
        if late.is_empty() {
            return;
        }
        tracing::info!(
            count = late.len(),
            "releasing messages received after the shutdown timeout"
        );
        // Together: their releases go out in batches, not one request after another.
        let releases = late.into_iter().map(|d| async move {
            let message_id = d.message_id().to_owned();
            if let Err(err) = d.release().await {
                tracing::warn!(%message_id, error = %err.chain(), "releasing a late delivery failed; it returns when its visibility lapses");
            }
        });
        futures_util::future::join_all(releases).await;
    }
}

/// A run's receive loop (`Engine::receive`) on a task of its own, which gives the run back
/// when the loop ends.
///
/// `run_until` is often awaited on a thread that is no worker of its runtime (the future
/// `#[tokio::main]` blocks on): from there, each handler the loop spawns is handed across
/// threads, a parked worker woken for it, and each receive's answer wakes that thread. As a
/// task, the loop runs on a worker, and what it spawns goes to that worker's own queue.
/// Dropped before the loop ends, it aborts the task. Outside a runtime's context, the loop
/// runs where it is awaited.
pub(super) struct ReceiveTask(Looping);

type LoopEnd = (Result<(), Error>, Run);

enum Looping {
    Task(JoinHandle<LoopEnd>),
    InPlace(BoxFuture<'static, LoopEnd>),
    Ended,
}

impl ReceiveTask {
    /// Runs `receiving` (the run's receive loop, which gives the run back when it ends) on a
    /// task of its own, or in place outside a runtime's context.
    pub(super) fn start(receiving: impl Future<Output = LoopEnd> + Send + 'static) -> Self {
        Self(match tokio::runtime::Handle::try_current() {
            // In the caller's span, for the caller's subscriber (one set for its thread only,
            // too): the loop's events go where they went when it ran in place.
            Ok(runtime) => {
                Looping::Task(runtime.spawn(receiving.in_current_span().with_current_subscriber()))
            }
            Err(_) => Looping::InPlace(Box::pin(receiving)),
        })
    }
}

impl Future for ReceiveTask {
    /// The loop's end, or an error if the runtime shut down first (the run went with it).
    type Output = Result<LoopEnd, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut task::Context<'_>) -> Poll<Self::Output> {
        let ended = match &mut self.0 {
            Looping::Task(task) => match ready!(Pin::new(task).poll(cx)) {
                Ok(end) => Ok(end),
                // A panic in the loop goes on where the run is awaited, as it did in place.
                Err(gone) if gone.is_panic() => std::panic::resume_unwind(gone.into_panic()),
                Err(_) => Err(Error::runtime_gone("ReceiveMessage")),
            },
            Looping::InPlace(receiving) => Ok(ready!(receiving.as_mut().poll(cx))),
            Looping::Ended => return Poll::Pending,
        };
        self.0 = Looping::Ended;
        Poll::Ready(ended)
    }
}

impl Drop for ReceiveTask {
    fn drop(&mut self) {
        if let Looping::Task(task) = &self.0 {
            task.abort();
        }
    }
}

impl Run {
    /// Steps 3 to 5 of the shutdown described on `Consumer::run_until`: the late arrivals
    /// released (for at most until `releases_end`), the handlers given until `deadline` to
    /// finish, then cancelled.
    pub(super) async fn drain(mut self, deadline: Instant, releases_end: Instant) {
        // From here on, a delivery dropped is released at once.
        self.ties.shutdown().cancel();
        let _ = tokio::time::timeout_at(releases_end, self.release_late()).await;
        // The collector goes first: its task hands out what is still filling, and ends once
        // those handlers are done.
        let Run {
            mut groups,
            collector,
            ..
        } = self;
        drop(collector);
        // Count the handler tasks still running, not those finished and not yet reaped.
        while groups.try_join_next().is_some() {}
        let running = groups.len();
        if running > 0 {
            tracing::info!(
                "waiting for {} to finish, up to {}",
                Count(running, "running handler", "running handlers"),
                Secs(deadline.saturating_duration_since(Instant::now()))
            );
        }
        let drained = tokio::time::timeout_at(deadline, async {
            while groups.join_next().await.is_some() {}
        })
        .await
        .is_ok();
        if !drained {
            tracing::warn!(
                running = groups.len(),
                "handlers still running at the shutdown timeout: cancelling them and releasing \
                 their messages"
            );
            groups.shutdown().await;
        }
    }
}
