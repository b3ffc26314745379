//! `Consumer::run` on a `MemoryQueue`, on tokio's paused clock.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, memory_queue as queue, run_while, secs, take_one};
use sqs_consumer::memory::{Action, Faults, RequestCounts};
use sqs_consumer::{
    BoxError, Consumer, ConsumerBuilder, Delivery, Error, Handler, MemoryQueue, RetryPolicy, Stats,
};
use tokio::sync::mpsc;
use tokio::time::{sleep, Instant};

/// How long (in virtual time) a test waits for a condition.
const LIMIT: Duration = Duration::from_secs(1000);

type Seen = Arc<Mutex<HashMap<String, u32>>>;

fn count(seen: &Seen, body: &str) {
    *seen.lock().unwrap().entry(body.to_owned()).or_default() += 1;
}

#[tokio::test(start_paused = true)]
async fn every_message_is_handled_once_and_acked() {
    let q = queue(30);
    for i in 0..25 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).max_in_flight(8).build().unwrap();
    let seen = Seen::default();
    let s = seen.clone();
    let handler = move |d: Delivery| {
        let s = s.clone();
        async move {
            count(&s, d.body());
            sleep(secs(1)).await;
            d.ack().await
        }
    };
    run_while(
        &consumer,
        handler,
        eventually("queue drained", LIMIT, || q.is_empty()),
    )
    .await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 25);
    assert!(
        seen.values().all(|n| *n == 1),
        "handled once each: {seen:?}"
    );
    assert_eq!(q.requests().deletes(), 25);
}

