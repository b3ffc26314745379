//! Every way a delivery is settled, under every ack mode and every retry policy, seen from
//! the queue (`MemoryQueue`, paused clock): whether the message is deleted, and if not, how
//! long after the settling it is received again. Delays between whole seconds are rounded
//! up, as SQS takes only whole seconds.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{run_while, secs};
use sqs_consumer::{AckMode, BoxError, Consumer, Delivery, MemoryQueue, RetryPolicy};
use tokio::time::{sleep, Instant};

/// The queue's visibility timeout.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long after a message is visible again the consumer receives it: its polls wake as a
/// message turns visible, and the clock stands still but for sleeps.
const PICKED_UP: Duration = Duration::from_millis(500);
/// How long to watch for a message that should never come back.
const WATCH: Duration = Duration::from_secs(60);

/// What the handler does with the first receive.
#[derive(Debug, Clone, Copy)]
enum Settle {
    Ack,
    Release,
    /// `release_after` a delay between whole seconds.
    ReleaseAfter(Duration),
    Fail,
    /// Returns `Ok` without settling.
    OkUnsettled,
    /// Returns an error without settling.
    ErrUnsettled,
}

/// What becomes of the message.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fate {
    Deleted,
    /// Received again between `from` and `to` after the settling.
    Back {
        from: Duration,
        to: Duration,
    },
}

const MODES: [AckMode; 3] = [AckMode::Manual, AckMode::OnSuccess, AckMode::Always];

fn policies() -> [RetryPolicy; 3] {
    [
        RetryPolicy::Leave,
        RetryPolicy::ReleaseNow,
        RetryPolicy::backoff(secs(2), secs(8)),
    ]
}

/// Visible again `at` after the settling.
fn back_at(at: Duration) -> Fate {
    Fate::Back {
        from: at,
        to: at + PICKED_UP,
    }
}

/// What the retry policy does with a delivery that failed on its first receive.
fn retried(policy: RetryPolicy) -> Fate {
    match policy {
        // Left hidden until the receive's own timeout lapses (settled at once, before any
        // extension).
        RetryPolicy::Leave => back_at(TIMEOUT),
        RetryPolicy::ReleaseNow => back_at(Duration::ZERO),
        // 2 s on the first receive, with jitter between half and all of it, whole seconds.
        _ => Fate::Back {
            from: secs(1),
            to: secs(2) + PICKED_UP,
        },
    }
}

/// The documented outcome of `settle` under `mode` and `policy`.
fn expected(mode: AckMode, policy: RetryPolicy, settle: Settle) -> Fate {
    match (settle, mode) {
        (Settle::Ack, _) => Fate::Deleted,
        (Settle::Release, _) => back_at(Duration::ZERO),
        (Settle::ReleaseAfter(delay), _) => back_at(secs(delay.as_secs_f64().ceil() as u64)),
        (Settle::Fail, _) => retried(policy),
        (Settle::OkUnsettled, AckMode::Manual) => retried(policy),
        (Settle::OkUnsettled, _) => Fate::Deleted,
        (Settle::ErrUnsettled, AckMode::Always) => Fate::Deleted,
        (Settle::ErrUnsettled, _) => retried(policy),
    }
}

/// Runs one message through `settle` under `mode` and `policy`, and says what became of it.
async fn fate_of(mode: AckMode, policy: RetryPolicy, settle: Settle) -> Fate {
    let q = MemoryQueue::builder()
        .visibility_timeout(TIMEOUT)
        .build()
        .unwrap();
    q.send("the message").unwrap();
    let consumer = Consumer::in_memory(&q)
        .ack_mode(mode)
        .retry_policy(policy)
        .wait_time(secs(1))
        .build()
        .unwrap();
    let settled: Arc<Mutex<Option<Instant>>> = Arc::default();
    let back: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handler = {
        let (settled, back) = (settled.clone(), back.clone());
        move |d: Delivery| {
            let (settled, back) = (settled.clone(), back.clone());
            async move {
                if d.receive_count() > 1 {
                    back.lock().unwrap().get_or_insert_with(Instant::now);
                    return d.ack().await.map_err(BoxError::from);
                }
                let outcome = first_receive(d, settle).await;
                *settled.lock().unwrap() = Some(Instant::now());
                outcome
            }
        }
    };
    let watch = {
        let back = back.clone();
        async move {
            let end = Instant::now() + WATCH;
            while back.lock().unwrap().is_none() && Instant::now() < end {
                sleep(Duration::from_millis(50)).await;
            }
        }
    };
    run_while(&consumer, handler, watch).await;
    let settled = settled
        .lock()
        .unwrap()
        .expect("the first receive was handled");
    let back = *back.lock().unwrap();
    match back {
        Some(back) => {
            let after = back - settled;
            Fate::Back {
                from: after,
                to: after,
            }
        }
        None => {
            assert!(q.is_empty(), "neither deleted nor back within {WATCH:?}");
            Fate::Deleted
        }
    }
}

async fn first_receive(d: Delivery, settle: Settle) -> Result<(), BoxError> {
    match settle {
        Settle::Ack => d.ack().await?,
        Settle::Release => d.release().await?,
        Settle::ReleaseAfter(delay) => d.release_after(delay).await?,
        Settle::Fail => d.fail("failed on purpose").await?,
        Settle::OkUnsettled => {}
        Settle::ErrUnsettled => return Err("failed on purpose".into()),
    }
    Ok(())
}

/// Checks `settle` under every ack mode and retry policy.
async fn check(settle: Settle) {
    let mut wrong = Vec::new();
    for mode in MODES {
        for policy in policies() {
            let got = fate_of(mode, policy, settle).await;
            let want = expected(mode, policy, settle);
            let fits = match (got, want) {
                (Fate::Back { from: at, .. }, Fate::Back { from, to }) => from <= at && at <= to,
                _ => got == want,
            };
            if !fits {
                wrong.push(format!("{mode:?} {policy:?}: {got:?}, not {want:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{settle:?}:\n{}", wrong.join("\n"));
}

#[tokio::test(start_paused = true)]
async fn ack_deletes_under_every_mode_and_policy() {
    check(Settle::Ack).await;
}

#[tokio::test(start_paused = true)]
async fn release_makes_it_visible_at_once_under_every_mode_and_policy() {
    check(Settle::Release).await;
}

#[tokio::test(start_paused = true)]
async fn release_after_a_delay_between_seconds_rounds_it_up_under_every_mode_and_policy() {
    check(Settle::ReleaseAfter(Duration::from_millis(1200))).await;
    check(Settle::ReleaseAfter(Duration::from_millis(2001))).await;
}

#[tokio::test(start_paused = true)]
async fn fail_meets_the_retry_policy_and_never_deletes_under_every_mode() {
    check(Settle::Fail).await;
}

#[tokio::test(start_paused = true)]
async fn ok_unsettled_is_acked_unless_manual_which_meets_the_retry_policy() {
    check(Settle::OkUnsettled).await;
}

#[tokio::test(start_paused = true)]
async fn an_error_meets_the_retry_policy_unless_always_which_acks() {
    check(Settle::ErrUnsettled).await;
}
