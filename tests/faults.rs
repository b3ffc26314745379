//! The consumer against the test server through a proxy that breaks things on purpose
//! (`common::faults`): server errors, throttling, connections dropped before or after the
//! server acted, answers held past the client's timeouts. Nothing may be lost, the consumer
//! must keep running, and every message handled twice must be explained by a fault.
//! Each test prints its figures (`cargo test --test faults -- --nocapture`).

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use common::faults::{Fault, FaultProxy, Faults};
use common::{client_for, left_on_server, secs, server_client, server_endpoint, server_queue_with};
use sqs_consumer::{Consumer, Delivery};
use tokio::time::{sleep, Instant};

/// What happened to one delivery, as its handler saw it.
#[derive(Debug, Clone)]
struct Handled {
    /// When the delivery was received: deliveries of one message are ordered by it (their
    /// acks may finish in another order).
    received_at: Instant,
    ack_ok: bool,
    /// The ack finished after the visibility deadline the delivery had when the ack began:
    /// its requests failed or were held so long that the message could be received again
    /// meanwhile (the heartbeat keeps extending during an ack, but under faults it may fail).
    ack_outlasted_deadline: bool,
    /// When its ack finished.
    acked_at: Instant,
}

impl Handled {
    /// Whether `next`, a later delivery of the same message, is explained: this one was told
    /// its ack failed, or its ack outlasted its deadline, or the server handed the message
    /// out again while this delivery still held it (`next`'s receive began before this ack
    /// finished): a duplicate of the server's own, which SQS standard queues may also send,
    /// and which the test server does when two receives race.
    fn explains(&self, next: &Handled) -> bool {
        !self.ack_ok || self.ack_outlasted_deadline || next.received_at < self.acked_at
    }