#[tokio::test(start_paused = true)]
async fn receives_only_while_a_slot_is_free_and_never_asks_for_more() {
    let q = queue(30);
    for i in 0..10 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).max_in_flight(3).build().unwrap();
    let handler = |d: Delivery| async move {
        let _held = d;
        sleep(secs(3600)).await;
        Ok::<(), Error>(())
    };
    run_while(&consumer, handler, async {
        eventually("three held", LIMIT, || q.in_flight_len() == 3).await;
        let receives = q.requests().requests(Action::ReceiveMessage);
        sleep(secs(600)).await;
        assert_eq!(
            q.in_flight_len(),
            3,
            "never more than max_in_flight received"
        );
        assert_eq!(consumer.in_flight(), 3);
        assert_eq!(
            q.requests().requests(Action::ReceiveMessage),
            receives,
            "no receive while full"
        );
        // The held ones are kept hidden by the keeper all along.
        assert!(q.requests().visibility_changes() >= 3 * (600 / 15 - 1));
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_delivery_moved_elsewhere_keeps_its_slot_until_dropped() {
    let q = queue(30);
    q.send("a").unwrap();
    q.send("b").unwrap();
    let consumer = Consumer::in_memory(&q).max_in_flight(1).build().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel::<Delivery>();
    let handler = move |d: Delivery| {
        let tx = tx.clone();
        async move { tx.send(d).map_err(|_| "test ended") }
    };
    run_while(&consumer, handler, async {
        let first = rx.recv().await.unwrap();
        sleep(secs(120)).await;
        assert_eq!(consumer.in_flight(), 1);
        assert!(rx.try_recv().is_err(), "the second waits for the slot");
        assert_eq!(
            q.in_flight_len(),
            1,
            "the held one is still hidden after 4 timeouts"
        );
        // Dropped, not settled: the slot is free at once, and the second comes.
        let dropped_at = Instant::now();
        drop(first);
        let second = rx.recv().await.unwrap();
        assert_eq!(second.body(), "b");
        assert!(
            dropped_at.elapsed() < secs(1),
            "the second came {:?} after the drop",
            dropped_at.elapsed()
        );
        second.ack().await.unwrap();
        // The dropped one comes back when its visibility lapses (the default retry policy).
        let again = rx.recv().await.unwrap();
        assert_eq!(again.body(), "a");
        again.ack().await.unwrap();
    })
    .await;
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_is_caught_and_the_consumer_carries_on() {
    let q = queue(30);
    q.send("boom").unwrap();
    for i in 0..5 {
        q.send(format!("ok{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).max_in_flight(2).build().unwrap();
    let seen = Seen::default();
    let s = seen.clone();
    let handler = move |d: Delivery| {
        let s = s.clone();
        async move {
            count(&s, d.body());
            if d.body() == "boom" {
                panic!("handler bug");
            }
            d.ack().await
        }
    };
    common::run_while_expecting_panics(
        &consumer,
        handler,
        eventually("five acked", LIMIT, || q.len() == 1),
    )
    .await;
    assert_eq!(
        consumer.in_flight(),
        0,
        "the panicked delivery freed its slot"
    );
    assert_eq!(seen.lock().unwrap()["boom"], 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_handler_leaves_the_message_to_come_back_after_its_timeout() {
    let q = queue(10);
    q.send("flaky").unwrap();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel::<(u32, Instant)>();
    let handler = move |d: Delivery| {
        let tx = tx.clone();
        async move {
            let _ = tx.send((d.receive_count(), Instant::now()));
            if d.receive_count() == 1 {
                return Err(anyhow::anyhow!("transient failure"));
            }
            d.ack().await?;
            Ok(())
        }
    };
    run_while(&consumer, handler, async {
        let (n1, t1) = rx.recv().await.unwrap();
        let (n2, t2) = rx.recv().await.unwrap();
        assert_eq!((n1, n2), (1, 2));
        assert_eq!(t2 - t1, secs(10), "back when its visibility timeout lapsed");
        eventually("acked", LIMIT, || q.is_empty()).await;
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_missing_queue_ends_run_with_the_error_at_once() {
    let q = queue(30);
    q.fail_next(Action::ReceiveMessage, "QueueDoesNotExist", 1);
    let consumer = Consumer::in_memory(&q)
        .visibility_timeout(secs(30))
        .build()
        .unwrap();
    let start = Instant::now();
    let err = consumer
        .run(|d: Delivery| d.ack())
        .await
        .expect_err("fatal");
    assert_eq!(err.code(), Some("QueueDoesNotExist"));
    assert!(err.is_fatal());
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn access_denied_reading_the_queue_timeout_ends_run() {
    let q = queue(30);
    q.fail_next(Action::GetQueueAttributes, "AccessDenied", 1);
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let err = consumer.run(|d: Delivery| d.ack()).await.unwrap_err();
    assert_eq!(err.code(), Some("AccessDenied"));
    assert!(err.is_fatal(), "{err}");
    assert_eq!(q.requests().requests(Action::ReceiveMessage), 0);
}

#[tokio::test(start_paused = true)]
async fn transient_receive_errors_back_off_and_recover() {
    let q = queue(30);
    q.send("m").unwrap();
    q.fail_next(Action::ReceiveMessage, "InternalError", 6);
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let start = Instant::now();
    run_while(
        &consumer,
        |d: Delivery| d.ack(),
        eventually("acked", LIMIT, || q.is_empty()),
    )
    .await;
    // Six failures, the receive that got the message, perhaps the next long poll.
    let receives = q.requests().requests(Action::ReceiveMessage);
    assert!((7..=8).contains(&receives), "{receives}");
    // 200 ms doubling, each at least half: 0.1 + 0.2 + 0.4 + 0.8 + 1.6 + 3.2 s.
    assert!(
        start.elapsed() >= Duration::from_millis(6_300),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn short_polling_an_empty_queue_does_not_spin() {
    let q = queue(30);
    let consumer = Consumer::in_memory(&q)
        .wait_time(Duration::ZERO)
        .build()
        .unwrap();
    run_while(&consumer, |d: Delivery| d.ack(), sleep(secs(60))).await;
    let receives = q.requests().requests(Action::ReceiveMessage);
    // Idle back-off from 50 ms up to 2 s (jittered): never more than about one a second.
    assert!(receives <= 60, "{receives} receives in 60 s");
    // And a message sent now is still picked up within the idle back-off.
    q.send("m").unwrap();
    run_while(
        &consumer,
        |d: Delivery| d.ack(),
        eventually("acked", LIMIT, || q.is_empty()),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn long_polling_an_empty_queue_costs_one_request_per_wait() {
    let q = queue(30);
    let consumer = Consumer::in_memory(&q).build().unwrap();
    run_while(
        &consumer,
        |d: Delivery| d.ack(),
        sleep(secs(200) - Duration::from_millis(1)),
    )
    .await;
    assert_eq!(q.requests().requests(Action::ReceiveMessage), 10);
}

#[tokio::test(start_paused = true)]
async fn the_queue_timeout_is_read_once_and_drives_the_keeper() {
    let q = queue(10);
    q.send("slow").unwrap();
    q.send("slow too").unwrap();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let seen = Seen::default();
    let s = seen.clone();
    let handler = move |d: Delivery| {
        let s = s.clone();
        async move {
            count(&s, d.body());
            assert_eq!(d.deadline(), d.received_at() + secs(10));
            sleep(secs(22)).await; // extended at 5, 10, 15 and 20 s
            d.ack().await
        }
    };
    run_while(
        &consumer,
        handler,
        eventually("acked", LIMIT, || q.is_empty()),
    )
    .await;
    assert_eq!(q.requests().requests(Action::GetQueueAttributes), 1);
    assert_eq!(q.requests().visibility_changes(), 2 * 4);
    assert!(seen.lock().unwrap().values().all(|n| *n == 1));
}

#[tokio::test(start_paused = true)]
async fn the_builder_timeout_overrides_the_queue_timeout() {
    let q = queue(30);
    q.send("m").unwrap();
    let consumer = Consumer::in_memory(&q)
        .visibility_timeout(secs(4))
        .build()
        .unwrap();
    let d = take_one(&consumer).await;
    assert_eq!(d.deadline(), d.received_at() + secs(4));
    assert_eq!(q.requests().requests(Action::GetQueueAttributes), 0);
    let received = d.received_at();
    drop(d);
    // Back after 4 s, not 30 s.
    sleep_until_after(received + secs(4)).await;
    assert_eq!(q.receive(1, Duration::ZERO).await.unwrap().len(), 1);
}

async fn sleep_until_after(t: Instant) {
    tokio::time::sleep_until(t).await;
}

#[tokio::test(start_paused = true)]
async fn a_redriven_message_leaves_and_the_consumer_carries_on() {
    let dlq = MemoryQueue::new();
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(5))
        .dead_letter_queue(&dlq, 3)
        .build()
        .unwrap();
    q.send("poison").unwrap();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let handler = |d: Delivery| async move {
        if d.body() == "poison" {
            d.release().await
        } else {
            d.ack().await
        }
    };
    run_while(&consumer, handler, async {
        eventually("moved to the DLQ", LIMIT, || dlq.len() == 1).await;
        q.send("good").unwrap();
        eventually("good acked", LIMIT, || q.is_empty()).await;
    })
    .await;
    let moved = dlq.receive(1, Duration::ZERO).await.unwrap();
    assert_eq!(moved[0].body(), Some("poison"));
}

#[tokio::test(start_paused = true)]
async fn a_message_handed_out_late_in_a_long_poll_gets_its_whole_timeout() {
    // The long poll is sent at 0 s; the message arrives at 12 s, more than a timeout later.
    // Its visibility counts from the hand-out (less the 1 s allowed for the answer's way
    // back), so the keeper must not count it as lapsed.
    let q = queue(5);
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let sender = q.clone();
    tokio::spawn(async move {
        sleep(secs(12)).await;
        sender.send("late").unwrap();
    });
    let seen = Seen::default();
    let s = seen.clone();
    let handler = move |d: Delivery| {
        let s = s.clone();
        async move {
            count(&s, d.body());
            assert_eq!(d.deadline(), Instant::now() + secs(5) - secs(1));
            sleep(secs(20)).await;
            assert!(!d.is_lost());
            d.ack().await
        }
    };
    run_while(
        &consumer,
        handler,
        eventually("acked", LIMIT, || q.requests().deletes() == 1),
    )
    .await;
    assert!(q.is_empty());
    assert_eq!(seen.lock().unwrap()["late"], 1);
    assert_eq!(consumer.stats().lost, 0);
}

fn queue_with_50_ms_requests() -> MemoryQueue {
    MemoryQueue::builder()
        .latency(Duration::from_millis(50))
        .build()
        .unwrap()
}

/// Drains 1,000 messages through a queue whose requests take 50 ms, with instant handlers,
/// by a consumer `configure` sets up further; returns how long that took (virtual time).
async fn drain_with_latency(
    max_concurrent_receives: usize,
    configure: impl FnOnce(ConsumerBuilder) -> ConsumerBuilder,
) -> Duration {
    let q = queue_with_50_ms_requests();
    for i in 0..1_000 {
        q.send(format!("m{i}")).unwrap();
    }
    let builder = Consumer::in_memory(&q)
        .max_in_flight(100)
        .max_concurrent_receives(max_concurrent_receives);
    let consumer = configure(builder).build().unwrap();
    time_to_drain(&q, &consumer).await
}

/// How long `consumer` takes to drain `q` with instant handlers (virtual time).
async fn time_to_drain(q: &MemoryQueue, consumer: &Consumer) -> Duration {
    let start = Instant::now();
    run_while(
        consumer,
        |d: Delivery| d.ack(),
        eventually("drained", LIMIT, || q.is_empty()),
    )
    .await;
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn concurrent_receives_keep_the_consumer_busy_when_requests_take_time() {
    // One receive at a time: 100 receives of 10, 50 ms each.
    let alone = drain_with_latency(1, |b| b).await;
    assert!(alone >= secs(5), "{alone:?}");
    let together = drain_with_latency(8, |b| b).await;
    assert!(
        together * 3 < alone,
        "{together:?} with 8, {alone:?} with 1"
    );
}

/// Drains `messages` through a queue whose requests take 50 ms, with instant handlers, by a
/// consumer of `max_in_flight` slots and otherwise default settings; the messages a second,
/// as a fraction of the limit the round trip sets (each slot busy one round trip a message:
/// the receive that brings it; its delete is sent, and the slot comes free).
async fn fraction_of_the_round_trip_limit(messages: usize, max_in_flight: usize) -> f64 {
    let q = queue_with_50_ms_requests();
    for i in 0..messages {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .max_in_flight(max_in_flight)
        .build()
        .unwrap();
    let took = time_to_drain(&q, &consumer).await;
    let limit = max_in_flight as f64 / 0.05;
    messages as f64 / took.as_secs_f64() / limit
}

/// At a round trip, every slot stays busy: a slot comes free as its delivery's ack is sent,
/// deletes go out as soon as their batch is whole, however many are under way, and receives
/// under way follow the slots up to as many as they can fill.
#[tokio::test(start_paused = true)]
async fn at_a_round_trip_a_busy_queue_keeps_every_slot_busy() {
    // Ten seconds' worth at the limit, from the first request (reading the queue's
    // visibility timeout) to the last delete's answer.
    let default_slots = fraction_of_the_round_trip_limit(8_000, 40).await;
    assert!(default_slots >= 0.95, "{default_slots:.3} of the limit");
    let many_slots = fraction_of_the_round_trip_limit(40_000, 200).await;
    assert!(many_slots >= 0.95, "{many_slots:.3} of the limit");
}

/// Ten messages, `action`'s answers held 10 s (the rest at once), a consumer of one slot
/// running `handler`: the receives sent and the stats after 5 s.
async fn five_seconds_with_answers_held(action: Action, handler: impl Handler) -> (u64, Stats) {
    let faults = Faults::new(1).held_answer(1.0, secs(10)).actions([action]);
    let q = MemoryQueue::builder().faults(faults).build().unwrap();
    for i in 0..10 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).max_in_flight(1).build().unwrap();
    let at_5_s = async {
        sleep(secs(5)).await;
        let receives = q.requests().requests(Action::ReceiveMessage);
        (receives, consumer.stats())
    };
    run_while(&consumer, handler, at_5_s).await
}

/// A delivery's slot comes free once its ack is sent, not when the delete is answered; but
/// no more than twice `max_in_flight` acks go unanswered with their slots given back: past
/// that an ack keeps its slot, and receives wait.
#[tokio::test(start_paused = true)]
async fn a_slot_comes_free_as_its_ack_is_sent_while_few_acks_wait_for_answers() {
    let acks = |d: Delivery| d.ack();
    let (receives, stats) = five_seconds_with_answers_held(Action::DeleteMessageBatch, acks).await;
    // The first two acks gave their slots back at once; the third keeps its slot.
    assert_eq!(receives, 3);
    assert_eq!((stats.acked, stats.in_flight), (0, 1), "{stats:?}");
}

/// A release keeps its slot until it is answered: its message is visible again at once, and
/// a receive started on its slot would split it from the others released with it.
#[tokio::test(start_paused = true)]
async fn a_release_keeps_its_slot_until_it_is_answered() {
    let releases = |d: Delivery| d.release();
    let action = Action::ChangeMessageVisibilityBatch;
    let (receives, stats) = five_seconds_with_answers_held(action, releases).await;
    assert_eq!(receives, 1);
    assert_eq!((stats.released, stats.in_flight), (0, 1), "{stats:?}");
}

/// While a receive is under way and more are wanted, one more starts as soon as acks free a
/// whole batch of slots, not when the receive under way comes back.
#[tokio::test(start_paused = true)]
async fn a_receive_starts_once_acks_free_its_slots_while_another_waits() {
    let q = queue_with_50_ms_requests();
    for i in 0..20 {
        q.send(format!("m{i}")).unwrap();
    }
    // Two full answers bring the receives wanted to three: the third long-polls the emptied
    // queue for 20 s, while the first answer's ten are acked after a second and the second's
    // are held.
    let consumer = Consumer::in_memory(&q).max_in_flight(30).build().unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let handler = move |d: Delivery| {
        let quick = handled.fetch_add(1, Ordering::SeqCst) < 10;
        async move {
            sleep(secs(if quick { 1 } else { 60 })).await;
            d.ack().await
        }
    };
    let receives_at = |at: Duration| {
        let q = q.clone();
        async move {
            sleep(at).await;
            q.requests().requests(Action::ReceiveMessage)
        }
    };
    let receives = run_while(
        &consumer,
        handler,
        receives_at(Duration::from_millis(1_500)),
    )
    .await;
    // The first two, the long poll, and the one the freed slots started.
    assert_eq!(receives, 4);
}

/// A receive beside the one under way that cannot start for want of tokens, with a whole
/// batch of slots free, leaves the loop waiting for an answer or a token: it does not wait
/// for slots that are free already (which would spin, and on the paused clock never let
/// time move).
#[tokio::test(start_paused = true)]
async fn short_of_tokens_with_slots_free_the_receive_loop_waits_without_spinning() {
    let q = queue_with_50_ms_requests();
    for i in 0..30 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .max_in_flight(20)
        .max_receive_rate(10.0)
        .build()
        .unwrap();
    // Ten at once, then ten a second: the last ten come about 2 s in.
    let took = time_to_drain(&q, &consumer).await;
    assert!(took < secs(4), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn under_a_rate_limit_more_receives_start_on_the_tokens_there() {
    // 5,000 a second (a burst of 10) leaves the 50 ms requests the bound: one receive of 2
    // at a time takes 25 s; more receives start on the tokens there when an answer comes.
    let limited = |b: ConsumerBuilder| b.receive_batch_size(2).max_receive_rate(5_000.0);
    let alone = drain_with_latency(1, limited).await;
    assert!(alone >= secs(25), "{alone:?}");
    let together = drain_with_latency(8, limited).await;
    assert!(
        together * 3 < alone,
        "{together:?} with 8, {alone:?} with 1"
    );
}

/// A queue whose requests take 50 ms holding a burst of `messages`, and a consumer that may
/// keep 8 receives under way for them.
fn a_burst_for_up_to_8_receives(messages: usize) -> (MemoryQueue, Consumer) {
    let q = queue_with_50_ms_requests();
    for i in 0..messages {
        q.send(format!("burst {i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .max_in_flight(100)
        .max_concurrent_receives(8)
        .build()
        .unwrap();
    (q, consumer)
}

/// After a burst has brought the receives under way up to 8, a trickle of one message every
/// 10 ms on a queue whose requests take 50 ms; returns the receives the trickle took.
async fn receives_for_a_trickle_after_a_burst() -> u64 {
    const TRICKLE: usize = 200;
    let (q, consumer) = a_burst_for_up_to_8_receives(100);
    let acked = Arc::new(AtomicUsize::new(0));
    let handler = {
        let acked = acked.clone();
        move |d: Delivery| {
            let acked = acked.clone();
            async move {
                d.ack().await?;
                acked.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(())
            }
        }
    };
    // Returns the receives made before the trickle.
    let trickle = {
        let (q, acked) = (q.clone(), acked.clone());
        async move {
            eventually("the burst acked", LIMIT, || {
                acked.load(Ordering::SeqCst) == 100
            })
            .await;
            let before = q.requests().requests(Action::ReceiveMessage);
            for i in 0..TRICKLE {
                q.send(format!("trickle {i}")).unwrap();
                sleep(Duration::from_millis(10)).await;
            }
            eventually("the trickle acked", LIMIT, || {
                acked.load(Ordering::SeqCst) == 100 + TRICKLE
            })
            .await;
            before
        }
    };
    let before = run_while(&consumer, handler, trickle).await;
    q.requests().requests(Action::ReceiveMessage) - before
}

#[tokio::test(start_paused = true)]
async fn short_answers_bring_the_receives_under_way_down_so_a_trickle_comes_in_batches() {
    // With eight long polls waiting, each message would be taken alone as it arrives: one
    // receive per message. Each short answer takes one poll away; one poll at a time, what
    // arrives during a round trip (about five messages) comes in one answer.
    let receives = receives_for_a_trickle_after_a_burst().await;
    assert!(receives <= 200 / 3, "{receives} receives for 200 messages");
}

#[tokio::test(start_paused = true)]
async fn a_drained_queue_comes_back_to_one_long_poll_at_a_time() {
    // A burst brings the receives under way up to 8; once it is acked, the polls still
    // under way wait out their 20 s, and from then on one long poll waits at a time.
    let (q, consumer) = a_burst_for_up_to_8_receives(100);
    let waiting = |c: &RequestCounts| {
        c.requests(Action::ReceiveMessage) - c.empty_receives() - c.non_empty_receives()
    };
    let quiet_minutes = async {
        eventually("the burst acked", LIMIT, || q.is_empty()).await;
        let at_drain = q.requests();
        sleep(secs(120)).await;
        (at_drain, q.requests())
    };
    let (at_drain, after) = run_while(&consumer, |d: Delivery| d.ack(), quiet_minutes).await;
    assert_eq!(
        waiting(&after),
        1,
        "polls waiting 2 minutes after the drain: {after:?}"
    );
    // Those under way at the drain, then one every 20 s: at most 120 / 20 more.
    let polls = after.empty_receives() - at_drain.empty_receives();
    assert!(
        polls <= waiting(&at_drain) + 6,
        "{polls} empty polls in 2 minutes, {} waiting at the drain",
        waiting(&at_drain)
    );
}

/// Receives sent in each of two seconds on a queue whose requests take 50 ms, holding more
/// messages than either second takes, by a consumer that may keep 8 receives under way: in
/// the first, every delivery is released at once; in the second, every delivery is acked.
async fn receives_while_releasing_at_once_then_acking() -> (u64, u64) {
    let (q, consumer) = a_burst_for_up_to_8_receives(3_000);
    let acking = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handler = {
        let acking = acking.clone();
        move |d: Delivery| {
            let acking = acking.load(Ordering::SeqCst);
            async move {
                if acking {
                    d.ack().await
                } else {
                    d.release().await
                }
            }
        }
    };
    let two_seconds = async {
        let receives = || q.requests().requests(Action::ReceiveMessage);
        sleep(secs(1)).await;
        let releasing = receives();
        acking.store(true, Ordering::SeqCst);
        sleep(secs(1)).await;
        (releasing, receives() - releasing)
    };
    run_while(&consumer, handler, two_seconds).await
}

#[tokio::test(start_paused = true)]
async fn releases_at_once_bring_the_receives_under_way_back_to_one() {
    // Released at once, messages are visible again when the next answer comes: several
    // receives under way would split them into short answers. One at a time, a second holds
    // 20 receives of 50 ms (and the first answer, before any release, adds one).
    let (releasing, acking) = receives_while_releasing_at_once_then_acking().await;
    assert!(
        releasing <= 22,
        "{releasing} receives in the second of releases"
    );
    // With acks only, full answers bring them up again.
    assert!(
        acking >= 3 * releasing,
        "{acking} receives in the second of acks, {releasing} before"
    );
}

/// 100 messages, each failing its first delivery and released at once, acked on its second:
/// the requests made by the last ack.
async fn requests_when_every_first_delivery_fails() -> RequestCounts {
    const MESSAGES: usize = 100;
    let q = queue_with_50_ms_requests();
    for i in 0..MESSAGES {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let acked = Arc::new(AtomicUsize::new(0));
    let handler = {
        let acked = acked.clone();
        move |d: Delivery| {
            let acked = acked.clone();
            async move {
                if d.receive_count() == 1 {
                    return Err(BoxError::from("fails its first delivery"));
                }
                d.ack().await?;
                acked.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        }
    };
    let all_acked = async {
        eventually("all acked", LIMIT, || {
            acked.load(Ordering::SeqCst) == MESSAGES
        })
        .await;
        q.requests()
    };
    run_while(&consumer, handler, all_acked).await
}

#[tokio::test(start_paused = true)]
async fn failures_released_at_once_cost_the_floor_releases_go_in_tens_like_acks() {
    // The floor: each message comes in a receive of 10 twice, its release and its delete
    // each an entry of a request of 10.
    let counts = requests_when_every_first_delivery_fails().await;
    let requests = |a| counts.requests(a);
    assert_eq!(
        (
            requests(Action::ChangeMessageVisibilityBatch),
            requests(Action::ChangeMessageVisibility)
        ),
        (10, 0),
        "releases: {counts:?}"
    );
    assert_eq!(
        (
            requests(Action::DeleteMessageBatch),
            requests(Action::DeleteMessage)
        ),
        (10, 0),
        "deletes: {counts:?}"
    );
    // Receives still waiting at the last ack are neither empty nor non-empty yet.
    assert_eq!(
        (counts.non_empty_receives(), counts.empty_receives()),
        (20, 0),
        "receives answered by the last ack: {counts:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_first_receives_acks_share_one_request_though_they_come_apart() {
    // No delete has been answered yet, but the read of the queue's visibility timeout has:
    // its round trip bounds the wait for the receive's other acks, which come 0 to 9 ms
    // after the first.
    let q = queue_with_50_ms_requests();
    for i in 0..10 {
        q.send(i.to_string()).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let handler = |d: Delivery| async move {
        let apart = d.body().parse().unwrap_or(0);
        sleep(Duration::from_millis(apart)).await;
        d.ack().await
    };
    let all_acked = eventually("all acked", LIMIT, || q.is_empty());
    run_while(&consumer, handler, all_acked).await;
    let counts = q.requests();
    assert_eq!(
        (
            counts.requests(Action::DeleteMessageBatch),
            counts.requests(Action::DeleteMessage)
        ),
        (1, 0),
        "{counts:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_busy_queue_never_leaves_free_slots_unused_for_long() {
    // 16 slots, receives of 10: after a full receive the consumer prefers to wait for 10 free
    // slots, but these handlers only finish once all 16 messages have reached a handler.
    let q = queue(30);
    for i in 0..16 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).max_in_flight(16).build().unwrap();
    let all_started = Arc::new(tokio::sync::Barrier::new(16));
    let handler = move |d: Delivery| {
        let all_started = all_started.clone();
        async move {
            all_started.wait().await;
            d.ack().await
        }
    };
    let start = Instant::now();
    run_while(
        &consumer,
        handler,
        eventually("all acked", LIMIT, || q.is_empty()),
    )
    .await;
    assert!(start.elapsed() < secs(1), "{:?}", start.elapsed());
}

/// The test helper that takes deliveries fails the test at once, with the run's error, when
/// the run it watches ends (it should run until the test drops it).
#[tokio::test(start_paused = true)]
#[should_panic(expected = "the consumer's run ended: Ok(Err(")]
async fn the_taker_reports_a_run_that_ended() {
    let q = MemoryQueue::new();
    q.fail_next(Action::ReceiveMessage, "AccessDenied", 1);
    let consumer = Consumer::in_memory(&q)
        .visibility_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut taker = common::Taker::start(consumer);
    let _ = taker.next(Duration::from_secs(1000)).await;
}

/// The receive back-off of `call_retries.rs`: 200 ms doubling to 20 s, each wait drawn
/// between half and all of it.
#[tokio::test(start_paused = true)]
async fn receive_failures_back_off_from_200_ms_doubling_to_at_most_20_s() {
    const FAILURES: u32 = 20;
    let q = queue(30);
    q.send("after the failures").unwrap();
    q.fail_next(Action::ReceiveMessage, "InternalError", FAILURES as usize);
    let consumer = Consumer::in_memory(&q)
        .visibility_timeout(secs(30))
        .build()
        .unwrap();
    let start = Instant::now();
    let d = take_one(&consumer).await;
    let took = start.elapsed();
    let full: Duration = (0..FAILURES)
        .map(|k| (Duration::from_millis(200) * 2u32.pow(k.min(10))).min(secs(20)))
        .sum();
    assert!(
        took >= full / 2 && took <= full,
        "{FAILURES} failures waited {took:?} in all; each wait at full length: {full:?}"
    );
    assert_eq!(d.body(), "after the failures");
}

/// Empty short polls (a wait time of 0) back off from 50 ms doubling to 2 s: the consumer
/// never spins, and never sleeps longer than 2 s between polls.
#[tokio::test(start_paused = true)]
async fn empty_short_polls_back_off_from_50_ms_doubling_to_at_most_2_s() {
    let q = queue(30);
    let consumer = Consumer::in_memory(&q)
        .visibility_timeout(secs(30))
        .wait_time(Duration::ZERO)
        .build()
        .unwrap();
    run_while(&consumer, |d: Delivery| d.ack(), sleep(secs(60))).await;
    let polls = q.requests().empty_receives();
    // The ramp 50 ms ..= 1.6 s takes 6 polls and at most 3.15 s; then one poll every 1 to
    // 2 s for the rest of the minute.
    assert!(
        (6 + 28..=6 + 58).contains(&polls),
        "{polls} empty polls in 60 s"
    );
}

/// A server that answers an empty long poll early (here at once) is backed off as an empty
/// short poll is: 50 ms doubling to 2 s, each wait jittered to between half and all of it.
#[tokio::test(start_paused = true)]
async fn empty_long_polls_answered_early_back_off_as_short_polls_do() {
    use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
    use aws_smithy_mocks::mock;
    use common::sdk::{mocked, URL};

    const RECEIVES: usize = 20;
    let (count, twentieth) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(tokio::sync::Notify::new()),
    );
    let (counted, notify) = (count.clone(), twentieth.clone());
    let empty = mock!(aws_sdk_sqs::Client::receive_message)
        .match_requests(|r| r.wait_time_seconds() == Some(20))
        .then_output(move || {
            if counted.fetch_add(1, Ordering::SeqCst) + 1 == RECEIVES {
                notify.notify_one();
            }
            ReceiveMessageOutput::builder().build()
        });
    let consumer = Consumer::builder(mocked(&[&empty]), URL)
        .visibility_timeout(secs(10))
        .build()
        .unwrap();
    let start = Instant::now();
    run_while(&consumer, |d: Delivery| d.ack(), twentieth.notified()).await;
    let took = start.elapsed();
    // 19 waits: the ramp 50 ms ..= 1.6 s, then 2 s each; jitter takes each to half or more.
    let ramp = [50, 100, 200, 400, 800, 1600].map(Duration::from_millis);
    let longest = ramp.iter().sum::<Duration>() + secs(2) * (RECEIVES - 1 - ramp.len()) as u32;
    assert!(
        (longest / 2..=longest).contains(&took),
        "{RECEIVES} early empty answers took {took:?}, not {:?} to {longest:?}",
        longest / 2
    );
    assert_eq!(count.load(Ordering::SeqCst), RECEIVES);
}

/// A resume starts one receive, as the start does, however many were under way before the
/// pause: the queue may have changed meanwhile, and more follow as answers come back full.
#[tokio::test(start_paused = true)]
async fn a_resume_starts_one_receive_however_many_were_under_way_before_the_pause() {
    let (q, consumer) = a_burst_for_up_to_8_receives(2_000);
    let waiting = |c: &RequestCounts| {
        c.requests(Action::ReceiveMessage) - c.empty_receives() - c.non_empty_receives()
    };
    let pause_and_resume = async {
        let mut before = 0;
        for _ in 0..1_000 {
            before = before.max(waiting(&q.requests()));
            sleep(Duration::from_millis(1)).await;
        }
        consumer.pause();
        eventually("the receives in", LIMIT, || waiting(&q.requests()) == 0).await;
        sleep(secs(1)).await;
        consumer.resume();
        // Less than the 50 ms a request takes: none has been answered yet.
        sleep(Duration::from_millis(10)).await;
        (before, waiting(&q.requests()))
    };
    let (before, after) = run_while(&consumer, |d: Delivery| d.ack(), pause_and_resume).await;
    assert!(
        before >= 4 && after == 1,
        "receives under way: {before} before the pause, {after} after the resume"
    );
}

/// The test helper fails the test when a handler panicked, though the consumer carried on
/// (an assert in a handler would otherwise go unseen).
#[tokio::test(start_paused = true)]
#[should_panic(expected = "a handler panicked")]
async fn run_while_reports_a_handler_that_panicked() {
    let q = queue(30);
    q.send("job").unwrap();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let handler = |_d: Delivery| async move {
        assert_eq!(1 + 1, 3, "an assert in a handler");
        Ok::<(), Error>(())
    };
    run_while(&consumer, handler, sleep(secs(10))).await;
}

/// `receive_batch_size` is the most messages one receive asks for: a batch handler sees batches of
/// at most that many.
#[tokio::test(start_paused = true)]
async fn batch_size_caps_what_one_receive_brings() {
    let q = queue(30);
    for i in 0..9 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .receive_batch_size(3)
        .build()
        .unwrap();
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let seen = sizes.clone();
    let handler = move |batch: sqs_consumer::Batch| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(batch.len());
            batch.ack_all().await
        }
    };
    let drained = eventually("the queue drained", LIMIT, || q.is_empty());
    tokio::select! {
        result = consumer.run_batch(handler) => panic!("run_batch ended: {result:?}"),
        () = drained => {}
    }
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(sizes.iter().sum::<usize>(), 9);
    assert_eq!(sizes.iter().max(), Some(&3), "{sizes:?}");
}

/// `run_batch_until` stops at its signal as `run_until` does: no receive after it, the
/// running batch handler finishes and its acks go through, then it returns.
#[tokio::test(start_paused = true)]
async fn run_batch_until_stops_at_its_signal_after_the_running_batch() {
    let q = queue(30);
    for i in 0..3 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .wait_time(secs(1))
        .shutdown_timeout(secs(10))
        .build()
        .unwrap();
    let handler = |batch: sqs_consumer::Batch| async move {
        sleep(secs(3)).await; // still running at the signal
        batch.ack_all().await
    };
    let start = Instant::now();
    tokio::time::timeout(secs(100), consumer.run_batch_until(handler, sleep(secs(1))))
        .await
        .expect("returned after the signal")
        .unwrap();
    assert_eq!(
        start.elapsed(),
        secs(3),
        "returned once the batch was acked"
    );
    assert!(q.is_empty());
    q.send("after the signal").unwrap();
    sleep(secs(5)).await;
    assert_eq!(q.visible_len(), 1, "nothing receives after the stop");
}

/// Without a rate limit or a shared budget, a receive counts the queue busy only when it
/// brings a whole batch. One that asked for fewer (the other slots were held) and got them
/// is no sign of more: the next receive takes the first slot freed, without waiting to
/// gather a batch.
#[tokio::test(start_paused = true)]
async fn a_receive_short_of_a_batch_does_not_make_the_next_wait_to_gather_one() {
    use futures::StreamExt;

    let q = queue(30);
    for i in 0..10 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .receive_batch_size(2)
        .max_in_flight(3)
        .build()
        .unwrap();
    let mut deliveries = consumer.stream();
    let mut next = async || {
        let d = tokio::time::timeout(secs(60), deliveries.next()).await;
        d.expect("a delivery within 60 s")
            .expect("a delivery")
            .unwrap()
    };
    // A whole batch of 2, then the one slot left: a receive of 1, answered in full.
    let first = next().await;
    let _held = (next().await, next().await);
    assert_eq!(q.requests().non_empty_receives(), 2);
    let freed = Instant::now();
    first.ack().await.unwrap();
    let _fourth = next().await;
    assert!(
        freed.elapsed() < Duration::from_millis(20),
        "the fourth came {:?} after a slot was freed",
        freed.elapsed()
    );
}

/// Under a budget shared with other consumers, a receive on a quiet queue asks for one
/// message; one that comes back full (as many as it asked for) counts the queue busy, so
/// the next asks for a whole batch.
#[tokio::test(start_paused = true)]
async fn under_a_shared_budget_a_full_receive_of_one_brings_a_batch_next() {
    let q = queue(30);
    for i in 0..21 {
        q.send(format!("m{i}")).unwrap();
    }
    let limit = sqs_consumer::InFlightLimit::new(100);
    let consumer = Consumer::in_memory(&q)
        .shared_in_flight_limit(&limit)
        .max_concurrent_receives(1)
        .build()
        .unwrap();
    let drained = eventually("drained", LIMIT, || q.is_empty());
    run_while(&consumer, |d: Delivery| d.ack(), drained).await;
    // A receive of 1, then two of 10.
    assert_eq!(q.requests().non_empty_receives(), 3, "{:?}", q.requests());
}

/// A clone is the same consumer: what one pauses the other sees paused, their stats are one,
/// and a clone's `shutdown` ends a run of the original.
#[tokio::test(start_paused = true)]
async fn a_clone_is_the_same_consumer() {
    let q = queue(30);
    q.send("one").unwrap();
    let consumer = Consumer::in_memory(&q).wait_time(secs(1)).build().unwrap();
    let clone = consumer.clone();
    clone.pause();
    assert!(consumer.is_paused(), "paused through the clone");
    consumer.resume();
    assert!(!clone.is_paused(), "resumed through the original");
    let watcher = consumer.clone();
    let stopper = tokio::spawn(async move {
        eventually("the ack", LIMIT, || watcher.stats().acked == 1).await;
        watcher.shutdown();
    });
    tokio::time::timeout(LIMIT, consumer.run(|d: Delivery| d.ack()))
        .await
        .expect("the clone's shutdown ends the run")
        .unwrap();
    stopper.await.unwrap();
    assert_eq!(clone.stats().acked, 1, "one set of counters");
    assert!(q.is_empty());
}
