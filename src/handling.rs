//! Running a handler on its deliveries: its time limit, its panics, its errors (logged with
//! their whole chain), and what happens to the deliveries it leaves unsettled, which its
//! outcome and the consumer's [`AckMode`] decide.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use crate::batch_handler::{Batch, BatchHandler};
use crate::context::Context;
use crate::delivery::Delivery;
use crate::error::{self, BoxError, ErrorKind};
use crate::handler::Handler;
use crate::lease::Lease;
use crate::stats::Counter;

/// What a handler's `Ok` means for the deliveries it leaves unsettled (dropped without
/// `ack`, `release` or `release_after`), set with
/// [`ack_mode`](crate::ConsumerBuilder::ack_mode).
///
/// Whatever the mode, a handler that returns an error, panics, or runs past its
/// [`handler_timeout`](crate::ConsumerBuilder::handler_timeout) leaves its unsettled
/// deliveries to the [`RetryPolicy`](crate::RetryPolicy), and a delivery the handler moved
/// elsewhere (and still holds) is not touched: it is settled, or meets the retry policy, when
/// it is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AckMode {
    /// You settle each delivery yourself. `Ok` without settling is counted
    /// ([`Stats::unsettled`](crate::Stats::unsettled)) and warned about (the first time, then
    /// at counts 2, 4, 8, ...), and the delivery meets the retry policy: by default its
    /// message comes back when its visibility lapses. The default.
    #[default]
    Manual,
    /// `Ok` acks what the handler left unsettled (deleted together, in one request for up to
    /// 10); an error, a panic or a timeout applies the retry policy.
    OnSuccess,
}

/// How the consumer runs each handler.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HandlerSettings {
    pub(crate) ack_mode: AckMode,
    /// `None`: no limit.
    pub(crate) timeout: Option<Duration>,
}

/// How a handler ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Failed,
    Panicked,
    TimedOut,
}

/// Runs `handler` on one delivery.
pub(crate) async fn run_handler<H: Handler>(
    handler: Arc<H>,
    delivery: Delivery,
    settings: HandlerSettings,
) {
    let span = delivery.span().clone();
    let ctx = delivery.context().clone();
    let shutdown = delivery.shutdown_token().clone();
    async move {
        let handed = Handed::new(
            ctx,
            shutdown,
            std::slice::from_ref(&delivery),
            settings.ack_mode,
        );
        let outcome = outcome(handler.handle(delivery), settings, &handed).await;
        handed.settle(outcome).await;
    }
    .instrument(span)
    .await
}

/// Runs `handler` on the deliveries of one receive, received by the consumer of `ctx` for the
/// run that `shutdown` stops.
pub(crate) async fn run_batch_handler<H: BatchHandler>(
    handler: Arc<H>,
    ctx: Arc<Context>,
    shutdown: CancellationToken,
    deliveries: Vec<Delivery>,
    settings: HandlerSettings,
) {
    let span = tracing::info_span!("batch", size = deliveries.len());
    async move {
        let handed = Handed::new(ctx, shutdown, &deliveries, settings.ack_mode);
        let outcome = outcome(handler.handle(Batch::new(deliveries)), settings, &handed).await;
        handed.settle(outcome).await;
    }
    .instrument(span)
    .await
}

