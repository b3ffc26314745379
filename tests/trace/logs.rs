//! What the crate logs, checked line by line on `MemoryQueue` (paused clock): no message body
//! and no whole receipt handle ever, every line about a delivery in its `delivery` span with
//! the message id, and each event at the level the docs give it. Then, on a 2-thread runtime,
//! where the events go: to the subscriber of the thread that started the run, whichever
//! worker or thread a task of the run logs from.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    capture_logs, eventually, run_until_one_acked, run_while, run_while_expecting_panics, secs,
};
use futures::StreamExt;
use sqs_consumer::memory::{Action, Faults};
use sqs_consumer::{Batch, Consumer, Delivery, MemoryQueue, RetryPolicy};
use tokio::time::sleep;

#[tokio::test(start_paused = true)]
async fn logs_never_carry_bodies_or_whole_receipt_handles_and_name_the_message() {
    let (logs, _guard) = capture_logs();
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(2))
        .build()
        .unwrap();
    for outcome in ["ack", "fail", "panic", "hold"] {
        q.send(format!("SECRET-BODY-{outcome}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let handles: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = handles.clone();
    let handler = move |d: Delivery| {
        let seen = seen.clone();
        async move {
            let handle = d.message().receipt_handle().unwrap_or_default().to_owned();
            seen.lock().unwrap().push(handle);
            let outcome = d.body().trim_start_matches("SECRET-BODY-").to_owned();
            // The second time round, every message is acked.
            match (outcome.as_str(), d.receive_count()) {
                (_, 2..) | ("ack", _) => d.ack().await.map_err(Into::into),
                ("fail", _) => Err::<(), sqs_consumer::BoxError>("failed on purpose".into()),
                ("panic", _) => panic!("panicked on purpose"),
                _ => {
                    sleep(secs(5)).await; // extended twice meanwhile
                    d.ack().await.map_err(Into::into)
                }
            }
        }
    };
    let drained = eventually("the queue drained", secs(600), || q.is_empty());
    run_while_expecting_panics(&consumer, handler, drained).await;
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let handles = handles.lock().unwrap().clone();
    assert!(handles.len() >= 6 && handles.iter().all(|h| h.len() > 16));

    assert!(!logs.contains("SECRET-BODY"), "a body was logged:\n{logs}");
    for handle in &handles {
        assert!(
            !logs.contains(handle.as_str()),
            "a whole receipt handle was logged"
        );
    }
    let crate_lines: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("sqs_consumer"))
        .collect();
    for line in crate_lines.iter().filter(|l| l.contains("delivery{")) {
        assert!(
            line.contains("messaging.message.id="),
            "no message id: {line}"
        );
    }
    let has = |level: &str, what: &str| {
        crate_lines
            .iter()
            .any(|l| l.contains(level) && l.contains("message.id=") && l.contains(what))
    };
    assert!(has("WARN", "handler failed"), "{logs}");
    assert!(has("ERROR", "handler panicked"), "{logs}");
    assert!(has("DEBUG", "visibility extended"), "{logs}");
    assert!(has("DEBUG", "acked"), "{logs}");
    // The panic is the only error: nothing else here is one.
    let errors: Vec<&&str> = crate_lines.iter().filter(|l| l.contains("ERROR")).collect();
    assert!(
        errors.iter().all(|l| l.contains("handler panicked")),
        "{errors:#?}"
    );
    assert_eq!(consumer.stats().handler_panics, 1);
}

/// A subscriber set for the thread that awaits the run only (`set_default`) still gets the
/// receive loop's events, though the loop runs on a worker of the runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_for_the_awaiting_thread_gets_the_receive_loops_events() {
    let (logs, _guard) = capture_logs();
    // The loop logs its start before its first receive, so before the ack.
    run_until_one_acked("logged-off-the-workers").await;
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("consumer started"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("logged-off-the-workers"), "{line}");
}

