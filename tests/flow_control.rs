//! Flow control, each scenario on `MemoryQueue` (paused clock) and on the test server (real
//! time): a receive rate (one consumer's own, and one budget shared by two), cancellation of
//! a handler whose delivery is lost. Figures are
//! printed (`cargo test --test flow_control -- --nocapture`).

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{secs, Kind, ReceiveSizes, TestQueue};
use sqs_consumer::{Consumer, Delivery, RateLimit};
use tokio::time::{sleep, Instant};

/// The visibility timeout the scenarios use.
const T: u64 = 5;

/// How long a scenario may wait for what it expects.
const LIMIT: Duration = Duration::from_secs(60);

on_both!(
    max_receive_rate_holds_receives_to_the_rate_and_no_message_waits_for_a_token,
    a_shared_rate_limit_holds_two_consumers_to_one_rate,
    cancel_on_lost_drops_the_handler_when_its_delivery_is_lost,
);

/// When each message reached its handler, and how long after its receive's request.
#[derive(Debug, Default, Clone)]
struct Handled(Arc<Mutex<Vec<(Instant, Duration)>>>);

impl Handled {
    fn handler(&self) -> impl sqs_consumer::Handler {
        let handled = self.clone();
        move |d: Delivery| {
            let handled = handled.clone();
            async move {
                let now = Instant::now();
                handled.0.lock().unwrap().push((now, now - d.received_at()));
                d.ack().await
            }
        }
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// The handling instants in order.
    fn times(&self) -> Vec<Instant> {
        let mut times: Vec<Instant> = self.0.lock().unwrap().iter().map(|h| h.0).collect();
        times.sort();
        times
    }

    fn longest_wait(&self) -> Duration {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|h| h.1)
            .max()
            .unwrap_or_default()
    }

