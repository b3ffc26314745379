//! Claiming a delivery's idempotency key before its handler sees it (with
//! `ConsumerBuilder::idempotency`): a key whose work is done acks the delivery at once; a key
//! another message holds releases it until that hold ends; a key function or a store that
//! fails sends it through the failure step. A claimed key is kept, and marked done by the
//! ack, from the lease's side (`lease/claim.rs`).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use tokio::time::Instant;
use tracing::instrument::WithSubscriber;

use crate::delivery::Delivery;
use crate::error::BoxError;
use crate::idempotency::{Begun, Key, Owner, Recording};
use crate::lease::claim::{call_store, hold, keep, MIN_GRACE};
use crate::stats::Counter;

/// What `ConsumerBuilder::idempotency_key` was given.
type UserKey = dyn Fn(&Delivery) -> Result<String, BoxError> + Send + Sync;

/// The user's key for a delivery (`ConsumerBuilder::idempotency_key`).
#[derive(Clone)]
pub(crate) struct KeyFn(pub(crate) Arc<UserKey>);

impl std::fmt::Debug for KeyFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyFn")
    }
}

/// Claims `delivery`'s key before its handler sees it: `Some(delivery)` to run the handler;
/// `None` when the delivery was acked (its key is done), released (another message holds
/// the key) or given to the failure step (its key function or the store failed).
pub(crate) async fn claim(delivery: Delivery, key_fn: Option<KeyFn>) -> Option<Delivery> {
    let ctx = delivery.context().clone();
    let recording = ctx.idempotency()?.clone();
    let raw = match key_of(&delivery, key_fn.as_ref()) {
        Ok(raw) => raw,
        Err(err) => {
            let err = format!(
                "the idempotency key could not be made: {}",
                crate::error::chain(&*err)
            );
            let _ = delivery.fail(err).await;
            return None;
        }
    };
    let key = Key::new(ctx.short_queue_name(), &raw);
    let lease = delivery.lease().clone();
    let owner = Owner::new(delivery.message_id(), lease.receipt());
    let recorded = lease.deadline();
    let hold = hold(&lease);
    let begun = call_store(&lease, "begin", || {
        recording.store.begin(&key, &owner, hold)
    })
    .await;
    match begun {
        Ok(Begun::Started) => {
            recording.hold(&owner, &key);
            watch(&delivery, recording, key, owner, recorded);
            Some(delivery)
        }
        Ok(Begun::Done) => {
            skip_done(delivery).await;
            None
        }
        Ok(Begun::InProgress { ends_in }) => {
            delay(delivery, ends_in).await;
            None
        }
        Err(err) => {
            ctx.count(Counter::IdempotencyFailures);
            let chain = err.chain().to_string();
            let message_id = delivery.message_id();
            tracing::warn!(parent: delivery.span(), %message_id, error = %chain, "the idempotency store failed before the handler; the delivery gets the failure step");
            let _ = delivery.give_up(chain).await;
            None
        }
    }
}

/// The key the user's function gives (its panic an error), else the message's own: a FIFO
/// message's deduplication id, else its message id.
fn key_of(delivery: &Delivery, key_fn: Option<&KeyFn>) -> Result<String, BoxError> {
    let Some(key_fn) = key_fn else {
        return Ok(default_key(delivery).to_owned());
    };
    match std::panic::catch_unwind(AssertUnwindSafe(|| (key_fn.0)(delivery))) {
        Ok(key) => key,
        Err(_) => Err("the idempotency_key function panicked".into()),
    }
}

fn default_key(delivery: &Delivery) -> &str {
    delivery
        .message()
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::MessageDeduplicationId))
        .map_or_else(|| delivery.message_id(), String::as_str)
}

/// A key whose work is done: the delivery is acked without its handler.
async fn skip_done(delivery: Delivery) {
    let ctx = delivery.context().clone();
    ctx.count(Counter::DuplicatesSkipped);
    let message_id = delivery.message_id().to_owned();
    tracing::info!(parent: delivery.span(), %message_id, "its idempotency key is done: acked without running the handler");
    if let Err(err) = delivery.ack().await {
        tracing::warn!(%message_id, error = %err.chain(), "acking a delivery whose key is done failed; it comes back and is skipped again");
    }
}

/// A key another message holds: the delivery comes back when that hold ends (at least
/// [`MIN_GRACE`] from now, and within the 12-hour limit).
async fn delay(delivery: Delivery, ends_in: Duration) {
    delivery.context().count(Counter::DuplicatesDelayed);
    let room = delivery.lease().room();
    let wait = ends_in
        .max(MIN_GRACE)
        .min(Duration::from_secs(room.as_secs()));
    let message_id = delivery.message_id().to_owned();
    tracing::info!(parent: delivery.span(), %message_id, back_in = %crate::readable::Secs(wait), "another message holds its idempotency key: released until that hold ends");
    if let Err(err) = delivery.release_after(wait).await {
        tracing::warn!(%message_id, error = %err.chain(), "releasing a delivery whose key another message holds failed; it returns when its visibility lapses");
    }
}

/// Keeps the delivery's claim while its lease lives, in a task the consumer's shutdown waits
/// for (not its run's: a Lambda event's end counts its run's unanswered calls).
fn watch(delivery: &Delivery, recording: Recording, key: Key, owner: Owner, recorded: Instant) {
    let lease = delivery.lease().clone();
    let run = delivery.run_ties();
    let Some(runtime) = lease.context().calls().runtime(run.runtime()) else {
        // No runtime (it is shutting down): the claim ends with its record's expiry.
        recording.forget(&owner);
        return;
    };
    let tasks = recording.tasks().clone();
    let keep = tasks.track_future(keep(lease, recording, key, owner, recorded));
    runtime.spawn(keep.with_current_subscriber());
}
