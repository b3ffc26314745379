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
use crate::error::{ErrorKind, LostReason};
use crate::lease::Lease;
use crate::limits::extension_limit;
use crate::stats::Counter;

/// The shortest wait before retrying a failed extension.
const MIN_RETRY_WAIT: Duration = Duration::from_millis(100);

/// One planned `ChangeMessageVisibility` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extension {
    /// When to send the call.
    pub(crate) at: Instant,
    /// The visibility to ask for, in whole seconds, counted from the call; less than the
    /// timeout when the 12-hour limit cuts the extension short (the last one).
    pub(crate) visibility: u32,
}

/// Plans the next extension of a delivery whose visibility currently ends at `deadline`.
///
/// `timeout` is the visibility timeout `T` in seconds and `limit` the latest instant an
/// extension may end at (receive + 12 h - [`CAP_MARGIN`](crate::limits::CAP_MARGIN)).
/// Returns `None` when no further extension is possible or useful: `T = 0`, or the limit
/// leaves nothing to gain.
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
    Some(Extension { at, visibility })
}

/// An extension done later than this (or a quarter of the timeout, if less) after it was
/// due is late: a starved runtime, or a slow SQS.
const LATE_EXTENSION: Duration = Duration::from_secs(1);

/// Counts a late extension and warns at counts 1, 2, 4, 8, ...: a starved runtime makes
/// thousands of them late at once.
fn warn_late(lease: &Lease, late: Duration, timeout: Duration) {
    let n = lease.context().count(Counter::LateHeartbeats);
    if n.is_power_of_two() {
        tracing::warn!(
            late_by = ?late,
            visibility_timeout = ?timeout,
            late_heartbeats = n,
            "a visibility extension was done late: something may be blocking the runtime's \
             threads (CPU-bound or blocking code in an async handler: move it to \
             tokio::task::spawn_blocking), or SQS answers slowly; at half a timeout late, \
             the message goes to another consumer"
        );
    }
}

/// Keeps one delivery hidden until it is settled, dropped, or lost.
///
/// Runs as its own task; the `Delivery` aborts it when it settles or is dropped. When it ends by itself, the delivery is lost (or `T = 0`, which has no deadline).
pub(crate) async fn run(lease: Arc<Lease>, timeout: u32, received_at: Instant) {
    if timeout == 0 {
        // Nothing to keep: the message is visible to other receivers at once.
        return;
    }
    let limit = extension_limit(received_at);
    let mut warned = false;
    let t = Duration::from_secs(u64::from(timeout));
    let late_after = (t / 4).min(LATE_EXTENSION);
    while let Some(ext) = next_extension(lease.deadline(), timeout, limit) {
        sleep_until(ext.at).await;
        let outcome = extend(&lease, timeout, limit).await;
        // Done late, whether it succeeded or gave up: a starved runtime shows as both.
        let delay = Instant::now().saturating_duration_since(ext.at);
        lease.context().extension_delay(delay);
        if delay > late_after {
            warn_late(&lease, delay, t);
        }
        match outcome {
            Ok(Extended::By(visibility)) if visibility < timeout && !warned => {
                warned = true;
                lease.context().count(Counter::Capped);
                tracing::warn!(
                    held_for = ?Instant::now().saturating_duration_since(received_at),
                    visibility,
                    "last visibility extension: SQS keeps a message hidden for at most 12 hours \
                     after the receive; it goes to another consumer when this one lapses"
                );
            }
            Ok(Extended::By(_)) => {}
            Ok(Extended::NothingToGain) => break,
            Err(reason) => {
                if lease.heartbeat_lost(reason) {
                    tracing::warn!(%reason, "delivery lost");
                }
                return;
            }
        }
    }
    // No extension is possible any more: the 12-hour limit is reached. The delivery is ours
    // until the current deadline, and lost after it.
    sleep_until(lease.deadline()).await;
    if lease.heartbeat_lost(LostReason::HardDeadline) {
        tracing::warn!(reason = %LostReason::HardDeadline, "delivery lost");
    }
}

/// What one extension achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extended {
    /// The visibility now ends this many seconds after the call.
    By(u32),
    /// The 12-hour limit leaves no room past the current deadline: extending is over.
    NothingToGain,
}