    async fn until(&self, n: usize, start: Instant) {
        while self.len() < n {
            assert!(start.elapsed() < LIMIT, "{} of {n} handled", self.len());
            sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The token bucket's promise, from the test's own start (before any receive): by the time
/// the k-th message (from 1) is handled, at least `(k - burst) / rate` seconds have passed.
fn assert_within_rate(times: &[Instant], start: Instant, rate: f64, burst: usize) {
    for (i, at) in times.iter().enumerate() {
        let earliest = Duration::from_secs_f64((i + 1).saturating_sub(burst) as f64 / rate);
        assert!(
            *at - start >= earliest,
            "message {} handled {:?} in, before {earliest:?}",
            i + 1,
            *at - start
        );
    }
}

async fn max_receive_rate_holds_receives_to_the_rate_and_no_message_waits_for_a_token(kind: Kind) {
    const N: usize = 50;
    const RATE: f64 = 20.0;
    let q = TestQueue::new(kind, T).await;
    q.send_many("m", N).await;
    let sizes = ReceiveSizes::default();
    let consumer = q
        .consumer_recording(&sizes)
        .wait_time(secs(1))
        .max_receive_rate(RATE)
        .build()
        .unwrap();
    let handled = Handled::default();
    let start = Instant::now();
    common::run_while(&consumer, handled.handler(), handled.until(N, start)).await;
    let times = handled.times();
    assert_within_rate(&times, start, RATE, 10);
    let took = times[N - 1] - start;
    let ideal = Duration::from_secs_f64((N - 10) as f64 / RATE); // a burst of 10, then the rate
    let receives = q.non_empty_receives(&sizes);
    if kind == Kind::Memory {
        // Receives of 10 (the burst) every half second: the floor, 0.1 per message.
        assert_eq!(took, ideal, "the rate is reached, not only kept under");
        assert_eq!(receives, N / 10);
        assert_eq!(
            handled.longest_wait(),
            Duration::ZERO,
            "a message waited for a token"
        );
    } else {
        assert!(took < ideal * 3, "{took:?} for {N} messages at {RATE}/s");
    }
    common::report(&format!(
        "max_receive_rate({RATE}) ({kind:?}): {N} messages in {took:.2?} (the rate's own: \
         {ideal:?}); {receives} non-empty receives; longest receive to handler {:.1?}",
        handled.longest_wait()
    ));
}

async fn a_shared_rate_limit_holds_two_consumers_to_one_rate(kind: Kind) {
    const N: usize = 30; // on each queue
    const RATE: f64 = 20.0;
    let limit = RateLimit::new(RATE);
    let (a, b) = (TestQueue::new(kind, T).await, TestQueue::new(kind, T).await);
    a.send_many("a", N).await;
    b.send_many("b", N).await;
    let build = |q: &TestQueue| q.consumer().wait_time(secs(1)).rate_limit(&limit).build();
    let (ca, cb): (Consumer, Consumer) = (build(&a).unwrap(), build(&b).unwrap());
    let handled = Handled::default();
    let start = Instant::now();
    let both = async {
        tokio::join!(
            common::run_while(&ca, handled.handler(), handled.until(2 * N, start)),
            common::run_while(&cb, handled.handler(), handled.until(2 * N, start)),
        )
    };
    both.await;
    let times = handled.times();
    assert_within_rate(&times, start, RATE, 10);
    let took = times[2 * N - 1] - start;
    let ideal = Duration::from_secs_f64((2 * N - 10) as f64 / RATE);
    if kind == Kind::Memory {
        // The rate is reached, less one token per consumer at most: a long poll on a queue
        // drained first holds one token of the shared budget, not a burst.
        let most = ideal + Duration::from_secs_f64(2.0 / RATE);
        assert!(
            took <= most,
            "the shared rate is reached: {took:?}, not {ideal:?}"
        );
        assert_eq!(handled.longest_wait(), Duration::ZERO);
    } else {
        assert!(
            took < ideal * 3,
            "{took:?} for {} messages at {RATE}/s",
            2 * N
        );
    }
    common::report(&format!(
        "rate_limit shared by two consumers ({kind:?}): {} messages in {took:.2?} (the \
         rate's own: {ideal:?})",
        2 * N
    ));
}

/// A rate of one message every 2 s (a burst of 1): the first message on the full bucket, then
/// a receive waiting for its token.
fn slow_consumer(q: &sqs_consumer::MemoryQueue) -> Consumer {
    Consumer::in_memory(q)
        .wait_time(secs(1))
        .max_receive_rate(0.5)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_pause_while_a_receive_waits_for_its_token_takes_nothing_and_keeps_the_token() {
    let q = common::memory_queue(T);
    for i in 0..3 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = slow_consumer(&q);
    let handled = Handled::default();
    let start = Instant::now();
    let resumed = async {
        handled.until(1, start).await;
        sleep(secs(1)).await; // the next receive waits for the token due at 2 s
        consumer.pause();
        sleep(secs(10)).await;
        assert_eq!(handled.len(), 1, "received while paused");
        assert_eq!(
            (q.visible_len(), q.in_flight_len()),
            (2, 0),
            "a message taken while paused"
        );
        consumer.resume();
        let resumed = Instant::now();
        handled.until(3, start).await;
        resumed
    };
    let resumed = common::run_while(&consumer, handled.handler(), resumed).await;
    let times = handled.times();
    // The token earned while paused (one: the burst) is there at the resume, and the next
    // one 2 s later: the pause cost no token, and saved up no more than the burst.
    assert_eq!(times[1], resumed);
    assert_eq!(times[2] - times[1], secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_stop_while_a_receive_waits_for_its_token_ends_at_once_and_takes_nothing() {
    let q = common::memory_queue(T);
    for i in 0..3 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = slow_consumer(&q);
    let handled = Handled::default();
    let start = Instant::now();
    let signal = {
        let handled = handled.clone();
        async move {
            handled.until(1, start).await;
            sleep(secs(1)).await; // the next receive waits for the token due at 2 s
        }
    };
    consumer.run_until(handled.handler(), signal).await.unwrap();
    assert!(
        start.elapsed() < secs(2),
        "the stop waited for a token: {:?}",
        start.elapsed()
    );
    assert_eq!(
        (handled.len(), q.visible_len(), q.in_flight_len()),
        (1, 2, 0)
    );
}

/// Whether a handler's future was dropped before it finished, and whether it finished.
#[derive(Debug, Default, Clone)]
struct Fate {
    dropped: Arc<std::sync::atomic::AtomicBool>,
    finished: Arc<std::sync::atomic::AtomicBool>,
}

struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A message deleted elsewhere while its handler works (3 visibility timeouts): the delivery
/// is lost at the keeper's next round. With `cancel_on_lost` the handler is dropped then;
/// without, it runs to its end and its ack reports the loss.
async fn lost_while_handled(kind: Kind, cancel: bool) -> (Fate, sqs_consumer::Stats, Duration) {
    let q = TestQueue::new(kind, T).await;
    q.send("deleted elsewhere").await;
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .cancel_on_lost(cancel)
        .build()
        .unwrap();
    let fate = Fate::default();
    let (handles, mut handle) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let handler = {
        let fate = fate.clone();
        move |d: Delivery| {
            let (fate, handles) = (fate.clone(), handles.clone());
            async move {
                let _flag = DropFlag(fate.dropped.clone());
                let receipt = d.message().receipt_handle().unwrap_or_default().to_owned();
                let _ = handles.send((receipt, d.deadline()));
                sleep(secs(3 * T)).await;
                fate.finished
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                let acked = d.ack().await;
                assert!(acked.unwrap_err().is_lost(), "the ack reports the loss");
                Ok::<(), sqs_consumer::BoxError>(())
            }
        }
    };
    let start = Instant::now();
    let ended = async {
        let (receipt, deadline) = handle.recv().await.unwrap();
        q.delete_raw(&receipt).await;
        // Lost at the next round (halfway through the timeout): before the first deadline.
        while !fate.dropped.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(start.elapsed() < LIMIT, "the handler never ended");
            sleep(Duration::from_millis(20)).await;
        }
        deadline
    };
    let deadline = common::run_while(&consumer, handler, ended).await;
    let ended_before_deadline = deadline.saturating_duration_since(Instant::now());
    (fate, consumer.stats(), ended_before_deadline)
}

async fn cancel_on_lost_drops_the_handler_when_its_delivery_is_lost(kind: Kind) {
    let (fate, stats, before_deadline) = lost_while_handled(kind, true).await;
    assert!(
        !fate.finished.load(std::sync::atomic::Ordering::SeqCst),
        "ran on"
    );
    assert!(
        before_deadline > Duration::ZERO,
        "dropped only after its deadline"
    );
    assert_eq!((stats.lost, stats.cancelled_on_lost), (1, 1), "{stats:?}");
    assert_eq!(
        (stats.handler_errors, stats.handler_panics, stats.acked),
        (0, 0, 0)
    );
    let (fate, stats, _) = lost_while_handled(kind, false).await;
    assert!(
        fate.finished.load(std::sync::atomic::Ordering::SeqCst),
        "dropped by default"
    );
    assert_eq!(
        (stats.lost, stats.cancelled_on_lost, stats.lost_acks),
        (1, 0, 1),
        "{stats:?}"
    );
    common::report(&format!(
        "cancel_on_lost ({kind:?}): the handler dropped {before_deadline:.2?} before the \
         visibility deadline it was received with (T = {T} s)"
    ));
}

/// A batch handler is dropped only once every delivery of its batch is lost: one lost of two
/// leaves it running.
#[tokio::test(start_paused = true)]
async fn cancel_on_lost_drops_a_batch_handler_once_its_whole_batch_is_lost() {
    let q = TestQueue::new(Kind::Memory, T).await;
    q.send("a").await;
    q.send("b").await;
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .cancel_on_lost(true)
        .build()
        .unwrap();
    let fate = Fate::default();
    let (handles, mut handle) = tokio::sync::mpsc::unbounded_channel::<Vec<String>>();
    let handler = {
        let fate = fate.clone();
        move |batch: sqs_consumer::Batch| {
            let (fate, handles) = (fate.clone(), handles.clone());
            async move {
                let _flag = DropFlag(fate.dropped.clone());
                let receipts = batch
                    .iter()
                    .map(|d| d.message().receipt_handle().unwrap_or_default().to_owned())
                    .collect();
                let _ = handles.send(receipts);
                sleep(secs(10 * T)).await;
                fate.finished
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<(), sqs_consumer::BoxError>(())
            }
        }
    };
    let test = async {
        let receipts = handle.recv().await.unwrap();
        assert_eq!(receipts.len(), 2, "one batch of both");
        q.delete_raw(&receipts[0]).await;
        sleep(secs(2 * T)).await; // two rounds: the first delivery is lost by now
        assert_eq!(consumer.stats().lost, 1);
        assert!(
            !fate.dropped.load(std::sync::atomic::Ordering::SeqCst),
            "one of two lost"
        );
        q.delete_raw(&receipts[1]).await;
        sleep(secs(T)).await;
        assert!(
            fate.dropped.load(std::sync::atomic::Ordering::SeqCst),
            "both lost"
        );
    };
    let run = consumer.run_batch_until(handler, std::future::pending());
    tokio::select! {
        result = run => panic!("ended: {result:?}"),
        () = test => {}
    }
    let stats = consumer.stats();
    assert_eq!((stats.lost, stats.cancelled_on_lost), (2, 1), "{stats:?}");
    assert!(!fate.finished.load(std::sync::atomic::Ordering::SeqCst));
}
