//! Behaviour that only a real SQS-compatible server can show: its error answers.

use crate::common;

use std::time::Duration;

use common::{capture_logs, secs, server_client, unique_name};
use sqs_consumer::{Consumer, Delivery, Error};
use tokio::time::Instant;

async fn missing_queue_url() -> String {
    // A real queue's URL with another name: same host and account, no such queue.
    let client = server_client();
    let url = client
        .create_queue()
        .queue_name(unique_name("exists"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let (base, _) = url.rsplit_once('/').unwrap();
    format!("{base}/{}", unique_name("missing"))
}

#[tokio::test]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn a_missing_queue_makes_run_return_an_error_within_seconds() {
    crate::require_server!("a_missing_queue_makes_run_return_an_error_within_seconds");
    let url = missing_queue_url().await;
    for visibility in [None, Some(secs(5))] {
        let mut builder = Consumer::builder(server_client(), url.clone());
        if let Some(v) = visibility {
            // The consumer then skips GetQueueAttributes and fails on ReceiveMessage.
            builder = builder.visibility_timeout(v);
        }
        let consumer = builder.build().unwrap();
        let (logs, _guard) = capture_logs();
        let start = Instant::now();
        let result = tokio::time::timeout(secs(10), consumer.run(|d: Delivery| d.ack())).await;
        let err = result
            .expect("run must return, not retry forever")
            .expect_err("a missing queue is an error");
        assert!(err.is_fatal(), "{err:?}");
        let code = err.code().unwrap_or_default();
        assert!(
            code.contains("NonExistentQueue") || code.contains("QueueDoesNotExist"),
            "{code}"
        );
        assert!(start.elapsed() < secs(5));
        let text = err.to_string();
        let operation = if visibility.is_some() {
            "ReceiveMessage"
        } else {
            "GetQueueAttributes"
        };
        assert!(text.contains(operation), "{text}");
        // Logged at error whatever the settings, with the queue's code.
        let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
        assert!(
            logs.lines()
                .any(|l| l.contains("ERROR") && l.contains(code)),
            "visibility {visibility:?}: {logs}"
        );
    }
}

#[tokio::test]
async fn bad_settings_are_refused_before_anything_is_sent() {
    // A listener that only counts who connects stands in for the server: `build()` must not
    // connect at all, for good settings or bad.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let client = common::client_for(&endpoint);
    let good = Consumer::builder(client.clone(), format!("{endpoint}/000000000000/q")).build();
    assert!(good.is_ok(), "{good:?}");
    let cases: Vec<(&str, sqs_consumer::ConsumerBuilder)> = vec![
        (
            "visibility_timeout",
            Consumer::builder(client.clone(), "http://127.0.0.1:1/q")
                .visibility_timeout(secs(43_201)),
        ),
        (
            "visibility_timeout",
            Consumer::builder(client.clone(), "http://127.0.0.1:1/q")
                .visibility_timeout(Duration::ZERO),
        ),
        (
            "wait_time",
            Consumer::builder(client.clone(), "http://127.0.0.1:1/q").wait_time(secs(21)),
        ),
        (
            "receive_batch_size",
            Consumer::builder(client.clone(), "http://127.0.0.1:1/q").receive_batch_size(0),
        ),
        (
            "max_in_flight",
            Consumer::builder(client.clone(), "http://127.0.0.1:1/q").max_in_flight(0),
        ),
        ("queue", Consumer::builder(client.clone(), "my queue")),
    ];
    for (field, builder) in cases {
        match builder.build() {
            Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: expected InvalidConfig, got {other:?}"),
        }
    }
    tokio::task::yield_now().await;
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "build() connected to the server"
    );
}

#[tokio::test]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn the_queue_timeout_is_read_from_the_server() {
    crate::require_server!("the_queue_timeout_is_read_from_the_server");
    let client = server_client();
    let url = client
        .create_queue()
        .queue_name(unique_name("timeout"))
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "7",
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    client
        .send_message()
        .queue_url(&url)
        .message_body("m")
        .send()
        .await
        .unwrap();
    let consumer = Consumer::builder(client, url).build().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Duration>();
    let handler = move |d: Delivery| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(d.deadline() - d.received_at());
            d.ack().await
        }
    };
    let timeout = tokio::select! {
        r = consumer.run(handler) => panic!("run ended: {r:?}"),
        t = rx.recv() => t.unwrap(),
    };
    // Seven seconds from the answer's arrival, a moment after the request.
    assert!(timeout >= secs(7) && timeout < secs(8), "{timeout:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn a_purged_queue_loses_the_held_delivery_at_its_next_round() {
    crate::require_server!("a_purged_queue_loses_the_held_delivery_at_its_next_round");
    // AWS answers the extension of a purged message `InvalidParameterValue` "does not exist or
    // is not available" (LocalStack too, with `SenderFault` false); moto answers
    // `ReceiptHandleIsInvalid`. Either way: lost at the first round, not retried until the
    // deadline, and not reported as a late extension.
    let q = common::TestQueue::new(common::Kind::Server, 4).await;
    q.send("purged").await;
    let common::TestQueue::Server { client, url } = q.clone() else {
        unreachable!("a server queue")
    };
    let consumer = q.consumer().build().unwrap();
    let d = common::take_one(&consumer).await;
    client.purge_queue().queue_url(&url).send().await.unwrap();
    let due = d.deadline() - secs(2);
    let reason = tokio::time::timeout(secs(10), d.lost())
        .await
        .expect("lost before its deadline");
    let at = Instant::now();
    assert_eq!(reason, sqs_consumer::LostReason::ReceiptHandleInvalid);
    assert!(at >= due && at < d.deadline(), "lost at the first round");
    let stats = consumer.stats();
    assert_eq!(stats.extension_failures, 1, "{stats:?}");
    assert_eq!(stats.late_extensions, 0, "{stats:?}");
    assert!(d.ack().await.unwrap_err().is_lost());
}
