//! What the crate logs, checked line by line on `MemoryQueue` (paused clock): no message body
//! and no whole receipt handle ever, every line about a delivery in its `delivery` span with
//! the message id, and each event at the level the docs give it.

mod common;

use std::sync::{Arc, Mutex};

use common::{capture_logs, eventually, run_until_one_acked, run_while_expecting_panics, secs};
use sqs_consumer::{Consumer, Delivery, MemoryQueue, RetryPolicy};
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
        assert!(line.contains("message_id="), "no message id: {line}");
    }
    let has = |level: &str, what: &str| {
        crate_lines
            .iter()
            .any(|l| l.contains(level) && l.contains("message_id=") && l.contains(what))
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
