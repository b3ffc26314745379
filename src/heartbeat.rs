//! The extension schedule (a pure function) and the per-delivery heartbeat task.
//!
//! SQS has no lease: a received message is hidden for its visibility timeout `T` and then
//! handed to the next receiver. While a delivery is held, the heartbeat calls
//! `ChangeMessageVisibility(T)` halfway through each timeout, leaving the other half for the
//! call (and its retries) to reach the queue. SQS refuses any visibility that would end more
//! than 12 hours after the receive, so the last extension is cut to end just before that.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep, sleep_until, timeout_at, Instant};

use crate::backoff::Backoff;
use crate::delivery::Shared;
use crate::error::{ErrorKind, LostReason};
use crate::queue::Queue;

/// The largest visibility timeout SQS accepts, in seconds (12 hours).
pub(crate) const MAX_VISIBILITY_SECS: u32 = 43_200;

/// SQS's limit on how long a message may stay hidden, counted from the receive.
pub(crate) const HARD_LIMIT: Duration = Duration::from_secs(MAX_VISIBILITY_SECS as u64);

/// How far before the 12-hour limit the last extension ends.
///
/// SQS applies a `ChangeMessageVisibility` from the moment the call reaches it, which is a
/// little later than the moment we send it; SQS's own guide suggests 43,195 s rather than
/// 43,200 s for the same reason.
pub(crate) const CAP_MARGIN: Duration = Duration::from_secs(5);

/// One planned `ChangeMessageVisibility` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extension {
    /// When to send the call.
    pub(crate) at: Instant,
    /// The visibility to ask for, in whole seconds, counted from the call.
    pub(crate) visibility: u32,
    /// `true` when the 12-hour limit cut this extension short: it is the last one.
    pub(crate) capped: bool,
}

/// Plans the next extension of a delivery whose visibility currently ends at `deadline`.
///
/// `timeout` is the visibility timeout `T` in seconds and `limit` the latest instant an
/// extension may end at (receive + 12 h - [`CAP_MARGIN`]). Returns `None` when no further
/// extension is possible or useful: `T = 0`, or the limit leaves nothing to gain.
pub(crate) fn next_extension(deadline: Instant, timeout: u32, limit: Instant) -> Option<Extension> {
    if timeout == 0 {
        return None;
    }
    let t = Duration::from_secs(u64::from(timeout));
    let at = deadline.checked_sub(t / 2)?;
    if at >= limit {
        return None;
    }
    let room = u32::try_from((limit - at).as_secs()).unwrap_or(u32::MAX);
    if room >= timeout {
        return Some(Extension {
            at,
            visibility: timeout,
            capped: false,
        });
    }
    if room == 0 {
        return None;
    }
    // The limit cuts this extension short. Send it a moment later than usual, so that it ends
    // exactly at the limit, unless that would eat too far into the time left for retries.
    let visibility = room;
    let exact = limit - Duration::from_secs(u64::from(visibility));
    let at = if exact <= at + t / 4 { exact } else { at };
    if at + Duration::from_secs(u64::from(visibility)) <= deadline {
        return None;
    }
    Some(Extension {
        at,
        visibility,
        capped: true,
    })
}

/// The latest instant an extension of a delivery received at `received_at` may end at.
pub(crate) fn extension_limit(received_at: Instant) -> Instant {
    received_at + HARD_LIMIT - CAP_MARGIN
}

/// Keeps one delivery hidden until it is settled, dropped, or lost.
///
/// Runs as its own task; the [`Delivery`](crate::Delivery) aborts it when it settles or is
/// dropped. When it ends by itself, the delivery is lost (or `T = 0`, which has no deadline).
pub(crate) async fn run(queue: Queue, shared: Arc<Shared>, timeout: u32, received_at: Instant) {
    if timeout == 0 {
        // Nothing to keep: the message is visible to other receivers at once.
        return;
    }
    let limit = extension_limit(received_at);
    let mut warned = false;
    while let Some(ext) = next_extension(shared.deadline(), timeout, limit) {
        if ext.capped && !warned {
            warned = true;
            tracing::warn!(
                message_id = %shared.message_id,
                held_for = ?ext.at.saturating_duration_since(received_at),
                "delivery held for almost 12 hours: this is its last visibility extension; \
                 SQS hands the message to another consumer when it lapses"
            );
        }
        sleep_until(ext.at).await;
        if let Err(reason) = extend(&queue, &shared, timeout, limit).await {
            shared.mark_lost(reason);
            tracing::warn!(message_id = %shared.message_id, %reason, "delivery lost");
            return;
        }
    }
    // No extension is possible any more: the 12-hour limit is reached. The delivery is ours
    // until the current deadline, and lost after it.
    sleep_until(shared.deadline()).await;
    shared.mark_lost(LostReason::HardDeadline);
    tracing::warn!(
        message_id = %shared.message_id,
        reason = %LostReason::HardDeadline,
        "delivery lost"
    );
}

