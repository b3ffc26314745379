//! The handler model, each scenario on `MemoryQueue` (paused clock) and on the test server
//! (real time): handler timeouts, ack modes, batch handlers, attribute selection, pause and
//! resume, and a stream's graceful end. Figures are printed
//! (`cargo test --test handler model:: -- --nocapture`).

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName as Attr;
use common::{secs, Kind, ReceiveSizes, Taker, TestQueue};
use futures::StreamExt;
use sqs_consumer::{AckMode, Batch, Delivery, RetryPolicy};
use tokio::time::{sleep, Instant};

/// The visibility timeout the scenarios use: short, so the server runs them quickly.
const T: u64 = 2;

/// How long a scenario may wait for what it expects.
const LIMIT: Duration = Duration::from_secs(30);

on_both!(
    a_handler_past_its_timeout_is_stopped_and_its_message_comes_back_after_its_timeout,
    a_handler_past_its_timeout_with_release_now_gives_its_message_back_at_once,
    on_success_acks_on_ok_and_redelivers_on_err_and_on_panic,
    always_acks_on_ok_err_panic_and_timeout_and_counts_each,
    manual_ok_without_settling_is_counted_once_per_delivery_and_redelivered,
    run_batch_hands_out_one_batch_per_receive,
    run_batch_on_fifo_never_holds_two_of_a_group_and_keeps_their_order,
    attribute_selection_returns_exactly_the_named_attributes,
    pause_stops_receiving_and_resume_starts_again_with_leases_untouched,
    stream_until_drains_like_run_until,
    stream_until_ends_at_the_shutdown_timeout_and_what_is_still_held_stays_yours,
);

/// Per message body, how many times the handler saw it.
type Calls = Arc<Mutex<HashMap<String, u32>>>;

fn count(calls: &Calls, body: &str) -> u32 {
    let mut calls = calls.lock().unwrap();
    let n = calls.entry(body.to_owned()).or_default();
    *n += 1;
    *n
}

fn seen(calls: &Calls, body: &str) -> u32 {
    calls.lock().unwrap().get(body).copied().unwrap_or(0)
}

/// Runs `consumer` with a handler that hangs on its first delivery of "hangs" (the timeout
/// stops it) and acks the next one; returns when each came.
async fn hung_once_then_acked(consumer: &sqs_consumer::Consumer) -> Vec<Instant> {
    let calls: Calls = Arc::default();
    let times = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let (calls, times) = (calls.clone(), times.clone());
        move |d: Delivery| {
            let (calls, times) = (calls.clone(), times.clone());
            async move {
                times.lock().unwrap().push(Instant::now());
                if count(&calls, d.body()) == 1 {
                    sleep(secs(3600)).await; // hung: the timeout stops it
                }
                d.ack().await
            }
        }
    };
    let start = Instant::now();
    let done = async {
        while seen(&calls, "hangs") < 2 {
            assert!(start.elapsed() < LIMIT, "not received again");
            sleep(Duration::from_millis(50)).await;
        }
    };
    common::run_while(consumer, handler, done).await;
    let times = times.lock().unwrap().clone();
    times
}

async fn a_handler_past_its_timeout_is_stopped_and_its_message_comes_back_after_its_timeout(
    kind: Kind,
) {
    let q = TestQueue::new(kind, T).await;
    q.send("hangs").await;
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .handler_timeout(secs(1))
        .build()
        .unwrap();
    let times = hung_once_then_acked(&consumer).await;
    let stats = consumer.stats();
    assert_eq!(stats.handler_timeouts, 1, "{stats:?}");
    // Stopped at 1 s; left to its timeout (extended at T/2 = 1 s, so it lapses at about
    // 1 + T s): received again a second or more after the timeout, not at once.
    let again = times[1] - times[0];
    assert!(
        again >= secs(2) && again <= secs(T + 3),
        "received again {again:?} after the first time"
    );
    common::report(&format!(
        "handler_timeout ({kind:?}): stopped at 1 s, received again {again:.1?} after the \
         first receive (T = {T} s)"
    ));
}

