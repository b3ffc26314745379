//! One scenario suite, run against both `MemoryQueue` (paused clock) and the SQS-compatible
//! test server (real time), so the in-memory model is checked against a real server.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, run_while, secs, Kind, Taker, TestQueue};
use sqs_consumer::{Delivery, Error};
use tokio::sync::mpsc;
use tokio::time::{sleep, Instant};

/// The visibility timeout most scenarios use: short, so the server runs them quickly.
const T: u64 = 2;

/// How much later than the model a real server may make a message visible again: request
/// latency, an extension already on its way when the delivery was dropped, and the
/// server's own timer granularity. The in-memory queue on the paused clock is exact.
fn slack(kind: Kind) -> Duration {
    match kind {
        Kind::Memory => Duration::ZERO,
        Kind::Server => secs(2),
    }
}

on_both!(
    a_handler_holding_three_timeouts_is_never_redelivered,
    a_dropped_delivery_comes_back_after_about_its_timeout,
    release_makes_the_message_visible_at_once,
    release_after_makes_it_visible_after_the_delay,
    the_builder_timeout_overrides_the_queue_timeout,
    a_redriven_message_reaches_the_dead_letter_queue_and_the_consumer_carries_on,
    every_message_is_handled_and_the_queue_drains,
    fifo_groups_are_handled_in_send_order_one_message_at_a_time,
    fifo_a_released_message_holds_back_the_rest_of_its_group,
    shutdown_lets_handlers_finish_then_releases_what_is_still_held,
    the_shutdown_signal_starts_no_receive_and_leaves_no_poll_behind,
    a_message_deleted_elsewhere_is_lost_at_the_next_round_and_its_batch_neighbour_kept,
    a_message_sent_during_a_long_poll_is_handled_at_once,
    adaptive_visibility_follows_the_holds_within_its_bounds_and_the_keeper_extends_the_rest,
);

/// A consumer that holds one delivery at most: while the test holds its delivery, it starts no
/// further receive.
fn one_at_a_time(q: &TestQueue) -> sqs_consumer::ConsumerBuilder {
    q.consumer().max_in_flight(1)
}

async fn a_handler_holding_three_timeouts_is_never_redelivered(kind: Kind) {
    let q = TestQueue::new(kind, T).await;
    q.send("long job").await;
    let consumer = q.consumer().build().unwrap();
    let calls = Arc::new(Mutex::new(0));
    let (started_tx, mut started_rx) = mpsc::unbounded_channel();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let (c, c2) = (calls.clone(), calls.clone());
    let handler = move |d: Delivery| {
        let (c, started, done) = (c.clone(), started_tx.clone(), done_tx.clone());
        async move {
            *c.lock().unwrap() += 1;
            let _ = started.send(());
            sleep(secs(3 * T)).await;
            d.ack().await?;
            let _ = done.send(());
            Ok::<(), Error>(())
        }
    };
    run_while(&consumer, handler, async {
        started_rx.recv().await.unwrap();
        // A second receiver polls all along: it must see nothing while the handler works.
        let start = Instant::now();
        while start.elapsed() < secs(3 * T) {
            let got = q.receive_raw(secs(1)).await;
            assert!(got.is_empty(), "redelivered while held: {got:?}");
            assert_eq!(
                *c2.lock().unwrap(),
                1,
                "handed to the handler again while held"
            );
        }
        // Bounded: a handler whose ack fails never reports done.
        let done = tokio::time::timeout(secs(T), done_rx.recv()).await;
        assert!(
            matches!(done, Ok(Some(()))),
            "not acked once the handler was done"
        );
    })
    .await;
    assert_eq!(*calls.lock().unwrap(), 1);
    // Acked: it never comes back.
    assert!(q.wait_for_message(secs(T + 1)).await.is_none());
}

