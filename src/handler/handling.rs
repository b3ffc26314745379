//! Running a handler on its deliveries: its time limit, its panics, its errors (logged with
//! their whole chain), and what happens to the deliveries it leaves unsettled, which its
//! outcome and the consumer's [`AckMode`] decide.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, BoxFuture, FutureExt};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use crate::dead_letter::Failure;
use crate::delivery::run_ties::RunTies;
use crate::delivery::settle::{move_to_dead_letter, release_unsettled, settle, Moved, Settle};
use crate::delivery::Delivery;
use crate::error::{self, BoxError};
use crate::handler::batch::{Batch, BatchHandler};
use crate::handler::batch_window::Batching;
use crate::handler::Handler;
use crate::keeper::Keeper;
use crate::lease::context::Context;
use crate::lease::{Lease, Left};
use crate::readable::Secs;
use crate::stats::{Counter, Measure};
use crate::trace::process_span::process_span;

/// What a handler's `Ok` means for the deliveries it leaves unsettled (dropped without
/// `ack`, `release` or `release_after`), set with
/// [`ack_mode`](crate::ConsumerBuilder::ack_mode).
///
/// In `Manual` and `OnSuccess`, a handler that returns an error, panics, or runs past its
/// [`handler_timeout`](crate::ConsumerBuilder::handler_timeout) leaves its unsettled
/// deliveries to the [`RetryPolicy`](crate::RetryPolicy). In every mode a delivery the
/// handler settled itself (`ack`, `release`, `fail`, ...) stays settled as it said, and a
/// delivery the handler moved elsewhere (and still holds) is not touched: it is settled, or
/// meets the retry policy, when it is dropped. A handler cancelled by a shutdown past its
/// timeout has no outcome: what it held is released, whatever the mode. One dropped by
/// [`cancel_on_lost`](crate::ConsumerBuilder::cancel_on_lost) acks nothing, whatever the mode,
/// not even a delivery it had dropped before: its work was cut short, and its messages may be
/// with another consumer.
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
    /// Every outcome acks what the handler left unsettled: `Ok`, an error, a panic and a
    /// timeout alike (deleted together, as for `OnSuccess`). For work that must never be
    /// tried twice, where a failure is logged and dropped rather than retried: the failures
    /// are still counted by outcome ([`Stats::handler_errors`](crate::Stats::handler_errors),
    /// [`handler_panics`](crate::Stats::handler_panics),
    /// [`handler_timeouts`](crate::Stats::handler_timeouts)) and logged, and each ack in
    /// [`Stats::acked`](crate::Stats::acked). A delivery the handler [`fail`](crate::Delivery::fail)s
    /// or releases itself still meets the retry policy, or its release.
    Always,
}

/// How the consumer runs each handler.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HandlerSettings {
    pub(crate) ack_mode: AckMode,
    /// `None`: no limit.
    pub(crate) timeout: Option<Duration>,
    pub(crate) on_lost: OnLost,
    /// How a batch handler's deliveries are grouped.
    pub(crate) batching: Batching,
}

/// What becomes of a handler whose deliveries are lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum OnLost {
    /// It runs on; `Delivery::lost` and `is_lost` tell it, and its ack reports it.
    #[default]
    RunOn,
    /// Its future is dropped (`cancel_on_lost`).
    Cancel,
}

