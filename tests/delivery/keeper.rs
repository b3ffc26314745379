//! The consumer's keeper: where it runs (on a thread of its own, or on the caller's runtime),
//! which client it calls SQS with, and what a runtime whose threads are all blocked does to
//! the deliveries it keeps. Real time: the isolated keeper's clock is its own thread's.

use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_smithy_mocks::mock;
use sqs_consumer::{Consumer, Delivery, Error, LostReason, MemoryQueue};
use tokio::time::{sleep, timeout, Instant};

use crate::common;

use common::sdk::{
    consumer, deletes, extensions_succeed, mocked, one_extension_failed, receive_once, URL,
};
use common::{client_for, secs, take_one, Kind, TestQueue};

fn refused_field(result: Result<Consumer, Error>) -> &'static str {
    match result {
        Err(Error::InvalidConfig { field, .. }) => field,
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test]
async fn isolation_follows_the_client_unless_told() {
    // The SDK's default HTTP client: the keeper gets a client (and connections) of its own.
    let plain = client_for("http://127.0.0.1:9");
    let url = "http://127.0.0.1:9/000000000000/q";
    let build = |b: sqs_consumer::ConsumerBuilder| b.build().unwrap().has_isolated_keeper();
    assert!(build(Consumer::builder(plain.clone(), url)));
    assert!(!build(
        Consumer::builder(plain.clone(), url).isolated_keeper(false)
    ));
    // The same through `aws_config`, as most services build their client.
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .endpoint_url("http://127.0.0.1:9")
        .load()
        .await;
    assert!(build(Consumer::builder(Client::new(&shared), url)));
    // A client with an HTTP client of its own (here a mock): its connections cannot be
    // copied, so the keeper stays on the caller's runtime unless given a client.
    let mock = mocked(&[]);
    assert!(!build(Consumer::builder(mock.clone(), URL)));
    assert!(build(
        Consumer::builder(mock.clone(), URL).keeper_client(mocked(&[]))
    ));
    assert!(!build(
        Consumer::builder(mock.clone(), URL)
            .keeper_client(mocked(&[]))
            .isolated_keeper(false)
    ));
    let refused = Consumer::builder(mock, URL).isolated_keeper(true).build();
    let message = refused.as_ref().map(|_| ()).unwrap_err().to_string();
    assert_eq!(refused_field(refused), "isolated_keeper");
    assert!(message.contains("keeper_client"), "{message}");
    // MemoryQueue: on the caller's runtime (and clock) unless asked; no client to give.
    let q = MemoryQueue::new();
    assert!(!build(Consumer::in_memory(&q)));
    assert!(build(Consumer::in_memory(&q).isolated_keeper(true)));
    assert_eq!(
        refused_field(Consumer::in_memory(&q).keeper_client(plain).build()),
        "keeper_client"
    );
}