async fn a_dropped_delivery_comes_back_after_about_its_timeout(kind: Kind) {
    let q = TestQueue::new(kind, T).await;
    q.send("dropped").await;
    let mut taker = Taker::start(one_at_a_time(&q).build().unwrap());
    let d = taker.next(secs(5)).await;
    // Held past its first timeout by the keeper; dropped between two extensions, half a
    // timeout before its current deadline.
    sleep(secs(T) + Duration::from_millis(T * 1000 / 4)).await;
    assert!(q.receive_raw(Duration::ZERO).await.is_empty());
    let remaining = d.deadline() - Instant::now();
    drop(d);
    let dropped = Instant::now();
    assert!(
        q.receive_raw(Duration::ZERO).await.is_empty(),
        "not at once"
    );
    let again = taker.next(secs(T) + slack(kind) + secs(2)).await;
    let after = dropped.elapsed();
    assert!(
        after >= remaining.min(secs(1)),
        "back {after:?} after the drop"
    );
    assert!(
        after <= remaining + slack(kind),
        "back {after:?} after the drop"
    );
    assert_eq!(again.body(), "dropped");
    assert_eq!(again.receive_count(), 2);
}

async fn release_makes_the_message_visible_at_once(kind: Kind) {
    let q = TestQueue::new(kind, T).await;
    q.send("released").await;
    let mut taker = Taker::start(one_at_a_time(&q).build().unwrap());
    let d = taker.next(secs(5)).await;
    sleep(secs(T + 1)).await;
    d.release().await.unwrap();
    let released = Instant::now();
    let again = taker.next(secs(5)).await;
    assert!(
        released.elapsed() <= slack(kind),
        "{:?}",
        released.elapsed()
    );
    assert_eq!(again.receive_count(), 2);
}

async fn release_after_makes_it_visible_after_the_delay(kind: Kind) {
    let q = TestQueue::new(kind, T).await;
    q.send("later").await;
    let mut taker = Taker::start(one_at_a_time(&q).build().unwrap());
    let d = taker.next(secs(5)).await;
    d.release_after(secs(4)).await.unwrap();
    let released = Instant::now();
    let again = taker.next(secs(10)).await;
    let after = released.elapsed();
    assert!(
        after >= Duration::from_millis(3_500) && after <= secs(4) + slack(kind),
        "{after:?}"
    );
    assert_eq!(again.body(), "later");
}

async fn the_builder_timeout_overrides_the_queue_timeout(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    q.send("short").await;
    let consumer = one_at_a_time(&q)
        .visibility_timeout(secs(T))
        .build()
        .unwrap();
    let mut taker = Taker::start(consumer);
    let d = taker.next(secs(5)).await;
    // T after the answer arrived (the request was sent a moment earlier).
    let timeout = d.deadline() - d.received_at();
    assert!(
        timeout >= secs(T) && timeout <= secs(T) + slack(kind),
        "{timeout:?}"
    );
    drop(d);
    let dropped = Instant::now();
    // Back after the builder's timeout, not the queue's 30 s.
    let again = taker.next(secs(T) + slack(kind) + secs(2)).await;
    assert!(
        dropped.elapsed() <= secs(T) + slack(kind),
        "{:?}",
        dropped.elapsed()
    );
    assert_eq!(again.receive_count(), 2);
}

async fn a_redriven_message_reaches_the_dead_letter_queue_and_the_consumer_carries_on(kind: Kind) {
    let (q, dlq) = TestQueue::with_dead_letter(kind, T, 2).await;
    q.send("poison").await;
    let consumer = q.consumer().wait_time(secs(1)).build().unwrap();
    let (acked_tx, mut acked_rx) = mpsc::unbounded_channel::<String>();
    let handler = move |d: Delivery| {
        let acked = acked_tx.clone();
        async move {
            if d.body() == "poison" {
                return d.release().await;
            }
            let body = d.body().to_owned();
            d.ack().await?;
            let _ = acked.send(body);
            Ok(())
        }
    };
    run_while(&consumer, handler, async {
        let (moved, _) = dlq
            .wait_for_message(secs(20))
            .await
            .expect("moved to the dead-letter queue");
        assert_eq!(moved.body(), Some("poison"));
        q.send("good").await;
        let acked = tokio::time::timeout(secs(20), acked_rx.recv()).await;
        assert_eq!(acked.unwrap().as_deref(), Some("good"));
    })
    .await;
}

