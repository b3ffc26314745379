//! Flow control, each scenario on `MemoryQueue` (paused clock) and on the test server (real
//! time): a receive rate (one consumer's own, and one budget shared by two). Figures are
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