async fn a_handler_past_its_timeout_with_release_now_gives_its_message_back_at_once(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    q.send("hangs").await;
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .handler_timeout(secs(1))
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let times = hung_once_then_acked(&consumer).await;
    // Released at the timeout (1 s): back long before its 30 s visibility would lapse.
    let again = times[1] - times[0];
    assert!(
        again >= secs(1) && again < secs(5),
        "received again {again:?} after the first time"
    );
    assert_eq!(consumer.stats().handler_timeouts, 1);
}

async fn on_success_acks_on_ok_and_redelivers_on_err_and_on_panic(kind: Kind) {
    let q = TestQueue::new(kind, T).await;
    for body in ["ok", "err", "panic"] {
        q.send(body).await;
    }
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .ack_mode(AckMode::OnSuccess)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let calls: Calls = Arc::default();
    let handler = {
        let calls = calls.clone();
        move |d: Delivery| {
            let calls = calls.clone();
            async move {
                // No settling anywhere: the ack mode decides.
                let n = count(&calls, d.body());
                match (d.body(), n) {
                    ("err", 1) => Err("failed on purpose".into()),
                    ("panic", 1) => panic!("panicked on purpose"),
                    _ => Ok::<(), sqs_consumer::BoxError>(()),
                }
            }
        }
    };
    let start = Instant::now();
    let done = async {
        loop {
            let (visible, hidden) = q.counts().await;
            // Each ack has come back as well (no delivery held), not only reached the server.
            if seen(&calls, "err") >= 2
                && seen(&calls, "panic") >= 2
                && visible + hidden == 0
                && consumer.stats().in_flight == 0
            {
                return;
            }
            assert!(
                start.elapsed() < LIMIT,
                "not drained: {:?}",
                calls.lock().unwrap()
            );
            sleep(Duration::from_millis(100)).await;
        }
    };
    common::run_while_expecting_panics(&consumer, handler, done).await;
    let stats = consumer.stats();
    assert_eq!(
        (
            seen(&calls, "ok"),
            seen(&calls, "err"),
            seen(&calls, "panic")
        ),
        (1, 2, 2),
        "Ok acked at once; Err and panic received again, then acked"
    );
    assert_eq!(
        (stats.acked, stats.handler_errors, stats.handler_panics),
        (3, 1, 1)
    );
    assert_eq!(stats.unsettled, 0);
}

/// `AckMode::Always`: each outcome acks what the handler left, once; a delivery the handler
/// failed itself still gets the retry policy.
async fn always_acks_on_ok_err_panic_and_timeout_and_counts_each(kind: Kind) {
    let q = TestQueue::new(kind, T).await;
    for body in ["ok", "err", "panic", "slow", "failed"] {
        q.send(body).await;
    }
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .ack_mode(AckMode::Always)
        .handler_timeout(secs(3))
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let calls: Calls = Arc::default();
    // A message handled more often than expected ends the test at once: on the paused clock a
    // queue that hands the same messages out again and again never lets a timer fire.
    let (again, mut handled_again) = tokio::sync::mpsc::unbounded_channel::<String>();
    let handler = {
        let calls = calls.clone();
        move |d: Delivery| {
            let (calls, again) = (calls.clone(), again.clone());
            async move {
                let n = count(&calls, d.body());
                if n > if d.body() == "failed" { 2 } else { 1 } {
                    let _ = again.send(d.body().to_owned());
                }
                match (d.body(), n) {
                    ("err", _) => Err("failed on purpose".into()),
                    ("panic", _) => panic!("panicked on purpose"),
                    ("slow", _) => {
                        sleep(secs(3 * T)).await; // past the handler timeout
                        Ok(())
                    }
                    // Failed by hand once: released, received again, then left to Always.
                    ("failed", 1) => d.fail("failed by hand").await.map_err(Into::into),
                    _ => Ok::<(), sqs_consumer::BoxError>(()),
                }
            }
        }
    };
    let start = Instant::now();
    let done = async {
        loop {
            let (visible, hidden) = q.counts().await;
            if visible + hidden == 0 && consumer.stats().in_flight == 0 {
                return;
            }
            assert!(
                start.elapsed() < LIMIT,
                "not drained: {:?}",
                calls.lock().unwrap()
            );
            sleep(Duration::from_millis(100)).await;
        }
    };
    let done = async {
        tokio::select! {
            () = done => {}
            Some(body) = handled_again.recv() => panic!("{body} was handled again: not acked"),
        }
    };
    common::run_while_expecting_panics(&consumer, handler, done).await;
    let stats = consumer.stats();
    let times: Vec<u32> = ["ok", "err", "panic", "slow", "failed"]
        .iter()
        .map(|b| seen(&calls, b))
        .collect();
    assert_eq!(
        times,
        [1, 1, 1, 1, 2],
        "each handled once; the failed one twice"
    );
    assert_eq!(
        (
            stats.acked,
            stats.handler_errors,
            stats.handler_panics,
            stats.handler_timeouts
        ),
        (5, 2, 1, 1),
        "{stats:?}"
    );
}

