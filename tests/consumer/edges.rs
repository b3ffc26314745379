//! The handler model at its edges, each scenario on `MemoryQueue` (paused clock) and on the
//! test server (real time): a stop or a pause while a long poll waits abandons nothing; a
//! delivery dropped in its handler is kept until the outcome decides, and an ack is never
//! counted for a lost one; `Delivery::fail` in a batch; a queue whose own visibility timeout
//! is 0; a clone of the consumer that pauses or stops it. Figures are printed
//! (`cargo test --test consumer edges:: -- --nocapture`).

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::faults::{FaultProxy, Faults};
use common::{capture_logs, eventually, secs, Kind, TestQueue};
use futures::StreamExt;
use sqs_consumer::memory::Action;
use sqs_consumer::{AckMode, Batch, Consumer, Delivery, Error, MemoryQueue, RetryPolicy};
use tokio::time::{sleep, Instant};

/// The long polls' wait: short, so the server runs the scenarios quickly. The promise is the
/// same at 20 s.
const WAIT: Duration = Duration::from_secs(2);

/// How long a scenario may wait for what it expects.
const LIMIT: Duration = Duration::from_secs(60);

on_both!(
    a_stop_while_a_poll_waits_hands_out_what_it_brings_and_leaves_nothing_hidden,
    a_pause_while_a_poll_waits_handles_what_it_brings_and_leaves_nothing_hidden,
    a_delivery_dropped_in_its_handler_is_kept_until_on_success_acks_it_once,
    a_batch_with_one_failed_delivery_acks_the_others_and_retries_that_one,
    a_queue_whose_own_visibility_timeout_is_zero_fails_at_start,
    a_handle_stops_a_run_a_stream_and_any_started_later,
    a_stream_dropped_while_its_poll_waits_releases_what_the_poll_brings,
    a_run_dropped_while_its_poll_waits_releases_what_the_poll_brings,
    an_ack_through_an_outage_longer_than_the_timeout_is_lost_not_ok,
    a_batch_ack_through_an_outage_longer_than_the_timeout_is_lost_not_ok,
    an_on_success_ack_through_an_outage_longer_than_the_timeout_is_lost_not_ok,
);

/// A handler that counts its calls and acks.
fn acking(
    calls: &Arc<AtomicUsize>,
) -> impl Fn(Delivery) -> futures::future::BoxFuture<'static, Result<(), Error>> + Send + Sync + 'static
{
    let calls = calls.clone();
    move |d: Delivery| {
        calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(d.ack())
    }
}

/// Until a receive is under way (a slot reserved for what it brings).
async fn until_polling(consumer: &Consumer) {
    eventually("a receive under way", LIMIT, || {
        consumer.stats().reserved > 0
    })
    .await;
    // Long enough for the request to reach the server.
    sleep(Duration::from_millis(300)).await;
}

async fn a_stop_while_a_poll_waits_hands_out_what_it_brings_and_leaves_nothing_hidden(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    let consumer = q.consumer().wait_time(WAIT).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let signalled = Mutex::new(None::<Instant>);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let signal = async {
        until_polling(&consumer).await;
        *signalled.lock().unwrap() = Some(Instant::now());
        let _ = tx.send(());
    };
    // Sent right after the signal, while the poll still waits on the server.
    let send = async {
        let _ = rx.await;
        for i in 0..3 {
            q.send(&format!("after the stop {i}")).await;
        }
    };
    let (result, ()) = tokio::join!(consumer.run_until(acking(&calls), signal), send);
    result.unwrap();
    let signalled = signalled.lock().unwrap().expect("signalled");
    let stop_took = signalled.elapsed();
    assert!(
        stop_took <= WAIT + secs(10),
        "the stop ends with the poll under way, within its wait (+ the request timeout): \
         {stop_took:?}"
    );
    let handled = calls.load(Ordering::SeqCst) as u64;
    assert_eq!(consumer.stats().acked, handled);
    // Nothing the stopped consumer's poll took is left hidden: what it brought was handled,
    // the rest is visible. Counted once the poll's wait is over: a poll the consumer
    // abandoned would be served until then, and what it took hidden.
    tokio::time::sleep_until(signalled + WAIT + WAIT / 2).await;
    let (visible, hidden) = q.counts().await;
    assert_eq!((visible + handled, hidden), (3, 0), "handled {handled}");
    let next: Vec<u32> = q
        .receive_raw(Duration::ZERO)
        .await
        .iter()
        .map(common::receive_count)
        .collect();
    assert!(next.iter().all(|&count| count == 1), "{next:?}");
    common::report(&format!(
        "stop ({kind:?}): {stop_took:.2?} from the signal; handled {handled} of the 3 sent \
         after it, hidden 0, visible {visible}"
    ));
}

