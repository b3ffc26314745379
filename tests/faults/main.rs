//! The consumer against the test server through a proxy that breaks things on purpose
//! (`common::faults`): server errors, throttling, connections dropped before or after the
//! server acted, answers held past the client's timeouts. Nothing may be lost, the consumer
//! must keep running, and every message handled twice must be explained by a fault.
//! Each test prints its figures (`cargo test --test faults -- --nocapture`). The crash test, a consumer process killed
//! mid-work, is in `crash`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
mod crash;

guard_logs!();

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;

use aws_sdk_sqs::types::QueueAttributeName;
use common::faults::{Fault, FaultProxy, Faults};
use common::{client_for, left_on_server, secs, server_client, server_endpoint, server_queue_with};
use sqs_consumer::memory::Faults as MemoryFaults;
use sqs_consumer::{Consumer, Delivery, MemoryQueue};
use tokio::time::{sleep, Instant};

/// What happened to one delivery, as its handler saw it.
#[derive(Debug, Clone)]
struct Handled {
    /// When the delivery was received: deliveries of one message are ordered by it (their
    /// acks may finish in another order).
    received_at: Instant,
    ack_ok: bool,
    /// The ack finished after the visibility deadline the delivery had when the ack began
    /// (less `slack`): its requests failed or were held so long that the message could be
    /// received again meanwhile (the keeper keeps extending during an ack, but under
    /// faults it may fail).
    ack_outlasted_deadline: bool,
    /// When its ack finished.
    acked_at: Instant,
}

impl Handled {
    /// Whether `next`, a later delivery of the same message, is explained by this one: it
    /// was told its ack failed, or its ack outlasted its deadline.
    fn explains(&self, next: &Handled) -> bool {
        let _ = next;
        !self.ack_ok || self.ack_outlasted_deadline
    }

    /// `next`'s receive began while this delivery still held the message and its ack went
    /// well: a duplicate of the server's own, which SQS standard queues may also send, and
    /// which the test server does when two receives race. Only a server is excused for it.
    fn handed_out_while_held(&self, next: &Handled) -> bool {
        self.ack_ok && !self.ack_outlasted_deadline && next.received_at < self.acked_at
    }
}

type Log = Arc<Mutex<HashMap<String, Vec<Handled>>>>;

/// A handler that acks each delivery at once and records how it went. `slack`: how early
/// before its deadline an ack must finish to count as in time (a server starts the
/// visibility a little before the consumer's clock does).
fn recording(
    log: Log,
    slack: Duration,
) -> impl Fn(Delivery) -> BoxFuture<'static, Result<(), sqs_consumer::Error>> + Send + Sync {
    move |d: Delivery| {
        let log = log.clone();
        Box::pin(async move {
            let body = d.body().to_owned();
            let received_at = d.received_at();
            let deadline = d.deadline();
            let ack_ok = d.ack().await.is_ok();
            let acked_at = Instant::now();
            let ack_outlasted_deadline = acked_at + slack >= deadline;
            log.lock().unwrap().entry(body).or_default().push(Handled {
                received_at,
                ack_ok,
                ack_outlasted_deadline,
                acked_at,
            });
            Ok(())
        })
    }
}

/// How the duplicates of a fault scenario are explained.
#[derive(Debug, Default)]
struct Duplicates {
    /// Deliveries beyond the first of a message.
    count: usize,
    /// Of those, handed out again by the server while held (see `handed_out_while_held`).
    servers_own: usize,
    acks_failed: usize,
    acks_outlasting: usize,
    /// Messages handled again without an explanation.
    unexplained: Vec<(String, Vec<Handled>)>,
}

