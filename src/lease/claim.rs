//! A delivery's hold on its key in the consumer's idempotency store, from the lease's side:
//! how long the hold lasts (its lease to the delivery's deadline, its record one visibility
//! timeout longer), the task that moves it on each time the keeper moves the deadline and
//! gives it back when the delivery ends unacked ([`keep`]), and the done mark an ack writes
//! before its delete ([`mark_done`]).
//!
//! So a worker that dies leaves a record whose lease ends with its delivery's: the message,
//! received again once its visibility lapsed, takes the key over at once, while a receive of
//! the message handed out twice while held (SQS's standard queues may do that, rarely) waits;
//! another message with the same key waits one timeout more, for the record to expire.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep, sleep_until, timeout, Instant};

use crate::call_retries::{self, ACK_RETRY_WINDOW, IDEMPOTENCY_CALL_TIMEOUT};
use crate::error::{Error, ErrorKind, LostReason};
use crate::idempotency::{Hold, Key, Owner, Ownership, Recording, StoreError, StoreFuture};
use crate::lease::{End, Lease};
use crate::limits::call_margin;
use crate::stats::Counter;

/// The shortest a claim's record outlives its lease's deadline, and the shortest wait for a
/// key another message holds: no setting makes a delivery come back at once, over and over.
pub(crate) const MIN_GRACE: Duration = Duration::from_secs(1);

/// The shortest wait before the record is looked at again (a failed extension, or a deadline
/// the keeper has not moved yet).
const RETRY_WAIT: Duration = Duration::from_millis(100);

/// The hold a claim asks for now: its lease until the delivery's deadline, its record one
/// visibility timeout (at least 1 s) longer.
pub(crate) fn hold(lease: &Lease) -> Hold {
    let until_deadline = lease.deadline().saturating_duration_since(Instant::now());
    Hold::new(until_deadline, until_deadline + grace(lease))
}

fn grace(lease: &Lease) -> Duration {
    lease.visibility_timeout().duration().max(MIN_GRACE)
}

/// Marks the key of `lease` done, if it holds one: before the ack's delete, so that a delete
/// that is lost leaves the key done. `Err(Error::Lost)` when a later receive holds the key;
/// an `Error::Idempotency` when the store kept failing (the delivery is then not done).
pub(crate) async fn mark_done(lease: &Arc<Lease>) -> Result<(), Error> {
    let Some(recording) = lease.context().idempotency() else {
        return Ok(());
    };
    let message_id = lease.message().message_id().unwrap_or_default();
    let owner = &Owner::new(message_id, lease.receipt());
    let Some(key) = &recording.key_held_by(owner) else {
        return Ok(()); // it holds none (a delivery whose key was done already)
    };
    let keep = recording.keep_done;
    match call_store(lease, "complete", || {
        recording.store.complete(key, owner, keep)
    })
    .await
    {
        Ok(Ownership::Ours) => Ok(()),
        Ok(Ownership::Taken) => Err(Error::Lost {
            message_id: owner.message_id().to_owned(),
            reason: LostReason::KeyTaken,
            source: None,
        }),
        Err(err) => {
            lease.context().count(Counter::IdempotencyFailures);
            Err(err)
        }
    }
}

/// One store call for `lease`, retried while it fails transiently, the lease is not lost,
/// [`ACK_RETRY_WINDOW`] has not passed and the next try can come before the lease's deadline.
pub(crate) async fn call_store<'a, T>(
    lease: &Lease,
    operation: &'static str,
    call: impl Fn() -> StoreFuture<'a, T>,
) -> Result<T, Error> {
    let started = Instant::now();
    let mut backoff = call_retries::IDEMPOTENCY.backoff();
    loop {
        let err = match timeout(IDEMPOTENCY_CALL_TIMEOUT, call()).await {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(err)) => err,
            Err(_) => StoreError::retryable(format!(
                "no answer in {}",
                crate::readable::Secs(IDEMPOTENCY_CALL_TIMEOUT)
            )),
        };
        let wait = backoff.next_delay();
        let next_try = Instant::now() + wait;
        let lease_allows = lease.lost_reason().is_none()
            && (lease.visibility_timeout().is_zero() || next_try < lease.deadline());
        if !err.is_retryable() || !lease_allows || started.elapsed() + wait > ACK_RETRY_WINDOW {
            return Err(store_error(lease, operation, err));
        }
        tracing::debug!(parent: lease.span(), operation, error = %crate::error::chain(&err), "the idempotency store failed; trying again");
        sleep(wait).await;
    }
}

