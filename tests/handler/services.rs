//! Handlers as tower services (feature `tower`): `tower::ServiceBuilder` layers (`timeout`,
//! `concurrency_limit`, `rate_limit`, a tracing layer) over a handler, on `MemoryQueue` (the
//! paused clock) and on the test server; `poll_ready` as back-pressure; ack modes and the
//! retry policy applied to a service's outcome.
#![cfg(feature = "tower")]

use crate::common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use common::{eventually, run_while, secs, Kind, TestQueue};
use sqs_consumer::memory::Action;
use sqs_consumer::{
    AckMode, Batch, BoxError, Consumer, Delivery, RetryPolicy, ServiceBatchHandler, ServiceHandler,
};
use tokio::sync::watch;
use tokio::time::{sleep, Instant};
use tower::{Service, ServiceBuilder};

on_both!(layers_wrap_the_handler_and_a_concurrency_limit_holds);

/// The example's tracing layer.
#[allow(dead_code)]
#[path = "../../examples/tower.rs"]
mod tower_example;

/// Counts the handlers running at once, and the most there ever were.
#[derive(Default)]
struct Running {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Running {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `timeout`, `concurrency_limit(2)` and a tracing layer over a handler that holds each
/// delivery 300 ms: every message is handled once and acked, never more than 2 at once, each
/// in the layer's span inside the crate's `delivery` span.
async fn layers_wrap_the_handler_and_a_concurrency_limit_holds(kind: Kind) {
    let logs = common::global_logs();
    let q = TestQueue::new(kind, 30).await;
    q.send_many("layered", 12).await;
    let consumer = q.consumer().wait_time(secs(1)).build().unwrap();
    let running = Arc::new(Running::default());
    let handled = Arc::new(Mutex::new(Vec::new()));
    let (counted, seen) = (running.clone(), handled.clone());
    let service = ServiceBuilder::new()
        .layer(tower::layer::layer_fn(tower_example::Traced))
        .concurrency_limit(2)
        .timeout(secs(10))
        .service_fn(move |d: Delivery| {
            let (running, seen) = (counted.clone(), seen.clone());
            async move {
                running.enter();
                tracing::info!("handling inside the layers ({kind:?})");
                sleep(Duration::from_millis(300)).await;
                running.leave();
                seen.lock().unwrap().push(d.body().to_owned());
                d.ack().await
            }
        });
    let done = eventually("all acked", secs(60), || consumer.stats().acked == 12);
    run_while(&consumer, ServiceHandler::new(service), done).await;
    assert_eq!(
        running.most.load(Ordering::SeqCst),
        2,
        "the limit was reached and held"
    );
    let mut bodies = handled.lock().unwrap().clone();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), 12, "each handled once");
    assert_eq!(q.counts().await, (0, 0), "nothing left");
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains(&format!("handling inside the layers ({kind:?})")))
        .unwrap_or_else(|| panic!("no line from the handler: {text}"));
    assert!(
        line.contains("delivery{") && line.contains("job{receive_count=1}"),
        "{line}"
    );
}

/// A service that is ready only while its gate is open.
#[derive(Clone)]
struct Gated {
    open: watch::Receiver<bool>,
    calls: Arc<AtomicUsize>,
}

impl Service<Delivery> for Gated {
    type Response = ();
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if *self.open.borrow() {
            return Poll::Ready(Ok(()));
        }
        // Wake when the gate changes.
        let mut open = self.open.clone();
        let waker = cx.waker().clone();
        tokio::spawn(async move {
            let _ = open.changed().await;
            waker.wake();
        });
        Poll::Pending
    }

    fn call(&mut self, d: Delivery) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { d.ack().await.map_err(Into::into) })
    }
}

/// While the service is not ready, no receive starts (the messages stay visible on the
/// queue, nobody holds them); once it is, they are all handled.
#[tokio::test(start_paused = true)]
async fn a_service_that_is_not_ready_holds_back_receives_not_messages() {
    let q = common::memory_queue(30);
    for i in 0..5 {
        q.send(format!("m{i}")).unwrap();
    }
    let (gate, open) = watch::channel(false);
    let calls = Arc::new(AtomicUsize::new(0));
    let service = Gated {
        open,
        calls: calls.clone(),
    };
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let checked = async {
        sleep(secs(120)).await;
        assert_eq!(q.requests().requests(Action::ReceiveMessage), 0);
        assert_eq!(q.visible_len(), 5, "every message still visible");
        assert_eq!(consumer.stats().received, 0);
        gate.send(true).unwrap();
        eventually("all handled", secs(60), || consumer.stats().acked == 5).await;
    };
    run_while(&consumer, ServiceHandler::new(service), checked).await;
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

/// While receives are under way, a service that is not ready holds back the next receive,
/// never the answers of those under way: each message is handed out (and kept hidden) as it
/// arrives. 40 messages at a visibility timeout of 2 s through a service that takes one at a
/// time for 300 ms each (12 s in all): none is handed out twice, none lost.
#[tokio::test(start_paused = true)]
async fn a_service_that_is_not_ready_never_holds_back_the_answers_of_receives_under_way() {
    let q = common::memory_queue(2);
    for i in 0..40 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .max_in_flight(100)
        .max_concurrent_receives(4)
        .build()
        .unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let handled = seen.clone();
    let service = ServiceBuilder::new()
        .concurrency_limit(1)
        .service_fn(move |d: Delivery| {
            handled.lock().unwrap().push(d.body().to_owned());
            async move {
                sleep(Duration::from_millis(300)).await;
                d.ack().await
            }
        });
    let done = eventually("all acked", secs(120), || consumer.stats().acked == 40);
    run_while(&consumer, ServiceHandler::new(service), done).await;
    let stats = consumer.stats();
    assert_eq!(
        (stats.received, stats.lost, stats.lost_acks),
        (40, 0, 0),
        "{stats:?}"
    );
    assert_eq!(seen.lock().unwrap().len(), 40, "each handled once");
}

/// A stop while the service is not ready: no receive started, none to wait for, so the run
/// ends at the signal.
#[tokio::test(start_paused = true)]
async fn a_stop_while_the_service_is_not_ready_ends_at_once() {
    let q = common::memory_queue(30);
    q.send("waits").unwrap();
    let (_gate, open) = watch::channel(false);
    let service = Gated {
        open,
        calls: Arc::default(),
    };
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let started = Instant::now();
    consumer
        .run_until(ServiceHandler::new(service), sleep(secs(10)))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), secs(10));
    assert_eq!(q.requests().requests(Action::ReceiveMessage), 0);
    assert_eq!(q.visible_len(), 1);
}