async fn a_pause_while_a_poll_waits_handles_what_it_brings_and_leaves_nothing_hidden(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    let consumer = Arc::new(q.consumer().wait_time(WAIT).build().unwrap());
    let handle = consumer.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let running = {
        let (consumer, handler) = (consumer.clone(), acking(&calls));
        tokio::spawn(async move { consumer.run(handler).await })
    };
    until_polling(&consumer).await;
    handle.pause();
    assert!(handle.is_paused() && consumer.is_paused());
    for i in 0..3 {
        q.send(&format!("while paused {i}")).await;
    }
    let paused_at = Instant::now();
    eventually("the poll under way is in", WAIT + secs(10), || {
        handle.stats().reserved == 0
    })
    .await;
    sleep(secs(1)).await;
    let handled = calls.load(Ordering::SeqCst) as u64;
    let (visible, hidden) = q.counts().await;
    assert_eq!((visible + handled, hidden), (3, 0), "handled {handled}");
    assert_eq!(handle.stats().acked, handled);
    // No receive while paused: the visible ones stay.
    sleep(WAIT).await;
    assert_eq!(q.counts().await, (visible, 0));
    handle.resume();
    assert!(!handle.is_paused() && !consumer.is_paused(), "resumed");
    eventually("all handled after resume", LIMIT, || {
        calls.load(Ordering::SeqCst) == 3
    })
    .await;
    handle.shutdown();
    running.await.unwrap().unwrap();
    assert_eq!(q.counts().await, (0, 0));
    common::report(&format!(
        "pause ({kind:?}): the poll under way in {:.2?} after the pause, with {handled} of 3; \
         hidden 0",
        paused_at.elapsed()
    ));
}

async fn a_delivery_dropped_in_its_handler_is_kept_until_on_success_acks_it_once(kind: Kind) {
    // Visibility 2 s; the handler drops its delivery at once and returns `Ok` after three
    // timeouts.
    let q = TestQueue::new(kind, 2).await;
    q.send("slow").await;
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .ack_mode(AckMode::OnSuccess)
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = calls.clone();
        move |d: Delivery| {
            calls.fetch_add(1, Ordering::SeqCst);
            drop(d);
            async {
                sleep(secs(6)).await;
                Ok::<(), Error>(())
            }
        }
    };
    let done = async {
        eventually("acked", LIMIT, || consumer.stats().acked > 0).await;
        // Time for a second delivery, if the message had come back.
        sleep(secs(3)).await;
    };
    consumer.run_until(handler, done).await.unwrap();
    let stats = consumer.stats();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "handed out once");
    assert_eq!((stats.acked, stats.lost, stats.lost_acks), (1, 0, 0));
    assert!(stats.extended >= 2, "kept hidden meanwhile: {stats:?}");
    assert_eq!(q.counts().await, (0, 0));
}

async fn a_batch_with_one_failed_delivery_acks_the_others_and_retries_that_one(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    q.send_many("m", 10).await;
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .ack_mode(AckMode::OnSuccess)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::<(String, u32)>::new()));
    let handler = {
        let seen = seen.clone();
        move |batch: Batch| {
            let seen = seen.clone();
            async move {
                for d in batch {
                    seen.lock()
                        .unwrap()
                        .push((d.body().to_owned(), d.receive_count()));
                    if d.body() == "m3" && d.receive_count() == 1 {
                        d.fail("m3 failed").await?;
                    }
                    // The others are dropped here: acked when the handler returns Ok.
                }
                Ok::<(), Error>(())
            }
        }
    };
    let handle = consumer.clone();
    let done = async move {
        eventually("all acked", LIMIT, || handle.stats().acked == 10).await;
    };
    consumer.run_batch_until(handler, done).await.unwrap();
    let stats = consumer.stats();
    assert_eq!(
        (stats.acked, stats.released, stats.handler_errors),
        (10, 1, 1),
        "{stats:?}"
    );
    let seen = seen.lock().unwrap().clone();
    let m3: Vec<u32> = seen
        .iter()
        .filter(|(body, _)| body == "m3")
        .map(|(_, count)| *count)
        .collect();
    assert_eq!(m3, [1, 2], "failed once, then handled again");
    assert_eq!(seen.len(), 11, "{seen:?}");
    assert_eq!(q.counts().await, (0, 0));
}