async fn manual_ok_without_settling_is_counted_once_per_delivery_and_redelivered(kind: Kind) {
    let q = TestQueue::new(kind, T).await;
    for body in ["a", "b", "c"] {
        q.send(body).await;
    }
    let consumer = q.consumer().wait_time(secs(1)).build().unwrap();
    let calls: Calls = Arc::default();
    let handler = {
        let calls = calls.clone();
        move |d: Delivery| {
            let calls = calls.clone();
            async move {
                if count(&calls, d.body()) == 1 {
                    return Ok(()); // forgot to ack: counted, and the message comes back
                }
                d.ack().await
            }
        }
    };
    let start = Instant::now();
    let done = async {
        loop {
            let (visible, hidden) = q.counts().await;
            // The server may count a delete before its answer reaches the consumer: wait
            // until no delivery is held (each ack has come back) as well.
            if ["a", "b", "c"].iter().all(|b| seen(&calls, b) == 2)
                && visible + hidden == 0
                && consumer.stats().in_flight == 0
            {
                return;
            }
            assert!(
                start.elapsed() < LIMIT,
                "not drained: {:?}",
                calls.lock().unwrap()
            );
            sleep(Duration::from_millis(100)).await;
        }
    };
    common::run_while(&consumer, handler, done).await;
    let stats = consumer.stats();
    assert_eq!((stats.unsettled, stats.acked), (3, 3), "{stats:?}");
}