/// The same subscriber gets the handlers' events and the keeper's: the tasks the run spawns
/// (handlers, the keeper, the batchers) log for the caller's subscriber too, on whatever
/// worker they run, and on the keeper's own thread when it has one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_for_the_awaiting_thread_gets_the_handlers_and_keepers_events() {
    handlers_and_keeper_log_for_the_awaiting_threads_subscriber(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_for_the_awaiting_thread_gets_the_isolated_keepers_events() {
    handlers_and_keeper_log_for_the_awaiting_threads_subscriber(true).await;
}

async fn handlers_and_keeper_log_for_the_awaiting_threads_subscriber(isolated_keeper: bool) {
    let (logs, _guard) = capture_logs();
    // 2 s of visibility: held 1.5 s, a delivery is extended once (at 1 s) before its ack.
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(2))
        .build()
        .unwrap();
    q.send("fail").unwrap();
    q.send("hold").unwrap();
    let consumer = Consumer::in_memory(&q)
        .wait_time(secs(1))
        .retry_policy(RetryPolicy::ReleaseNow)
        .isolated_keeper(isolated_keeper)
        .build()
        .unwrap();
    let handler = |d: Delivery| async move {
        if d.body() == "fail" && d.receive_count() == 1 {
            return Err::<(), sqs_consumer::BoxError>("failed on purpose".into());
        }
        if d.body() == "hold" {
            sleep(Duration::from_millis(1500)).await;
        }
        d.ack().await.map_err(Into::into)
    };
    let drained = eventually("the queue drained", secs(30), || q.is_empty());
    consumer.run_until(handler, drained).await.unwrap();
    assert_logged(
        &logs,
        [
            ("sqs_consumer::handler::handling", "handler failed"),
            ("sqs_consumer::delivery::settle", "released"),
            ("sqs_consumer::keeper", "visibility extended"),
            ("sqs_consumer::lease", "acked"),
        ],
    );
    assert_eq!(consumer.has_isolated_keeper(), isolated_keeper);
}

/// The batchers' own events (a failed delete request, on the keeper's thread when it has
/// one) go to the awaiting thread's subscriber too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_for_the_awaiting_thread_gets_the_batchers_events() {
    batcher_logs_for_the_awaiting_threads_subscriber(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_for_the_awaiting_thread_gets_the_isolated_batchers_events() {
    batcher_logs_for_the_awaiting_threads_subscriber(true).await;
}

async fn batcher_logs_for_the_awaiting_threads_subscriber(isolated_keeper: bool) {
    let (logs, _guard) = capture_logs();
    // Every delete request fails: the ack's first try, then its retries, each log theirs.
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(2))
        .faults(
            Faults::new(7)
                .internal_error(1.0)
                .actions([Action::DeleteMessageBatch]),
        )
        .build()
        .unwrap();
    q.send("unlucky").unwrap();
    let consumer = Consumer::in_memory(&q)
        .wait_time(secs(1))
        .isolated_keeper(isolated_keeper)
        .build()
        .unwrap();
    let events = [
        (
            "sqs_consumer::settle_calls::request_batch",
            "batch request failed",
        ),
        ("sqs_consumer::settle_calls", "settle call failed; retrying"),
    ];
    // Until both are logged (the ack would go on trying for a while): the run is dropped then.
    let both = eventually("both events logged", secs(30), || {
        events.into_iter().all(|e| logged(&logs, e))
    });
    run_while(&consumer, |d: Delivery| d.ack(), both).await;
    assert_eq!(consumer.has_isolated_keeper(), isolated_keeper);
}

/// A batch handler's events go to the awaiting thread's subscriber too, with a batch window
/// (its collector's task hands the batches over) and without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_for_the_awaiting_thread_gets_the_batch_handlers_events() {
    batch_handler_logs_for_the_awaiting_threads_subscriber(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_for_the_awaiting_thread_gets_the_batch_windows_events() {
    batch_handler_logs_for_the_awaiting_threads_subscriber(Duration::from_millis(100)).await;
}

async fn batch_handler_logs_for_the_awaiting_threads_subscriber(window: Duration) {
    let (logs, _guard) = capture_logs();
    let q = MemoryQueue::new();
    q.send("fails once").unwrap();
    let consumer = Consumer::in_memory(&q)
        .wait_time(secs(1))
        .retry_policy(RetryPolicy::ReleaseNow)
        .batch_window(window)
        .build()
        .unwrap();
    let handler = |batch: Batch| async move {
        if batch.iter().any(|d| d.receive_count() == 1) {
            return Err::<(), sqs_consumer::BoxError>("failed on purpose".into());
        }
        batch.ack_all().await.map_err(Into::into)
    };
    let drained = {
        let q = q.clone();
        eventually("the queue drained", secs(30), move || q.is_empty())
    };
    consumer.run_batch_until(handler, drained).await.unwrap();
    assert_logged(
        &logs,
        [("sqs_consumer::handler::handling", "handler failed")],
    );
}

/// A stream's receive loop, a task of its own, logs for the subscriber of the thread that
/// made the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_for_the_awaiting_thread_gets_the_streams_events() {
    let (logs, _guard) = capture_logs();
    let q = MemoryQueue::builder().name("streamed").build().unwrap();
    q.send("job").unwrap();
    let consumer = Consumer::in_memory(&q).wait_time(secs(1)).build().unwrap();
    let mut deliveries = consumer.stream();
    let d = deliveries.next().await.expect("a delivery").unwrap();
    d.ack().await.unwrap();
    drop(deliveries);
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("consumer started"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("streamed"), "{line}");
}

/// Whether a line of `logs` comes from `module` and says `event`.
fn logged(logs: &Mutex<Vec<u8>>, (module, event): (&str, &str)) -> bool {
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    text.lines()
        .any(|l| l.contains(module) && l.contains(event))
}

