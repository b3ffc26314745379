//! Flow control, each scenario on `MemoryQueue` (paused clock) and on the test server (real
//! time): a receive rate (one consumer's own, and one budget shared by two), cancellation of
//! a handler whose delivery is lost, batch windows. Figures are
//! printed (`cargo test --test consumer flow:: -- --nocapture`).

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::faults::{FaultProxy, Faults};
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
    a_batch_fills_across_receives_and_keeps_every_lease_while_it_fills,
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
    let build = |q: &TestQueue| {
        q.consumer()
            .wait_time(secs(1))
            .shared_rate_limit(&limit)
            .build()
    };
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

/// A `MemoryQueue` with a visibility timeout of `visibility` s and `n` messages in it.
fn queued(visibility: u64, n: usize) -> sqs_consumer::MemoryQueue {
    let q = common::memory_queue(visibility);
    for i in 0..n {
        q.send(format!("m{i}")).unwrap();
    }
    q
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
    let q = queued(T, 3);
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
    let q = queued(T, 3);
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

/// Under `AckMode::Always` too, a handler dropped because its deliveries were lost acks
/// nothing, not even a delivery it had dropped before: its work was cut short, and the
/// message may be with another consumer.
#[tokio::test(start_paused = true)]
async fn a_batch_handler_cancelled_on_lost_acks_nothing_even_under_ack_mode_always() {
    let q = sqs_consumer::MemoryQueue::builder()
        .visibility_timeout(secs(T))
        .build()
        .unwrap();
    q.send("dropped, then lost").unwrap();
    q.send("held, then lost").unwrap();
    // Every extension fails: both deliveries are lost at their first deadline.
    q.fail_next(
        sqs_consumer::memory::Action::ChangeMessageVisibility,
        "InternalError",
        1_000,
    );
    let consumer = Consumer::in_memory(&q)
        .cancel_on_lost(true)
        .ack_mode(sqs_consumer::AckMode::Always)
        .build()
        .unwrap();
    let handler = |batch: sqs_consumer::Batch| async move {
        let mut deliveries = batch.into_iter();
        drop(deliveries.next()); // left to the outcome
        sleep(secs(3600)).await;
        drop(deliveries);
        Ok::<(), sqs_consumer::BoxError>(())
    };
    let cancelled = async {
        let start = Instant::now();
        while consumer.stats().cancelled_on_lost == 0 {
            assert!(start.elapsed() < LIMIT, "never cancelled");
            sleep(Duration::from_millis(100)).await;
        }
        sleep(secs(1)).await; // for a delete the outcome might still send
    };
    tokio::select! {
        result = consumer.run_batch(handler) => panic!("ended: {result:?}"),
        () = cancelled => {}
    }
    assert_eq!(q.requests().deletes(), 0, "no delete for a lost delivery");
    let stats = consumer.stats();
    assert_eq!((stats.lost, stats.acked), (2, 0), "{stats:?}");
}

/// The sizes of the batches a batch handler got, and when each came.
#[derive(Debug, Default, Clone)]
struct Batches(Arc<Mutex<Vec<(usize, Instant)>>>);

impl Batches {
    /// A batch handler that records each batch and acks it whole.
    fn acking(&self) -> impl sqs_consumer::BatchHandler {
        let batches = self.clone();
        move |batch: sqs_consumer::Batch| {
            let batches = batches.clone();
            async move {
                batches
                    .0
                    .lock()
                    .unwrap()
                    .push((batch.len(), Instant::now()));
                batch.ack_all().await
            }
        }
    }

    /// A batch handler that records each batch, pauses receiving and waits for the receives
    /// under way to be in, then acks it whole: moto's receives and deletes race (each
    /// rebuilds its list of messages without a lock), and with 1,000 messages held the race
    /// brings back messages it had deleted.
    fn acking_alone(&self, consumer: sqs_consumer::Consumer) -> impl sqs_consumer::BatchHandler {
        let batches = self.clone();
        move |batch: sqs_consumer::Batch| {
            let (batches, consumer) = (batches.clone(), consumer.clone());
            async move {
                batches
                    .0
                    .lock()
                    .unwrap()
                    .push((batch.len(), Instant::now()));
                consumer.pause();
                while consumer.stats().reserved > 0 {
                    sleep(Duration::from_millis(20)).await;
                }
                let acked = batch.ack_all().await;
                consumer.resume();
                acked
            }
        }
    }

    fn sizes(&self) -> Vec<usize> {
        self.0.lock().unwrap().iter().map(|b| b.0).collect()
    }

    fn times(&self) -> Vec<Instant> {
        self.0.lock().unwrap().iter().map(|b| b.1).collect()
    }

    async fn until(&self, n: usize) {
        let start = Instant::now();
        while self.sizes().iter().sum::<usize>() < n {
            assert!(start.elapsed() < LIMIT * 3, "{:?}", self.sizes());
            sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Runs `consumer` with `handler` until `until` completes.
async fn run_batches_while<F: std::future::Future>(
    consumer: &Consumer,
    handler: impl sqs_consumer::BatchHandler,
    until: F,
) -> F::Output {
    let run = consumer.run_batch_until(handler, std::future::pending());
    tokio::select! {
        result = run => panic!("the consumer stopped: {result:?}"),
        out = until => out,
    }
}

/// A batch of 1,000 fills across receives at a visibility timeout shorter than its window:
/// its first 500 deliveries are held for two visibility timeouts with none of them visible to
/// a spy, then the next 500 fill it and it is handed out whole at once; acked in requests
/// of 10. (200 on moto: see below.)
async fn a_batch_fills_across_receives_and_keeps_every_lease_while_it_fills(kind: Kind) {
    // Shorter than the window, long enough for a server's extension rounds of 100 requests.
    const T: u64 = 12;
    // 1,000 in all; 200 on moto, whose every extension scans all the messages it holds: with
    // 1,000 held, each round of 100 extension requests outlasts half a timeout.
    let half: usize = match common::implementation(kind) {
        common::Implementation::Moto => 100,
        _ => 500,
    };
    const WINDOW: Duration = Duration::from_secs(300); // never reached: the batch fills first
    let q = TestQueue::new(kind, T).await;
    q.send_many("a", half).await;
    // On a server, through a proxy that sends deletes one at a time: moto rebuilds its list
    // of messages on each delete without a lock, and the batch's 100 delete requests (4 at a
    // time) would otherwise bring back messages it had deleted (see the guide's testing page);
    // the handler also pauses receiving while it acks, as moto's receives race its deletes.
    let proxy;
    let builder = match &q {
        TestQueue::Memory(_) => q.consumer(),
        TestQueue::Server { url, .. } => {
            proxy = FaultProxy::start(&common::server_endpoint(), Faults::none(), 1).await;
            Consumer::builder(common::client_for(&proxy.endpoint), url.clone())
        }
    };
    let consumer = builder
        .wait_time(secs(1))
        .max_in_flight(2 * half)
        // One receive at a time: moto hands one message to two receives under way at once
        // (its receive is not atomic), more often the more messages it holds.
        .max_concurrent_receives(1)
        .max_batch(2 * half)
        .batch_window(WINDOW)
        .build()
        .unwrap();
    let batches = Batches::default();
    let start = Instant::now();
    let handler = batches.acking_alone(consumer.clone());
    let spied = run_batches_while(&consumer, handler, async {
        while consumer.stats().received < half as u64 {
            assert!(start.elapsed() < LIMIT * 3, "{:?}", consumer.stats());
            sleep(Duration::from_millis(50)).await;
        }
        // Held past two visibility timeouts while the batch fills: a spy finds none.
        let filling = Instant::now();
        let mut spied = 0;
        while filling.elapsed() < secs(2 * T + 1) {
            spied += q.receive_up_to(10, Duration::ZERO).await.len();
            assert!(batches.sizes().is_empty(), "handed out before it was full");
            sleep(Duration::from_millis(500)).await;
        }
        q.send_many("b", half).await;
        batches.until(2 * half).await;
        while consumer.stats().acked < 2 * half as u64 {
            assert!(start.elapsed() < LIMIT * 5, "{:?}", consumer.stats());
            sleep(Duration::from_millis(50)).await;
        }
        spied
    })
    .await;
    assert_eq!(
        spied,
        0,
        "a delivery of the filling batch was visible: {:?}",
        consumer.stats()
    );
    assert_eq!(
        batches.sizes(),
        [2 * half],
        "one batch, handed out when full"
    );
    let stats = consumer.stats();
    assert_eq!((stats.acked, stats.lost), (2 * half as u64, 0), "{stats:?}");
    // Each of the first 500 extended at least once per half timeout it was held.
    assert!(stats.extended >= 4 * half as u64, "{stats:?}");
    let extended = stats.extended as f64 / (2 * half) as f64;
    let mut figures = format!("{extended:.2} extensions per message while filling");
    if let TestQueue::Memory(m) = &q {
        use sqs_consumer::memory::Action;
        let r = m.requests();
        assert_eq!(
            r.requests(Action::DeleteMessageBatch),
            100,
            "acks in requests of 10"
        );
        let requests = r.requests(Action::ReceiveMessage)
            + r.requests(Action::DeleteMessageBatch)
            + r.requests(Action::ChangeMessageVisibilityBatch);
        figures += &format!(
            "; {:.3} requests per message (receive {}, delete {}, extension {})",
            requests as f64 / (2 * half) as f64,
            r.requests(Action::ReceiveMessage),
            r.requests(Action::DeleteMessageBatch),
            r.requests(Action::ChangeMessageVisibilityBatch),
        );
    }
    assert_eq!(q.counts().await, (0, 0));
    common::report(&format!(
        "batch window ({kind:?}): {} in one batch, the first {half} held {:?} at T = {T} s, \
         none visible; {figures}",
        2 * half,
        secs(2 * T + 1)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_batch_is_handed_out_when_full_or_when_its_window_has_passed() {
    let q = queued(2, 20);
    let consumer = Consumer::in_memory(&q)
        .wait_time(secs(1))
        .max_in_flight(100)
        .max_batch(20)
        .batch_window(secs(5))
        .build()
        .unwrap();
    let batches = Batches::default();
    let start = Instant::now();
    let sent = run_batches_while(&consumer, batches.acking(), async {
        batches.until(20).await;
        sleep(secs(1)).await;
        for i in 0..6 {
            q.send(format!("late {i}")).unwrap();
        }
        let sent = Instant::now();
        batches.until(26).await;
        sent
    })
    .await;
    // Two receives of 10 fill the first batch: handed out at once. The 6 sent 1 s later go
    // after their window, 5 s from their arrival.
    assert_eq!(batches.sizes(), [20, 6]);
    let times = batches.times();
    assert_eq!(times[0] - start, Duration::ZERO);
    assert_eq!(times[1] - sent, secs(5));
    let r = q.requests();
    assert_eq!(
        r.requests(sqs_consumer::memory::Action::DeleteMessageBatch),
        2 + 1,
        "20 acked in two requests, 6 in one"
    );
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_hands_a_filling_batch_out_at_once() {
    let q = queued(2, 3);
    let consumer = Consumer::in_memory(&q)
        .wait_time(secs(1))
        .max_batch(10)
        .batch_window(secs(300))
        .build()
        .unwrap();
    let batches = Batches::default();
    let start = Instant::now();
    let handle = consumer.clone();
    let signal = async move {
        while handle.stats().received < 3 {
            sleep(Duration::from_millis(10)).await;
        }
        sleep(secs(10)).await;
    };
    consumer
        .run_batch_until(batches.acking(), signal)
        .await
        .unwrap();
    assert_eq!(batches.sizes(), [3]);
    // At the signal, once the long poll under way is in (its wait: 1 s), not at the window.
    let handed = batches.times()[0] - start;
    assert!(handed >= secs(10) && handed <= secs(11), "{handed:?}");
    assert!(q.is_empty(), "handled and acked within the shutdown");
}
