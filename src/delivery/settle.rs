//! Settling: the one path an ack or a release takes, whoever asks for it (a `Delivery`, a
//! handler batch's `ack_all` or `release_all`, or a handler's outcome for the deliveries it
//! dropped). The lease's state moves first, the keeper lets go (a release's at once, an
//! ack's once its delete is answered), the call goes out (batched, and retried as
//! `call_retries` says), and its answer ends the lease's state.
//!
//! A delivery dropped unsettled meets the retry policy the same way, in the background
//! ([`release_unsettled`]): nobody waits for that release but shutdown. A move to the
//! dead-letter queue ([`move_to_dead_letter`]) sends its copy first and deletes the original
//! second, so that a failure between the two leaves a duplicate in the dead-letter queue and
//! never loses the message.

use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::join_all;
use tokio::runtime::Handle;
use tokio::time::{sleep, Instant};
use tokio_util::task::TaskTracker;
use tracing::{Instrument, Span};

use crate::call_retries::{self, ACK_RETRY_WINDOW};
use crate::dead_letter::{DeadLetter, Failure};
use crate::error::{Error, LostReason};
use crate::keeper::Keeper;
use crate::lease::claim::mark_done;
use crate::lease::Lease;
use crate::limits::VisibilityTimeout;
use crate::readable::Secs;
use crate::settle_calls::SettleHooks;
use crate::stats::Counter;

/// How a lease is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Delete the message (`DeleteMessage`): it is done.
    Ack,
    /// Make the message visible again after this visibility timeout
    /// (`ChangeMessageVisibility`; 0: at once).
    Release(VisibilityTimeout),
    /// Leave the message to come back when its visibility lapses: no call.
    Leave,
}

/// Settles `leases` as `how` says, each one's result in order; `keeper` (the one keeping
/// them) lets go of each. One lease alone may wait a little for its cohort's settle calls,
/// to share a request; several go out together.
pub(crate) async fn settle(
    leases: &[Arc<Lease>],
    how: Settle,
    keeper: Option<&Keeper>,
) -> Vec<Result<(), Error>> {
    if how == Settle::Ack && leases.iter().any(|l| l.context().idempotency().is_some()) {
        return ack_marking_done(leases, keeper).await;
    }
    settle_now(leases, how, keeper).await
}

/// Acks `leases`, each one's idempotency key marked done first (together): those marked (or
/// without a key) are deleted; one whose key a later receive holds is a lost ack, and one the
/// store failed for is not done, so it meets the retry policy and reports the store's error.
async fn ack_marking_done(
    leases: &[Arc<Lease>],
    keeper: Option<&Keeper>,
) -> Vec<Result<(), Error>> {
    let marks = join_all(leases.iter().map(mark_done)).await;
    let marked: Vec<Arc<Lease>> = leases
        .iter()
        .zip(&marks)
        .filter(|(_, mark)| mark.is_ok())
        .map(|(lease, _)| lease.clone())
        .collect();
    let mut acked = settle_now(&marked, Settle::Ack, keeper).await.into_iter();
    let mut results = Vec::with_capacity(leases.len());
    for (lease, mark) in leases.iter().zip(marks) {
        let result = match mark {
            Ok(()) => acked.next().unwrap_or(Ok(())),
            Err(err) if err.is_lost() => {
                let lost_before = lease.begin_ack();
                let lost = lease.finish_ack(Err(err), lost_before);
                let_go(lease, keeper);
                lost
            }
            Err(err) => {
                tracing::warn!(parent: lease.span(), error = %err.chain(), "the idempotency store could not mark the delivery done: not acked; it gets the retry policy");
                let how = match lease.visibility_on_drop(false) {
                    Some(visibility_timeout) => Settle::Release(visibility_timeout),
                    None => Settle::Leave,
                };
                let _ = Box::pin(settle_now(std::slice::from_ref(lease), how, keeper)).await;
                Err(err)
            }
        };
        results.push(result);
    }
    results
}

/// Settles `leases` as `how` says, with no idempotency step.
async fn settle_now(
    leases: &[Arc<Lease>],
    how: Settle,
    keeper: Option<&Keeper>,
) -> Vec<Result<(), Error>> {
    let lost_before: Vec<_> = leases.iter().map(|l| begin(l, how, keeper)).collect();
    let results = call(leases, how).await;
    leases
        .iter()
        .zip(results)
        .zip(lost_before)
        .map(|((lease, result), lost_before)| finish(lease, how, result, lost_before, keeper))
        .collect()
}

