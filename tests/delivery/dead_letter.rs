//! The dead-letter step. Each scenario of `on_both!` runs on `MemoryQueue` (paused clock)
//! and on the test server (real time): a poison message moves with its reason after exactly
//! `after_receives` receives; `Delivery::dead_letter` moves one at once; a message with 10
//! attributes keeps them all; a FIFO copy keeps its group; a failure between the send and the
//! delete leaves one copy in each queue, and the next receive finishes the move without a
//! third; a copy refused for a moment is sent again on the same receive, one refused for good
//! leaves the message to the retry policy. The tests after them, on `MemoryQueue` only, check
//! the crate's own side: panics and timeouts in every ack mode, batches, `fail`'s warning, and
//! what `Delivery::dead_letter` has done by the time it returns.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use common::faults::{FaultProxy, Faults};
use common::{receive_count, run_while, secs, Kind, TestQueue};
use sqs_consumer::memory::Action;
use sqs_consumer::{
    AckMode, Batch, BoxError, Consumer, ConsumerBuilder, Delivery, MemoryQueue, RetryPolicy, Stats,
};
use tokio::time::{sleep, Instant};

/// The visibility timeout the scenarios use.
const T: u64 = 2;

/// How long a scenario may wait for what it expects.
const LIMIT: Duration = Duration::from_secs(60);

/// The failure attribute's name.
const FAILURE: &str = "sqs-consumer.failure";

on_both!(
    a_poison_message_moves_with_its_reason_after_exactly_n_receives,
    dead_letter_on_demand_moves_at_once_whatever_the_receive_count,
    a_message_with_ten_attributes_keeps_them_and_the_failure_is_logged,
    a_fifo_copy_keeps_its_group_and_is_deduplicated_by_the_message_id,
    a_failure_between_the_send_and_the_delete_leaves_one_copy_and_the_next_receive_finishes_the_move,
    a_copy_that_cannot_be_sent_leaves_the_message_to_the_retry_policy,
    a_copy_refused_for_a_moment_is_sent_again_on_the_same_receive,
);

/// The receive counts each handler call saw, in order.
#[derive(Debug, Default, Clone)]
struct Calls(Arc<Mutex<Vec<u32>>>);

impl Calls {
    /// A handler that records the call and fails with a two-link error chain.
    fn failing(&self) -> impl sqs_consumer::Handler {
        let calls = self.clone();
        move |d: Delivery| {
            let calls = calls.clone();
            async move {
                calls.0.lock().unwrap().push(d.receive_count());
                let cause = std::io::Error::other("byte 3: expected a digit");
                Err::<(), BoxError>(Box::new(ParseError(cause)))
            }
        }
    }