async fn every_message_is_handled_and_the_queue_drains(kind: Kind) {
    const N: usize = 30;
    let q = TestQueue::new(kind, T).await;
    for i in 0..N {
        q.send(&format!("m{i}")).await;
    }
    let consumer = q
        .consumer()
        .max_in_flight(8)
        .wait_time(secs(1))
        .build()
        .unwrap();
    let seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let s = seen.clone();
    let handler = move |d: Delivery| {
        let s = s.clone();
        async move {
            sleep(Duration::from_millis(100)).await;
            let body = d.body().to_owned();
            d.ack().await?;
            *s.lock().unwrap().entry(body).or_default() += 1;
            Ok::<(), Error>(())
        }
    };
    run_while(&consumer, handler, async {
        eventually("every message acked", secs(60), || {
            seen.lock().unwrap().len() == N
        })
        .await;
        // Keep consuming past one timeout, so that anything redelivered is handled too.
        sleep(secs(T + 1)).await;
    })
    .await;
    assert!(
        q.wait_for_message(secs(T + 1)).await.is_none(),
        "the queue is empty"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), N);
    if kind == Kind::Memory {
        // SQS promises at least once; the in-memory queue (atomic, unlike the test server
        // under concurrent deletes) delivers exactly once here.
        assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    }
}

/// A handler delay from 0 to 200 ms that looks random but is the same on every run.
fn pseudo_random_delay(body: &str) -> Duration {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    body.hash(&mut h);
    Duration::from_millis(h.finish() % 200)
}

#[derive(Default)]
struct GroupLog {
    /// Handlers running now, per group.
    active: HashMap<String, u32>,
    /// Times a handler started while another of its group was running.
    overlaps: u32,
    /// Message numbers in the order first handled, per group.
    order: HashMap<String, Vec<usize>>,
    /// Bodies acked.
    acked: std::collections::HashSet<String>,
    /// The most groups handled at the same moment.
    most_groups_at_once: usize,
}

async fn fifo_groups_are_handled_in_send_order_one_message_at_a_time(kind: Kind) {
    const GROUPS: [&str; 3] = ["a", "b", "c"];
    const PER_GROUP: usize = 15;
    let q = TestQueue::new_fifo(kind, 5).await;
    for i in 0..PER_GROUP {
        for g in GROUPS {
            q.send_to_group(&format!("{g}-{i:02}"), g).await;
        }
    }
    let consumer = q
        .consumer()
        .max_in_flight(10)
        .wait_time(secs(1))
        .build()
        .unwrap();
    let log: Arc<Mutex<GroupLog>> = Arc::default();
    // The test server can lose one of two concurrent deletes (SQS does not): ack one at a time.
    let ack_lock = Arc::new(tokio::sync::Mutex::new(()));
    let (l, lock) = (log.clone(), ack_lock.clone());
    let handler = move |d: Delivery| {
        let (log, lock) = (l.clone(), lock.clone());
        async move {
            let group = d.message_group_id().expect("a FIFO group").to_owned();
            let body = d.body().to_owned();
            let n: usize = body[2..].parse().unwrap();
            {
                let mut guard = log.lock().unwrap();
                let log = &mut *guard;
                let active = log.active.entry(group.clone()).or_default();
                *active += 1;
                if *active > 1 {
                    log.overlaps += 1;
                }
                if !log.acked.contains(&body) {
                    let order = log.order.entry(group.clone()).or_default();
                    if !order.contains(&n) {
                        order.push(n);
                    }
                }
                let busy = log.active.values().filter(|a| **a > 0).count();
                log.most_groups_at_once = log.most_groups_at_once.max(busy);
            }
            sleep(pseudo_random_delay(&body)).await;
            {
                let _one_at_a_time = lock.lock().await;
                // The guarantee SQS gives: the group's next message is handed out only once
                // this delete was sent and taken, which may be a moment before its answer
                // arrives here (a waiting long poll is answered at once; moto waits for its
                // next look). So this one stops counting as active as its delete goes out.
                *log.lock().unwrap().active.get_mut(&group).unwrap() -= 1;
                d.ack().await?;
            }
            log.lock().unwrap().acked.insert(body);
            Ok::<(), Error>(())
        }
    };
    run_while(&consumer, handler, async {
        eventually("every message acked", secs(120), || {
            log.lock().unwrap().acked.len() == GROUPS.len() * PER_GROUP
        })
        .await;
    })
    .await;
    let log = log.lock().unwrap();
    assert_eq!(
        log.overlaps, 0,
        "two messages of one group were handled at once"
    );
    for g in GROUPS {
        assert_eq!(
            log.order[g],
            (0..PER_GROUP).collect::<Vec<_>>(),
            "group {g} out of order"
        );
    }
    assert!(
        log.most_groups_at_once >= 2,
        "groups should run in parallel"
    );
}