async fn a_queue_whose_own_visibility_timeout_is_zero_fails_at_start(kind: Kind) {
    let q = match kind {
        // With a network's latency: a consumer that wrongly ran on this queue would receive
        // the same message again and again, and without latency the paused clock would never
        // move, so the bound on `run` below would never fire.
        Kind::Memory => TestQueue::Memory(
            MemoryQueue::builder()
                .visibility_timeout(Duration::ZERO)
                .latency(Duration::from_millis(2))
                .build()
                .unwrap(),
        ),
        Kind::Server => TestQueue::new(kind, 0).await,
    };
    q.send("m").await;
    let consumer = q.consumer().build().unwrap();
    let (logs, _guard) = capture_logs();
    let run = tokio::time::timeout(LIMIT, consumer.run(|d: Delivery| d.ack()));
    let err = run.await.expect("run ends at its start").unwrap_err();
    match &err {
        Error::InvalidConfig { field, allowed, .. } => {
            assert_eq!(*field, "visibility_timeout");
            assert!(allowed.contains("1..=43200"), "{allowed}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(err.is_fatal());
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        logs.lines()
            .any(|l| l.contains("ERROR") && l.contains("visibility_timeout")),
        "{logs}"
    );
    assert_eq!(q.counts().await, (1, 0), "nothing received");
    // With the consumer's own timeout it runs.
    let consumer = q.consumer().visibility_timeout(secs(30)).build().unwrap();
    let done = async {
        eventually("acked", LIMIT, || consumer.stats().acked == 1).await;
    };
    consumer
        .run_until(|d: Delivery| d.ack(), done)
        .await
        .unwrap();
}

async fn a_handle_stops_a_run_a_stream_and_any_started_later(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    q.send("m").await;
    let consumer = Arc::new(q.consumer().wait_time(WAIT).build().unwrap());
    let handle = consumer.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let run = {
        let (consumer, handler) = (consumer.clone(), acking(&calls));
        tokio::spawn(async move { consumer.run(handler).await })
    };
    let stream = {
        let consumer = consumer.clone();
        tokio::spawn(async move {
            let mut stream = consumer.stream();
            let mut yielded = 0;
            while let Some(d) = stream.next().await {
                d.unwrap().ack().await.unwrap();
                yielded += 1;
            }
            yielded
        })
    };
    eventually("handled", LIMIT, || consumer.stats().acked == 1).await;
    let at = Instant::now();
    handle.shutdown();
    run.await.unwrap().unwrap();
    let yielded = stream.await.unwrap();
    assert!(at.elapsed() <= WAIT + secs(10), "{:?}", at.elapsed());
    assert_eq!(calls.load(Ordering::SeqCst) + yielded, 1);
    let later = Instant::now();
    consumer.run(|d: Delivery| d.ack()).await.unwrap();
    assert_eq!(consumer.stream().count().await, 0);
    assert!(later.elapsed() <= WAIT + secs(10), "{:?}", later.elapsed());
}

/// A stream dropped while its poll waits: the poll is finished in the background, and what
/// it brings is released at once, not left hidden.
async fn a_stream_dropped_while_its_poll_waits_releases_what_the_poll_brings(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    // A long wait: the message must reach the poll under way, not the next one.
    let consumer = q.consumer().wait_time(secs(10)).build().unwrap();
    let stream = consumer.stream();
    until_polling(&consumer).await;
    drop(stream);
    q.send("after the drop").await;
    eventually("released", LIMIT, || consumer.stats().released == 1).await;
    let stats = consumer.stats();
    assert_eq!((stats.received, stats.released), (1, 1), "{stats:?}");
    let (visible, hidden) = q.counts().await;
    assert_eq!(visible + hidden, 1);
    // Visible again at once (within the servers' second of timer granularity), not after
    // the 30 s timeout; taken once by the dropped stream's poll.
    let (message, after) = q
        .wait_for_message(secs(3))
        .await
        .expect("visible again at once");
    assert_eq!(common::receive_count(&message), 2, "after {after:?}");
}

async fn a_run_dropped_while_its_poll_waits_releases_what_the_poll_brings(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    // A long wait: the messages must reach the poll under way, not a later one.
    let consumer = q.consumer().wait_time(secs(10)).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    // Dropped once its poll is under way, as an aborted task, a `select!` or a timeout
    // around it drops it.
    tokio::select! {
        ended = consumer.run(acking(&calls)) => panic!("the run ended: {ended:?}"),
        () = until_polling(&consumer) => {}
    }
    let dropped = Instant::now();
    for i in 0..5 {
        q.send(&format!("after the drop {i}")).await;
    }
    // All five reach the next consumer at once, not after the 30 s visibility timeout: the
    // dropped run's poll took some of them, and released them.
    let mut taken = Vec::new();
    while taken.len() < 5 && dropped.elapsed() < secs(10) {
        taken.extend(q.receive_up_to(10, secs(1)).await);
    }
    let counts: Vec<u32> = taken.iter().map(common::receive_count).collect();
    assert_eq!(
        taken.len(),
        5,
        "visible again within 10 s of the drop (receive counts {counts:?})"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "no handler ran after the drop"
    );
    assert!(
        counts.contains(&2),
        "the dropped run's poll took at least one: {counts:?}"
    );
    common::report(&format!(
        "run dropped during a poll ({kind:?}): all 5 visible again {:.2?} after the drop; \
         receive counts {counts:?}",
        dropped.elapsed()
    ));
}

/// The model the scenarios above rely on: a receive whose caller went away is still served,
/// as on AWS, and takes the next message for a whole visibility timeout.
#[tokio::test(start_paused = true)]
async fn memory_queue_serves_a_receive_whose_caller_went_away() {
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(30))
        .build()
        .unwrap();
    let abandoned = tokio::time::timeout(secs(1), q.receive(10, secs(20))).await;
    assert!(abandoned.is_err(), "the caller gave up");
    q.send("taken by the abandoned poll").unwrap();
    sleep(Duration::from_millis(10)).await;
    assert_eq!((q.visible_len(), q.in_flight_len()), (0, 1));
    assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
    sleep(secs(30)).await;
    let back = q.receive(10, Duration::ZERO).await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(
        common::receive_count(&back[0]),
        2,
        "the lost attempt counts"
    );
}

/// An ack after the delivery was lost is never counted as acked: it is reported (counted in
/// `lost_acks`, logged with the message id).
#[tokio::test(start_paused = true)]
async fn an_ack_of_a_lost_delivery_is_counted_and_logged_not_acked() {
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(4))
        .build()
        .unwrap();
    let id = q.send("m").unwrap();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let d = common::take_one(&consumer).await;
    // SQS refuses the extension: the delivery is lost at its deadline.
    q.fail_next(Action::ChangeMessageVisibility, "MessageNotInflight", 1);
    let reason = tokio::time::timeout(secs(10), d.lost())
        .await
        .expect("lost");
    assert!(d.is_lost(), "{reason}");
    let (logs, _guard) = capture_logs();
    let err = d.ack().await.expect_err("an ack of a lost delivery");
    assert!(err.is_lost(), "{err}");
    let stats = consumer.stats();
    assert_eq!((stats.acked, stats.lost_acks), (0, 1), "{stats:?}");
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        logs.lines()
            .any(|l| l.contains("WARN") && l.contains("lost delivery") && l.contains(&id)),
        "{logs}"
    );
}