/// Sends one extension, retrying transient failures until the current deadline.
///
/// The visibility asked for is worked out again for every attempt, so a late retry never asks
/// past the 12-hour limit.
async fn extend(lease: &Lease, timeout: u32, limit: Instant) -> Result<Extended, LostReason> {
    let ctx = lease.context();
    let deadline = lease.deadline();
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
            // A late retry near the limit: nothing can be gained any more.
            return Ok(Extended::NothingToGain);
        }
        match timeout_at(deadline, ctx.extend(lease.receipt(), visibility)).await {
            Ok(Ok(())) => {
                lease.set_deadline(ends);
                ctx.count(Counter::Extended);
                tracing::debug!(visibility, "visibility extended");
                return Ok(Extended::By(visibility));
            }
            Ok(Err(err)) => {
                ctx.count(Counter::ExtensionFailures);
                if let Some(ErrorKind::Lost(reason)) = err.kind() {
                    return Err(reason);
                }
                if err.refuses_visibility() {
                    // SQS refuses the visibility itself, the one value we vary: past its
                    // 12-hour limit by its own clock. Asking again cannot help; the delivery
                    // is ours until the current deadline.
                    tracing::warn!(
                        error = %err.chain(),
                        "SQS refused the visibility extension (past its 12-hour limit?); no \
                         more extensions: the message goes to another consumer when this \
                         timeout lapses"
                    );
                    return Ok(Extended::NothingToGain);
                }
                let remaining = deadline.saturating_duration_since(Instant::now());
                // A quarter of what is left, so several tries fit before the deadline, but
                // never less than MIN_RETRY_WAIT: close to the deadline a quarter shrinks
                // towards nothing, and the tries would bunch up into a burst.
                let wait = backoff.next_delay().min(remaining / 4).max(MIN_RETRY_WAIT);
                tracing::warn!(
                    error = %err.chain(),
                    retry_in = ?wait,
                    remaining = ?remaining,
                    "visibility extension failed; retrying"
                );
                // Not past the deadline: the delivery is lost right then, not a bit later.
                sleep(wait.min(remaining)).await;
            }
            Err(_elapsed) => {
                ctx.count(Counter::ExtensionFailures);
                return Err(LostReason::ExtensionFailed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::HARD_LIMIT;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[tokio::test(start_paused = true)]
    async fn extends_at_half_by_whole_timeout() {
        let r = Instant::now();
        let ext = next_extension(r + secs(30), 30, extension_limit(r)).expect("an extension");
        assert_eq!(ext.at, r + secs(15));
        assert_eq!(ext.visibility, 30);
        assert_eq!(ext.visibility, 30);
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
            if ext.visibility < 30 {
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
        assert!(ext.visibility < 30_000);
        assert_eq!(ext.at + secs(u64::from(ext.visibility)), limit);
        assert!(ext.at < r + secs(30_000));
        // After it, nothing more can be gained.
        assert_eq!(next_extension(limit, 30_000, limit), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_twelve_hour_timeout_needs_no_extension() {
        // The receive itself already hides the message past the limit.
        let r = Instant::now();
        assert_eq!(
            next_extension(r + secs(43_200), 43_200, extension_limit(r)),
            None
        );
    }

    mod schedule {
        //! Properties of the whole extension schedule, for any timeout and receive time.
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn every_schedule_stays_inside_the_limits(
                timeout in prop_oneof![0u32..=120, 0u32..=43_200],
                // Where the receive falls on the clock, and how long the answer took (a long
                // poll answers up to 20 s after the request; the first deadline counts from
                // the answer).
                received_offset_ms in 0u64..=1_000_000_000,
                answer_ms in 0u64..=20_000,
            ) {
                let r = Instant::now() + Duration::from_millis(received_offset_ms);
                let hard = r + HARD_LIMIT;
                let limit = extension_limit(r);
                let t = Duration::from_secs(u64::from(timeout));
                let mut deadline = r + Duration::from_millis(answer_ms) + t;
                let mut last_sent = r;
                let mut rounds = 0u32;
                while let Some(ext) = next_extension(deadline, timeout, limit) {
                    rounds += 1;
                    prop_assert!(timeout > 0, "no extension at all when T = 0");
                    prop_assert!(ext.visibility > 0, "an extension of 0 at T = {}", timeout);
                    prop_assert!(ext.visibility <= timeout);
                    prop_assert!(ext.at < deadline, "sent at or after the deadline it extends");
                    prop_assert!(ext.at >= last_sent, "the schedule goes back in time");
                    let ends = ext.at + Duration::from_secs(u64::from(ext.visibility));
                    prop_assert!(ends <= hard, "asks past receive + 12 h");
                    prop_assert!(ends <= limit, "eats into the margin before the 12-hour limit");
                    prop_assert!(ends > deadline, "an extension that gains nothing");
                    prop_assert!(rounds <= 2 * 43_200 + 2, "the schedule does not end");
                    last_sent = ext.at;
                    deadline = ends;
                }
                if timeout > 0 {
                    // Nothing given away: the message stays hidden to within a second of the
                    // limit (visibility is whole seconds), or its first deadline was later.
                    prop_assert!(deadline + Duration::from_secs(1) > limit, "stops early");
                }
            }
        }
    }
}
