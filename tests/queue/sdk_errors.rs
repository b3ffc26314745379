//! SQS error answers the test server never gives (`MessageNotInflight`, a stale receipt
//! handle, throttling, 5xx), sent through the real SDK with `aws-smithy-mocks`, on the paused
//! clock: whole-request errors in the wire format SQS uses (JSON body plus the
//! `x-amzn-query-error` header), per-entry errors as batch answers.

use std::time::Duration;

use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
use aws_sdk_sqs::types::Message;
use aws_sdk_sqs::Client;
use aws_smithy_mocks::mock;
use sqs_consumer::{Delivery, LostReason};
use tokio::time::{sleep, Instant};

use crate::common;

use common::sdk::{
    change_answer, consumer, deletes, mocked, one_extended, one_message, receive_once, sqs_error,
};
use common::take_one;

async fn lost_by(code: &'static str) -> (LostReason, sqs_consumer::Error) {
    let change = mock!(Client::change_message_visibility_batch)
        .then_compute_output(move |req| change_answer(req, |_| true, code));
    let (receive, delete) = (receive_once(), deletes());
    let client = mocked(&[&receive, &change, &delete]);
    let d = take_one(&consumer(client)).await;
    let start = Instant::now();
    let reason = d.lost().await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(5),
        "lost at the first extension"
    );
    assert_eq!(change.num_calls(), 1, "a lost delivery is not retried");
    let err = d
        .ack()
        .await
        .expect_err("ack of a lost delivery reports it");
    (reason, err)
}

#[tokio::test(start_paused = true)]
async fn message_not_inflight_from_sqs_loses_the_delivery() {
    let (reason, err) = lost_by("AWS.SimpleQueueService.MessageNotInflight").await;
    assert_eq!(reason, LostReason::NotInFlight);
    assert!(err.is_lost(), "{err}");
}

#[tokio::test(start_paused = true)]
async fn receipt_handle_is_invalid_from_sqs_loses_the_delivery() {
    let (reason, err) = lost_by("ReceiptHandleIsInvalid").await;
    assert_eq!(reason, LostReason::ReceiptHandleInvalid);
    assert!(err.is_lost(), "{err}");
}