/// Panics, showing every line, unless each of `events` (module, event) was logged.
fn assert_logged<const N: usize>(logs: &Mutex<Vec<u8>>, events: [(&str, &str); N]) {
    for event in events {
        assert!(
            logged(logs, event),
            "no {event:?} line:\n{}",
            String::from_utf8_lossy(&logs.lock().unwrap())
        );
    }
}

/// The suite's leak guard itself: a line carrying a registered body, or a whole
/// `MemoryQueue` receipt handle, fails the test that logs it; the same texts cut short pass.
#[test]
fn the_leak_guard_fails_a_test_that_logs_a_body_or_a_whole_handle() {
    use common::log_guard;
    let (_logs, _guard) = capture_logs();
    let body = "LEAK-GUARD-SELF-TEST body";
    log_guard::secret(body);
    let handle = "7a42bf96c50605bf.12.3.488c5ce5273edf3c";
    let logs = |line: String| std::panic::catch_unwind(|| tracing::warn!("{line}")).is_err();
    assert!(logs(format!("handled {body}")), "a body passed");
    assert!(
        logs(format!("LEAK-GUARD-SELF-TEST handle {handle}")),
        "a handle passed"
    );
    assert!(!logs("LEAK-GUARD-SELF-TEST handle 7a42bf96…".to_owned()));
    assert!(!logs("LEAK-GUARD-SELF-TEST b…".to_owned()));
    // Leaked on purpose: not a reason to fail the binary at its end.
    assert_eq!(log_guard::forget_leaks_with("LEAK-GUARD-SELF-TEST"), 2);
}

/// Every test binary that uses the crate installs the leak guard before its first test: each
/// file of `tests/` and each folder's `main.rs` is a binary of its own.
#[test]
fn every_test_binary_installs_the_leak_guard() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let (mut binaries, mut unguarded) = (0, Vec::new());
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let root = match path.is_dir() {
            true => path.join("main.rs"),
            false => path.clone(),
        };
        if root.extension().is_some_and(|e| e == "rs") && root.exists() {
            binaries += 1;
            let code = std::fs::read_to_string(&root).unwrap();
            let uses_the_crate = code.contains("sqs_consumer") || code.contains("\nmod ");
            if uses_the_crate && !code.contains("\nguard_logs!(") {
                unguarded.push(root.display().to_string());
            }
        }
    }
    assert!(binaries >= 10, "{binaries} test binaries found");
    assert!(unguarded.is_empty(), "no guard_logs!() in {unguarded:?}");
}

/// The `on_delivery_span` hook is for spans a subscriber records: on a thread whose
/// subscriber records none, it is not called (and no trace header is read for it).
#[tokio::test(start_paused = true)]
async fn the_delivery_span_hook_skips_a_span_no_subscriber_records() {
    let _none = tracing::subscriber::set_default(tracing::subscriber::NoSubscriber::default());
    let q = MemoryQueue::new();
    q.send("job").unwrap();
    let calls = Arc::new(Mutex::new(0));
    let consumer = Consumer::in_memory(&q)
        .on_delivery_span({
            let calls = calls.clone();
            move |_, _| *calls.lock().unwrap() += 1
        })
        .build()
        .unwrap();
    let handler = |d: Delivery| async move { d.ack().await };
    run_while(&consumer, handler, async {
        eventually("the ack", secs(10), || consumer.stats().acked == 1).await;
    })
    .await;
    assert_eq!(*calls.lock().unwrap(), 0);
}

/// Each pause is logged once at `info` ("receiving paused", once the receive under way is
/// in), and each resume once ("receiving resumed"), however long the pause lasts.
#[tokio::test(start_paused = true)]
async fn each_pause_and_each_resume_is_logged_once_at_info() {
    let (logs, _guard) = capture_logs();
    let q = MemoryQueue::new();
    let consumer = Consumer::in_memory(&q).wait_time(secs(1)).build().unwrap();
    let lines = |what: &str| {
        let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
        let lines: Vec<String> = logs
            .lines()
            .filter(|l| l.contains(what))
            .map(Into::into)
            .collect();
        assert!(
            lines
                .iter()
                .all(|l| l.contains("INFO") && l.contains("queue=")),
            "{lines:?}"
        );
        lines.len()
    };
    run_while(&consumer, |d: Delivery| d.ack(), async {
        sleep(secs(5)).await;
        for round in 1..=2 {
            assert_eq!(lines("receiving paused"), round - 1);
            consumer.pause();
            sleep(secs(30)).await; // the receive under way ends within its 1 s wait
            assert_eq!(lines("receiving paused"), round);
            assert_eq!(lines("receiving resumed"), round - 1);
            consumer.resume();
            sleep(secs(5)).await;
            assert_eq!(lines("receiving resumed"), round);
        }
    })
    .await;
}