fn duplicates(log: &Log, server_may_duplicate: bool) -> Duplicates {
    let mut handled = log.lock().unwrap().clone();
    let mut d = Duplicates::default();
    for (body, deliveries) in &mut handled {
        deliveries.sort_by_key(|h| h.received_at);
        d.count += deliveries.len() - 1;
        let mut explained = true;
        for pair in deliveries.windows(2) {
            let servers = pair[0].handed_out_while_held(&pair[1]);
            d.servers_own += usize::from(servers);
            explained &= pair[0].explains(&pair[1]) || (server_may_duplicate && servers);
        }
        if !explained {
            d.unexplained.push((body.clone(), deliveries.clone()));
        }
    }
    let all = handled.values().flatten();
    d.acks_failed = all.clone().filter(|h| !h.ack_ok).count();
    d.acks_outlasting = all.filter(|h| h.ack_outlasted_deadline).count();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn under_injected_faults_every_message_is_handled_and_deleted() {
    crate::require_server!("under_injected_faults_every_message_is_handled_and_deleted");
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
    let log = Log::default();
    let start = Instant::now();
    let done = async {
        loop {
            let all = log.lock().unwrap().len() == MESSAGES;
            if all && left_on_server(&direct, &url).await == 0 {
                return;
            }
            assert!(start.elapsed() < LIMIT, "not done within {LIMIT:?}");
            sleep(Duration::from_millis(200)).await;
        }
    };
    consumer
        .run_until(recording(log.clone(), secs(1)), done)
        .await
        .expect("the consumer keeps running through every fault");
    let elapsed = start.elapsed();
    let proxy_log = proxy.log();
    let stats = consumer.stats();

    // Every message handled, and the queue is empty: every one deleted.
    assert_eq!(log.lock().unwrap().len(), MESSAGES);
    assert_eq!(left_on_server(&direct, &url).await, 0);
    let dup = duplicates(&log, true);
    common::report(&format!(
        "faults (test server): {MESSAGES} messages in {elapsed:.1?}; requests {:?}; injected: \
         500s {}, throttled {}, reset {}, dropped after acting {}, held past the timeout {}; \
         receive answers never seen held {} messages; handled twice: {} (acks reported failed: \
         {}, acks outlasting their deadline: {}, handed out again by the server while held: \
         {}); extension failures {}, lost {}",
        proxy_log.requests,
        proxy_log.count(Fault::InternalError),
        proxy_log.count(Fault::Throttle),
        proxy_log.count(Fault::ResetBefore),
        proxy_log.count(Fault::DropAfter),
        proxy_log.count(Fault::Delay),
        proxy_log.unseen_receives.len(),
        dup.count,
        dup.acks_failed,
        dup.acks_outlasting,
        dup.servers_own,
        stats.extension_failures,
        stats.lost,
    ));
    assert!(
        dup.unexplained.is_empty(),
        "handled again without a fault to explain it: {:?}",
        dup.unexplained
    );
    for fault in [
        Fault::InternalError,
        Fault::Throttle,
        Fault::ResetBefore,
        Fault::DropAfter,
        Fault::Delay,
    ] {
        assert!(proxy_log.count(fault) > 0, "no {fault:?} injected");
    }
}

#[tokio::test(start_paused = true)]
async fn under_injected_faults_on_an_atomic_queue_every_duplicate_is_a_failed_or_late_ack() {
    // The same scenario on MemoryQueue: atomic (one receive never races another), with
    // latency and the same faults, on the paused clock. A message handled twice must be
    // explained by its earlier delivery's ack: no server excuse here.
    const MESSAGES: usize = 500;
    const LIMIT: Duration = Duration::from_secs(600);
    let queue = MemoryQueue::builder()
        .visibility_timeout(secs(6))
        .latency(Duration::from_millis(5))
        .faults(
            MemoryFaults::new(0x5eed_f00d)
                .internal_error(0.25)
                .throttle(0.05)
                .lost_answer(0.05)
                // Longer than the consumer waits for any answer (receive: wait + 10 s;
                // the others: 10 s).
                .held_answer(0.05, secs(12)),
        )
        .build()
        .unwrap();
    for i in 0..MESSAGES {
        queue.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&queue)
        .wait_time(secs(1))
        .max_in_flight(50)
        .build()
        .unwrap();
    let log = Log::default();
    let start = Instant::now();
    let done = async {
        while !(log.lock().unwrap().len() == MESSAGES && queue.is_empty()) {
            assert!(start.elapsed() < LIMIT, "not done within {LIMIT:?}");
            sleep(Duration::from_millis(200)).await;
        }
    };
    consumer
        .run_until(recording(log.clone(), Duration::ZERO), done)
        .await
        .expect("the consumer keeps running through every fault");
    let injected = queue.injected();
    let stats = consumer.stats();
    assert_eq!(log.lock().unwrap().len(), MESSAGES);
    assert!(queue.is_empty());
    let dup = duplicates(&log, false);
    common::report(&format!(
        "faults (MemoryQueue): {MESSAGES} messages in {:.1?} (virtual); requests {}; \
         injected {injected:?}; handled twice: {} (acks reported failed: {}, acks outlasting \
         their deadline: {}, handed out again while held: {}); extension failures {}, lost {}",
        start.elapsed(),
        queue.requests().total(),
        dup.count,
        dup.acks_failed,
        dup.acks_outlasting,
        dup.servers_own,
        stats.extension_failures,
        stats.lost,
    ));
    assert!(
        dup.unexplained.is_empty(),
        "handled again without a failed or late ack to explain it: {:?}",
        dup.unexplained
    );
    assert_eq!(
        dup.servers_own, 0,
        "an atomic queue handed a held message out again"
    );
    assert!(
        injected.internal_error > 0
            && injected.throttle > 0
            && injected.lost_answer > 0
            && injected.held_answer > 0,
        "{injected:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn a_held_message_whose_extensions_fail_transiently_stays_held() {
    crate::require_server!("a_held_message_whose_extensions_fail_transiently_stays_held");
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
    // Every injected failure reaches the keeper's retries (the consumer's calls make one
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