fn store_error(lease: &Lease, operation: &'static str, err: StoreError) -> Error {
    let kind = match err.is_retryable() {
        true => ErrorKind::Retryable,
        false => ErrorKind::Fatal,
    };
    Error::Idempotency {
        message_id: lease.message().message_id().map(str::to_owned),
        operation,
        kind,
        source: Box::new(err),
    }
}

/// Moves the claim's record on each time the keeper moves the lease's deadline, a call's
/// margin before the deadline it recorded (so the record's lease never ends before the
/// delivery's), until the lease ends; then gives the key back, unless the delivery was acked
/// (its key is done) or another receive took the key. `recorded`: the deadline the record
/// holds now.
pub(crate) async fn keep(
    lease: Arc<Lease>,
    recording: Recording,
    key: Key,
    owner: Owner,
    recorded: Instant,
) {
    let end = follow(&lease, &recording, &key, &owner, recorded).await;
    if end == Some(End::NotAcked) {
        give_back(&lease, &recording, &key, &owner).await;
    }
    recording.forget(&owner);
}

/// Follows the lease's deadline until the delivery ends (how), or until another receive
/// takes the key (`None`).
async fn follow(
    lease: &Arc<Lease>,
    recording: &Recording,
    key: &Key,
    owner: &Owner,
    mut recorded: Instant,
) -> Option<End> {
    let ended = lease.ended();
    tokio::pin!(ended);
    let margin = call_margin(lease.visibility_timeout().duration()).max(RETRY_WAIT);
    let mut next_look = recorded.checked_sub(margin).unwrap_or(recorded);
    // Nothing to follow without a timeout: the deadline never moves.
    let mut following = !lease.visibility_timeout().is_zero();
    loop {
        tokio::select! {
            end = &mut ended => return Some(end),
            () = sleep_until(next_look), if following && lease.lost_reason().is_none() => {}
        }
        let now = Instant::now();
        let deadline = lease.deadline();
        if deadline <= recorded {
            // Not moved yet (the keeper is late, or the lease is ending): look again soon,
            // until the recorded deadline passes.
            next_look = now + RETRY_WAIT;
            following = next_look < recorded;
            continue;
        }
        let extend = recording.store.extend(key, owner, hold(lease));
        match timeout(IDEMPOTENCY_CALL_TIMEOUT, extend).await {
            Ok(Ok(Ownership::Ours)) => {
                recorded = deadline;
                next_look = recorded.checked_sub(margin).unwrap_or(recorded);
            }
            Ok(Ok(Ownership::Taken)) => {
                tracing::warn!(parent: lease.span(), message_id = owner.message_id(), "another receive holds the idempotency key: this delivery's ack will report it lost");
                return None;
            }
            // Tried again a little later.
            Ok(Err(_)) | Err(_) => next_look = Instant::now() + (margin / 2).max(RETRY_WAIT),
        }
    }
}

/// Gives the key back (one try, bounded in time): the retry policy's next try may run it.
async fn give_back(lease: &Lease, recording: &Recording, key: &Key, owner: &Owner) {
    match timeout(
        IDEMPOTENCY_CALL_TIMEOUT,
        recording.store.abandon(key, owner),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::debug!(parent: lease.span(), error = %crate::error::chain(&err), "giving the idempotency key back failed; it ends with its record's expiry");
        }
        Err(_) => {
            tracing::debug!(parent: lease.span(), "giving the idempotency key back took too long; it ends with its record's expiry");
        }
    }
}