async fn run_batch_hands_out_one_batch_per_receive(kind: Kind) {
    const MESSAGES: usize = 300;
    let q = TestQueue::new(kind, 30).await;
    q.send_many("m", MESSAGES).await;
    let sizes = ReceiveSizes::default();
    let consumer = q
        .consumer_recording(&sizes)
        .wait_time(secs(1))
        .max_in_flight(50)
        .build()
        .unwrap();
    let batches = Arc::new(Mutex::new(Vec::<usize>::new()));
    let handled = Arc::new(Mutex::new(Vec::<String>::new()));
    let handler = {
        let (batches, handled) = (batches.clone(), handled.clone());
        move |batch: Batch| {
            let (batches, handled) = (batches.clone(), handled.clone());
            async move {
                batches.lock().unwrap().push(batch.len());
                handled
                    .lock()
                    .unwrap()
                    .extend(batch.iter().map(|d| d.body().to_owned()));
                batch.ack_all().await
            }
        }
    };
    let start = Instant::now();
    let done = async {
        loop {
            let (visible, hidden) = q.counts().await;
            if handled.lock().unwrap().len() >= MESSAGES && visible + hidden == 0 {
                return;
            }
            assert!(start.elapsed() < secs(120), "not drained");
            sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        result = consumer.run_batch(handler) => panic!("run_batch ended: {result:?}"),
        () = done => {}
    }
    let batches = batches.lock().unwrap().clone();
    let mut histogram: BTreeMap<usize, usize> = BTreeMap::new();
    for n in &batches {
        *histogram.entry(*n).or_default() += 1;
    }
    assert!(
        batches.iter().all(|n| (1..=10).contains(n)),
        "{histogram:?}"
    );
    assert_eq!(
        batches.len(),
        q.non_empty_receives(&sizes),
        "one batch per non-empty receive: {histogram:?}"
    );
    if kind == Kind::Server {
        let mut receives = sizes.0.lock().unwrap().clone();
        let mut handed = batches.clone();
        receives.sort_unstable();
        handed.sort_unstable();
        assert_eq!(handed, receives, "the batches are the receives");
    }
    let handled = handled.lock().unwrap().clone();
    let distinct: std::collections::BTreeSet<&String> = handled.iter().collect();
    assert_eq!(distinct.len(), MESSAGES, "every message handled");
    common::report(&format!(
        "run_batch ({kind:?}): {MESSAGES} messages in {} batches ({} handled in all); batch \
         sizes {histogram:?}",
        batches.len(),
        handled.len()
    ));
}

async fn run_batch_on_fifo_never_holds_two_of_a_group_and_keeps_their_order(kind: Kind) {
    let q = TestQueue::new_fifo(kind, 10).await;
    for i in 0..4 {
        for group in ["a", "b"] {
            q.send_to_group(&format!("{group}{i}"), group).await;
        }
    }
    let consumer = q.consumer().wait_time(secs(1)).build().unwrap();
    let seen_batches = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let handler = {
        let seen_batches = seen_batches.clone();
        move |batch: Batch| {
            let seen_batches = seen_batches.clone();
            async move {
                let bodies = batch.iter().map(|d| d.body().to_owned()).collect();
                seen_batches.lock().unwrap().push(bodies);
                batch.ack_all().await
            }
        }
    };
    let start = Instant::now();
    let done = async {
        loop {
            let total: usize = seen_batches.lock().unwrap().iter().map(Vec::len).sum();
            let (visible, hidden) = q.counts().await;
            if total >= 8 && visible + hidden == 0 {
                return;
            }
            assert!(start.elapsed() < LIMIT, "not drained");
            sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        result = consumer.run_batch(handler) => panic!("run_batch ended: {result:?}"),
        () = done => {}
    }
    let batches = seen_batches.lock().unwrap().clone();
    for batch in &batches {
        let groups: Vec<char> = batch.iter().filter_map(|b| b.chars().next()).collect();
        let distinct: std::collections::BTreeSet<&char> = groups.iter().collect();
        assert_eq!(
            distinct.len(),
            groups.len(),
            "two of one group in {batch:?}"
        );
    }
    for group in ["a", "b"] {
        let order: Vec<String> = batches
            .iter()
            .flatten()
            .filter(|b| b.starts_with(group))
            .cloned()
            .collect();
        let expected: Vec<String> = (0..4).map(|i| format!("{group}{i}")).collect();
        assert_eq!(order, expected, "group {group} in send order, once each");
    }
    assert_eq!(
        consumer.stats().released,
        0,
        "each receive handed out round by round, none of it released"
    );
}

async fn attribute_selection_returns_exactly_the_named_attributes(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    q.send_with_attributes(
        "with attributes",
        &[
            ("tenant", "acme"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("other", "not asked for"),
        ],
    )
    .await;
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .message_attribute_names(["tenant", "traceparent"])
        .message_system_attribute_names([Attr::SentTimestamp])
        .build()
        .unwrap();
    let d = common::take_one(&consumer).await;
    let message = d.message();
    let mut names: Vec<&str> = message
        .message_attributes()
        .map(|a| a.keys().map(String::as_str).collect())
        .unwrap_or_default();
    names.sort_unstable();
    assert_eq!(names, ["tenant", "traceparent"]);
    let tenant = &message.message_attributes().unwrap()["tenant"];
    assert_eq!(tenant.string_value(), Some("acme"));
    let mut system: Vec<String> = message
        .attributes()
        .map(|a| a.keys().map(|k| k.as_str().to_owned()).collect())
        .unwrap_or_default();
    system.sort_unstable();
    // The named one, and the one the consumer needs (`MessageGroupId` exists on FIFO
    // queues only).
    assert_eq!(system, ["ApproximateReceiveCount", "SentTimestamp"]);
    assert_eq!(d.receive_count(), 1);
    d.ack().await.unwrap();
}

/// The visibility timeout of the pause scenario, which holds one delivery through several
/// timeouts: each of its extensions must be answered within half a timeout, and moto, loaded
/// by the rest of the suite with both cores busy, took up to 1.5 s to answer one.
const HELD_T: u64 = 5;

async fn pause_stops_receiving_and_resume_starts_again_with_leases_untouched(kind: Kind) {
    let q = TestQueue::new(kind, HELD_T).await;
    q.send("held").await;
    let consumer = Arc::new(q.consumer().wait_time(secs(1)).build().unwrap());
    let mut taker = Taker::start_shared(consumer.clone());
    let held = taker.next(LIMIT).await;
    assert!(!consumer.is_paused(), "a new consumer receives");
    let paused_at = Instant::now();
    consumer.pause();
    assert!(consumer.is_paused());
    // The pause starts no receive; the one under way is awaited and ends within its wait
    // (1 s): let it end before sending what the paused consumer must not take.
    sleep(Duration::from_millis(1_500)).await;
    for i in 0..3 {
        q.send(&format!("while paused {i}")).await;
    }
    // Two timeouts: the held delivery stays hidden (the keeper goes on), the three new
    // messages stay visible (nobody receives them).
    let watch_until = Instant::now() + secs(2 * HELD_T);
    while Instant::now() < watch_until {
        assert_eq!(q.counts().await, (3, 1), "while paused");
        assert_eq!(
            consumer.stats().reserved,
            0,
            "no receive under way while paused"
        );
        sleep(Duration::from_millis(250)).await;
    }
    assert!(!held.is_lost());
    consumer.resume();
    assert!(!consumer.is_paused(), "resumed");
    let resumed_at = Instant::now();
    for _ in 0..3 {
        let d = taker.next(LIMIT).await;
        assert!(d.body().starts_with("while paused"), "{}", d.body());
        d.ack().await.unwrap();
    }
    let took = resumed_at.elapsed();
    held.ack().await.unwrap();
    assert_eq!(q.counts().await, (0, 0));
    common::report(&format!(
        "pause ({kind:?}): paused {:.1?}; the three waiting messages received {took:.1?} \
         after resume",
        resumed_at - paused_at
    ));
}

async fn stream_until_drains_like_run_until(kind: Kind) {
    let q = TestQueue::new(kind, T).await;
    for i in 0..3 {
        q.send(&format!("m{i}")).await;
    }
    let shutdown_timeout = secs(10);
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .shutdown_timeout(shutdown_timeout)
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut stream = consumer.stream_until(async move {
        let _ = rx.await;
    });
    // Each delivery goes to a task that holds it 3 s (and 250 ms more than the one before,
    // so that the last settles alone), then notes when its ack starts.
    let acks_started = Arc::new(Mutex::new(Vec::new()));
    let taken = std::sync::atomic::AtomicU32::new(0);
    let hold = |d: Delivery| {
        let acks_started = acks_started.clone();
        let n = taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::spawn(async move {
            sleep(secs(3) + Duration::from_millis(250) * n).await;
            acks_started.lock().unwrap().push(Instant::now());
            d.ack().await.unwrap();
        })
    };
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let d = tokio::time::timeout(LIMIT, stream.next())
            .await
            .expect("a delivery in time")
            .expect("the stream goes on")
            .expect("no error");
        tasks.push(hold(d));
    }
    let signalled_at = Instant::now();
    tx.send(()).unwrap();
    // Sent after the signal: no receive starts, but the one under way (if any) may take it,
    // and then the stream yields it; either way it is never left hidden.
    q.send("after the signal").await;
    // Driven by hand: the moment `next()` says the stream ended is what is checked.
    let ended_at = loop {
        match tokio::time::timeout(LIMIT, stream.next()).await {
            Ok(Some(d)) => tasks.push(hold(d.expect("no error"))),
            Ok(None) => break Instant::now(),
            Err(_) => panic!("the stream did not end within {LIMIT:?}"),
        }
    };
    let yielded = tasks.len();
    let acks_started = acks_started.lock().unwrap().clone();
    // It ended only once every delivery it yielded was being acked (about 3 s after each was
    // taken), not at the signal.
    assert_eq!(
        acks_started.len(),
        yielded,
        "ended before every ack started"
    );
    assert!(
        acks_started.iter().all(|at| *at <= ended_at),
        "ended before an ack: {:?} after the signal, acks at {:?}",
        ended_at - signalled_at,
        acks_started
            .iter()
            .map(|at| *at - signalled_at)
            .collect::<Vec<_>>()
    );
    // ...and as soon as the last one was settled, not at the shutdown timeout.
    assert!(
        ended_at - signalled_at < shutdown_timeout,
        "ended {:?} after the signal: at the shutdown timeout",
        ended_at - signalled_at
    );
    assert!(
        (3..=4).contains(&yielded),
        "at most the late message yielded after the signal: {yielded}"
    );
    for task in tasks {
        task.await.expect("the holding task");
    }
    assert_eq!(
        q.counts().await,
        (4 - yielded as u64, 0),
        "the late message handled or visible, never hidden"
    );
}

async fn stream_until_ends_at_the_shutdown_timeout_and_what_is_still_held_stays_yours(kind: Kind) {
    let q = TestQueue::new(kind, T).await;
    for i in 0..2 {
        q.send(&format!("m{i}")).await;
    }
    let shutdown_timeout = secs(2);
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .shutdown_timeout(shutdown_timeout)
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut stream = consumer.stream_until(async move {
        let _ = rx.await;
    });
    let mut held = Vec::new();
    while held.len() < 2 {
        let d = tokio::time::timeout(LIMIT, stream.next())
            .await
            .expect("a delivery in time")
            .expect("the stream goes on")
            .expect("no error");
        held.push(d);
    }
    let signalled_at = Instant::now();
    tx.send(()).unwrap();
    let ended_at = match tokio::time::timeout(LIMIT, stream.next()).await {
        Ok(None) => Instant::now(),
        Ok(Some(item)) => panic!("nothing more was sent, yet the stream yielded {item:?}"),
        Err(_) => panic!("the stream did not end within {LIMIT:?}"),
    };
    // Not before the shutdown timeout (the deliveries are still held), and not much after:
    // the poll under way ends within its wait time (1 s).
    let took = ended_at - signalled_at;
    let slack = match kind {
        Kind::Memory => Duration::ZERO,
        Kind::Server => secs(1),
    };
    assert!(
        took >= shutdown_timeout && took <= shutdown_timeout + secs(1) + slack,
        "the stream ended {took:?} after the signal (shutdown timeout {shutdown_timeout:?})"
    );
    // What is still held stays yours, kept hidden past its visibility timeout...
    sleep(secs(2 * T)).await;
    assert!(held.iter().all(|d| !d.is_lost()));
    assert_eq!(q.counts().await, (0, 2), "still held: hidden");
    // ...and dropping it now releases it at once.
    let dropped_at = Instant::now();
    drop(held);
    while q.counts().await != (2, 0) {
        assert!(
            dropped_at.elapsed() < LIMIT,
            "the dropped deliveries are not visible again"
        );
        sleep(Duration::from_millis(50)).await;
    }
}