#[tokio::test]
async fn the_keeper_client_makes_the_extensions_and_the_deletes() {
    // The consumer's client answers receives only; extensions and deletes it would answer
    // too, but they must go to the keeper's client.
    let (receive, main_change, main_delete) = (receive_once(), extensions_succeed(), deletes());
    let (change, delete) = (extensions_succeed(), deletes());
    let consumer = Consumer::builder(mocked(&[&receive, &main_change, &main_delete]), URL)
        .visibility_timeout(secs(2))
        .keeper_client(mocked(&[&change, &delete]))
        .build()
        .unwrap();
    assert!(consumer.has_isolated_keeper());
    let d = take_one(&consumer).await;
    // Due 1 s after the receive; waited for at most 5 s.
    let start = Instant::now();
    while change.num_calls() == 0 && start.elapsed() < secs(5) {
        sleep(Duration::from_millis(20)).await;
    }
    assert!(change.num_calls() >= 1, "extended by the keeper's client");
    d.ack().await.unwrap();
    assert_eq!(delete.num_calls(), 1);
    assert_eq!((main_change.num_calls(), main_delete.num_calls()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn without_isolation_everything_stays_on_the_callers_runtime() {
    // A mocked client: the keeper runs on this (paused) runtime, so its extension is due
    // exactly at half the timeout of this runtime's clock.
    let (receive, change, delete) = (receive_once(), extensions_succeed(), deletes());
    let consumer = consumer(mocked(&[&receive, &change, &delete]));
    assert!(!consumer.has_isolated_keeper());
    let d = take_one(&consumer).await;
    let due = d.received_at() + secs(5);
    tokio::time::sleep_until(due - Duration::from_millis(1)).await;
    assert_eq!(change.num_calls(), 0);
    tokio::time::sleep_until(due + Duration::from_millis(1)).await;
    assert_eq!(change.num_calls(), 1);
    d.ack().await.unwrap();
}

/// Holds one delivery (T = 2 s, so an extension is due after 1 s) while every worker thread
/// of this 2-thread runtime is blocked for 2.5 s, as handlers running CPU-bound or blocking
/// code in async would do. Returns the delivery and the consumer.
async fn held_through_a_blocked_runtime(kind: Kind, isolated: bool) -> (Delivery, Consumer) {
    let q = TestQueue::new(kind, 2).await;
    q.send("held").await;
    let consumer = q.consumer().isolated_keeper(isolated).build().unwrap();
    assert_eq!(consumer.has_isolated_keeper(), isolated);
    let d = take_one(&consumer).await;
    let blockers: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async { std::thread::sleep(Duration::from_millis(2_500)) }))
        .collect();
    for blocker in blockers {
        blocker.await.unwrap();
    }
    (d, consumer)
}

async fn isolated_keeper_survives_a_blocked_runtime(kind: Kind) {
    let (d, consumer) = held_through_a_blocked_runtime(kind, true).await;
    assert!(!d.is_lost());
    let stats = consumer.stats();
    assert_eq!(stats.late_extensions, 0, "{stats:?}");
    // Never as late as a quarter of the timeout (what counts as a late extension), and
    // extended in time to outlive the first deadline (2 s) through the 2.5 s block.
    assert!(stats.worst_extension_delay < secs(2) / 4, "{stats:?}");
    assert!(stats.extended >= 1, "{stats:?}");
    d.ack().await.unwrap();
}

async fn keeper_on_the_callers_runtime_loses_to_a_blocked_runtime(kind: Kind) {
    let (d, consumer) = held_through_a_blocked_runtime(kind, false).await;
    // The extension was due at 1 s and could only run at 2.5 s, past the deadline: it is
    // not sent, and the delivery is lost.
    let reason = timeout(secs(5), d.lost()).await.expect("lost");
    assert_eq!(reason, LostReason::ExtensionFailed);
    let stats = consumer.stats();
    assert_eq!(stats.lost, 1, "{stats:?}");
    assert_eq!(stats.extended, 0, "{stats:?}");
    assert!(stats.late_extensions >= 1, "{stats:?}");
    assert!(d.ack().await.unwrap_err().is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_keeper_survives_a_blocked_runtime_memory() {
    isolated_keeper_survives_a_blocked_runtime(Kind::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn an_isolated_keeper_survives_a_blocked_runtime_server() {
    crate::require_server!("an_isolated_keeper_survives_a_blocked_runtime_server");
    isolated_keeper_survives_a_blocked_runtime(Kind::Server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_on_the_callers_runtime_loses_to_a_blocked_runtime_memory() {
    keeper_on_the_callers_runtime_loses_to_a_blocked_runtime(Kind::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn a_keeper_on_the_callers_runtime_loses_to_a_blocked_runtime_server() {
    crate::require_server!("a_keeper_on_the_callers_runtime_loses_to_a_blocked_runtime_server");
    keeper_on_the_callers_runtime_loses_to_a_blocked_runtime(Kind::Server).await;
}

#[tokio::test(start_paused = true)]
async fn an_extension_refused_past_the_12_hour_limit_stops_extending() {
    // AWS's exact answer for a visibility past its 12-hour limit, as a batch entry.
    let change = mock!(Client::change_message_visibility_batch).then_output(|| {
        one_extension_failed(
            "InvalidParameterValue",
            "Value 10 for parameter VisibilityTimeout is invalid. Reason: Total \
             VisibilityTimeout for the message is beyond the limit [43200 seconds]",
        )
    });
    let (receive, delete) = (receive_once(), deletes());
    let consumer = consumer(mocked(&[&receive, &change, &delete]));
    let d = take_one(&consumer).await;
    let received = d.received_at();
    // Refused at 5 s, not asked again: the delivery is ours until its deadline at 10 s.
    assert_eq!(d.lost().await, LostReason::HardDeadline);
    assert_eq!(received.elapsed(), secs(10));
    assert_eq!(change.num_calls(), 1, "not retried");
    assert_eq!(consumer.stats().late_extensions, 0);
}

/// An ack's delete answered before the deadline is an ack, however late the handler's task
/// looks at the answer: the keeper takes the answer's time where it arrives, and neither
/// extends nor lapses the lease after it. Here the ack's task is not polled again until two
/// timeouts after its delete went out (a starved runtime, on the paused clock).
#[tokio::test(start_paused = true)]
async fn an_ack_answered_in_time_is_an_ack_however_late_its_task_looks() {
    let q = common::memory_queue(2);
    q.send("m").unwrap();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let d = take_one(&consumer).await;
    let ack = d.ack();
    tokio::pin!(ack);
    assert!(
        futures::poll!(ack.as_mut()).is_pending(),
        "its delete is out"
    );
    sleep(secs(4)).await;
    ack.await.expect("answered in time: an ack");
    let stats = consumer.stats();
    assert_eq!(
        (stats.acked, stats.lost, stats.lost_acks),
        (1, 0, 0),
        "{stats:?}"
    );
    assert!(q.is_empty());
}

/// The same with real threads: both worker threads of the runtime blocked (as handlers
/// running blocking code in async would) right after the ack's delete went out, longer than
/// the visibility timeout. The isolated keeper sees the delete answered in time; the ack says
/// `Ok` when its task runs again, and nothing is counted lost.
async fn an_ack_answered_in_time_survives_a_blocked_runtime(kind: Kind) {
    const T: u64 = 2;
    let q = match kind {
        // Its answer takes a while, as a server's does: never there at the ack's first poll.
        Kind::Memory => TestQueue::Memory(
            MemoryQueue::builder()
                .visibility_timeout(secs(T))
                .latency(Duration::from_millis(100))
                .build()
                .unwrap(),
        ),
        Kind::Server => TestQueue::new(kind, T).await,
    };
    q.send("held").await;
    let consumer = q.consumer().isolated_keeper(true).build().unwrap();
    let d = take_one(&consumer).await;
    let ack = d.ack();
    tokio::pin!(ack);
    assert!(
        futures::poll!(ack.as_mut()).is_pending(),
        "its delete is out"
    );
    let block = Duration::from_secs(T) * 5 / 4;
    let other = tokio::spawn(async move { std::thread::sleep(block) });
    std::thread::sleep(block);
    other.await.unwrap();
    ack.await.expect("answered in time: an ack");
    let stats = consumer.stats();
    assert_eq!(
        (stats.acked, stats.lost, stats.lost_acks),
        (1, 0, 0),
        "{stats:?}"
    );
    assert!(q.receive_raw(secs(T) + secs(1)).await.is_empty(), "deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_answered_in_time_survives_a_blocked_runtime_memory() {
    an_ack_answered_in_time_survives_a_blocked_runtime(Kind::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn an_ack_answered_in_time_survives_a_blocked_runtime_server() {
    crate::require_server!("an_ack_answered_in_time_survives_a_blocked_runtime_server");
    an_ack_answered_in_time_survives_a_blocked_runtime(Kind::Server).await;
}
