//! Graceful shutdown, retry policy, lost-ack safety, stats, the stream and FIFO waiting, and
//! how a run ends when its receive loop panics or loses its runtime, on `MemoryQueue` and
//! tokio's paused clock.

use crate::common;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, memory_fifo as fifo, memory_queue as queue, run_while, secs};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use sqs_consumer::memory::{Action, SendOptions};
use sqs_consumer::{Batch, BoxError, Consumer, Delivery, Error, Handler, MemoryQueue, RetryPolicy};
use tokio::sync::mpsc;
use tokio::time::{sleep, sleep_until, Instant};

const LIMIT: Duration = Duration::from_secs(1000);

/// A signal that fires after `after`, noting how many receives had been sent by then.
fn signal_after(
    q: &MemoryQueue,
    after: Duration,
    receives: Arc<AtomicU64>,
) -> impl std::future::Future<Output = ()> {
    let q = q.clone();
    async move {
        sleep(after).await;
        receives.store(
            q.requests().requests(Action::ReceiveMessage),
            Ordering::SeqCst,
        );
    }
}

// ---- graceful shutdown ----

#[tokio::test(start_paused = true)]
async fn running_handlers_finish_and_ack_and_no_receive_starts_after_the_signal() {
    let q = queue(10);
    for i in 0..3 {
        q.send(format!("m{i}")).unwrap();
    }
    q.send("never received").unwrap();
    let consumer = Consumer::in_memory(&q)
        .max_in_flight(3)
        .shutdown_timeout(secs(30))
        .build()
        .unwrap();
    let handler = |d: Delivery| async move {
        sleep(secs(25)).await; // past two timeouts: the keeper runs through the drain
        d.ack().await
    };
    let at_signal = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    consumer
        .run_until(handler, signal_after(&q, secs(1), at_signal.clone()))
        .await
        .unwrap();
    assert_eq!(
        start.elapsed(),
        secs(25),
        "returned when the last handler finished"
    );
    assert_eq!(
        q.requests().requests(Action::ReceiveMessage),
        at_signal.load(Ordering::SeqCst)
    );
    assert_eq!(q.len(), 1, "the three were acked");
    assert_eq!(q.visible_len(), 1);
    let stats = consumer.stats();
    assert_eq!((stats.acked, stats.lost, stats.in_flight), (3, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn the_signal_sends_no_new_receive_and_awaits_the_one_under_way() {
    let q = queue(30);
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let at_signal = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    consumer
        .run_until(
            |d: Delivery| d.ack(),
            signal_after(&q, secs(3), at_signal.clone()),
        )
        .await
        .unwrap();
    // The long poll (20 s) had started at 0 s; the signal came at 3 s; nothing arrived.
    assert_eq!(start.elapsed(), secs(20), "the poll's wait: not abandoned");
    assert_eq!(q.requests().requests(Action::ReceiveMessage), 1);
    assert_eq!(at_signal.load(Ordering::SeqCst), 1);
    // A message sent now stays with the queue: nothing is receiving.
    q.send("later").unwrap();
    sleep(secs(1)).await;
    assert_eq!(q.visible_len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_message_the_awaited_poll_brings_after_the_signal_is_handled() {
    let q = queue(30);
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let send_later = async {
        sleep(secs(5)).await;
        q.send("after the signal").unwrap();
    };
    let start = Instant::now();
    let (result, ()) = tokio::join!(
        consumer.run_until(|d: Delivery| d.ack(), sleep(secs(3))),
        send_later
    );
    result.unwrap();
    let took = start.elapsed();
    assert!(took >= secs(5) && took < secs(6), "{took:?}");
    assert_eq!(q.requests().requests(Action::ReceiveMessage), 1);
    assert_eq!(consumer.stats().acked, 1);
    assert!(q.is_empty());
}

/// A handler that counts its calls and then holds its delivery for an hour: whatever it is
/// handed is still held when a shutdown times out.
fn counting_handler_that_hangs() -> (
    Arc<AtomicUsize>,
    impl Fn(Delivery) -> futures::future::BoxFuture<'static, Result<(), Error>> + Clone,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let handler = move |d: Delivery| -> futures::future::BoxFuture<'static, Result<(), Error>> {
        c.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            sleep(secs(3600)).await;
            d.ack().await
        })
    };
    (calls, handler)
}

#[tokio::test(start_paused = true)]
async fn what_the_awaited_poll_brings_after_the_shutdown_timeout_is_released_not_handled() {
    let q = queue(30);
    q.send("held").unwrap();
    let consumer = Consumer::in_memory(&q)
        .shutdown_timeout(secs(1))
        .build()
        .unwrap();
    let (calls, handler) = counting_handler_that_hangs();
    // Signal at 1 s, so the shutdown timeout ends at 2 s; the poll under way brings one more
    // message at 5 s.
    let send_later = async {
        sleep(secs(5)).await;
        q.send("late").unwrap();
    };
    let start = Instant::now();
    let (result, ()) = tokio::join!(consumer.run_until(handler, sleep(secs(1))), send_later);
    result.unwrap();
    let took = start.elapsed();
    assert!(took >= secs(5) && took < secs(6), "{took:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the late one reached no handler"
    );
    assert_eq!((q.visible_len(), q.in_flight_len()), (2, 0));
    assert_eq!(consumer.stats().released, 2);
}

#[tokio::test(start_paused = true)]
async fn a_late_arrival_reaches_no_handler_and_waits_for_the_other_receives() {
    let q = queue(30);
    for i in 0..10 {
        q.send(format!("m{i}")).unwrap();
    }
    // The first receive comes back full: two receives wait on the empty queue after it.
    let consumer = Consumer::in_memory(&q)
        .shutdown_timeout(secs(1))
        .build()
        .unwrap();
    let (calls, handler) = counting_handler_that_hangs();
    // Signal at 1 s, shutdown timeout over at 2 s; one message at 5 s, taken by one of the
    // two polls while the other still waits (until 20 s).
    let late = async {
        sleep(secs(5)).await;
        q.send("late").unwrap();
        sleep(secs(1)).await;
        q.visible_len()
    };
    let (result, visible_meanwhile) =
        tokio::join!(consumer.run_until(handler, sleep(secs(1))), late);
    result.unwrap();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        10,
        "the late one reached no handler"
    );
    assert_eq!(
        visible_meanwhile, 0,
        "kept hidden while the other poll waits: released, it would be taken again"
    );
    assert_eq!((q.visible_len(), q.in_flight_len()), (11, 0));
    assert_eq!(
        q.requests().requests(Action::ReceiveMessage),
        3,
        "no receive after the signal"
    );
}

#[tokio::test(start_paused = true)]
async fn at_the_shutdown_timeout_held_messages_are_released_and_visible_at_once() {
    let q = queue(30);
    for i in 0..4 {
        q.send(format!("m{i}")).unwrap();
    }
    // The poll under way at the signal ends (at 2 s) before the shutdown timeout (at 3 s).
    let consumer = Consumer::in_memory(&q)
        .shutdown_timeout(secs(2))
        .wait_time(secs(2))
        .build()
        .unwrap();
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    let handler = move |d: Delivery| {
        let f = f.clone();
        async move {
            sleep(secs(3600)).await;
            f.fetch_add(1, Ordering::SeqCst);
            d.ack().await
        }
    };
    let start = Instant::now();
    consumer.run_until(handler, sleep(secs(1))).await.unwrap();
    assert_eq!(
        start.elapsed(),
        secs(3),
        "signal at 1 s plus the 2 s timeout"
    );
    assert_eq!(q.visible_len(), 4, "released when run_until returns");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the handlers were cancelled"
    );
    let stats = consumer.stats();
    assert_eq!((stats.released, stats.in_flight), (4, 0));
    let extensions = q.requests().visibility_changes();
    sleep(secs(120)).await;
    assert_eq!(
        q.requests().visibility_changes(),
        extensions,
        "no lease left kept"
    );
}

#[tokio::test(start_paused = true)]
async fn an_ack_under_way_when_the_timeout_hits_still_completes() {
    let q = queue(30);
    q.send("m").unwrap();
    let consumer = Consumer::in_memory(&q)
        .shutdown_timeout(secs(1))
        .build()
        .unwrap();
    let handler = |d: Delivery| async move {
        sleep(Duration::from_millis(1_800)).await;
        d.ack().await // retried for a while: the first three deletes fail
    };
    q.fail_next(Action::DeleteMessage, "InternalError", 3);
    consumer.run_until(handler, sleep(secs(1))).await.unwrap();
    assert!(
        q.is_empty(),
        "the delete went through although its handler was cancelled"
    );
    assert_eq!(
        consumer.stats().released,
        0,
        "an acked message is not released"
    );
}

#[tokio::test(start_paused = true)]
async fn acks_during_the_drain_are_not_lost() {
    let q = queue(30);
    for i in 0..5 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let handler = |d: Delivery| async move {
        sleep(secs(2)).await;
        d.ack().await
    };
    consumer.run_until(handler, sleep(secs(1))).await.unwrap();
    assert!(q.is_empty());
    assert_eq!(consumer.stats().acked, 5);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_run_future_releases_and_lets_go_of_every_lease_and_receive() {
    let q = queue(30);
    for i in 0..3 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let handler = |d: Delivery| async move {
        let _held = d;
        sleep(secs(3600)).await;
        Ok::<(), Error>(())
    };
    run_while(&consumer, handler, sleep(secs(40))).await; // the run future is dropped here
    eventually("released", LIMIT, || q.visible_len() == 3).await;
    let extensions = q.requests().visibility_changes();
    sleep(secs(300)).await;
    assert_eq!(
        q.requests().visibility_changes(),
        extensions,
        "no lease left kept"
    );
    assert_eq!(q.visible_len(), 3, "no receive left either");
    assert_eq!(consumer.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn fifo_deliveries_waiting_their_turn_are_released_at_shutdown() {
    let q = fifo(30);
    for body in ["a", "b", "c"] {
        q.send_with(body, SendOptions::new().group_id("g")).unwrap();
    }
    // The poll under way at the signal (1 s) ends at 2 s, while "a" is still handled.
    let consumer = Consumer::in_memory(&q).wait_time(secs(2)).build().unwrap();
    let handled = Arc::new(Mutex::new(Vec::new()));
    let h = handled.clone();
    let handler = move |d: Delivery| {
        let h = h.clone();
        async move {
            h.lock().unwrap().push(d.body().to_owned());
            sleep(secs(5)).await;
            d.ack().await
        }
    };
    consumer.run_until(handler, sleep(secs(1))).await.unwrap();
    assert_eq!(
        *handled.lock().unwrap(),
        ["a"],
        "b and c never reached the handler"
    );
    assert_eq!(q.len(), 2);
    assert_eq!(consumer.stats().released, 2);
    // They come back in order.
    let again = q.receive(10, Duration::ZERO).await.unwrap();
    let bodies: Vec<_> = again.iter().map(|m| m.body().unwrap()).collect();
    assert_eq!(bodies, ["b", "c"]);
}

// ---- FIFO waiting ----

#[tokio::test(start_paused = true)]
async fn fifo_deliveries_stay_kept_while_they_wait() {
    let q = fifo(10);
    for body in ["slow", "next"] {
        q.send_with(body, SendOptions::new().group_id("g")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handler = move |d: Delivery| {
        let tx = tx.clone();
        async move {
            if d.body() == "slow" {
                sleep(secs(35)).await;
            }
            let _ = tx.send((d.body().to_owned(), d.receive_count(), Instant::now()));
            d.ack().await
        }
    };
    let start = Instant::now();
    run_while(&consumer, handler, async {
        let (first, _, _) = rx.recv().await.unwrap();
        let (second, count, at) = rx.recv().await.unwrap();
        assert_eq!((first.as_str(), second.as_str()), ("slow", "next"));
        assert_eq!(count, 1, "the waiting one was never redelivered");
        assert_eq!(at - start, secs(35));
    })
    .await;
    // Both extended every 5 s while "slow" ran, together, 6 times each (5 to 30 s); at 35 s
    // "slow" is being acked, so its round is not sent, and "next" is extended once more
    // unless its own ack (right after) came first.
    let changes = q.requests().visibility_changes();
    assert!((12..=13).contains(&changes), "{changes}");
    let requests = q.requests().requests(Action::ChangeMessageVisibilityBatch);
    assert_eq!(
        requests,
        changes.div_ceil(2),
        "the two share each round's request"
    );
}

// ---- retry policy ----

/// Runs a consumer whose handler fails `failures` times, then acks; returns the receive times.
async fn redelivery_times(policy: RetryPolicy, visibility: u64, failures: u32) -> Vec<Duration> {
    let q = queue(visibility);
    q.send("flaky").unwrap();
    let consumer = Consumer::in_memory(&q)
        .retry_policy(policy)
        .build()
        .unwrap();
    let start = Instant::now();
    let times = Arc::new(Mutex::new(Vec::new()));
    let t = times.clone();
    let handler = move |d: Delivery| {
        let t = t.clone();
        async move {
            t.lock().unwrap().push(start.elapsed());
            if d.receive_count() <= failures {
                return Err(anyhow::anyhow!("failure {}", d.receive_count()));
            }
            d.ack().await?;
            Ok(())
        }
    };
    run_while(
        &consumer,
        handler,
        eventually("acked", LIMIT * 10, || q.is_empty()),
    )
    .await;
    assert_eq!(consumer.stats().handler_errors, u64::from(failures));
    let times = times.lock().unwrap().clone();
    assert_eq!(times.len(), failures as usize + 1);
    times
}

#[tokio::test(start_paused = true)]
async fn retry_leave_waits_for_the_visibility_timeout() {
    let t = redelivery_times(RetryPolicy::Leave, 30, 2).await;
    assert_eq!((t[1] - t[0], t[2] - t[1]), (secs(30), secs(30)));
}

#[tokio::test(start_paused = true)]
async fn retry_release_now_redelivers_at_once() {
    let t = redelivery_times(RetryPolicy::ReleaseNow, 30, 2).await;
    assert_eq!((t[1] - t[0], t[2] - t[1]), (Duration::ZERO, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn retry_backoff_grows_with_the_receive_count() {
    let policy = RetryPolicy::backoff(secs(10), secs(30));
    let t = redelivery_times(policy, 300, 4).await;
    // 10, 20, 30 (capped), 30 s, each jittered to between half and all of it.
    for (i, full) in [10, 20, 30, 30].into_iter().enumerate() {
        let gap = t[i + 1] - t[i];
        assert!(
            gap >= secs(full / 2) && gap <= secs(full),
            "retry {}: {gap:?}",
            i + 1
        );
    }
}

#[tokio::test(start_paused = true)]
async fn retry_backoff_never_asks_past_the_12_hour_limit() {
    let q = queue(60);
    q.send("old").unwrap();
    let consumer = Consumer::in_memory(&q)
        .retry_policy(RetryPolicy::backoff(secs(3600), secs(3600)))
        .build()
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handler = move |d: Delivery| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Instant::now());
            if d.receive_count() == 1 {
                // Fail just before the 12-hour limit: at most 10 s of it are left.
                sleep_until(d.hard_deadline() - secs(15)).await;
                return Err("late failure");
            }
            d.ack().await.map_err(|_| "ack")
        }
    };
    run_while(&consumer, handler, async {
        let first = rx.recv().await.unwrap();
        let second = rx.recv().await.unwrap();
        let gap = second - (first + secs(12 * 3600 - 15));
        assert!(gap <= secs(10), "released for {gap:?}, past the limit");
    })
    .await;
    assert_eq!(
        consumer.stats().released,
        1,
        "SQS accepted the shortened release"
    );
}

#[tokio::test(start_paused = true)]
async fn an_explicit_release_after_wins_over_the_policy() {
    let q = queue(30);
    q.send("m").unwrap();
    let consumer = Consumer::in_memory(&q)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handler = move |d: Delivery| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Instant::now());
            if d.receive_count() == 1 {
                d.release_after(secs(50)).await?;
                return Err(anyhow::anyhow!("failed after scheduling a retry"));
            }
            d.ack().await?;
            Ok(())
        }
    };
    run_while(&consumer, handler, async {
        let first = rx.recv().await.unwrap();
        let second = rx.recv().await.unwrap();
        assert_eq!(second - first, secs(50));
    })
    .await;
}

// ---- lost-ack safety ----

#[tokio::test(start_paused = true)]
async fn a_message_whose_ack_was_lost_is_deleted_on_redelivery_without_the_handler() {
    let q = queue(10);
    q.send("m").unwrap();
    // Every extension fails: the delivery is lost at its first deadline (10 s).
    q.fail_next(Action::ChangeMessageVisibility, "InternalError", 1_000);
    let consumer = Consumer::in_memory(&q).max_in_flight(1).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let (c, raw) = (calls.clone(), q.clone());
    let handler = move |d: Delivery| {
        let (c, raw) = (c.clone(), raw.clone());
        async move {
            c.fetch_add(1, Ordering::SeqCst);
            d.lost().await;
            // Someone else receives it meanwhile: our receipt handle is stale now.
            assert_eq!(raw.receive(1, Duration::ZERO).await.unwrap().len(), 1);
            let err = d
                .ack()
                .await
                .expect_err("the ack fails: the delivery was lost");
            assert!(err.is_lost());
            Ok::<(), Error>(())
        }
    };
    // The other receiver never deletes it; it comes back to us after 10 s more.
    run_while(
        &consumer,
        handler,
        eventually("deleted", LIMIT, || q.is_empty()),
    )
    .await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the handler was not called again"
    );
    let stats = consumer.stats();
    assert_eq!((stats.skipped_redeliveries, stats.lost), (1, 1));
    assert_eq!(
        stats.dead_lettered, 0,
        "the delete finished an ack, not a move"
    );
}

// ---- stats ----

#[tokio::test(start_paused = true)]
async fn stats_count_what_happened() {
    let q = queue(10);
    for body in ["ack", "release", "error", "panic"] {
        q.send(body).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let handler = |d: Delivery| async move {
        match d.body() {
            "ack" => d.ack().await,
            "release" if d.receive_count() == 1 => d.release().await,
            "error" if d.receive_count() == 1 => Err(Error::invalid_for_test()),
            "panic" if d.receive_count() == 1 => panic!("boom"),
            _ => {
                sleep(secs(12)).await; // one extension at 5 s and at 10 s
                d.ack().await
            }
        }
    };
    common::run_while_expecting_panics(
        &consumer,
        handler,
        eventually("all acked", LIMIT, || q.is_empty()),
    )
    .await;
    let s = consumer.stats();
    assert_eq!(s.received, 7, "four, then three again");
    assert_eq!(s.acked, 4);
    assert_eq!(s.released, 1);
    assert_eq!(s.handler_errors, 1);
    assert_eq!(s.handler_panics, 1);
    assert_eq!(s.extended, 6, "two each for the three second receives");
    assert_eq!(
        (s.lost, s.extension_failures, s.skipped_redeliveries),
        (0, 0, 0)
    );
    assert_eq!(s.in_flight, 0);
}

trait ForTest {
    fn invalid_for_test() -> Self;
}

impl ForTest for Error {
    fn invalid_for_test() -> Self {
        // Any error will do: build one through the public API.
        MemoryQueue::builder()
            .visibility_timeout(secs(50_000))
            .build()
            .unwrap_err()
    }
}

// ---- stream ----

#[tokio::test(start_paused = true)]
async fn the_stream_keeps_deliveries_hidden_and_respects_max_in_flight() {
    let q = queue(10);
    for i in 0..5 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).max_in_flight(2).build().unwrap();
    let mut stream = consumer.stream();
    let a = stream.next().await.unwrap().unwrap();
    let b = stream.next().await.unwrap().unwrap();
    // No third while two are held, however long.
    let third = tokio::time::timeout(secs(60), stream.next()).await;
    assert!(third.is_err(), "a third delivery while two are held");
    assert_eq!(
        q.in_flight_len(),
        2,
        "kept hidden by the keeper for 6 timeouts"
    );
    a.ack().await.unwrap();
    b.ack().await.unwrap();
    let mut handled = 2;
    while handled < 5 {
        stream.next().await.unwrap().unwrap().ack().await.unwrap();
        handled += 1;
    }
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_stream_keeps_fifo_order_under_concurrent_handling() {
    let q = fifo(10);
    for i in 0..10 {
        q.send_with(format!("{i}"), SendOptions::new().group_id("g"))
            .unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    let stream = consumer.stream().take(10);
    stream
        .for_each_concurrent(8, |d| {
            let o = o.clone();
            async move {
                let d = d.unwrap();
                o.lock().unwrap().push(d.body().parse::<u32>().unwrap());
                sleep(Duration::from_millis(100)).await;
                d.ack().await.unwrap();
            }
        })
        .await;
    assert_eq!(*order.lock().unwrap(), (0..10).collect::<Vec<_>>());
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_releases_what_it_had_not_yielded() {
    let q = fifo(30);
    for body in ["a", "b", "c"] {
        q.send_with(body, SendOptions::new().group_id("g")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let mut stream = consumer.stream();
    let a = stream.next().await.unwrap().unwrap();
    assert_eq!(a.body(), "a");
    drop(stream);
    drop(a);
    eventually("all three visible again", LIMIT, || q.visible_len() == 3).await;
    assert_eq!(consumer.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_stream_yields_a_fatal_error_once_and_ends() {
    let q = queue(30);
    q.fail_next(Action::ReceiveMessage, "QueueDoesNotExist", 1);
    let consumer = Consumer::in_memory(&q)
        .visibility_timeout(secs(30))
        .build()
        .unwrap();
    let items: Vec<_> = consumer.stream().collect().await;
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].as_ref().unwrap_err().code(),
        Some("QueueDoesNotExist")
    );
}

/// Five messages received at once; a stream of them (`stream_until` with a signal that never
/// comes if `graceful`) that has yielded the first, with the next long poll under way.
async fn a_stream_holding_four_not_yielded(
    graceful: bool,
) -> (
    MemoryQueue,
    Consumer,
    sqs_consumer::DeliveryStream,
    Delivery,
) {
    let q = queue(30);
    for i in 0..5 {
        q.send(format!("m{i}")).unwrap();
    }
    // Past the poll's 20 s: a graceful end waits for the delivery yielded, not the timeout.
    let consumer = Consumer::in_memory(&q)
        .shutdown_timeout(secs(60))
        .build()
        .unwrap();
    let mut stream = if graceful {
        consumer.stream_until(std::future::pending())
    } else {
        consumer.stream()
    };
    let first = stream.next().await.unwrap().unwrap();
    eventually("the next poll under way", LIMIT, || {
        q.requests().requests(Action::ReceiveMessage) == 2
    })
    .await;
    let shown = format!("{stream:?}");
    assert!(
        shown.starts_with("DeliveryStream") && shown.contains("buffered: 4"),
        "{shown}"
    );
    (q, consumer, stream, first)
}

/// Dropping a stream releases the deliveries it had not yielded at once, not when the long
/// poll under way ends (20 s later).
#[tokio::test(start_paused = true)]
async fn dropping_a_stream_releases_what_it_had_not_yielded_at_once_while_a_poll_waits() {
    for graceful in [false, true] {
        let (q, _consumer, stream, first) = a_stream_holding_four_not_yielded(graceful).await;
        drop(stream);
        eventually("the other four visible again", secs(1), || {
            q.visible_len() == 4
        })
        .await;
        first.ack().await.unwrap();
    }
}

/// A shutdown from the handle ends a stream as `stream_until`'s signal does: what it had
/// not yielded is released once the poll under way is in, and it ends once the delivery it
/// yielded is settled.
#[tokio::test(start_paused = true)]
async fn a_handle_shutdown_ends_a_stream_once_what_it_yielded_is_settled() {
    let (q, consumer, mut stream, first) = a_stream_holding_four_not_yielded(false).await;
    consumer.clone().shutdown();
    // Once the poll under way is in: it started with the stream's first receive's answer.
    eventually("the other four visible again", secs(21), || {
        q.visible_len() == 4
    })
    .await;
    let early = tokio::time::timeout(secs(5), stream.next()).await;
    assert!(early.is_err(), "ended while a delivery was held: {early:?}");
    first.ack().await.unwrap();
    let end = tokio::time::timeout(secs(1), stream.next()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
}

/// After a fatal error the stream ends at once, even with a delivery it yielded still held.
#[tokio::test(start_paused = true)]
async fn a_fatal_error_ends_the_stream_at_once_though_a_delivery_is_held() {
    let (q, _consumer, mut stream, first) = a_stream_holding_four_not_yielded(false).await;
    for _ in 0..4 {
        stream.next().await.unwrap().unwrap().ack().await.unwrap();
    }
    q.fail_next(Action::ReceiveMessage, "QueueDoesNotExist", 1);
    let error = tokio::time::timeout(secs(30), stream.next()).await;
    assert!(matches!(error, Ok(Some(Err(_)))), "{error:?}");
    let end = tokio::time::timeout(secs(1), stream.next()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
    first.ack().await.unwrap();
}

/// A handler that panics when asked whether it is ready.
struct PanicsInReady;

impl Handler for PanicsInReady {
    fn handle(&self, delivery: Delivery) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move { delivery.ack().await.map_err(Into::into) })
    }

    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(async { panic!("asked whether it is ready") })
    }
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_ready_goes_on_where_the_run_is_awaited() {
    let q = queue(30);
    let consumer = Consumer::in_memory(&q).build().unwrap();
    // The receive loop runs on a task of its own: its panic is not turned into an error.
    let panic = AssertUnwindSafe(consumer.run(PanicsInReady))
        .catch_unwind()
        .await
        .expect_err("the run panics");
    assert_eq!(
        panic.downcast_ref::<&str>(),
        Some(&"asked whether it is ready")
    );
}

#[test]
fn a_run_whose_receive_loop_lost_its_runtime_returns_an_error() {
    let awaited_on = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let loop_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let q = queue(30);
    let ended = awaited_on.block_on(async {
        let consumer = Consumer::in_memory(&q).build().unwrap();
        let mut run = std::pin::pin!(consumer.run(|d: Delivery| d.ack()));
        {
            // The run's receive loop starts on the runtime whose context its first poll sees.
            let _context = loop_runtime.enter();
            assert!(futures::poll!(run.as_mut()).is_pending());
        }
        loop_runtime.shutdown_background();
        tokio::time::timeout(secs(10), run).await
    });
    let err = ended
        .expect("ends at once")
        .expect_err("an error, not a panic");
    assert!(err.to_string().contains("runtime shut down"), "{err}");
    assert!(err.is_retryable(), "{err:?}");
}

/// Runs a batch handler on FIFO queue `q` that records each batch's bodies and acks it,
/// until `signal`; returns the batches.
async fn fifo_batches_until(
    q: &MemoryQueue,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Vec<Vec<String>> {
    let consumer = Consumer::in_memory(q).wait_time(secs(10)).build().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let seen = seen.clone();
        move |batch: Batch| {
            let seen = seen.clone();
            async move {
                let bodies: Vec<String> = batch.iter().map(|d| d.body().to_owned()).collect();
                seen.lock().unwrap().push(bodies);
                batch.ack_all().await
            }
        }
    };
    consumer.run_batch_until(handler, signal).await.unwrap();
    assert_eq!(consumer.stats().handler_panics, 0);
    let batches = seen.lock().unwrap().clone();
    batches
}

#[tokio::test(start_paused = true)]
async fn a_fifo_receive_is_handed_to_a_batch_handler_round_by_round_releasing_nothing() {
    let (logs, _guard) = common::capture_logs();
    let q = fifo(30);
    for body in ["g1", "g2", "g3"] {
        q.send_with(body, SendOptions::new().group_id("g")).unwrap();
    }
    let watched = q.clone();
    let drained = async move { eventually("drained", LIMIT, || watched.is_empty()).await };
    let batches = fifo_batches_until(&q, drained).await;
    assert_eq!(batches, [["g1"], ["g2"], ["g3"]]);
    assert_eq!(q.requests().visibility_changes(), 0, "nothing released");
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(!text.contains("releasing the rest"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_fifo_receive_that_comes_in_after_the_signal_hands_out_its_first_round_only() {
    let (logs, _guard) = common::capture_logs();
    let q = fifo(30);
    // The signal comes at 1 s, while the poll waits; the messages reach that poll at 2 s.
    let sender = q.clone();
    tokio::spawn(async move {
        sleep(secs(2)).await;
        for body in ["g1", "g2", "g3"] {
            sender
                .send_with(body, SendOptions::new().group_id("g"))
                .unwrap();
        }
    });
    let batches = fifo_batches_until(&q, sleep(secs(1))).await;
    // The run had decided to hand out what that receive brings: the first round goes out;
    // the rest is released, to come back in order.
    assert_eq!(batches, [["g1"]]);
    assert_eq!((q.len(), q.visible_len()), (2, 2));
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(
        text.contains("releasing the rest of FIFO message groups, to keep their order count=2"),
        "{text}"
    );
}