/// How a handler ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// It returned an error, panicked or timed out.
    Failed(Failure),
    /// Dropped: its deliveries were lost (`cancel_on_lost`).
    CancelledOnLost,
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
    // A "process" span for several messages; each delivery keeps its own for its message.
    let span = process_span!(
        "batch",
        ctx.short_queue_name(),
        messaging.batch.message_count = deliveries.len(),
    );
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
    let started = tokio::time::Instant::now();
    let guarded = AssertUnwindSafe(work).catch_unwind();
    let guarded = async {
        match settings.on_lost {
            OnLost::RunOn => Some(guarded.await),
            OnLost::Cancel => tokio::select! {
                result = guarded => Some(result),
                () = handed.all_lost() => None,
            },
        }
    };
    let result = match settings.timeout {
        None => guarded.await,
        Some(limit) => match tokio::time::timeout(limit, guarded).await {
            Ok(result) => result,
            Err(_) => {
                // The handler's future, and with it every delivery it still held, is dropped.
                handed
                    .ctx
                    .observe(Measure::HandlerDuration, limit.as_secs_f64());
                handed.ctx.count(Counter::HandlerTimeouts);
                tracing::warn!(
                    timeout = %Secs(limit),
                    deliveries = handed.len(),
                    "handler timed out: stopped; what it left unsettled gets the retry policy"
                );
                return Outcome::Failed(Failure::Timeout(limit));
            }
        },
    };
    handed
        .ctx
        .observe(Measure::HandlerDuration, started.elapsed().as_secs_f64());
    let Some(result) = result else {
        handed.cancelled_on_lost();
        return Outcome::CancelledOnLost;
    };
    match result {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(err)) => {
            handed.ctx.count(Counter::HandlerErrors);
            let chain = error::chain(&*err).to_string();
            tracing::warn!(error = %chain, "handler failed");
            Outcome::Failed(Failure::Error(chain))
        }
        Err(panic) => {
            handed.ctx.count(Counter::HandlerPanics);
            let message = panic_message(&*panic);
            tracing::error!(panic = message, "handler panicked");
            Outcome::Failed(Failure::Panic(message.to_owned()))
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
/// outcome, kept hidden by the keeper. Settled by [`settle`](Handed::settle); if the
/// handler's task is cancelled first (a shutdown past its timeout), dropping this settles
/// them as a failure would.
struct Handed {
    ctx: Arc<Context>,
    /// What the deliveries' run shares (all of one run's): its keeper, told to let go of
    /// each one settled, and its releases.
    run: Option<Arc<RunTies>>,
    items: Items,
    shutdown: CancellationToken,
    ack_mode: AckMode,
    settled: bool,
}

/// One delivery handed to a handler.
struct Item {
    lease: Arc<Lease>,
    span: Span,
}

/// The items of a single handler without an allocation, or of a batch handler.
enum Items {
    One([Item; 1]),
    Many(Vec<Item>),
}

impl Items {
    fn as_slice(&self) -> &[Item] {
        match self {
            Items::One(one) => one,
            Items::Many(many) => many,
        }
    }
}

impl Handed {
    fn new(
        ctx: Arc<Context>,
        shutdown: CancellationToken,
        deliveries: &[Delivery],
        ack_mode: AckMode,
    ) -> Self {
        let item = |d: &Delivery| {
            d.lease().enter_handler();
            Item {
                lease: d.lease().clone(),
                span: d.span().clone(),
            }
        };
        let items = match deliveries {
            [one] => Items::One([item(one)]),
            many => Items::Many(many.iter().map(item).collect()),
        };
        Self {
            ctx,
            run: deliveries.first().map(|d| d.run_ties().clone()),
            items,
            shutdown,
            ack_mode,
            settled: false,
        }
    }

    fn len(&self) -> usize {
        self.items.as_slice().len()
    }

    /// The keeper of the deliveries' run.
    fn keeper(&self) -> Option<&Keeper> {
        self.run.as_deref().map(RunTies::keeper)
    }

    /// Completes once every delivery the handler was handed is lost.
    async fn all_lost(&self) {
        for item in self.items.as_slice() {
            item.lease.lost().await;
        }
    }

    /// The handler was dropped because its deliveries were lost: counted, and a `warn` for
    /// each delivery with its message id.
    fn cancelled_on_lost(&self) {
        self.ctx.count(Counter::CancelledOnLost);
        for item in self.items.as_slice() {
            let reason = item.lease.lost_reason();
            tracing::warn!(
                parent: &item.span,
                message_id = item.lease.message().message_id().unwrap_or_default(),
                reason = reason.map(tracing::field::display),
                "delivery lost: its handler was dropped (cancel_on_lost); another consumer may \
                 have the message"
            );
        }
    }

    /// Settles what the handler dropped unsettled, as `outcome` and the ack mode say; a
    /// delivery it still holds elsewhere decides for itself from now on.
    async fn settle(mut self, outcome: Outcome) {
        self.settled = true;
        let abandoned: Vec<(&Item, Left)> = self
            .items
            .as_slice()
            .iter()
            .map(|item| (item, item.lease.leave_handler()))
            .filter(|(_, left)| *left != Left::NotAbandoned)
            .collect();
        let abandoned = match &outcome {
            Outcome::Failed(failure) => self.dead_letter_due(abandoned, failure).await,
            _ => abandoned,
        };
        if abandoned.is_empty() {
            return;
        }
        match (outcome, self.ack_mode) {
            // Lost: nothing to ack or release (another consumer may have the message).
            (Outcome::CancelledOnLost, _) => {
                for (item, _) in abandoned {
                    self.release(item);
                }
            }
            (_, AckMode::Always) | (Outcome::Ok, AckMode::OnSuccess) => {
                self.ack(&abandoned).await;
            }
            (Outcome::Ok, AckMode::Manual) => {
                for (item, _) in abandoned {
                    let n = self.ctx.count(Counter::Unsettled);
                    if n.is_power_of_two() {
                        tracing::warn!(
                            parent: &item.span,
                            unsettled = n,
                            "the handler returned Ok without settling its delivery: call \
                             delivery.ack() (or release) in the handler, or build the consumer \
                             with .ack_mode(AckMode::OnSuccess); the message gets the retry \
                             policy and comes back"
                        );
                    }
                    self.release(item);
                }
            }
            _ => {
                for (item, _) in abandoned {
                    self.release(item);
                }
            }
        }
    }

    /// Moves the abandoned deliveries whose receive count has reached the dead-letter step's
    /// to the dead-letter queue (in every ack mode: a failure there is kept, not retried and
    /// not dropped); returns the others, and those whose copy could not be sent (the ack mode
    /// then decides, except that `Always` gives the retry policy: nothing is lost).
    async fn dead_letter_due<'a>(
        &self,
        abandoned: Vec<(&'a Item, Left)>,
        failure: &Failure,
    ) -> Vec<(&'a Item, Left)> {
        let Some(dead_letter) = self.ctx.dead_letter() else {
            return abandoned;
        };
        let (due, rest): (Vec<_>, Vec<_>) = abandoned.into_iter().partition(|(item, left)| {
            *left == Left::Abandoned && dead_letter.is_due(item.lease.receive_count())
        });
        let moves = due
            .iter()
            .map(|(item, _)| move_to_dead_letter(&item.lease, dead_letter, failure, self.keeper()));
        for ((item, _), moved) in due.iter().zip(join_all(moves).await) {
            match moved {
                Moved::Done => {}
                Moved::CopyOnly(_) => item.lease.mark_ended(),
                Moved::NotSent(_) => self.release(item),
            }
        }
        rest
    }

    /// Acks the abandoned deliveries together, as `Delivery::ack` would: one lost meanwhile
    /// is a lost ack, reported and never counted as acked.
    async fn ack(&self, abandoned: &[(&Item, Left)]) {
        let leases: Vec<_> = abandoned
            .iter()
            .map(|(item, _)| item.lease.clone())
            .collect();
        let results = settle(&leases, Settle::Ack, self.keeper()).await;
        for ((item, _), result) in abandoned.iter().zip(results) {
            match result {
                Ok(()) => tracing::debug!(parent: &item.span, ack_mode = ?self.ack_mode, "acked"),
                Err(err) if err.is_lost() => item.lease.mark_ended(),
                Err(err) => {
                    item.lease.mark_ended();
                    tracing::warn!(parent: &item.span, error = %err.chain(), "acking a delivery its handler left unsettled failed; the message comes back when its visibility lapses");
                }
            }
        }
    }

    /// Applies the retry policy to an abandoned delivery (at once during a shutdown); one lost
    /// meanwhile only ends. Without a runtime (it is shutting down) the message comes back
    /// when its visibility lapses.
    fn release(&self, item: &Item) {
        self.let_go(item);
        match item.lease.context().calls().runtime(None) {
            Some(runtime) if item.lease.lost_reason().is_none() => {
                let shutting_down = self.shutdown.is_cancelled();
                let releases = self.run.as_ref().map(|run| run.background().clone());
                let releases = releases.unwrap_or_default();
                release_unsettled(&item.lease, shutting_down, &runtime, &item.span, &releases);
            }
            _ => item.lease.mark_ended(),
        }
    }

    /// The keeper lets go of a delivery its handler dropped, now that it is settled.
    fn let_go(&self, item: &Item) {
        if let Some(keeper) = self.keeper() {
            keeper.let_go(&item.lease);
        }
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // The handler's task was cancelled before its outcome: as for a failure.
        for item in self.items.as_slice() {
            if item.lease.leave_handler() != Left::NotAbandoned {
                self.release(item);
            }
        }
    }
}

#[cfg(test)]
mod tests;
