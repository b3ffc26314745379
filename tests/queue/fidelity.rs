//! What each implementation of SQS answers where AWS is subtle, pinned: `MemoryQueue` (which
//! follows AWS) on the paused clock, and the test server at hand, moto or LocalStack (the test
//! command runs this file against both). The table "Test servers and AWS" in `docs/testing.md` summarises
//! these tests: a server that starts answering differently fails here, and the table (and
//! what the crate's own tests may rely on) is looked at again.
//!
//! The crate's behaviour in each case is tested elsewhere; the table names those tests too.

use crate::common;

use std::time::Duration;

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
};
use common::{
    implementation, receive_count, secs, server_client, server_queue_with,
    Implementation::{self, LocalStack, Memory, Moto},
    Kind, TestQueue,
};
use tokio::time::{sleep, Instant};

/// `Ok`, or the error code (its short form: no `AWS.SimpleQueueService.` prefix, no
/// `Exception` suffix) and message.
type Answer = Result<(), (String, String)>;

fn short(code: &str) -> String {
    let code = code.rsplit('.').next().unwrap_or(code);
    code.strip_suffix("Exception").unwrap_or(code).to_owned()
}

fn memory_answer(result: Result<(), sqs_consumer::Error>) -> Answer {
    result.map_err(|e| (short(e.code().unwrap_or_default()), e.to_string()))
}

fn server_answer<T, E: ProvideErrorMetadata>(result: Result<T, E>) -> Answer {
    result.map(|_| ()).map_err(|e| {
        (
            short(e.code().unwrap_or_default()),
            e.message().unwrap_or_default().to_owned(),
        )
    })
}

async fn change(q: &TestQueue, handle: &str, seconds: u64) -> Answer {
    match q {
        TestQueue::Memory(q) => memory_answer(q.change_visibility(handle, secs(seconds))),
        TestQueue::Server { client, url } => server_answer(
            client
                .change_message_visibility()
                .queue_url(url)
                .receipt_handle(handle)
                .visibility_timeout(seconds as i32)
                .send()
                .await
                .map_err(|e| e.into_service_error()),
        ),
    }
}

async fn delete(q: &TestQueue, handle: &str) -> Answer {
    match q {
        TestQueue::Memory(q) => memory_answer(q.delete(handle)),
        TestQueue::Server { client, url } => server_answer(
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(handle)
                .send()
                .await
                .map_err(|e| e.into_service_error()),
        ),
    }
}

async fn receive_one(q: &TestQueue) -> String {
    let got = q.receive_up_to(1, secs(2)).await;
    let m = got.first().expect("a message");
    m.receipt_handle().expect("a receipt handle").to_owned()
}

/// Messages on the queue, visible or not.
async fn stored(q: &TestQueue) -> u64 {
    let (visible, hidden) = q.counts().await;
    visible + hidden
}

const GONE: &str = "Message does not exist or is not available for visibility timeout change";

async fn an_extension_of_a_deleted_message(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    q.send("deleted").await;
    let handle = receive_one(&q).await;
    delete(&q, &handle).await.unwrap();
    let (code, message) = change(&q, &handle, 30).await.unwrap_err();
    match implementation(kind) {
        Memory | LocalStack => {
            assert_eq!(code, "InvalidParameterValue");
            assert!(message.contains(GONE), "{message}");
        }
        Moto => assert_eq!(code, "ReceiptHandleIsInvalid", "{message}"),
    }
    delete(&q, &handle)
        .await
        .expect("a second delete of a deleted message succeeds");
}

async fn an_extension_after_the_timeout_lapsed(kind: Kind) {
    let q = TestQueue::new(kind, 1).await;
    q.send("lapsed").await;
    let handle = receive_one(&q).await;
    // Past the timeout, with LocalStack's second of timer granularity to spare.
    sleep(Duration::from_millis(2500)).await;
    change(&q, &handle, 30)
        .await
        .expect("answered with success everywhere");
    let visible = q.receive_up_to(10, Duration::ZERO).await.len();
    match implementation(kind) {
        // AWS: success, and nothing changes: the message stays visible.
        Memory | LocalStack => assert_eq!(visible, 1),
        // moto hides it again.
        Moto => assert_eq!(visible, 0),
    }
}