/// Applies the consumer's retry policy to a delivery that ended unsettled (dropped, or left
/// by its handler): release it at once if the consumer is `shutting_down`, otherwise as the
/// policy says (by default, leave it to come back when its visibility lapses). The release
/// runs on `runtime`, without anyone waiting for it (shutdown does, and whoever waits for
/// `run_releases`, its run's).
pub(crate) fn release_unsettled(
    lease: &Arc<Lease>,
    shutting_down: bool,
    runtime: &Handle,
    span: &Span,
    run_releases: &TaskTracker,
) {
    lease.mark_ended();
    if lease.visibility_timeout().is_zero() {
        return; // visible to others already
    }
    let Some(visibility_timeout) = lease.visibility_on_drop(shutting_down) else {
        return;
    };
    let leases = [lease.clone()];
    let release = async move {
        // As one lease alone: its release may wait for its receive's others, to share a
        // request.
        for result in settle(&leases, Settle::Release(visibility_timeout), None).await {
            if let Err(err) = result {
                let visibility = visibility_timeout.secs();
                tracing::warn!(error = %err.chain(), visibility, "releasing a dropped delivery failed; it returns when its visibility lapses");
            }
        }
    };
    let ctx = lease.context();
    let release = run_releases.track_future(release.instrument(span.clone()));
    ctx.calls().spawn(release, runtime);
}

/// The lease's settle starts; returns the reason it was lost before, if it was. A release
/// lets the keeper go first, so that no extension lands after it; an ack's delete is kept
/// extended until it is answered.
fn begin(lease: &Arc<Lease>, how: Settle, keeper: Option<&Keeper>) -> Option<LostReason> {
    match how {
        Settle::Ack => lease.begin_ack(),
        Settle::Release(_) | Settle::Leave => {
            let lost_before = lease.begin_release();
            let_go(lease, keeper);
            lost_before
        }
    }
}

/// The settle calls of `leases`: each one's result, in order.
async fn call(leases: &[Arc<Lease>], how: Settle) -> Vec<Result<(), Error>> {
    let Some(first) = leases.first() else {
        return Vec::new();
    };
    let calls = first.context().calls();
    match (how, leases) {
        (Settle::Leave, _) => leases.iter().map(|_| Ok(())).collect(),
        (Settle::Ack, [one]) => {
            let delete = calls.delete(one.receipt(), Some(hooks(one)));
            vec![delete.instrument(one.span().clone()).await]
        }
        (Settle::Release(visibility_timeout), [one]) => {
            let release = calls.release(one.receipt(), visibility_timeout, Some(hooks(one)));
            vec![release.instrument(one.span().clone()).await]
        }
        (Settle::Ack, many) => calls.delete_all(entries(many)).await,
        (Settle::Release(visibility_timeout), many) => {
            calls.release_all(entries(many), visibility_timeout).await
        }
    }
}

/// Ends the lease's settle with its call's `result`.
fn finish(
    lease: &Arc<Lease>,
    how: Settle,
    result: Result<(), Error>,
    lost_before: Option<LostReason>,
    keeper: Option<&Keeper>,
) -> Result<(), Error> {
    match how {
        Settle::Ack => {
            // After the ack's end: an ack its holder keeps hidden stays with the keeper.
            let acked = lease.finish_ack(result, lost_before);
            let_go(lease, keeper);
            acked
        }
        Settle::Release(visibility_timeout) => {
            let released = lease.finish_release(result);
            if released.is_ok() {
                lease.context().count(Counter::Released);
                let visibility = visibility_timeout.secs();
                tracing::debug!(parent: lease.span(), visibility, "released");
            }
            released
        }
        Settle::Leave => lease.finish_release(result),
    }
}

fn let_go(lease: &Arc<Lease>, keeper: Option<&Keeper>) {
    if let Some(keeper) = keeper {
        keeper.let_go(lease);
    }
}

/// The lease as its settle call sees it: its cohort, and whether it is still ours.
fn hooks(lease: &Arc<Lease>) -> Arc<dyn SettleHooks> {
    lease.clone()
}

/// Each lease's receipt handle and itself, as a settle call of several takes them.
fn entries(leases: &[Arc<Lease>]) -> Vec<(String, Option<Arc<dyn SettleHooks>>)> {
    leases
        .iter()
        .map(|lease| (lease.receipt().to_owned(), Some(hooks(lease))))
        .collect()
}