    fn counts(&self) -> Vec<u32> {
        self.0.lock().unwrap().clone()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the order cannot be parsed")]
struct ParseError(#[source] std::io::Error);

/// A consumer of `q` that moves failures to `dlq` after `n` receives, releasing a failure at
/// once before that (so the scenarios do not wait out a visibility timeout per failure).
fn consumer(q: &TestQueue, dlq: &TestQueue, n: u32) -> ConsumerBuilder {
    q.consumer()
        .wait_time(secs(1))
        .retry_policy(RetryPolicy::ReleaseNow)
        .dead_letter(dlq.as_dead_letter(), n)
}

/// Receives from `dlq` until `n` messages came or `wait` passed; every message is returned
/// (to look at) and left hidden.
async fn copies(dlq: &TestQueue, n: usize, wait: Duration) -> Vec<Message> {
    let start = Instant::now();
    let mut got = Vec::new();
    while got.len() < n && start.elapsed() < wait {
        got.extend(dlq.receive_raw(secs(1)).await);
    }
    got
}

/// The copy's failure attribute, parsed.
fn failure_of(copy: &Message) -> serde_json::Value {
    let value = copy
        .message_attributes()
        .and_then(|a| a.get(FAILURE))
        .and_then(|v| v.string_value())
        .unwrap_or_else(|| panic!("the copy has no {FAILURE} attribute: {copy:?}"));
    serde_json::from_str(value).expect("the failure is JSON")
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < LIMIT, "{what}: not within {LIMIT:?}");
        sleep(Duration::from_millis(20)).await;
    }
}

/// Runs a consumer of `q` whose handler fails, moving after one receive, until the move is
/// done; the copies in `dlq` then. `Leave`: a copy refused would bring the message back after
/// T, not at once, so such a failure ends the scenario at its bound instead of spinning.
async fn fail_once_and_move(q: &TestQueue, dlq: &TestQueue) -> Vec<Message> {
    let consumer = consumer(q, dlq, 1)
        .retry_policy(RetryPolicy::Leave)
        .build()
        .unwrap();
    let calls = Calls::default();
    run_while(&consumer, calls.failing(), async {
        until("the move", || consumer.stats().dead_lettered == 1).await;
    })
    .await;
    copies(dlq, 1, secs(10)).await
}

async fn a_poison_message_moves_with_its_reason_after_exactly_n_receives(kind: Kind) {
    let (q, dlq) = (
        TestQueue::new(kind, T).await,
        TestQueue::new(kind, 30).await,
    );
    q.send_with_attributes("order 42", &[("tenant", "acme"), ("kind", "order")])
        .await;
    let original_id = q.receive_raw(secs(1)).await.pop().expect("the message");
    let original_id = original_id.message_id().unwrap().to_owned();
    let logs = common::global_logs();
    // The receive above counts: the consumer sees receives 2, 3 and 4 (after T).
    let consumer = consumer(&q, &dlq, 4).build().unwrap();
    let calls = Calls::default();
    let stats = || consumer.stats();
    run_while(&consumer, calls.failing(), async {
        until("the move", || stats().dead_lettered == 1).await;
    })
    .await;
    assert_eq!(
        calls.counts(),
        [2, 3, 4],
        "handled until receive 4, then moved"
    );
    let s = consumer.stats();
    assert_eq!((s.handler_errors, s.dead_lettered, s.acked), (3, 1, 0));
    assert_eq!(q.counts().await, (0, 0), "the original is deleted");

    let copy = copies(&dlq, 1, secs(10)).await;
    assert_eq!(copy.len(), 1, "one copy");
    let copy = &copy[0];
    assert_eq!(copy.body(), Some("order 42"));
    let attributes = copy.message_attributes().unwrap();
    assert_eq!(attributes.len(), 3, "{attributes:?}");
    assert_eq!(attributes["tenant"].string_value(), Some("acme"));
    assert_eq!(attributes["kind"].string_value(), Some("order"));
    let failure = failure_of(copy);
    assert_eq!(
        failure["error"],
        "the order cannot be parsed: byte 3: expected a digit"
    );
    assert_eq!(failure["cause"], "error");
    assert_eq!(failure["receive_count"], 4);
    assert_eq!(failure["message_id"], original_id.as_str());
    // The queue it came from, by URL (`MemoryQueue`: by its name).
    let source = q
        .url()
        .map_or_else(|| format!("memory:{}", q.short_name()), str::to_owned);
    assert_eq!(failure["source_queue"], source.as_str(), "{failure}");
    let first = failure["first_received_at_ms"].as_u64().expect("first");
    let last = failure["last_received_at_ms"].as_u64().expect("last");
    assert!(first > 1_600_000_000_000 && first <= last, "{failure}");

    // The warning names the queue the message went to, as the consumer was given it.
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let moved = text
        .lines()
        .find(|l| l.contains("moved to the dead-letter queue") && l.contains(&original_id))
        .unwrap_or_else(|| panic!("no move logged for {original_id}: {text}"));
    let dead_letter_queue = dlq.url().unwrap_or(dlq.short_name());
    assert!(moved.contains(dead_letter_queue), "{moved}");
}

async fn dead_letter_on_demand_moves_at_once_whatever_the_receive_count(kind: Kind) {
    let (q, dlq) = (
        TestQueue::new(kind, T).await,
        TestQueue::new(kind, 30).await,
    );
    q.send("{not json").await;
    let consumer = consumer(&q, &dlq, 1000).build().unwrap();
    let results = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let results = results.clone();
        move |d: Delivery| {
            let results = results.clone();
            async move {
                let result = d.dead_letter("the body is not JSON").await;
                results.lock().unwrap().push(result.is_ok());
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, async {
        until("the move", || consumer.stats().dead_lettered == 1).await;
    })
    .await;
    assert_eq!(*results.lock().unwrap(), [true]);
    assert_eq!(q.counts().await, (0, 0));
    let copy = copies(&dlq, 1, secs(10)).await;
    assert_eq!(copy.len(), 1);
    let failure = failure_of(&copy[0]);
    assert_eq!(failure["error"], "the body is not JSON");
    assert_eq!(failure["cause"], "reason");
    assert_eq!(failure["receive_count"], 1);
}

async fn a_message_with_ten_attributes_keeps_them_and_the_failure_is_logged(kind: Kind) {
    let (q, dlq) = (
        TestQueue::new(kind, T).await,
        TestQueue::new(kind, 30).await,
    );
    let names: Vec<String> = (0..10).map(|i| format!("a{i}")).collect();
    let attributes: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    q.send_with_attributes("full", &attributes).await;
    let (logs, _guard) = common::capture_logs();
    let copy = fail_once_and_move(&q, &dlq).await;
    assert_eq!(copy.len(), 1);
    let kept = copy[0].message_attributes().unwrap();
    assert_eq!(kept.len(), 10, "every attribute of the user's kept");
    assert!(!kept.contains_key(FAILURE));
    if kind == Kind::Memory {
        // Logs are captured on this thread only: the server variant's handlers run on others.
        let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
        let line = logs
            .lines()
            .find(|l| l.contains("ERROR") && l.contains("10 message attributes"))
            .unwrap_or_else(|| panic!("no error logged: {logs}"));
        assert!(line.contains("message_id="), "{line}");
        assert!(
            line.contains("expected a digit"),
            "the failure is in it: {line}"
        );
    }
}

async fn a_fifo_copy_keeps_its_group_and_is_deduplicated_by_the_message_id(kind: Kind) {
    let (q, dlq) = (
        TestQueue::new_fifo(kind, T).await,
        TestQueue::new_fifo(kind, 30).await,
    );
    q.send_to_group("first", "customer-7").await;
    let copy = fail_once_and_move(&q, &dlq).await;
    assert_eq!(copy.len(), 1);
    let system = copy[0].attributes().unwrap();
    assert_eq!(
        system[&MessageSystemAttributeName::MessageGroupId],
        "customer-7"
    );
    let failure = failure_of(&copy[0]);
    if let Some(dedup) = system.get(&MessageSystemAttributeName::MessageDeduplicationId) {
        assert_eq!(dedup, failure["message_id"].as_str().unwrap());
    }
}

async fn a_failure_between_the_send_and_the_delete_leaves_one_copy_and_the_next_receive_finishes_the_move(
    kind: Kind,
) {
    let (q, dlq) = (
        TestQueue::new(kind, T).await,
        TestQueue::new(kind, 30).await,
    );
    q.send("poison").await;
    let proxy;
    let builder = match &q {
        TestQueue::Memory(memory) => {
            // The original's delete is refused once: the move's (deletes go in batches).
            memory.fail_next(Action::DeleteMessageBatch, "AccessDenied", 1);
            consumer(&q, &dlq, 1)
        }
        TestQueue::Server { url, .. } => {
            proxy = FaultProxy::start(&common::server_endpoint(), Faults::none(), 1).await;
            proxy.refuse_next("DeleteMessageBatch", "AccessDenied", 1);
            Consumer::builder(common::client_for(&proxy.endpoint), url.clone())
                .wait_time(secs(1))
                .dead_letter(dlq.as_dead_letter(), 1)
        }
    };
    let consumer = builder.build().unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    run_while(&consumer, calls.failing(), async {
        // The copy is sent, the delete refused: one copy in each queue.
        until("the copy", || !calls.counts().is_empty()).await;
        let mut in_both = false;
        while !in_both {
            assert!(start.elapsed() < LIMIT, "no copy in the dead-letter queue");
            let (visible, hidden) = dlq.counts().await;
            in_both = visible + hidden == 1;
            sleep(Duration::from_millis(50)).await;
        }
        let (visible, hidden) = q.counts().await;
        assert_eq!(visible + hidden, 1, "the original is still in its queue");
        assert_eq!(consumer.stats().dead_lettered, 0, "not moved yet");
        // The original comes back after its timeout and is deleted, not handled.
        until("the move", || consumer.stats().dead_lettered == 1).await;
    })
    .await;
    assert_eq!(
        calls.counts(),
        [1],
        "handled once: the redelivery is not handled"
    );
    assert_eq!(q.counts().await, (0, 0), "the original is deleted");
    let copy = copies(&dlq, 2, secs(3)).await;
    assert_eq!(copy.len(), 1, "one copy, no second one");
    assert_eq!(receive_count(&copy[0]), 1);
    assert_eq!(failure_of(&copy[0])["receive_count"], 1);
}

async fn a_copy_that_cannot_be_sent_leaves_the_message_to_the_retry_policy(kind: Kind) {
    let (calls, stats, copy) = move_through(kind, SendFault::Refused).await;
    // Refused once: released at once (the retry policy), received again, and moved.
    assert_eq!(
        calls,
        [1, 2],
        "the refused move left the message in its queue"
    );
    assert!(stats.released >= 1, "{stats:?}");
    assert_eq!(failure_of(&copy)["receive_count"], 2);
}

async fn a_copy_refused_for_a_moment_is_sent_again_on_the_same_receive(kind: Kind) {
    let (calls, stats, copy) = move_through(kind, SendFault::Transient).await;
    assert_eq!(calls, [1], "retried within the first receive's move");
    assert_eq!(stats.released, 0, "{stats:?}");
    assert_eq!(failure_of(&copy)["receive_count"], 1);
}

/// How the dead-letter queue answers the first sends of a copy.
#[derive(Debug, Clone, Copy)]
enum SendFault {
    /// Refused once, for good (`AccessDenied`).
    Refused,
    /// Failing for a moment (`InternalError`: twice on `MemoryQueue`, for 2 s through the
    /// proxy).
    Transient,
}

/// Runs a consumer whose handler fails (moving after one receive, releasing at once
/// before that) on a fresh queue holding one message, while the dead-letter queue's sends
/// meet `fault`, until the move is done; checks that the original is gone and that the
/// failed sends made no copy. The receive counts the handler saw, the consumer's stats and
/// the copy.
async fn move_through(kind: Kind, fault: SendFault) -> (Vec<u32>, Stats, Message) {
    let (q, dlq) = (
        TestQueue::new(kind, T).await,
        TestQueue::new(kind, 30).await,
    );
    q.send("poison").await;
    let proxy;
    let builder = match (&q, &dlq) {
        (TestQueue::Memory(_), TestQueue::Memory(failed)) => {
            match fault {
                SendFault::Refused => failed.fail_next(Action::SendMessage, "AccessDenied", 1),
                SendFault::Transient => failed.fail_next(Action::SendMessage, "InternalError", 2),
            }
            consumer(&q, &dlq, 1)
        }
        (TestQueue::Server { url, .. }, _) => {
            proxy = FaultProxy::start(&common::server_endpoint(), Faults::none(), 1).await;
            match fault {
                SendFault::Refused => proxy.refuse_next("SendMessage", "AccessDenied", 1),
                SendFault::Transient => proxy.outage(&["SendMessage"], secs(2)),
            }
            Consumer::builder(common::client_for(&proxy.endpoint), url.clone())
                .wait_time(secs(1))
                .retry_policy(RetryPolicy::ReleaseNow)
                .dead_letter(dlq.as_dead_letter(), 1)
        }
        _ => unreachable!("both queues are of one kind"),
    };
    let consumer = builder.build().unwrap();
    let calls = Calls::default();
    run_while(&consumer, calls.failing(), async {
        until("the move", || consumer.stats().dead_lettered == 1).await;
    })
    .await;
    assert_eq!(q.counts().await, (0, 0));
    let mut copies = copies(&dlq, 2, secs(3)).await;
    assert_eq!(copies.len(), 1, "one copy: the failed sends made none");
    (calls.counts(), consumer.stats(), copies.remove(0))
}

/// A panic and a timeout are failures the step moves, in every ack mode.
#[tokio::test(start_paused = true)]
async fn a_panic_and_a_timeout_are_moved_in_every_ack_mode() {
    for mode in [AckMode::Manual, AckMode::OnSuccess, AckMode::Always] {
        let (q, failed) = (MemoryQueue::new(), MemoryQueue::new());
        q.send("panics").unwrap();
        q.send("sleeps").unwrap();
        let consumer = Consumer::in_memory(&q)
            .ack_mode(mode)
            .handler_timeout(secs(5))
            .dead_letter(&failed, 1)
            .build()
            .unwrap();
        let handler = |d: Delivery| async move {
            if d.body() == "panics" {
                panic!("index out of bounds");
            }
            sleep(secs(3600)).await;
            Ok::<(), BoxError>(())
        };
        common::run_while_expecting_panics(&consumer, handler, async {
            until("both moved", || consumer.stats().dead_lettered == 2).await;
        })
        .await;
        let s = consumer.stats();
        assert_eq!(
            (s.acked, s.handler_panics, s.handler_timeouts),
            (0, 1, 1),
            "{mode:?}"
        );
        let mut causes: Vec<String> = failed
            .receive(10, Duration::ZERO)
            .await
            .unwrap()
            .iter()
            .map(|m| {
                let f = failure_of(m);
                format!(
                    "{}: {}",
                    f["cause"].as_str().unwrap(),
                    f["error"].as_str().unwrap()
                )
            })
            .collect();
        causes.sort();
        assert_eq!(
            causes,
            [
                "panic: handler panicked: index out of bounds",
                "timeout: handler timed out after 5s"
            ],
            "{mode:?}"
        );
        assert!(q.is_empty(), "{mode:?}");
    }
}

/// A batch handler's failure moves each of its deliveries that is due, and leaves the others
/// to the retry policy (moved on a later failure, once due).
#[tokio::test(start_paused = true)]
async fn a_failed_batch_moves_its_due_deliveries_and_leaves_the_others_to_the_retry_policy() {
    let (q, failed) = (MemoryQueue::new(), MemoryQueue::new());
    q.send("old").unwrap();
    // Received once already: its next receive is its second.
    let old = q.receive(1, Duration::ZERO).await.unwrap().remove(0);
    q.change_visibility(old.receipt_handle().unwrap(), Duration::ZERO)
        .unwrap();
    q.send("new").unwrap();
    let consumer = Consumer::in_memory(&q)
        .retry_policy(RetryPolicy::ReleaseNow)
        .dead_letter(&failed, 2)
        .build()
        .unwrap();
    let batches = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let batches = batches.clone();
        move |batch: Batch| {
            let mut seen: Vec<(String, u32)> = batch
                .iter()
                .map(|d| (d.body().to_owned(), d.receive_count()))
                .collect();
            seen.sort();
            batches.lock().unwrap().push(seen);
            async move {
                drop(batch);
                Err::<(), BoxError>("the batch failed".into())
            }
        }
    };
    let moved = async {
        until("both moved", || consumer.stats().dead_lettered == 2).await;
        consumer.clone().shutdown();
    };
    let (result, ()) = tokio::join!(consumer.run_batch(handler), moved);
    result.unwrap();
    let old_and_new = vec![("new".to_owned(), 1), ("old".to_owned(), 2)];
    assert_eq!(
        *batches.lock().unwrap(),
        [old_and_new, vec![("new".to_owned(), 2)]],
        "old moved at its second receive, new released and moved at its second"
    );
    let mut copies: Vec<(String, u64)> = failed
        .receive(10, Duration::ZERO)
        .await
        .unwrap()
        .iter()
        .map(|m| {
            let count = failure_of(m)["receive_count"].as_u64().unwrap();
            (m.body().unwrap().to_owned(), count)
        })
        .collect();
    copies.sort();
    assert_eq!(copies, [("new".to_owned(), 2), ("old".to_owned(), 2)]);
    assert!(q.is_empty());
}

/// `Delivery::dead_letter` without a dead-letter queue is refused naming the setting; nothing
/// is sent, and the delivery meets the retry policy.
#[tokio::test(start_paused = true)]
async fn dead_letter_without_a_queue_is_refused_and_the_message_meets_the_retry_policy() {
    let q = MemoryQueue::new();
    q.send("m").unwrap();
    let consumer = Consumer::in_memory(&q)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let delivery = common::take_one(&consumer).await;
    match delivery.dead_letter("no queue").await {
        Err(sqs_consumer::Error::InvalidConfig { field, .. }) => assert_eq!(field, "dead_letter"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    until("released", || q.visible_len() == 1).await;
    let s = consumer.stats();
    assert_eq!((s.dead_lettered, s.released), (0, 1));
    assert_eq!(
        q.requests().requests(Action::SendMessage),
        1,
        "only the test's own send"
    );
}

/// `fail` says in its warning what comes next: the retry policy until the step is due, then
/// the move.
#[tokio::test(start_paused = true)]
async fn a_failures_warning_says_whether_it_moves_or_meets_the_retry_policy() {
    let (logs, _guard) = common::capture_logs();
    let (q, failed) = (MemoryQueue::new(), MemoryQueue::new());
    q.send("order 42").unwrap();
    let consumer = Consumer::in_memory(&q)
        .retry_policy(RetryPolicy::ReleaseNow)
        .dead_letter(&failed, 2)
        .build()
        .unwrap();
    let handler = |d: Delivery| async move {
        d.fail("the order cannot be parsed").await?;
        Ok::<(), BoxError>(())
    };
    run_while(&consumer, handler, async {
        until("the move", || consumer.stats().dead_lettered == 1).await;
    })
    .await;
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("delivery failed"))
        .collect();
    assert_eq!(failed.len(), 2, "{text}");
    assert!(
        failed[0].contains("it gets the retry policy"),
        "{}",
        failed[0]
    );
    assert!(
        failed[1].contains("it moves to the dead-letter queue"),
        "{}",
        failed[1]
    );
}

/// A copy that cannot be sent leaves the message to the retry policy before
/// `Delivery::dead_letter` returns its error.
#[tokio::test(start_paused = true)]
async fn a_refused_copy_is_released_before_dead_letter_returns() {
    let (q, failed) = (MemoryQueue::new(), MemoryQueue::new());
    q.send("{not json").unwrap();
    failed.fail_next(Action::SendMessage, "AccessDenied", 1);
    let consumer = Consumer::in_memory(&q)
        .retry_policy(RetryPolicy::ReleaseNow)
        .dead_letter(&failed, 1000)
        .build()
        .unwrap();
    let released = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let (q, released) = (q.clone(), released.clone());
        move |d: Delivery| {
            let (q, released) = (q.clone(), released.clone());
            async move {
                let before = q.requests().visibility_changes();
                let moved = d.dead_letter("the body is not JSON").await.is_ok();
                let changes = q.requests().visibility_changes() - before;
                released.lock().unwrap().push((moved, changes));
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, async {
        until("the move", || consumer.stats().dead_lettered == 1).await;
    })
    .await;
    assert_eq!(
        *released.lock().unwrap(),
        [(false, 1), (true, 0)],
        "the refused move released its message (one visibility change) before returning"
    );
}

/// A delivery lost before `Delivery::dead_letter` sends no copy and touches the message no
/// more: the call says it was lost, and nothing claims a release failed.
#[tokio::test(start_paused = true)]
async fn dead_letter_on_a_lost_delivery_sends_nothing_and_releases_nothing() {
    let (logs, _guard) = common::capture_logs();
    let (q, failed) = (common::memory_queue(T), MemoryQueue::new());
    q.send("order 42").unwrap();
    let consumer = Consumer::in_memory(&q)
        .dead_letter(&failed, 1000)
        .build()
        .unwrap();
    let results = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let (q, results) = (q.clone(), results.clone());
        move |d: Delivery| {
            let (q, results) = (q.clone(), results.clone());
            async move {
                // The first extension is refused: the delivery is lost.
                q.fail_next(Action::ChangeMessageVisibility, "ReceiptHandleIsInvalid", 1);
                d.lost().await;
                let changes = q.requests().visibility_changes();
                let result = d.dead_letter("the body is not JSON").await;
                let lost = result.is_err_and(|e| e.is_lost());
                let changes = q.requests().visibility_changes() - changes;
                results.lock().unwrap().push((lost, changes));
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, async {
        until("the handler", || !results.lock().unwrap().is_empty()).await;
    })
    .await;
    assert_eq!(*results.lock().unwrap(), [(true, 0)]);
    assert_eq!(failed.len(), 0, "no copy");
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(!text.contains("releasing the delivery failed"), "{text}");
}