async fn an_extension_and_a_delete_with_an_old_handle(kind: Kind) {
    let q = TestQueue::new(kind, 1).await;
    q.send("received twice").await;
    let old = receive_one(&q).await;
    sleep(Duration::from_millis(2500)).await;
    let latest = receive_one(&q).await;
    assert_ne!(old, latest, "a new receipt handle on every receive");
    let extended = change(&q, &old, 30).await;
    let deleted = delete(&q, &old).await;
    assert_eq!(
        deleted,
        Ok(()),
        "a delete with an old handle succeeds everywhere"
    );
    let left = stored(&q).await;
    match implementation(kind) {
        Memory => {
            let (code, message) = extended.unwrap_err();
            assert_eq!(code, "InvalidParameterValue");
            assert!(message.contains(GONE), "{message}");
            assert_eq!(
                left, 1,
                "AWS: the message might not be deleted; here it never is"
            );
        }
        // Both servers keep old handles valid: the extension and the delete act.
        Moto | LocalStack => {
            assert_eq!(extended, Ok(()));
            assert_eq!(left, 0);
        }
    }
}

async fn visibility_limits(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    q.send("limits").await;
    let handle = receive_one(&q).await;
    let over = change(&q, &handle, 43_201).await;
    sleep(Duration::from_millis(1500)).await;
    // 43,200 s from now ends past 12 hours after the receive.
    let past_total = change(&q, &handle, 43_200).await;
    change(&q, &handle, 43_190)
        .await
        .expect("within 12 hours of the receive");
    match implementation(kind) {
        Memory | Moto => {
            assert_eq!(over.unwrap_err().0, "InvalidParameterValue");
            let (code, message) = past_total.unwrap_err();
            assert_eq!(code, "InvalidParameterValue");
            assert!(
                message.contains(
                    "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"
                ),
                "{message}"
            );
        }
        // LocalStack accepts both.
        LocalStack => {
            assert_eq!(over, Ok(()));
            assert_eq!(past_total, Ok(()));
        }
    }
}

/// A long poll of `wait` started in the background; it gives how many messages it got, and
/// when its answer came.
fn long_poll(q: &TestQueue, wait: Duration) -> tokio::task::JoinHandle<(usize, Instant)> {
    let q = q.clone();
    tokio::spawn(async move {
        let got = q.receive_up_to(10, wait).await;
        (got.len(), Instant::now())
    })
}

async fn a_long_poll_returns_when_a_message_arrives(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    let wait = secs(10);
    let poll = long_poll(&q, wait);
    sleep(secs(1)).await;
    q.send("wake").await;
    let sent = Instant::now();
    let (got, at) = poll.await.unwrap();
    assert_eq!(got, 1);
    // At once, against the 9 s of wait left: within a quarter of the wait.
    assert!(at - sent < wait / 4, "{:?} after the send", at - sent);
}

/// A long poll whose client went away is still served: it takes the next message, hidden
/// for the whole visibility timeout, and no one reads the answer. (AWS: aws-sdk-js #2350,
/// aws-sdk-java #2083.) Why the consumer never abandons a receive.
async fn a_long_poll_whose_caller_went_away_still_takes_a_message(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    let wait = secs(4);
    let abandoned = tokio::time::timeout(secs(1), q.receive_up_to(10, wait)).await;
    assert!(abandoned.is_err(), "the caller gave up on the poll");
    q.send("taken by a poll no one reads").await;
    sleep(wait).await;
    assert_eq!(q.counts().await, (0, 1), "(visible, hidden)");
}

async fn a_fifo_long_poll_and_the_delete_that_unlocks_its_group(kind: Kind) {
    let q = TestQueue::new_fifo(kind, 30).await;
    q.send_to_group("first", "g").await;
    q.send_to_group("second", "g").await;
    let first = receive_one(&q).await;
    let wait = secs(5);
    let poll = long_poll(&q, wait);
    sleep(secs(1)).await;
    delete(&q, &first).await.unwrap();
    let deleted = Instant::now();
    let (got, at) = poll.await.unwrap();
    // At once, or when the wait ends (4 s after the delete): half of what was left tells.
    let half_left = (wait - secs(1)) / 2;
    match implementation(kind) {
        // AWS: the waiting poll answers as soon as the group unlocks.
        Memory | LocalStack => {
            assert_eq!(got, 1);
            assert!(
                at - deleted < half_left,
                "{:?} after the delete",
                at - deleted
            );
        }
        // moto looks at the locked groups once, when the poll starts: the unlocked group's
        // message is not in this poll's answer, which comes when the wait ends.
        Moto => {
            assert_eq!(got, 0);
            assert!(
                at - deleted > half_left,
                "{:?} after the delete",
                at - deleted
            );
        }
    }
}