async fn fifo_a_released_message_holds_back_the_rest_of_its_group(kind: Kind) {
    let q = TestQueue::new_fifo(kind, 5).await;
    for body in ["m0", "m1", "m2"] {
        q.send_to_group(body, "g").await;
    }
    let consumer = q.consumer().wait_time(secs(1)).build().unwrap();
    let seen: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let s = seen.clone();
    let handler = move |d: Delivery| {
        let s = s.clone();
        async move {
            s.lock()
                .unwrap()
                .push((d.body().to_owned(), d.receive_count()));
            if d.body() == "m0" && d.receive_count() == 1 {
                return d.release().await;
            }
            d.ack().await
        }
    };
    run_while(&consumer, handler, async {
        eventually("m2 handled", secs(30), || {
            seen.lock().unwrap().iter().any(|(b, _)| b == "m2")
        })
        .await;
        // Give a wrongly released message time to show up twice.
        sleep(secs(1)).await;
    })
    .await;
    let seen = seen.lock().unwrap();
    let bodies: Vec<&str> = seen.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(bodies, ["m0", "m0", "m1", "m2"], "{seen:?}");
    assert_eq!(seen[1].1, 2, "m0 again, received a second time");
}

async fn shutdown_lets_handlers_finish_then_releases_what_is_still_held(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    for body in ["quick", "quick too", "stuck"] {
        q.send(body).await;
    }
    let consumer = q
        .consumer()
        .max_in_flight(3)
        .shutdown_timeout(secs(2))
        .build()
        .unwrap();
    let started = Arc::new(Mutex::new(0));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let (st, ac) = (started.clone(), acked.clone());
    let handler = move |d: Delivery| {
        let (started, acked) = (st.clone(), ac.clone());
        async move {
            *started.lock().unwrap() += 1;
            if d.body() == "stuck" {
                sleep(secs(3600)).await;
            }
            sleep(Duration::from_millis(500)).await; // still running at the signal
            let body = d.body().to_owned();
            d.ack().await?;
            acked.lock().unwrap().push(body);
            Ok::<(), Error>(())
        }
    };
    let signalled = Arc::new(Mutex::new(None));
    let sig = signalled.clone();
    let signal = async move {
        eventually("three handlers running", secs(10), || {
            *started.lock().unwrap() == 3
        })
        .await;
        *sig.lock().unwrap() = Some(Instant::now());
    };
    consumer.run_until(handler, signal).await.unwrap();
    let took = signalled.lock().unwrap().unwrap().elapsed();
    assert!(
        took >= secs(2) && took <= secs(2) + slack(kind),
        "returned {took:?} after the signal"
    );
    let mut acked = acked.lock().unwrap().clone();
    acked.sort();
    assert_eq!(
        acked,
        ["quick", "quick too"],
        "handlers running at the signal finished"
    );
    // The stuck one was released before run_until returned: visible at once.
    let got = q.receive_raw(Duration::ZERO).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body(), Some("stuck"));
}