/// How a move ended.
#[derive(Debug)]
pub(crate) enum Moved {
    /// The copy is in the dead-letter queue and the original is deleted.
    Done,
    /// No copy was sent (the delivery was lost, or the send failed for good): the original
    /// is as it was, for the retry policy.
    NotSent(Error),
    /// The copy is sent but the original could not be deleted: remembered, so that it is
    /// deleted without its handler if it comes back to this consumer.
    CopyOnly(Error),
}

/// Moves `lease`'s message to `dead_letter` for `failure`. The keeper keeps the message hidden
/// while the copy is sent (and between the delete's tries), and is told to let go at the end.
pub(crate) async fn move_to_dead_letter(
    lease: &Arc<Lease>,
    dead_letter: &DeadLetter,
    failure: &Failure,
    keeper: Option<&Keeper>,
) -> Moved {
    let span = lease.span().clone();
    async {
        if let Err(err) = send_copy(lease, dead_letter, failure).await {
            return Moved::NotSent(err);
        }
        // The copy is sent: the message's work is over, whoever else may hold it.
        if let Err(err) = mark_done(lease).await {
            tracing::warn!(error = %err.chain(), "the idempotency store could not mark a message moved to the dead-letter queue done");
        }
        // Held by its guard, or dropped in its handler, whose failure moves it.
        let lost_before = lease.begin_ack();
        let hooks: Arc<dyn SettleHooks> = lease.clone();
        let result = lease.context().calls().delete(lease.receipt(), Some(hooks)).await;
        let moved = lease.finish_move(result, lost_before);
        // After the move's end: a move its holder keeps hidden stays with the keeper.
        if let Some(keeper) = keeper {
            keeper.let_go(lease);
        }
        let message_id = lease.message().message_id().unwrap_or_default();
        match moved {
            Ok(()) => {
                tracing::warn!(%message_id, dead_letter_queue = dead_letter.name(), "moved to the dead-letter queue");
                Moved::Done
            }
            Err(err) => {
                tracing::warn!(%message_id, error = %err.chain(), "the copy is in the dead-letter queue but deleting the original failed; if it comes back to this consumer it is deleted without its handler");
                Moved::CopyOnly(err)
            }
        }
    }
    .instrument(span)
    .await
}

/// Sends the copy, retrying transient failures for up to [`ACK_RETRY_WINDOW`] while the
/// delivery is still this consumer's.
async fn send_copy(
    lease: &Arc<Lease>,
    dead_letter: &DeadLetter,
    failure: &Failure,
) -> Result<(), Error> {
    let message = lease.message();
    let message_id = message.message_id().unwrap_or_default();
    let lost = |reason| Error::Lost {
        message_id: message_id.to_owned(),
        reason,
        source: None,
    };
    if let Some(reason) = lease.lost_reason() {
        return Err(lost(reason));
    }
    let ctx = lease.context();
    let copy = DeadLetter::copy(
        message,
        failure,
        lease.receive_count(),
        system_time_of(lease.received_at()),
        ctx.queue_name(),
    );
    if !copy.carries_failure {
        tracing::error!(%message_id, failure = %copy.failure, "the message has 10 message attributes, as many as SQS takes: its dead-letter copy keeps them all, without the failure, which is logged here instead");
    }
    let started = Instant::now();
    let mut backoff = call_retries::SETTLE.backoff();
    loop {
        let err = match dead_letter.send(message, &copy).await {
            Ok(()) => return Ok(()),
            Err(err) => err,
        };
        if let Some(reason) = lease.lost_reason() {
            return Err(lost(reason));
        }
        if !err.is_retryable() || started.elapsed() >= ACK_RETRY_WINDOW {
            tracing::warn!(%message_id, error = %err.chain(), "sending the dead-letter copy failed; the message stays in its queue and gets the retry policy");
            return Err(err);
        }
        let wait = backoff.next_delay();
        tracing::warn!(%message_id, error = %err.chain(), retry_in = %Secs(wait), "sending the dead-letter copy failed; retrying");
        sleep(wait).await;
    }
}

/// The system time of `at` (a tokio instant in the past).
fn system_time_of(at: Instant) -> SystemTime {
    let ago = Instant::now().saturating_duration_since(at);
    let now = SystemTime::now();
    now.checked_sub(ago).unwrap_or(now)
}
