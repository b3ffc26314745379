//! Moving a delivery's message to the dead-letter queue: its copy sent first, the original
//! deleted second, so that a failure between the two leaves a duplicate in the dead-letter
//! queue and never loses the message.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::{sleep, Instant};
use tracing::Instrument;

use crate::call_retries::{self, ACK_RETRY_WINDOW};
use crate::dead_letter::{DeadLetter, Failure};
use crate::error::Error;
use crate::keeper::Keeper;
use crate::lease::Lease;
use crate::readable::Secs;
use crate::settle_calls::SettleHooks;

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
        // Held by its guard, or dropped in its handler, whose failure moves it.
        let lost_before = lease.begin_ack();
        let hooks: Arc<dyn SettleHooks> = lease.clone();
        let result = lease.context().calls().delete(lease.receipt(), Some(hooks)).await;
        if let Some(keeper) = keeper {
            keeper.let_go(lease);
        }
        let message_id = lease.message().message_id().unwrap_or_default();
        match lease.finish_move(result, lost_before) {
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