/// The visibility timeout of the outage scenarios, seconds: short, so that an outage longer
/// than it stays inside the ack's 20 s retry window (a longer one fails the ack either way).
const OUTAGE_T: u64 = 3;

/// The outage: three timeouts, so the ack's retries outlast the deadline and would go
/// through after it.
const OUTAGE: Duration = Duration::from_secs(3 * OUTAGE_T);

/// Every call that could settle or extend a delivery, as the proxy names them.
const SETTLE_ACTIONS: &[&str] = &[
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
];

/// A consumer of `q` whose deletes and visibility changes an outage can stop: through a
/// proxy on a server, with injected failures on `MemoryQueue`.
struct OutageQueue {
    q: TestQueue,
    proxy: Option<FaultProxy>,
}

impl OutageQueue {
    async fn new(kind: Kind) -> Self {
        let q = TestQueue::new(kind, OUTAGE_T).await;
        let proxy = match kind {
            Kind::Memory => None,
            Kind::Server => {
                Some(FaultProxy::start(&common::server_endpoint(), Faults::none(), 1).await)
            }
        };
        Self { q, proxy }
    }

    fn consumer(&self) -> sqs_consumer::ConsumerBuilder {
        let builder = match (&self.q, &self.proxy) {
            (TestQueue::Server { url, .. }, Some(proxy)) => {
                Consumer::builder(common::client_for(&proxy.endpoint), url.clone())
            }
            _ => self.q.consumer(),
        };
        builder.wait_time(secs(1))
    }