async fn the_shutdown_signal_starts_no_receive_and_leaves_no_poll_behind(kind: Kind) {
    let q = TestQueue::new(kind, T).await;
    let wait = secs(2);
    let consumer = q.consumer().wait_time(wait).build().unwrap();
    let signalled = Arc::new(Mutex::new(None));
    let sig = signalled.clone();
    let signal = async move {
        sleep(secs(1)).await; // the long poll is under way
        *sig.lock().unwrap() = Some(Instant::now());
    };
    consumer
        .run_until(|d: Delivery| d.ack(), signal)
        .await
        .unwrap();
    let took = signalled.lock().unwrap().unwrap().elapsed();
    // The poll under way ends within its wait (on the paused clock: exactly at 2 s); then
    // nothing is receiving, on our side or the server's.
    let bound = match kind {
        Kind::Memory => wait - secs(1),
        Kind::Server => wait + secs(5),
    };
    assert!(took <= bound, "returned {took:?} after the signal");
    q.send("after").await;
    assert_eq!(
        q.receive_raw(Duration::ZERO).await.len(),
        1,
        "visible at once: no poll of the stopped consumer took it"
    );
}

async fn a_message_deleted_elsewhere_is_lost_at_the_next_round_and_its_batch_neighbour_kept(
    kind: Kind,
) {
    // Each server answers the extension of a deleted message its own way (AWS, LocalStack and
    // MemoryQueue: `InvalidParameterValue` "does not exist or is not available"; moto:
    // `ReceiptHandleIsInvalid`); whichever it is, that entry's delivery is lost at the first
    // round, and the other entry of the same request is extended as usual.
    const T: u64 = 4;
    let q = TestQueue::new(kind, T).await;
    q.send("kept").await;
    q.send("deleted").await;
    let consumer = Arc::new(q.consumer().build().unwrap());
    let mut taker = Taker::start_shared(consumer.clone());
    let (mut kept, mut deleted) = (taker.next(secs(10)).await, taker.next(secs(10)).await);
    if kept.body() == "deleted" {
        std::mem::swap(&mut kept, &mut deleted);
    }
    let handle = deleted.message().receipt_handle().unwrap().to_owned();
    q.delete_raw(&handle).await;
    let first_deadline = kept.deadline();
    let reason = tokio::time::timeout(secs(T), deleted.lost())
        .await
        .expect("lost before its deadline");
    assert_eq!(reason, sqs_consumer::LostReason::ReceiptHandleInvalid);
    assert!(Instant::now() < first_deadline, "lost at the first round");
    eventually("the other one extended", secs(T), || {
        kept.deadline() > first_deadline
    })
    .await;
    assert!(!kept.is_lost());
    let stats = consumer.stats();
    assert_eq!(
        (stats.extension_failures, stats.late_extensions),
        (1, 0),
        "{stats:?}"
    );
    if let TestQueue::Memory(m) = &q {
        let action = sqs_consumer::memory::Action::ChangeMessageVisibilityBatch;
        assert_eq!(m.requests().requests(action), 1, "one request for both");
    }
    kept.ack().await.expect("still ours");
    assert!(deleted.ack().await.unwrap_err().is_lost());
    drop(taker);
    assert_eq!(q.counts().await, (0, 0));
}