/// Runs a handler's future to its outcome: within its time limit, its panic caught, its error
/// logged with its whole chain.
async fn outcome(
    work: BoxFuture<'static, Result<(), BoxError>>,
    settings: HandlerSettings,
    handed: &Handed,
) -> Outcome {
    let guarded = AssertUnwindSafe(work).catch_unwind();
    let result = match settings.timeout {
        None => guarded.await,
        Some(limit) => match tokio::time::timeout(limit, guarded).await {
            Ok(result) => result,
            Err(_) => {
                // The handler's future, and with it every delivery it still held, is dropped.
                handed.ctx.count(Counter::HandlerTimeouts);
                tracing::warn!(
                    timeout = ?limit,
                    deliveries = handed.leases.len(),
                    "handler timed out: stopped; what it left unsettled gets the retry policy"
                );
                return Outcome::TimedOut;
            }
        },
    };
    match result {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(err)) => {
            handed.ctx.count(Counter::HandlerErrors);
            tracing::warn!(error = %error::chain(&*err), "handler failed");
            Outcome::Failed
        }
        Err(panic) => {
            handed.ctx.count(Counter::HandlerPanics);
            tracing::error!(panic = panic_message(&*panic), "handler panicked");
            Outcome::Panicked
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

/// The deliveries a handler was handed: while it runs, one it drops unsettled waits for its
/// outcome. Settled by [`settle`](Handed::settle); if the handler's task is cancelled first
/// (a shutdown past its timeout), dropping this settles them as a failure would.
struct Handed {
    ctx: Arc<Context>,
    leases: Vec<Arc<Lease>>,
    /// Only in `AckMode::OnSuccess`: to remember a lost ack by its message.
    message_ids: Vec<String>,
    spans: Vec<Span>,
    shutdown: CancellationToken,
    runtime: Handle,
    ack_mode: AckMode,
    settled: bool,
}

impl Handed {
    fn new(
        ctx: Arc<Context>,
        shutdown: CancellationToken,
        deliveries: &[Delivery],
        ack_mode: AckMode,
    ) -> Self {
        for d in deliveries {
            d.lease().enter_handler();
        }
        Self {
            ctx,
            leases: deliveries.iter().map(|d| d.lease().clone()).collect(),
            message_ids: match ack_mode {
                AckMode::OnSuccess => deliveries
                    .iter()
                    .map(|d| d.message_id().to_owned())
                    .collect(),
                AckMode::Manual => Vec::new(),
            },
            spans: deliveries.iter().map(|d| d.span().clone()).collect(),
            shutdown,
            runtime: Handle::current(),
            ack_mode,
            settled: false,
        }
    }

    /// Settles what the handler dropped unsettled, as `outcome` and the ack mode say; a
    /// delivery it still holds elsewhere decides for itself from now on.
    async fn settle(mut self, outcome: Outcome) {
        self.settled = true;
        let abandoned: Vec<usize> = (0..self.leases.len())
            .filter(|&i| self.leases[i].leave_handler())
            .collect();
        if abandoned.is_empty() {
            return;
        }
        match (outcome, self.ack_mode) {
            (Outcome::Ok, AckMode::OnSuccess) => self.ack(&abandoned).await,
            (Outcome::Ok, AckMode::Manual) => {
                for &i in &abandoned {
                    let n = self.ctx.count(Counter::Unsettled);
                    if n.is_power_of_two() {
                        tracing::warn!(
                            parent: &self.spans[i],
                            unsettled = n,
                            "the handler returned Ok without settling its delivery: call \
                             delivery.ack() (or release) in the handler, or build the consumer \
                             with .ack_mode(AckMode::OnSuccess); the message gets the retry \
                             policy and comes back"
                        );
                    }
                    self.release(i);
                }
            }
            _ => {
                for &i in &abandoned {
                    self.release(i);
                }
            }
        }
    }

    /// Acks the abandoned deliveries at `indices` together.
    async fn ack(&self, indices: &[usize]) {
        let items = indices
            .iter()
            .map(|&i| (self.leases[i].receipt().to_owned(), || true))
            .collect();
        let results = self.ctx.delete_all(items).await;
        for (&i, result) in indices.iter().zip(results) {
            let lease = &self.leases[i];
            match result {
                Ok(()) => {
                    lease.acked();
                    self.ctx.count(Counter::Acked);
                    tracing::debug!(parent: &self.spans[i], "acked (AckMode::OnSuccess)");
                }
                Err(err) => {
                    if let Some(ErrorKind::Lost(reason)) = err.kind() {
                        lease.mark_lost(reason);
                        self.ctx.remember_lost_ack(&self.message_ids[i]);
                    }
                    lease.end();
                    tracing::warn!(parent: &self.spans[i], error = %err.chain(), "acking a delivery its handler left unsettled failed; the message comes back when its visibility lapses");
                }
            }
        }
    }

    fn release(&self, i: usize) {
        self.leases[i].release_unsettled(
            self.shutdown.is_cancelled(),
            &self.runtime,
            &self.spans[i],
        );
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // The handler's task was cancelled before its outcome: as for a failure.
        for i in 0..self.leases.len() {
            if self.leases[i].leave_handler() {
                self.release(i);
            }
        }
    }
}