#[tokio::test(start_paused = true)]
async fn throttled_and_failed_extensions_are_retried_and_the_delivery_survives() {
    let change = mock!(Client::change_message_visibility_batch)
        .sequence()
        .http_response(|| sqs_error(400, "RequestThrottled"))
        .times(2)
        .http_response(|| sqs_error(500, "InternalError"))
        .output(one_extended)
        .repeatedly()
        .build();
    let (receive, delete) = (receive_once(), deletes());
    let client = mocked(&[&receive, &change, &delete]);
    let d = take_one(&consumer(client)).await;
    sleep(Duration::from_secs(60)).await;
    assert!(!d.is_lost());
    assert!(change.num_calls() >= 3 + 11, "{} calls", change.num_calls());
    d.ack().await.expect("ack");
    assert_eq!(delete.num_calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_partly_failed_batch_loses_only_the_failed_entry() {
    let receive = mock!(Client::receive_message)
        .sequence()
        .output(|| {
            let m = |n: u32| {
                Message::builder()
                    .message_id(format!("m-{n}"))
                    .receipt_handle(format!("handle-{n}"))
                    .body("work")
                    .build()
            };
            ReceiveMessageOutput::builder()
                .messages(m(1))
                .messages(m(2))
                .build()
        })
        .output(|| ReceiveMessageOutput::builder().build())
        .repeatedly()
        .build();
    let change = mock!(Client::change_message_visibility_batch).then_compute_output(|req| {
        change_answer(
            req,
            |h| h == "handle-2",
            "AWS.SimpleQueueService.MessageNotInflight",
        )
    });
    let delete = deletes();
    let client = mocked(&[&receive, &change, &delete]);
    let consumer = consumer(client);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Delivery>();
    let handler = move |d: Delivery| {
        let tx = tx.clone();
        async move { tx.send(d).map_err(|_| "test ended") }
    };
    let (one, two) = tokio::select! {
        r = consumer.run(handler) => panic!("run ended: {r:?}"),
        pair = async { (rx.recv().await.unwrap(), rx.recv().await.unwrap()) } => pair,
    };
    let (one, two) = if one.message_id() == "m-1" {
        (one, two)
    } else {
        (two, one)
    };
    assert_eq!(two.lost().await, LostReason::NotInFlight);
    // The first round went out as one request for both.
    assert_eq!(
        change.num_calls(),
        1,
        "the first round: one request for both"
    );
    sleep(Duration::from_secs(60)).await;
    assert!(
        !one.is_lost(),
        "the other entry's success went to its own delivery"
    );
    // Then one request per round for the one left.
    assert!(change.num_calls() <= 1 + 12, "{} calls", change.num_calls());
    one.ack().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_missing_queue_ends_run_and_a_server_error_is_retried() {
    let missing = mock!(Client::receive_message)
        .sequence()
        .http_response(|| sqs_error(400, "AWS.SimpleQueueService.NonExistentQueue"))
        .repeatedly()
        .build();
    let client = mocked(&[&missing]);
    let err = consumer(client)
        .run(|d: Delivery| d.ack())
        .await
        .unwrap_err();
    assert!(err.is_fatal(), "{err}");
    assert_eq!(missing.num_calls(), 1);

    let flaky = mock!(Client::receive_message)
        .sequence()
        .http_response(|| sqs_error(500, "InternalError"))
        .times(3)
        .output(one_message)
        .output(|| ReceiveMessageOutput::builder().build())
        .repeatedly()
        .build();
    let delete = deletes();
    let client = mocked(&[&flaky, &delete]);
    let d = take_one(&consumer(client)).await;
    assert_eq!(d.message_id(), "m-1");
    d.ack().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_message_without_receipt_handle_is_skipped_and_the_consumer_goes_on() {
    let receive = mock!(Client::receive_message)
        .sequence()
        .output(|| {
            ReceiveMessageOutput::builder()
                .messages(Message::builder().message_id("broken").body("x").build())
                .build()
        })
        .output(one_message)
        .output(|| ReceiveMessageOutput::builder().build())
        .repeatedly()
        .build();
    let delete = deletes();
    let client = mocked(&[&receive, &delete]);
    // One slot: had the skipped message kept it, the next receive would never start.
    let consumer = sqs_consumer::Consumer::builder(client, common::sdk::URL)
        .visibility_timeout(Duration::from_secs(10))
        .max_in_flight(1)
        .build()
        .unwrap();
    let (logs, _guard) = common::capture_logs();
    let d = take_one(&consumer).await;
    assert_eq!(d.message_id(), "m-1");
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        logs.lines().any(|l| l.contains("WARN")
            && l.contains("skipped a message without a receipt handle")
            && l.contains("message_id=broken")),
        "{logs}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_without_body_is_delivered_with_an_empty_one() {
    let receive = mock!(Client::receive_message)
        .sequence()
        .output(|| {
            ReceiveMessageOutput::builder()
                .messages(
                    Message::builder()
                        .message_id("m-empty")
                        .receipt_handle("handle-empty")
                        .build(),
                )
                .build()
        })
        .output(|| ReceiveMessageOutput::builder().build())
        .repeatedly()
        .build();
    let delete = deletes();
    let client = mocked(&[&receive, &delete]);
    let d = take_one(&consumer(client)).await;
    assert_eq!((d.message_id(), d.body()), ("m-empty", ""));
    d.ack().await.unwrap();
    assert_eq!(delete.num_calls(), 1);
}

/// A dead-letter queue given by URL, through the real SDK: `dead_letter` sends the copy to
/// that URL (the body, and the failure naming the reason and the source queue by its URL),
/// then deletes the original.
#[tokio::test(start_paused = true)]
async fn a_dead_letter_queue_given_by_url_gets_the_copy_then_the_original_goes() {
    use aws_sdk_sqs::operation::send_message::{SendMessageInput, SendMessageOutput};
    const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs-failed";
    let copies: std::sync::Arc<std::sync::Mutex<Vec<SendMessageInput>>> = Default::default();
    let send = {
        let copies = copies.clone();
        mock!(Client::send_message)
            .match_requests(move |req| {
                copies.lock().unwrap().push(req.clone());
                true
            })
            .then_output(|| SendMessageOutput::builder().message_id("copy-1").build())
    };
    let receive = receive_once();
    let delete = deletes();
    let client = mocked(&[&receive, &send, &delete]);
    let consumer = sqs_consumer::Consumer::builder(client, common::sdk::URL)
        .visibility_timeout(Duration::from_secs(10))
        .dead_letter(DLQ, 5)
        .build()
        .unwrap();
    let d = take_one(&consumer).await;
    d.dead_letter("cannot be parsed").await.unwrap();
    assert_eq!(delete.num_calls(), 1, "the original deleted after the copy");
    let copies = copies.lock().unwrap();
    let [copy] = copies.as_slice() else {
        panic!("one copy: {copies:?}");
    };
    assert_eq!(copy.queue_url(), Some(DLQ));
    assert_eq!(copy.message_body(), Some("work"));
    let failure = copy.message_attributes().unwrap()["sqs-consumer.failure"]
        .string_value()
        .unwrap();
    let failure: serde_json::Value = serde_json::from_str(failure).unwrap();
    assert_eq!(failure["error"], "cannot be parsed");
    assert_eq!(failure["source_queue"], common::sdk::URL);
    assert_eq!(consumer.stats().dead_lettered, 1);
}