/// Sends one extension, retrying transient failures until the current deadline.
///
/// The visibility asked for is worked out again for every attempt, so a late retry never asks
/// past the 12-hour limit.
async fn extend(
    queue: &Queue,
    shared: &Shared,
    timeout: u32,
    limit: Instant,
) -> Result<(), LostReason> {
    let deadline = shared.deadline();
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(LostReason::ExtensionFailed);
        }
        let room = u32::try_from(limit.saturating_duration_since(now).as_secs()).unwrap_or(0);
        let visibility = timeout.min(room);
        let ends = now + Duration::from_secs(u64::from(visibility));
        if ends <= deadline {
            // The limit leaves nothing to gain any more; the caller stops extending.
            return Ok(());
        }
        match timeout_at(deadline, queue.change_visibility(&shared.receipt, visibility)).await {
            Ok(Ok(())) => {
                shared.set_deadline(ends);
                tracing::debug!(
                    message_id = %shared.message_id,
                    visibility,
                    "visibility extended"
                );
                return Ok(());
            }
            Ok(Err(err)) => {
                if let Some(ErrorKind::Lost(reason)) = err.kind() {
                    return Err(reason);
                }
                let remaining = deadline.saturating_duration_since(Instant::now());
                let wait = backoff.next_delay().min(remaining / 4);
                tracing::warn!(
                    message_id = %shared.message_id,
                    error = %err,
                    retry_in = ?wait,
                    remaining = ?remaining,
                    "visibility extension failed; retrying"
                );
                sleep(wait).await;
            }
            Err(_elapsed) => return Err(LostReason::ExtensionFailed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[tokio::test(start_paused = true)]
    async fn extends_at_half_by_whole_timeout() {
        let r = Instant::now();
        let ext = next_extension(r + secs(30), 30, extension_limit(r)).expect("an extension");
        assert_eq!(ext.at, r + secs(15));
        assert_eq!(ext.visibility, 30);
        assert!(!ext.capped);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_timeout_has_no_extension() {
        let r = Instant::now();
        assert_eq!(next_extension(r, 0, extension_limit(r)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_extension_ends_exactly_at_the_limit() {
        let r = Instant::now();
        let limit = extension_limit(r);
        let mut deadline = r + secs(30);
        let mut capped = 0;
        let mut rounds = 0;
        while let Some(ext) = next_extension(deadline, 30, limit) {
            rounds += 1;
            assert!(ext.at < deadline, "sent before the current deadline");
            let ends = ext.at + secs(u64::from(ext.visibility));
            assert!(ends <= limit, "never past receive + 12 h - margin");
            if ext.capped {
                capped += 1;
                assert_eq!(ends, limit);
            }
            deadline = ends;
            assert!(rounds < 10_000, "the schedule must end");
        }
        assert_eq!(capped, 1);
        assert_eq!(deadline, limit);
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_timeout_is_cut_to_the_limit() {
        let r = Instant::now();
        let limit = extension_limit(r);
        let ext = next_extension(r + secs(30_000), 30_000, limit).expect("one extension");
        assert!(ext.capped);
        assert_eq!(ext.at + secs(u64::from(ext.visibility)), limit);
        assert!(ext.at < r + secs(30_000));
        // After it, nothing more can be gained.
        assert_eq!(next_extension(limit, 30_000, limit), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_twelve_hour_timeout_needs_no_extension() {
        // The receive itself already hides the message past the limit.
        let r = Instant::now();
        assert_eq!(next_extension(r + secs(43_200), 43_200, extension_limit(r)), None);
    }
}