async fn a_message_sent_during_a_long_poll_is_handled_at_once(kind: Kind) {
    // SQS answers a waiting long poll as soon as a message arrives (every implementation the
    // suite runs does): the consumer hands it out then, not at the end of its 20 s wait.
    let q = TestQueue::new(kind, T).await;
    let wait = secs(20);
    let consumer = Arc::new(q.consumer().wait_time(wait).build().unwrap());
    let mut taker = Taker::start_shared(consumer.clone());
    sleep(secs(1)).await; // the long poll is under way
    q.send("wake").await;
    let sent = Instant::now();
    let d = taker.next(wait).await;
    let took = sent.elapsed();
    // "At once" against the end of the wait: well within a quarter of it.
    let bound = match kind {
        Kind::Memory => Duration::ZERO,
        Kind::Server => wait / 4,
    };
    assert!(took <= bound, "handed out {took:?} after the send");
    d.ack().await.unwrap();
}

/// How long the delivery's visibility has left, in whole seconds rounded up: the timeout its
/// receive asked for, when taken at once.
/// The visibility timeout the delivery's receive applied, seconds; its deadline is at most
/// that far away.
fn visibility_left(d: &Delivery) -> u64 {
    let applied = d.visibility_timeout();
    assert!(d.deadline() <= Instant::now() + applied);
    applied.as_secs()
}

async fn adaptive_visibility_follows_the_holds_within_its_bounds_and_the_keeper_extends_the_rest(
    kind: Kind,
) {
    // The queue's own timeout is 30 s; the consumer chooses within [2 s, 6 s].
    let (min, max) = (secs(2), secs(6));
    let wait = secs(1);
    let q = TestQueue::new(kind, 30).await;
    let consumer = Arc::new(
        q.consumer()
            .wait_time(wait)
            .adaptive_visibility(min, max)
            .build()
            .unwrap(),
    );
    let mut taker = Taker::start_shared(consumer.clone());
    let limit = secs(30);

    // Nothing held yet: the queue's 30 s, clamped to the max.
    q.send("first").await;
    let first = taker.next(limit).await;
    assert_eq!(visibility_left(&first), 6);
    // Dropped unsettled with `RetryPolicy::Leave`: it comes back when the timeout its receive
    // chose lapses, as after a crash: the max, not the queue's 30 s.
    let dropped_at = Instant::now();
    drop(first);
    let again = taker.next(limit).await;
    let back_after = dropped_at.elapsed();
    assert_eq!(again.body(), "first");
    assert!(
        back_after >= secs(5) && back_after <= max + wait + slack(kind),
        "{back_after:?}"
    );
    // An instant hold gives 1 s, never below the min.
    assert_eq!(visibility_left(&again), 2);
    again.ack().await.unwrap();
    assert_eq!(consumer.stats().visibility_timeout, min);

    // Held 3 s on a 2 s timeout: the keeper extends them; none comes back.
    q.send_many("slow", 4).await;
    let mut holds = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let d = taker.next(limit).await;
        assert_eq!(d.receive_count(), 1, "{}", d.body());
        holds.spawn(async move {
            sleep(secs(3)).await;
            d.ack().await
        });
    }
    while let Some(acked) = holds.join_next().await {
        acked.unwrap().unwrap();
    }
    let stats = consumer.stats();
    assert_eq!(stats.acked, 5);
    assert!(stats.extended >= 1, "{stats:?}");
    // A receive under way through the holds asked before they were counted: let it end.
    sleep(wait + secs(1)).await;

    // Holds of 3 s: 2 x 3 + 0.5, rounded up, is 7 s; clamped to the max.
    q.send("after").await;
    let after = taker.next(limit).await;
    assert_eq!((after.body(), after.receive_count()), ("after", 1));
    assert_eq!(visibility_left(&after), 6);
    after.ack().await.unwrap();
    assert_eq!(consumer.stats().visibility_timeout, max);
    assert_eq!(consumer.stats().lost, 0);
    common::report(&format!(
        "adaptive visibility ({kind:?}): back after {back_after:.2?} at most {max:?}; \
         extended {} while held 3 s on 2 s",
        stats.extended
    ));
}
