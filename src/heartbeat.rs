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
use crate::stats::bump;

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
fn warn_late(shared: &Shared, late: Duration, timeout: Duration) {
    let n = shared
        .ctx
        .counters
        .late_heartbeats
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        + 1;
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

/// The latest instant an extension of a delivery received at `received_at` may end at.
pub(crate) fn extension_limit(received_at: Instant) -> Instant {
    received_at + HARD_LIMIT - CAP_MARGIN
}

/// Keeps one delivery hidden until it is settled, dropped, or lost.
///
/// Runs as its own task; the [`Delivery`](crate::Delivery) aborts it when it settles or is
/// dropped. When it ends by itself, the delivery is lost (or `T = 0`, which has no deadline).
pub(crate) async fn run(shared: Arc<Shared>, timeout: u32, received_at: Instant) {
    if timeout == 0 {
        // Nothing to keep: the message is visible to other receivers at once.
        return;
    }
    let limit = extension_limit(received_at);
    let mut warned = false;
    let t = Duration::from_secs(u64::from(timeout));
    let late_after = (t / 4).min(LATE_EXTENSION);
    while let Some(ext) = next_extension(shared.deadline(), timeout, limit) {
        sleep_until(ext.at).await;
        let outcome = extend(&shared, timeout, limit).await;
        // Done late, whether it succeeded or gave up: a starved runtime shows as both.
        let delay = Instant::now().saturating_duration_since(ext.at);
        shared.ctx.counters.extension_delay(delay);
        if delay > late_after {
            warn_late(&shared, delay, t);
        }
        match outcome {
            Ok(Extended::By(visibility)) if visibility < timeout && !warned => {
                warned = true;
                bump(&shared.ctx.counters.capped);
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
                if shared.heartbeat_lost(reason) {
                    tracing::warn!(%reason, "delivery lost");
                }
                return;
            }
        }
    }
    // No extension is possible any more: the 12-hour limit is reached. The delivery is ours
    // until the current deadline, and lost after it.
    sleep_until(shared.deadline()).await;
    if shared.heartbeat_lost(LostReason::HardDeadline) {
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
async fn extend(shared: &Shared, timeout: u32, limit: Instant) -> Result<Extended, LostReason> {
    let batcher = &shared.ctx.visibility;
    let counters = &shared.ctx.counters;
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
            // A late retry near the limit: nothing can be gained any more.
            return Ok(Extended::NothingToGain);
        }
        match timeout_at(deadline, batcher.submit(&shared.receipt, visibility)).await {
            Ok(Ok(())) => {
                shared.set_deadline(ends);
                bump(&counters.extended);
                tracing::debug!(visibility, "visibility extended");
                return Ok(Extended::By(visibility));
            }
            Ok(Err(err)) => {
                bump(&counters.extension_failures);
                if let Some(ErrorKind::Lost(reason)) = err.kind() {
                    return Err(reason);
                }
                if err.code().and_then(|c| c.rsplit('.').next()) == Some("InvalidParameterValue") {
                    // SQS refuses the visibility itself, the one value we vary: past its
                    // 12-hour limit by its own clock. Asking again cannot help; the delivery
                    // is ours until the current deadline.
                    tracing::warn!(
                        error = %err,
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
                    error = %err,
                    retry_in = ?wait,
                    remaining = ?remaining,
                    "visibility extension failed; retrying"
                );
                // Not past the deadline: the delivery is lost right then, not a bit later.
                sleep(wait.min(remaining)).await;
            }
            Err(_elapsed) => {
                bump(&counters.extension_failures);
                return Err(LostReason::ExtensionFailed);
            }
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

    mod task {
        //! The heartbeat task driven through a real `Delivery` on a `MemoryQueue`, on the
        //! paused clock: `sleep` here only moves virtual time forward.
        use tokio::time::sleep;

        use super::*;
        use crate::context::Context;
        use crate::delivery::Received;
        use crate::queue::Queue;
        use crate::{Action, Delivery, Error, MemoryQueue, RetryPolicy};

        fn queue(visibility: u64) -> MemoryQueue {
            MemoryQueue::builder()
                .visibility_timeout(secs(visibility))
                .build()
                .expect("valid queue")
        }

        /// Receives the queue's first message the way the consumer does, with `visibility`
        /// (or the queue's own timeout) and no in-flight slot.
        async fn hold(queue: &MemoryQueue, visibility: Option<u32>) -> Delivery {
            let received_at = Instant::now();
            let mut messages = queue
                .receive_with_visibility(1, Duration::ZERO, visibility)
                .await
                .expect("receive");
            let message = messages.pop().expect("a message to receive");
            let receipt = message
                .receipt_handle()
                .expect("a receipt handle")
                .to_owned();
            let timeout = visibility.unwrap_or(queue.visibility_timeout().as_secs() as u32);
            let ctx = Context::new(Queue::Memory(queue.clone()), RetryPolicy::Leave);
            let received = Received {
                receipt,
                received_at,
                returned_at: Instant::now(),
                timeout,
                permit: None,
                shutdown: Default::default(),
            };
            Delivery::start(std::sync::Arc::new(ctx), message, received)
        }

        fn extensions(queue: &MemoryQueue) -> u64 {
            queue.requests().visibility_changes()
        }

        #[tokio::test(start_paused = true)]
        async fn extends_at_half_the_timeout_by_the_timeout_again_and_again() {
            let q = queue(30);
            q.send("job").unwrap();
            let d = hold(&q, None).await;
            let r = d.received_at();
            assert_eq!(d.deadline(), r + secs(30));
            for round in 1..=10u64 {
                // Just before and just after each half-way point.
                sleep_until(r + secs(15 * round) - Duration::from_millis(100)).await;
                assert_eq!(
                    extensions(&q),
                    round - 1,
                    "no early extension in round {round}"
                );
                sleep_until(r + secs(15 * round) + Duration::from_millis(100)).await;
                assert_eq!(extensions(&q), round, "one extension per half timeout");
                assert_eq!(d.deadline(), r + secs(15 * round + 30));
            }
            // Still hidden after 5 timeouts.
            assert_eq!(q.in_flight_len(), 1);
            assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
            assert!(!d.is_lost());
        }

        #[tokio::test(start_paused = true)]
        async fn a_late_extension_is_counted() {
            let q = queue(10);
            q.send("job").unwrap();
            let d = hold(&q, None).await;
            let late = || {
                d.shared_for_tests()
                    .ctx
                    .counters
                    .late_heartbeats
                    .load(std::sync::atomic::Ordering::Relaxed)
            };
            // Due at 5 s. Done 0.9 s late: not counted (the threshold is min(T/4, 1 s)).
            tokio::time::advance(Duration::from_millis(5_900)).await;
            sleep(Duration::from_millis(1)).await;
            assert_eq!((extensions(&q), late()), (1, 0));
            // Next due at 5.9 + 5 = 10.9 s; jump the clock to about 12.9 s at once, as a runtime
            // whose threads were blocked for two seconds would see it.
            tokio::time::advance(secs(7)).await;
            sleep(Duration::from_millis(1)).await;
            assert_eq!((extensions(&q), late()), (2, 1));
            assert!(!d.is_lost());
        }

        #[tokio::test(start_paused = true)]
        async fn zero_timeout_sends_no_extension() {
            let q = queue(30);
            q.send("job").unwrap();
            let d = hold(&q, Some(0)).await;
            sleep(secs(600)).await;
            assert_eq!(extensions(&q), 0);
            assert!(!d.is_lost());
            assert_eq!(d.deadline(), d.received_at());
        }

        #[tokio::test(start_paused = true)]
        async fn ack_release_and_drop_each_stop_the_heartbeat() {
            let q = queue(10);
            for _ in 0..3 {
                q.send("job").unwrap();
            }
            let acked = hold(&q, None).await;
            let released = hold(&q, None).await;
            let dropped = hold(&q, None).await;
            sleep(secs(6)).await;
            assert_eq!(extensions(&q), 3, "each extended once at 5 s");

            acked.ack().await.expect("ack");
            released.release().await.expect("release");
            drop(dropped);
            let after_settling = extensions(&q);
            assert_eq!(after_settling, 4, "the release itself is one call");
            sleep(secs(120)).await;
            assert_eq!(
                extensions(&q),
                after_settling,
                "no extension after settling"
            );
            assert_eq!(q.requests().deletes(), 1);
            // The acked one is gone; the other two are back.
            assert_eq!(q.len(), 2);
            assert_eq!(q.receive(10, Duration::ZERO).await.unwrap().len(), 2);
        }

        #[tokio::test(start_paused = true)]
        async fn a_dropped_delivery_returns_when_its_timeout_lapses() {
            let q = queue(10);
            q.send("job").unwrap();
            let d = hold(&q, None).await;
            let r = d.received_at();
            sleep_until(r + secs(6)).await; // extended at 5 s: hidden until 15 s
            drop(d);
            sleep_until(r + secs(14)).await;
            assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
            sleep_until(r + secs(15)).await;
            let again = q.receive(10, Duration::ZERO).await.unwrap();
            assert_eq!(again.len(), 1);
        }

        #[tokio::test(start_paused = true)]
        async fn holding_13_hours_caps_the_last_extension_warns_once_then_loses_it() {
            let q = queue(30);
            q.send("long job").unwrap();
            let d = hold(&q, None).await;
            let r = d.received_at();
            let limit = r + HARD_LIMIT - CAP_MARGIN;
            assert_eq!(d.hard_deadline(), r + HARD_LIMIT);

            sleep_until(limit - secs(1)).await;
            assert_eq!(
                d.deadline(),
                limit,
                "the last extension ends exactly at the margin"
            );
            assert_eq!(q.in_flight_len(), 1, "still hidden just before the limit");
            assert!(!d.is_lost());
            // Counted where the warning is logged, once per delivery.
            let capped = || d.context().counters.snapshot(0).capped;
            assert_eq!(capped(), 1);

            // Hold on to 13 hours: the message goes to another receiver at the limit.
            let lost = d.lost();
            sleep_until(r + secs(13 * 3600)).await;
            assert_eq!(lost.await, LostReason::HardDeadline);
            assert!(d.is_lost());
            assert_eq!(capped(), 1, "warned once only");
            let other = q.receive(10, Duration::ZERO).await.unwrap();
            assert_eq!(other.len(), 1, "another receiver gets it");
            // One every 15 s from 15 s to 43,170 s, the last one cut to 25 s; none refused
            // (the queue refuses any that would end past the 12 hours).
            assert_eq!(extensions(&q), 43_170 / 15);
            match d.ack().await {
                Err(Error::Lost { reason, .. }) => assert_eq!(reason, LostReason::HardDeadline),
                other => panic!("ack of a lost delivery must report it, got {other:?}"),
            }
        }

        #[tokio::test(start_paused = true)]
        async fn late_retries_near_the_limit_stop_extending_instead_of_spinning() {
            // T = 30: the capped extensions are due at 43,170 s and 43,180 s. Failures make
            // the first land late (0.3..0.6 s) and the second less late (0.1..0.2 s), so the
            // second can no longer gain anything: the heartbeat must stop, not retry at once
            // forever. (A non-retryable code, so that the heartbeat itself retries, rather
            // than the batcher with the same visibility.)
            let q = queue(30);
            q.send("job").unwrap();
            let d = hold(&q, None).await;
            let r = d.received_at();
            sleep_until(r + secs(43_169)).await;
            q.fail_next(Action::ChangeMessageVisibility, "AccessDenied", 2);
            sleep_until(r + secs(43_175)).await;
            let first_late = d.deadline() - (r + secs(43_194));
            assert!(
                first_late >= Duration::from_millis(300) && first_late < secs(1),
                "{first_late:?}"
            );
            q.fail_next(Action::ChangeMessageVisibility, "AccessDenied", 1);
            let before = extensions(&q);
            assert_eq!(d.lost().await, LostReason::HardDeadline);
            assert_eq!(
                Instant::now(),
                r + secs(43_194) + first_late,
                "lost at its deadline"
            );
            assert_eq!(
                extensions(&q) - before,
                1,
                "one failed call, then nothing more"
            );
        }

        #[tokio::test(start_paused = true)]
        async fn an_ack_racing_an_extension_is_not_reported_lost() {
            // The extension due at 5 s is throttled and retried 50..100 ms later; the ack
            // goes out at 5.01 s. The retried extension then finds the message deleted: that
            // must not turn the successful ack into a "lost" one.
            let q = queue(10);
            q.send("m").unwrap();
            let d = hold(&q, None).await;
            let r = d.received_at();
            sleep_until(r + secs(4)).await;
            q.fail_next(Action::ChangeMessageVisibility, "RequestThrottled", 1);
            sleep_until(r + secs(5) + Duration::from_millis(10)).await;
            let ctx = d.context().clone();
            d.ack().await.expect("the delete succeeded");
            assert!(q.is_empty());
            sleep(secs(1)).await;
            assert_eq!(extensions(&q), 2, "the throttled try and its retry");
            assert_eq!(
                ctx.counters.snapshot(0).lost,
                0,
                "not counted as lost either"
            );
        }

        #[tokio::test(start_paused = true)]
        async fn message_not_in_flight_loses_the_delivery() {
            let q = queue(10);
            q.send("job").unwrap();
            let d = hold(&q, None).await;
            // Someone made it visible behind our back: the next extension finds it not in flight.
            q.change_visibility(&receipt_of(&d), 0).unwrap();
            let lost = d.lost();
            assert_eq!(lost.await, LostReason::NotInFlight);
            assert!(d.is_lost());
            assert!(matches!(
                d.ack().await,
                Err(Error::Lost {
                    reason: LostReason::NotInFlight,
                    ..
                })
            ));
        }

        #[tokio::test(start_paused = true)]
        async fn an_invalid_receipt_handle_loses_the_delivery() {
            let q = queue(10);
            q.send("job").unwrap();
            let d = hold(&q, None).await;
            q.change_visibility(&receipt_of(&d), 0).unwrap();
            // Another receiver takes it: our handle is now stale.
            assert_eq!(q.receive(1, Duration::ZERO).await.unwrap().len(), 1);
            assert_eq!(d.lost().await, LostReason::ReceiptHandleInvalid);
            let err = d.ack().await.expect_err("ack with a stale handle fails");
            assert!(err.is_lost(), "{err}");
        }

        #[tokio::test(start_paused = true)]
        async fn a_transient_extension_error_is_retried_and_the_delivery_survives() {
            let q = queue(10);
            q.send("job").unwrap();
            let d = hold(&q, None).await;
            q.fail_next(Action::ChangeMessageVisibility, "RequestThrottled", 2);
            sleep(secs(60)).await;
            assert!(!d.is_lost());
            assert_eq!(q.in_flight_len(), 1);
            assert!(
                extensions(&q) >= 2 + 11,
                "two failures, then one success per 5 s"
            );
            d.ack().await.expect("ack after retried extensions");
            assert!(q.is_empty());
        }

        #[tokio::test(start_paused = true)]
        async fn extensions_failing_until_the_deadline_lose_the_delivery() {
            let q = queue(10);
            q.send("job").unwrap();
            let d = hold(&q, None).await;
            let r = d.received_at();
            q.fail_next(Action::ChangeMessageVisibility, "InternalError", 10_000);
            let lost = d.lost();
            assert_eq!(lost.await, LostReason::ExtensionFailed);
            assert_eq!(Instant::now(), r + secs(10), "lost exactly at the deadline");
            let tries = extensions(&q);
            assert!(
                (3..=30).contains(&tries),
                "bounded retries in the half window, got {tries}"
            );
        }

        #[tokio::test(start_paused = true)]
        async fn release_after_hides_for_the_delay_and_refuses_past_the_limit() {
            let q = queue(10);
            q.send("a").unwrap();
            q.send("b").unwrap();
            let a = hold(&q, None).await;
            let b = hold(&q, None).await;
            let start = Instant::now();
            a.release_after(secs(120)).await.expect("release_after");
            sleep_until(start + secs(119)).await;
            assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
            sleep_until(start + secs(120)).await;
            assert_eq!(
                q.receive(1, Duration::ZERO).await.unwrap()[0].body(),
                Some("a")
            );

            match b.release_after(secs(43_200)).await {
                Err(Error::PastHardDeadline { allowed, .. }) => {
                    assert!(allowed < secs(43_200 - 120));
                }
                other => panic!("expected PastHardDeadline, got {other:?}"),
            }
            q.send("c").unwrap();
            let c = hold(&q, None).await;
            let err = c.release_after(secs(43_201)).await.expect_err("over 12 h");
            assert!(
                matches!(
                    err,
                    Error::InvalidConfig {
                        field: "release_after",
                        ..
                    }
                ),
                "{err}"
            );
        }

        fn receipt_of(d: &Delivery) -> String {
            d.shared_for_tests().receipt.clone()
        }

        #[tokio::test(start_paused = true)]
        async fn debug_output_hides_the_receipt_handle() {
            let q = queue(10);
            q.send("secret body").unwrap();
            let d = hold(&q, None).await;
            let text = format!("{d:?}");
            assert!(text.contains(d.message_id()));
            assert!(!text.contains(&receipt_of(&d)));
            assert!(!text.contains("secret body"));
        }
    }
}
#[cfg(test)]
mod size {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use crate::context::Context;
    use crate::delivery::Received;
    use crate::queue::Queue;
    use crate::{Delivery, MemoryQueue, RetryPolicy};

    /// Every held delivery keeps a heartbeat future alive: it must stay small (an SDK request
    /// future inside it once made it 5.5 KiB).
    #[tokio::test]
    async fn a_held_delivery_stays_small() {
        let q = MemoryQueue::new();
        let ctx = Arc::new(Context::new(Queue::Memory(q.clone()), RetryPolicy::Leave));
        q.send("x").unwrap();
        let m = q.receive(1, Duration::ZERO).await.unwrap().pop().unwrap();
        let received = Received {
            receipt: m.receipt_handle().unwrap().to_owned(),
            received_at: Instant::now(),
            returned_at: Instant::now(),
            timeout: 30,
            permit: None,
            shutdown: Default::default(),
        };
        let d = Delivery::start(ctx, m, received);
        let heartbeat = super::run(d.shared_for_tests(), 30, Instant::now());
        let (future, delivery) = (std::mem::size_of_val(&heartbeat), std::mem::size_of_val(&d));
        assert!(future <= 1024, "heartbeat future: {future} bytes");
        assert!(delivery <= 512, "Delivery: {delivery} bytes");
    }
}
