//! Hands what the receive loop brings to handlers (or to a stream): turns messages into
//! deliveries, skips redeliveries whose ack was lost, keeps FIFO groups in order, catches
//! handler panics, and runs the graceful shutdown.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::Context;
use crate::delivery::{Delivery, Received};
use crate::error::Error;
use crate::fifo;
use crate::handler::Handler;
use crate::queue::Queue;
use crate::receiver::{ReceiveSettings, ReceivedBatch, Receiver};
use crate::retry::RetryPolicy;
use crate::stats::{Counter, Stats};

/// What happens to each delivery handed out: run a handler, or send it down a stream.
pub(crate) type Dispatch = Arc<dyn Fn(Delivery) -> BoxFuture<'static, ()> + Send + Sync>;

/// A dispatch that runs `handler` on each delivery, catching its errors and panics.
pub(crate) fn to_handler<H: Handler>(handler: H) -> Dispatch {
    let handler = Arc::new(handler);
    Arc::new(move |d| Box::pin(run_handler(handler.clone(), d)))
}

/// The receive loop and what it feeds: one per consumer.
#[derive(Debug)]
pub(crate) struct Engine {
    ctx: Arc<Context>,
    receiver: Receiver,
    shutdown_timeout: Duration,
}

impl Engine {
    pub(crate) fn new(
        queue: Queue,
        receive: ReceiveSettings,
        retry: RetryPolicy,
        shutdown_timeout: Duration,
    ) -> Self {
        Self {
            ctx: Arc::new(Context::new(&queue, retry)),
            receiver: Receiver::new(queue, receive),
            shutdown_timeout,
        }
    }

    pub(crate) fn queue_name(&self) -> &str {
        self.ctx.queue_name()
    }

    pub(crate) fn receive_settings(&self) -> &ReceiveSettings {
        self.receiver.settings()
    }

    /// Slots taken: deliveries held, and receives under way.
    pub(crate) fn in_flight(&self) -> usize {
        self.receiver.in_flight()
    }

    pub(crate) fn stats(&self) -> Stats {
        self.ctx
            .stats(u64::try_from(self.in_flight()).unwrap_or(u64::MAX))
    }

    /// Receives and dispatches until `signal` completes or a fatal error, then shuts down
    /// gracefully (see `Consumer::run_until`).
    pub(crate) async fn run_until<S>(&self, dispatch: Dispatch, signal: S) -> Result<(), Error>
    where
        S: Future<Output = ()>,
    {
        let mut groups = JoinSet::new();
        let shutdown = CancellationToken::new();
        // Locals drop in reverse order: if this future is dropped, the guard cancels first,
        // so the deliveries the aborted handlers drop release their messages at once.
        let _release_on_drop = shutdown.clone().drop_guard();
        let result = tokio::select! {
            biased;
            () = signal => {
                tracing::info!(queue = %self.queue_name(), "shutdown signal: receiving stopped");
                Ok(())
            }
            result = self.receive(&shutdown, &mut groups, &dispatch) => result,
        };
        self.shut_down(&shutdown, groups).await;
        result
    }

    /// Receives and dispatches until `shutdown` is cancelled or a fatal error, which goes to
    /// `on_error` at once; then lets the FIFO groups already received finish handing out
    /// their deliveries. For a stream, whose consumer settles what it was handed.
    pub(crate) async fn pump(
        &self,
        dispatch: Dispatch,
        shutdown: CancellationToken,
        on_error: impl FnOnce(Error),
    ) {
        let mut groups = JoinSet::new();
        let result = tokio::select! {
            () = shutdown.cancelled() => Ok(()),
            result = self.receive(&shutdown, &mut groups, &dispatch) => result,
        };
        if let Err(err) = result {
            on_error(err);
        }
        while groups.join_next().await.is_some() {}
    }

    async fn receive(
        &self,
        shutdown: &CancellationToken,
        groups: &mut JoinSet<()>,
        dispatch: &Dispatch,
    ) -> Result<(), Error> {
        self.receiver
            .run(|batch| {
                // Group tasks log their own failures; this only frees finished ones.
                while groups.try_join_next().is_some() {}
                self.deliver(batch, shutdown, groups, dispatch);
            })
            .await
    }

    /// Turns a receive into deliveries (heartbeats start here) and starts their groups.
    /// Never awaits, so a shutdown cannot cut it in half.
    fn deliver(
        &self,
        batch: ReceivedBatch,
        shutdown: &CancellationToken,
        groups: &mut JoinSet<()>,
        dispatch: &Dispatch,
    ) {
        let ctx = &self.ctx;
        let mut permits = batch.permits.into_iter();
        let mut deliveries = Vec::with_capacity(batch.messages.len());
        for mut message in batch.messages {
            // A server that returns more than asked still gets every message handled (and
            // heartbeated); only the slot accounting is exceeded.
            let permit = permits.next();
            // The delivery keeps the receipt handle (once: real ones run to hundreds of bytes,
            // and 120,000 deliveries may be held at once).
            let receipt = message.receipt_handle.take();
            let message_id = message.message_id().unwrap_or_default();
            let Some(receipt) = receipt else {
                tracing::warn!(%message_id, "skipped a message without a receipt handle");
                continue;
            };
            if ctx.take_lost_ack(message_id) {
                ctx.count(Counter::SkippedRedeliveries);
                tracing::info!(
                    %message_id,
                    "deleting a redelivered message whose ack had failed (its delivery was \
                     lost); the handler is not called again"
                );
                let settle = ctx.clone();
                let delete = async move {
                    if let Err(err) = settle.delete(&receipt, || true).await {
                        tracing::warn!(error = %err, "deleting a redelivered message failed");
                    }
                    drop(permit);
                };
                ctx.spawn_settle(delete, &tokio::runtime::Handle::current());
                continue;
            }
            let received = Received {
                receipt,
                received_at: batch.received_at,
                returned_at: batch.returned_at,
                timeout: batch.timeout,
                permit,
                shutdown: shutdown.clone(),
            };
            deliveries.push(Delivery::start(ctx.clone(), message, received));
        }
        for group in fifo::partition(deliveries, ctx.is_fifo()) {
            let dispatch = dispatch.clone();
            // Boxed: the task then moves a pointer around, not the whole state machine.
            groups.spawn(Box::pin(fifo::run_group(
                group,
                shutdown.clone(),
                move |d| dispatch(d),
            )));
        }
    }

    /// Steps 2 to 5 of the shutdown described on `Consumer::run_until`.
    async fn shut_down(&self, shutdown: &CancellationToken, mut groups: JoinSet<()>) {
        shutdown.cancel();
        let running = groups.len();
        let limit = self.shutdown_timeout;
        if running > 0 {
            tracing::info!(running, timeout = ?limit, "waiting for running handlers");
        }
        let drained =
            tokio::time::timeout(limit, async { while groups.join_next().await.is_some() {} })
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
        self.ctx.flush_settles().await;
        tracing::info!(queue = %self.queue_name(), "consumer stopped");
    }
}

async fn run_handler<H: Handler>(handler: Arc<H>, delivery: Delivery) {
    let span = delivery.span().clone();
    let ctx = delivery.context().clone();
    async move {
        match AssertUnwindSafe(handler.handle(delivery))
            .catch_unwind()
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                ctx.count(Counter::HandlerErrors);
                tracing::warn!(error = %err, "handler failed");
            }
            Err(panic) => {
                ctx.count(Counter::HandlerPanics);
                tracing::error!(panic = panic_message(&*panic), "handler panicked");
            }
        }
    }
    .instrument(span)
    .await
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}