/// `rate_limit` (under `buffer`, which makes it `Clone`): 10 messages at 2 per second take
/// at least 4 s from the first call to the last.
#[tokio::test(start_paused = true)]
async fn a_rate_limit_layer_spaces_the_calls() {
    let q = common::memory_queue(30);
    for i in 0..10 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let seen = calls.clone();
    let service = ServiceBuilder::new()
        .buffer(16)
        .rate_limit(2, secs(1))
        .service_fn(move |d: Delivery| {
            seen.lock().unwrap().push(Instant::now());
            d.ack()
        });
    let done = eventually("all acked", secs(60), || consumer.stats().acked == 10);
    run_while(&consumer, ServiceHandler::new(service), done).await;
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 10);
    let spread = calls[9] - calls[0];
    assert!(spread >= secs(4), "{spread:?}");
    // Two per window of one second, never three.
    for pair in calls.windows(3) {
        assert!(pair[2] - pair[0] >= secs(1), "{calls:?}");
    }
}

/// A call past the `timeout` layer's limit is the handler's error: the retry policy brings the
/// message back after its visibility timeout, and the second try, in time, acks it.
#[tokio::test(start_paused = true)]
async fn a_timeout_layers_error_gets_the_retry_policy() {
    let q = common::memory_queue(10);
    q.send("slow first").unwrap();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let service = ServiceBuilder::new()
        .timeout(secs(2))
        .service_fn(|d: Delivery| async move {
            if d.receive_count() == 1 {
                sleep(secs(5)).await;
            }
            d.ack().await
        });
    let done = eventually("acked", secs(120), || consumer.stats().acked == 1);
    run_while(&consumer, ServiceHandler::new(service), done).await;
    let stats = consumer.stats();
    assert_eq!((stats.handler_errors, stats.received), (1, 2), "{stats:?}");
}

/// Ack modes apply to a service's outcome: with `AckMode::OnSuccess` its `Ok` acks what it
/// left, its error gets the retry policy (released at once here), and the retry acks.
#[tokio::test(start_paused = true)]
async fn ack_modes_and_the_retry_policy_apply_to_a_services_outcome() {
    let q = common::memory_queue(30);
    q.send("ok").unwrap();
    q.send("fail once").unwrap();
    let consumer = Consumer::in_memory(&q)
        .ack_mode(AckMode::OnSuccess)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let service = tower::service_fn(|d: Delivery| async move {
        if d.body() == "fail once" && d.receive_count() == 1 {
            return Err::<(), BoxError>("failed on purpose".into());
        }
        drop(d); // left unsettled: OnSuccess acks it
        Ok(())
    });
    let done = eventually("both acked", secs(60), || consumer.stats().acked == 2);
    run_while(&consumer, ServiceHandler::new(service), done).await;
    let stats = consumer.stats();
    assert_eq!(
        (stats.handler_errors, stats.released, stats.received),
        (1, 1, 3)
    );
    assert!(q.is_empty());
}

/// A service whose `poll_ready` fails: the error is the outcome of the delivery it was for
/// (counted, retry policy), and the consumer goes on.
#[tokio::test(start_paused = true)]
async fn a_poll_ready_error_is_the_deliverys_outcome() {
    #[derive(Clone)]
    struct Broken;
    impl Service<Delivery> for Broken {
        type Response = ();
        type Error = BoxError;
        type Future = std::future::Ready<Result<(), BoxError>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Err("the service is broken".into()))
        }
        fn call(&mut self, _: Delivery) -> Self::Future {
            std::future::ready(Ok(()))
        }
    }
    let q = common::memory_queue(30);
    q.send("refused").unwrap();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let done = eventually("failed once", secs(60), || {
        consumer.stats().handler_errors >= 1
    });
    run_while(&consumer, ServiceHandler::new(Broken), done).await;
    assert_eq!(consumer.stats().acked, 0);
    assert_eq!(q.len(), 1, "the message stays for the retry policy");
}

/// A batch service behind a `timeout` layer gets each receive's batch and acks it.
#[tokio::test(start_paused = true)]
async fn a_batch_service_gets_each_receives_batch() {
    let q = common::memory_queue(30);
    for i in 0..25 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let sizes: Arc<Mutex<Vec<usize>>> = Arc::default();
    let seen = sizes.clone();
    let service = ServiceBuilder::new()
        .timeout(secs(10))
        .service_fn(move |batch: Batch| {
            seen.lock().unwrap().push(batch.len());
            async move { batch.ack_all().await }
        });
    let done = eventually("all acked", secs(60), || consumer.stats().acked == 25);
    tokio::select! {
        result = consumer.run_batch(ServiceBatchHandler::new(service)) => panic!("ended: {result:?}"),
        () = done => {}
    }
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(sizes.iter().sum::<usize>(), 25);
    assert!(sizes.iter().all(|&n| (1..=10).contains(&n)), "{sizes:?}");
}