async fn redrive_moves_a_message_at_the_receive_after_max_receive_count(kind: Kind) {
    let (q, dead) = TestQueue::with_dead_letter(kind, 1, 2).await;
    q.send("poison").await;
    let mut counts = Vec::new();
    for _ in 0..3 {
        let got = q.receive_up_to(10, secs(3)).await;
        counts.push(got.iter().map(receive_count).collect::<Vec<_>>());
        sleep(Duration::from_millis(1500)).await;
    }
    assert_eq!(counts, [vec![1], vec![2], vec![]]);
    assert_eq!(
        dead.counts().await,
        (1, 0),
        "on the dead-letter queue, visible"
    );
}

on_both!(
    an_extension_of_a_deleted_message,
    an_extension_after_the_timeout_lapsed,
    an_extension_and_a_delete_with_an_old_handle,
    visibility_limits,
    a_long_poll_returns_when_a_message_arrives,
    a_long_poll_whose_caller_went_away_still_takes_a_message,
    a_fifo_long_poll_and_the_delete_that_unlocks_its_group,
    redrive_moves_a_message_at_the_receive_after_max_receive_count,
);

/// Batch requests, on the server (`MemoryQueue`'s batches are internal: its answers are
/// checked in `src/memory/seam.rs`).
#[tokio::test]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn batch_entry_ids_duplicates_and_partial_failures() {
    crate::require_server!("batch_entry_ids_duplicates_and_partial_failures");
    let server = implementation(Kind::Server);
    let client = server_client();
    let url = server_queue_with(&client, 3).await;
    let q = TestQueue::Server {
        client: client.clone(),
        url: url.clone(),
    };
    let got = q.receive_up_to(10, secs(2)).await;
    assert_eq!(got.len(), 3);
    let handles: Vec<&str> = got.iter().map(|m| m.receipt_handle().unwrap()).collect();
    let [a, b, c] = handles[..] else {
        unreachable!()
    };
    let change = |id: &str, handle: &str| {
        ChangeMessageVisibilityBatchRequestEntry::builder()
            .id(id)
            .receipt_handle(handle)
            .visibility_timeout(30)
            .build()
            .unwrap()
    };
    let delete = |id: &str, handle: &str| {
        DeleteMessageBatchRequestEntry::builder()
            .id(id)
            .receipt_handle(handle)
            .build()
            .unwrap()
    };

    // One good entry and one that is no receipt handle: each answered on its own.
    let out = client
        .change_message_visibility_batch()
        .queue_url(&url)
        .entries(change("good", a))
        .entries(change("bad", "not-a-receipt-handle"))
        .send()
        .await
        .expect("a partial failure is not a failed request");
    let ok: Vec<&str> = out.successful().iter().map(|e| e.id()).collect();
    assert_eq!(ok, ["good"]);
    let [failed] = out.failed() else {
        panic!("one failed entry: {:?}", out.failed())
    };
    assert_eq!(
        (failed.id(), short(failed.code()).as_str()),
        ("bad", "ReceiptHandleIsInvalid")
    );
    // The two servers disagree on whose fault it is: SenderFault is not to be trusted.
    assert_eq!(failed.sender_fault(), server == Moto);

    // Two entries with one id: AWS refuses the request; moto takes it.
    let changed = client
        .change_message_visibility_batch()
        .queue_url(&url)
        .entries(change("x", a))
        .entries(change("x", b))
        .send()
        .await;
    accepted_only_by(&[Moto], server, changed.map_err(|e| e.into_service_error()));

    // One handle in two entries with distinct ids: moto takes the repeated handle for a
    // repeated id; LocalStack deletes it once and answers both entries with success.
    let twice = client
        .delete_message_batch()
        .queue_url(&url)
        .entries(delete("first", b))
        .entries(delete("second", b))
        .send()
        .await;
    accepted_only_by(
        &[LocalStack],
        server,
        twice.map_err(|e| e.into_service_error()),
    );

    let deleted = client
        .delete_message_batch()
        .queue_url(&url)
        .entries(delete("x", a))
        .entries(delete("x", c))
        .send()
        .await;
    accepted_only_by(&[Moto], server, deleted.map_err(|e| e.into_service_error()));
}

/// A batch request `sent` to `server` succeeded if `server` is among `accepting`, and was
/// refused with `BatchEntryIdsNotDistinct` otherwise.
fn accepted_only_by<T: std::fmt::Debug, E: ProvideErrorMetadata + std::fmt::Debug>(
    accepting: &[Implementation],
    server: Implementation,
    sent: Result<T, E>,
) {
    if accepting.contains(&server) {
        assert!(sent.is_ok(), "{server:?}: {sent:?}");
    } else {
        let answer = server_answer(sent);
        assert_eq!(
            answer.as_ref().map_err(|(code, _)| code.as_str()),
            Err("BatchEntryIdsNotDistinct"),
            "{server:?}"
        );
    }
}