    fn handed_out_while_held(&self, next: &Handled) -> bool {
        self.ack_ok && !self.ack_outlasted_deadline && next.received_at < self.acked_at
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_injected_faults_every_message_is_handled_and_deleted() {
    const MESSAGES: usize = 500;
    const LIMIT: Duration = Duration::from_secs(300);
    let direct = server_client();
    let url = server_queue_with(&direct, MESSAGES).await;
    let proxy = FaultProxy::start(
        &server_endpoint(),
        Faults {
            internal_error: 0.25,
            throttle: 0.05,
            reset_before: 0.05,
            drop_after: 0.05,
            delay: 0.05,
            // Longer than the consumer waits for any answer (receive: wait + 10 s; batches:
            // 10 s).
            delay_for: secs(12),
            actions: &[
                "ReceiveMessage",
                "DeleteMessageBatch",
                "ChangeMessageVisibilityBatch",
            ],
        },
        0x5eed_f00d,
    )
    .await;
    let consumer = Consumer::builder(client_for(&proxy.endpoint), url.clone())
        .visibility_timeout(secs(6))
        .wait_time(secs(1))
        .max_in_flight(50)
        .build()
        .unwrap();
    let handled: Arc<Mutex<HashMap<String, Vec<Handled>>>> = Arc::default();
    let handler = {
        let handled = handled.clone();
        move |d: Delivery| {
            let handled = handled.clone();
            async move {
                let body = d.body().to_owned();
                let received_at = d.received_at();
                let deadline = d.deadline();
                let ack_ok = d.ack().await.is_ok();
                // Within a second of it counts: the server's clock for the visibility
                // started a little before ours (when it handed the message out).
                let acked_at = Instant::now();
                let ack_outlasted_deadline = acked_at + Duration::from_secs(1) >= deadline;
                handled
                    .lock()
                    .unwrap()
                    .entry(body)
                    .or_default()
                    .push(Handled {
                        received_at,
                        ack_ok,
                        ack_outlasted_deadline,
                        acked_at,
                    });
                Ok::<_, sqs_consumer::Error>(())
            }
        }
    };
    let start = Instant::now();
    let done = async {
        loop {
            let all = handled.lock().unwrap().len() == MESSAGES;
            if all && left_on_server(&direct, &url).await == 0 {
                return;
            }
            assert!(start.elapsed() < LIMIT, "not done within {LIMIT:?}");
            sleep(Duration::from_millis(200)).await;
        }
    };
    consumer
        .run_until(handler, done)
        .await
        .expect("the consumer keeps running through every fault");
    let elapsed = start.elapsed();
    let mut handled = handled.lock().unwrap().clone();
    let log = proxy.log();
    let stats = consumer.stats();

    // Every message handled, and the queue is empty: every one deleted.
    assert_eq!(handled.len(), MESSAGES);
    assert_eq!(left_on_server(&direct, &url).await, 0);
    // A message handled twice must be explained: see `Handled::explains`.
    let mut duplicates = 0;
    let mut servers_own = 0;
    let mut unexplained = Vec::new();
    for (body, deliveries) in &mut handled {
        deliveries.sort_by_key(|h| h.received_at);
        duplicates += deliveries.len() - 1;
        for pair in deliveries.windows(2) {
            servers_own += usize::from(pair[0].handed_out_while_held(&pair[1]));
        }
        if !deliveries.windows(2).all(|pair| pair[0].explains(&pair[1])) {
            unexplained.push((body.clone(), deliveries.clone()));
        }
    }
    let outlasted = handled
        .values()
        .flatten()
        .filter(|h| h.ack_outlasted_deadline)
        .count();
    let ack_failures = handled.values().flatten().filter(|h| !h.ack_ok).count();
    common::report(&format!(
        "faults: {MESSAGES} messages in {elapsed:.1?}; requests {:?}; injected: 500s {}, \
         throttled {}, reset {}, dropped after acting {}, held past the timeout {}; receive answers never seen held {} \
         messages; handled twice: {duplicates} (acks reported failed: {ack_failures}, acks \
         outlasting their deadline: {outlasted}, handed out again by the server while held: \
         {servers_own}); \
         extension failures {}, lost {}",
        log.requests,
        log.count(Fault::InternalError),
        log.count(Fault::Throttle),
        log.count(Fault::ResetBefore),
        log.count(Fault::DropAfter),
        log.count(Fault::Delay),
        log.unseen_receives.len(),
        stats.extension_failures,
        stats.lost,
    ));
    assert!(
        unexplained.is_empty(),
        "handled again without a fault to explain it: {unexplained:?}"
    );
    for fault in [
        Fault::InternalError,
        Fault::Throttle,
        Fault::ResetBefore,
        Fault::DropAfter,
        Fault::Delay,
    ] {
        assert!(log.count(fault) > 0, "no {fault:?} injected");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_message_whose_extensions_fail_transiently_stays_held() {
    let direct = server_client();
    let url = server_queue_with(&direct, 1).await;
    let proxy = FaultProxy::start(
        &server_endpoint(),
        Faults {
            internal_error: 0.3,
            throttle: 0.1,
            reset_before: 0.1,
            drop_after: 0.0,
            delay: 0.0,
            delay_for: Duration::ZERO,
            actions: &["ChangeMessageVisibilityBatch"],
        },
        0x0bad_cafe,
    )
    .await;
    // Every injected failure reaches the heartbeat's retries (the consumer's calls make one
    // attempt each, whatever the client says).
    let consumer = Consumer::builder(client_for(&proxy.endpoint), url.clone())
        .visibility_timeout(secs(10))
        .wait_time(secs(1))
        .build()
        .unwrap();
    let mut taker = common::Taker::start(consumer);
    let d = taker.next(secs(10)).await;
    // Hold it for two and a half timeouts, looking from outside that it never shows.
    let start = Instant::now();
    let mut looks = 0;
    while start.elapsed() < secs(25) {
        assert_eq!(
            left_on_server(&direct, &url).await,
            1,
            "still on the server"
        );
        let visible = direct
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .unwrap()
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .cloned();
        assert_eq!(
            visible.as_deref(),
            Some("0"),
            "visible while held (lost: {:?}) after {:?}; {:?}",
            d.is_lost(),
            start.elapsed(),
            proxy.log()
        );
        looks += 1;
        sleep(Duration::from_millis(250)).await;
    }
    assert!(!d.is_lost());
    let log = proxy.log();
    let requests = log.requests.get("ChangeMessageVisibilityBatch").copied();
    common::report(&format!(
        "held 25 s at T = 10 s through {looks} looks: {requests:?} extension requests, of which \
         500s {}, throttled {}, reset {}",
        log.count(Fault::InternalError),
        log.count(Fault::Throttle),
        log.count(Fault::ResetBefore),
    ));
    assert!(
        log.count(Fault::InternalError)
            + log.count(Fault::Throttle)
            + log.count(Fault::ResetBefore)
            > 0
    );
    d.ack().await.expect("ack after the faults");
    assert_eq!(left_on_server(&direct, &url).await, 0);
}