    /// From now on, for [`OUTAGE`], every delete and visibility change fails with a 500.
    fn start_outage(&self) {
        match (&self.q, &self.proxy) {
            (TestQueue::Memory(memory), _) => {
                for action in [
                    Action::DeleteMessage,
                    Action::DeleteMessageBatch,
                    Action::ChangeMessageVisibility,
                    Action::ChangeMessageVisibilityBatch,
                ] {
                    memory.fail_for(action, "InternalError", OUTAGE);
                }
            }
            (_, Some(proxy)) => proxy.outage(SETTLE_ACTIONS, OUTAGE),
            _ => unreachable!("a server queue has its proxy"),
        }
    }
}

/// What an ack that outlasted its deadline must report: lost, counted in `lost_acks`, never
/// in `acked`.
fn assert_lost_not_acked(result: &Result<(), Error>, consumer: &Consumer, took: Duration) {
    let stats = consumer.stats();
    assert!(
        matches!(result, Err(err) if err.is_lost()),
        "an ack whose lease lapsed during an outage reported {result:?} after {took:?}"
    );
    assert_eq!((stats.acked, stats.lost_acks), (0, 1), "{stats:?}");
    assert!(
        took >= secs(OUTAGE_T) - secs(1),
        "reported after the deadline, not before: {took:?}"
    );
    assert!(
        took < OUTAGE,
        "reported at the deadline, not after the outage: {took:?}"
    );
}

async fn an_ack_through_an_outage_longer_than_the_timeout_is_lost_not_ok(kind: Kind) {
    let oq = OutageQueue::new(kind).await;
    oq.q.send("acked through an outage").await;
    let consumer = oq.consumer().build().unwrap();
    let d = common::take_one(&consumer).await;
    let start = Instant::now();
    oq.start_outage();
    let result = d.ack().await;
    let took = start.elapsed();
    assert_lost_not_acked(&result, &consumer, took);
    // And it was lost indeed: the message is handed out again.
    let (message, after) =
        oq.q.wait_for_message(OUTAGE + secs(5))
            .await
            .expect("the message is visible to others again");
    assert!(common::receive_count(&message) >= 2, "after {after:?}");
    common::report(&format!(
        "ack through an outage ({kind:?}): {result:?} after {took:.2?}; received again after \
         {after:.2?}"
    ));
}

async fn a_batch_ack_through_an_outage_longer_than_the_timeout_is_lost_not_ok(kind: Kind) {
    let oq = Arc::new(OutageQueue::new(kind).await);
    oq.q.send("batch-acked through an outage").await;
    let consumer = oq.consumer().build().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let outage = oq.clone();
    let handler = move |batch: Batch| {
        let (tx, oq) = (tx.clone(), outage.clone());
        async move {
            let start = Instant::now();
            oq.start_outage();
            let result = batch.ack_all().await;
            let _ = tx.send((result, start.elapsed()));
            Ok::<(), Error>(())
        }
    };
    let (result, took) = tokio::select! {
        ended = consumer.run_batch(handler) => panic!("run ended early: {ended:?}"),
        answer = rx.recv() => answer.expect("an answer"),
    };
    assert_lost_not_acked(&result, &consumer, took);
}

async fn an_on_success_ack_through_an_outage_longer_than_the_timeout_is_lost_not_ok(kind: Kind) {
    let oq = Arc::new(OutageQueue::new(kind).await);
    oq.q.send("acked on success through an outage").await;
    let consumer = oq.consumer().ack_mode(AckMode::OnSuccess).build().unwrap();
    let started = Arc::new(Mutex::new(None::<Instant>));
    let (outage, handled) = (oq.clone(), started.clone());
    let handler = move |_d: Delivery| {
        *handled.lock().unwrap() = Some(Instant::now());
        outage.start_outage();
        async { Ok::<(), Error>(()) }
    };
    common::run_while(&consumer, handler, async {
        eventually("the ack's end", LIMIT, || {
            let stats = consumer.stats();
            stats.acked + stats.lost_acks > 0
        })
        .await;
    })
    .await;
    let took = started.lock().unwrap().expect("handled").elapsed();
    let stats = consumer.stats();
    assert_eq!(
        (stats.acked, stats.lost_acks),
        (0, 1),
        "{stats:?} after {took:?}"
    );
}
