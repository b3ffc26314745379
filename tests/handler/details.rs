//! The finer points of the handler model on a `MemoryQueue`, on tokio's paused clock: what
//! the logs say, what `Stats` counts, deliveries moved out of their handler, FIFO groups
//! after a timeout and their acks, batch settling in one request, a handler cancelled by the
//! shutdown, and what a stopped stream waits for and releases.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{capture_logs, eventually, memory_fifo, memory_queue as queue, run_while, secs};
use futures::StreamExt;
use sqs_consumer::memory::{Action, SendOptions};
use sqs_consumer::{AckMode, Batch, Consumer, Delivery, MemoryQueue, RetryPolicy};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep, Instant};

/// How long (in virtual time) a test waits for a condition.
const LIMIT: Duration = Duration::from_secs(1000);

fn text(logs: &Arc<Mutex<Vec<u8>>>) -> String {
    String::from_utf8_lossy(&logs.lock().unwrap()).into_owned()
}

#[tokio::test(start_paused = true)]
async fn a_handler_error_is_logged_with_its_whole_chain() {
    let (logs, _guard) = capture_logs();
    let q = queue(30);
    q.send("not json").unwrap();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let handler = |d: Delivery| async move {
        let parsed: Result<u32, _> = d.body().parse::<u32>();
        let _number = anyhow::Context::context(parsed, "bad body")?;
        d.ack().await?;
        Ok::<(), anyhow::Error>(())
    };
    run_while(
        &consumer,
        handler,
        eventually("the handler failed", LIMIT, || {
            consumer.stats().handler_errors == 1
        }),
    )
    .await;
    let text = text(&logs);
    let line = text
        .lines()
        .find(|l| l.contains("handler failed"))
        .expect("a log line");
    assert!(
        line.contains("bad body: invalid digit found in string"),
        "{line}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_consumer_holds_nothing_and_reserves_one_receive() {
    let q = queue(30);
    let consumer = Arc::new(Consumer::in_memory(&q).build().unwrap());
    let c = consumer.clone();
    let run = tokio::spawn(async move { c.run(|d: Delivery| d.ack()).await });
    sleep(secs(1)).await; // in a 20 s long poll
    let stats = consumer.stats();
    assert_eq!((stats.in_flight, stats.reserved), (0, 10), "{stats:?}");
    assert_eq!(consumer.in_flight(), 0);
    run.abort();
}

#[tokio::test(start_paused = true)]
async fn a_delivery_moved_out_of_its_handler_is_not_unsettled() {
    let q = queue(30);
    q.send("moved").unwrap();
    let consumer = Consumer::in_memory(&q)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel::<Delivery>();
    let handler = move |d: Delivery| {
        let tx = tx.clone();
        async move { tx.send(d).map_err(|_| "test ended") } // Ok, still held elsewhere
    };
    let d = run_while(&consumer, handler, rx.recv()).await.unwrap();
    assert_eq!(consumer.stats().unsettled, 0);
    assert_eq!((q.visible_len(), q.in_flight_len()), (0, 1));
    drop(d); // now the retry policy applies: released at once
    eventually("released", LIMIT, || q.visible_len() == 1).await;
    assert_eq!(consumer.stats().released, 1);
}

#[tokio::test(start_paused = true)]
async fn on_a_fifo_queue_a_timed_out_handler_releases_the_rest_of_its_group() {
    let q = memory_fifo(30);
    for body in ["g1", "g2", "g3"] {
        q.send_with(body, SendOptions::new().group_id("g")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .handler_timeout(secs(5))
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let handler = move |d: Delivery| {
        let s = s.clone();
        async move {
            s.lock()
                .unwrap()
                .push((d.body().to_owned(), d.receive_count()));
            if d.body() == "g1" && d.receive_count() == 1 {
                sleep(secs(3600)).await; // stopped at 5 s
            }
            d.ack().await
        }
    };
    run_while(
        &consumer,
        handler,
        eventually("drained", LIMIT, || q.is_empty()),
    )
    .await;
    let seen = seen.lock().unwrap().clone();
    // g1 timed out; g2 and g3 were released (not run out of order), then all three came back
    // in order after g1's visibility lapsed.
    let order: Vec<&str> = seen.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(order, ["g1", "g1", "g2", "g3"], "{seen:?}");
    assert_eq!(consumer.stats().handler_timeouts, 1);
    assert!(consumer.stats().released >= 2);
}

#[tokio::test(start_paused = true)]
async fn a_batch_settles_in_one_request() {
    let q = queue(30);
    for i in 0..20 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).max_in_flight(10).build().unwrap();
    let batches = Arc::new(Mutex::new(0));
    let b = batches.clone();
    let handler = move |batch: Batch| {
        let b = b.clone();
        async move {
            let first = {
                let mut n = b.lock().unwrap();
                *n += 1;
                *n == 1
            };
            if first {
                batch.release_all().await // the first ten come back at once
            } else {
                batch.ack_all().await
            }
        }
    };
    let run = async {
        tokio::select! {
            r = consumer.run_batch(handler) => panic!("{r:?}"),
            () = eventually("drained", LIMIT, || q.is_empty()) => {}
        }
    };
    run.await;
    let r = q.requests();
    let stats = consumer.stats();
    assert_eq!(stats.released, 10);
    assert_eq!(stats.acked, 20);
    assert_eq!(
        r.requests(Action::ChangeMessageVisibilityBatch),
        1,
        "ten releases in one request"
    );
    assert_eq!(
        r.requests(Action::DeleteMessageBatch),
        2,
        "twenty deletes in two requests"
    );
}

#[tokio::test(start_paused = true)]
async fn on_success_acks_what_a_batch_handler_left_in_one_request() {
    let q = queue(30);
    for i in 0..10 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .ack_mode(AckMode::OnSuccess)
        .build()
        .unwrap();
    let handler = |batch: Batch| async move {
        assert_eq!(batch.len(), 10);
        Ok::<(), sqs_consumer::BoxError>(()) // nothing settled by hand
    };
    tokio::select! {
        r = consumer.run_batch(handler) => panic!("{r:?}"),
        () = eventually("drained", LIMIT, || q.is_empty()) => {}
    }
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 1);
    assert_eq!(consumer.stats().acked, 10);
}

#[tokio::test(start_paused = true)]
async fn a_handler_cancelled_by_the_shutdown_after_dropping_its_delivery_releases_it() {
    let (logs, _guard) = capture_logs();
    let q = queue(600);
    q.send("dropped early").unwrap();
    // The long poll under way at the signal ends with the shutdown timeout.
    let consumer = Consumer::in_memory(&q)
        .shutdown_timeout(secs(1))
        .wait_time(secs(1))
        .build()
        .unwrap();
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let handler = move |d: Delivery| {
        let started_tx = started_tx.clone();
        async move {
            drop(d); // unsettled; its outcome decides, but it never comes
            let _ = started_tx.send(());
            sleep(secs(3600)).await;
            Ok::<(), sqs_consumer::Error>(())
        }
    };
    let signal = async {
        started.recv().await;
    };
    let start = Instant::now();
    consumer.run_until(handler, signal).await.unwrap();
    assert_eq!(start.elapsed(), secs(1), "the shutdown timeout");
    assert_eq!(
        q.visible_len(),
        1,
        "released when its handler was cancelled"
    );
    let text = text(&logs);
    let waiting = text
        .lines()
        .find(|l| l.contains("running handler to finish"))
        .expect("the shutdown log");
    assert!(
        waiting.contains("waiting for 1 running handler to finish, up to "),
        "{waiting}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_shutdown_log_counts_only_handlers_still_running() {
    let (logs, _guard) = capture_logs();
    let q = queue(30);
    for i in 0..4 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    consumer
        .run_until(
            |d: Delivery| d.ack(),
            eventually("drained", LIMIT, || q.is_empty()),
        )
        .await
        .unwrap();
    let text = text(&logs);
    assert!(
        !text.contains("running handler"),
        "four finished handlers are not running: {text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_handler_past_its_timeout_leaves_the_whole_batch_to_the_retry_policy() {
    let q = queue(600);
    for i in 0..3 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .handler_timeout(secs(2))
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let batches = Arc::new(Mutex::new(Vec::new()));
    let b = batches.clone();
    let handler = move |batch: Batch| {
        let b = b.clone();
        async move {
            let first = {
                let mut seen = b.lock().unwrap();
                seen.push((Instant::now(), batch.len()));
                seen.len() == 1
            };
            if first {
                sleep(secs(3600)).await; // hung: the whole batch is stopped at 2 s
            }
            batch.ack_all().await
        }
    };
    let start = Instant::now();
    tokio::select! {
        r = consumer.run_batch(handler) => panic!("{r:?}"),
        () = eventually("drained", LIMIT, || q.is_empty()) => {}
    }
    let batches = batches.lock().unwrap().clone();
    assert_eq!(batches.len(), 2, "{batches:?}");
    assert_eq!((batches[0].1, batches[1].1), (3, 3));
    // Released at the timeout, received again at once (not after the 600 s visibility).
    assert_eq!(batches[1].0 - start, secs(2));
    let stats = consumer.stats();
    assert_eq!(
        (stats.handler_timeouts, stats.released, stats.acked),
        (1, 3, 3)
    );
}

#[tokio::test(start_paused = true)]
async fn unsettled_deliveries_are_warned_about_at_powers_of_two() {
    let (logs, _guard) = capture_logs();
    let q = queue(600);
    for i in 0..5 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let handler = |_d: Delivery| async move { Ok::<(), sqs_consumer::Error>(()) };
    run_while(
        &consumer,
        handler,
        eventually("five unsettled", LIMIT, || consumer.stats().unsettled == 5),
    )
    .await;
    let warnings: Vec<String> = text(&logs)
        .lines()
        .filter(|l| l.contains("returned Ok without settling"))
        .map(str::to_owned)
        .collect();
    assert_eq!(warnings.len(), 3, "at 1, 2 and 4: {warnings:#?}");
    assert!(warnings[0].contains("AckMode::OnSuccess"), "names the fix");
}

#[test]
fn every_run_future_is_send() {
    fn send<T: Send>(_: T) {}
    let q = MemoryQueue::new();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    send(consumer.run(|d: Delivery| d.ack()));
    send(consumer.run_until(|d: Delivery| d.ack(), async {}));
    send(consumer.run_batch(|b: Batch| b.ack_all()));
    send(consumer.run_batch_until(|b: Batch| b.ack_all(), async {}));
}

/// SQS's 12-hour limit counts from the `ReceiveMessage` request, not from when a long poll
/// brought the message: one that arrives 15 s into the poll is capped, and lost, 12 hours
/// after the request (less the 5 s margin), through the real receive loop.
#[tokio::test(start_paused = true)]
async fn the_12_hour_cap_counts_from_the_request_of_a_long_poll_that_waited() {
    let q = queue(600);
    let consumer = Consumer::in_memory(&q)
        .visibility_timeout(secs(600))
        .wait_time(secs(20))
        .build()
        .unwrap();
    let mut taker = common::Taker::start(consumer);
    // The first receive goes out at once and waits.
    let requested = Instant::now();
    tokio::task::yield_now().await;
    sleep(secs(15)).await;
    q.send("late in the poll").unwrap();
    let d = taker.next(LIMIT).await;
    let arrived = Instant::now();
    assert_eq!(arrived - requested, secs(15), "brought 15 s into the poll");
    assert_eq!(d.received_at(), requested);
    assert_eq!(d.hard_deadline(), requested + secs(43_200));
    assert_eq!(d.lost().await, sqs_consumer::LostReason::HardDeadline);
    assert_eq!(
        Instant::now(),
        requested + secs(43_200 - 5),
        "lost when the last extension, cut to end 5 s before the limit, lapses"
    );
}

#[tokio::test(start_paused = true)]
async fn adaptive_visibility_learns_from_handlers_on_the_paused_clock() {
    // One delivery at a time, so that each receive has seen every hold before it: 100 holds
    // of 1 s, 4 of 60 s, then one more of 1 s. The queue's own timeout is 30 s.
    let q = queue(30);
    let holds: Vec<u64> = [vec![1; 100], vec![60; 4], vec![1]].concat();
    for hold in &holds {
        q.send(hold.to_string()).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .max_in_flight(1)
        .adaptive_visibility(secs(10), secs(120))
        .build()
        .unwrap();
    // Per delivery: the timeout its receive applied, and its receive count.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let seen = seen.clone();
        move |d: Delivery| {
            let seen = seen.clone();
            async move {
                let applied = d.deadline() - Instant::now();
                seen.lock()
                    .unwrap()
                    .push((applied.as_secs(), d.receive_count()));
                sleep(secs(d.body().parse().unwrap())).await;
                d.ack().await
            }
        }
    };
    run_while(
        &consumer,
        handler,
        eventually("every message acked", secs(100_000), || {
            consumer.stats().acked == holds.len() as u64
        }),
    )
    .await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), holds.len(), "nothing seen twice");
    assert!(seen.iter().all(|&(_, count)| count == 1), "{seen:?}");
    let applied: Vec<u64> = seen.iter().map(|&(t, _)| t).collect();
    // Before any hold: the queue's 30 s, within [10, 120].
    assert_eq!(applied[0], 30);
    // Holds of 1 s give 2 x 1 + 0.5, rounded up: 3 s, raised to the min.
    assert!(applied[1..=100].iter().all(|&t| t == 10), "{applied:?}");
    // The slow ones run on 10 s: the keeper extends them; the estimate rises within the
    // burst, to the max (2 x 60 + 0.5 is 121 s).
    let raised_at = applied[101..].iter().position(|&t| t == 120);
    assert!(matches!(raised_at, Some(0..=3)), "{:?}", &applied[100..]);
    assert_eq!(applied[104], 120);
    let stats = consumer.stats();
    assert!(stats.extended >= 4, "{stats:?}");
    assert_eq!((stats.lost, stats.visibility_timeout), (0, secs(120)));
}

#[tokio::test(start_paused = true)]
async fn on_a_fifo_queue_an_ack_does_not_wait_for_the_rest_of_its_group() {
    // Deliveries received together on a standard queue let an ack wait up to one round trip
    // for the others' to share its request. A FIFO group's are handed out one at a time,
    // each once the one before it is acked, so an ack that waited for them would only wait.
    let latency = Duration::from_millis(100);
    let q = MemoryQueue::builder()
        .fifo(true)
        .content_based_deduplication(true)
        .visibility_timeout(secs(30))
        .latency(latency)
        .build()
        .unwrap();
    for body in ["g1", "g2", "g3"] {
        q.send_with(body, SendOptions::new().group_id("g")).unwrap();
    }
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let acks_took = Arc::new(Mutex::new(Vec::new()));
    let took = acks_took.clone();
    let handler = move |d: Delivery| {
        let took = took.clone();
        async move {
            let start = Instant::now();
            let acked = d.ack().await;
            took.lock().unwrap().push(start.elapsed());
            acked
        }
    };
    run_while(
        &consumer,
        handler,
        eventually("all acked", LIMIT, || acks_took.lock().unwrap().len() == 3),
    )
    .await;
    let took = acks_took.lock().unwrap().clone();
    assert!(
        took.iter().all(|&t| t < latency * 3 / 2),
        "each ack takes one call of {latency:?}: {took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_stopped_while_a_delivery_is_held_says_it_waits_for_it() {
    let (logs, _guard) = capture_logs();
    let q = queue(30);
    q.send("held").unwrap();
    // The stream waits for the delivery once its receive under way (1 s) is in.
    let consumer = Consumer::in_memory(&q).wait_time(secs(1)).build().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let mut stream = consumer.stream_until(async {
        let _ = stopped.await;
    });
    let held = stream.next().await.expect("a delivery").expect("no error");
    stop.send(()).unwrap();
    let settle_later = async {
        sleep(secs(5)).await;
        held.ack().await.unwrap();
    };
    let (end, ()) = tokio::join!(stream.next(), settle_later);
    assert!(
        end.is_none(),
        "the stream ends once the delivery is settled"
    );
    let text = text(&logs);
    let waiting = text
        .lines()
        .find(|l| l.contains("handed out to be settled"))
        .unwrap_or_else(|| panic!("no shutdown log: {text}"));
    assert!(
        waiting.contains("waiting for 1 delivery handed out to be settled, up to "),
        "{waiting}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_stopped_with_nothing_held_does_not_say_it_waits() {
    let (logs, _guard) = capture_logs();
    let q = queue(30);
    q.send("acked").unwrap();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let mut stream = consumer.stream_until(async {
        let _ = stopped.await;
    });
    let d = stream.next().await.expect("a delivery").expect("no error");
    d.ack().await.unwrap();
    stop.send(()).unwrap();
    assert!(stream.next().await.is_none());
    let text = text(&logs);
    assert!(text.contains("stream stopped"), "{text}");
    assert!(
        !text.contains("handed out to be settled"),
        "nothing was held: {text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_releases_at_once_what_its_poll_brings_after_the_shutdown_timeout() {
    let (logs, _guard) = capture_logs();
    let q = queue(30);
    // Stopped at 1 s, its shutdown timeout ends at 2 s; the poll under way waits until 10 s,
    // and the message reaches it at 5 s: too late to be handed out.
    let consumer = Consumer::in_memory(&q)
        .wait_time(secs(10))
        .shutdown_timeout(secs(1))
        .build()
        .unwrap();
    let stream = consumer.stream_until(sleep(secs(1)));
    let send_late = async {
        sleep(secs(5)).await;
        q.send("late").unwrap();
    };
    let (yielded, ()) = tokio::join!(stream.collect::<Vec<_>>(), send_late);
    assert!(yielded.is_empty(), "nothing handed out after the timeout");
    assert_eq!((q.visible_len(), consumer.stats().released), (1, 1));
    let text = text(&logs);
    assert!(
        text.contains("releasing messages received after the shutdown timeout"),
        "{text}"
    );
    assert!(
        !text.contains("handed out to be settled")
            && !text.contains("still held at the shutdown timeout"),
        "a late message is never handed out, so never waited for: {text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_batch_handler_says_how_many_deliveries_it_stopped_on() {
    let (logs, _guard) = capture_logs();
    let q = queue(30);
    for i in 0..3 {
        q.send(format!("m{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .handler_timeout(secs(5))
        .build()
        .unwrap();
    let handler = |batch: Batch| async move {
        sleep(secs(3600)).await; // stopped at 5 s
        batch.ack_all().await
    };
    let watched = consumer.clone();
    consumer
        .run_batch_until(
            handler,
            eventually("timed out", LIMIT, || watched.stats().handler_timeouts == 1),
        )
        .await
        .unwrap();
    let text = text(&logs);
    let warning = text
        .lines()
        .find(|l| l.contains("handler timed out"))
        .unwrap_or_else(|| panic!("no timeout warning: {text}"));
    assert!(warning.contains("deliveries=3"), "{warning}");
}

/// The logs and the stats of a handler's `Ok` under `AckMode::OnSuccess` whose delete SQS
/// answers with the error `code`.
async fn ack_on_success_answered_with(code: &str) -> (String, sqs_consumer::Stats) {
    let (logs, _guard) = capture_logs();
    let q = queue(30);
    q.send("left unsettled").unwrap();
    q.fail_next(Action::DeleteMessage, code, 1);
    let consumer = Consumer::in_memory(&q)
        .ack_mode(AckMode::OnSuccess)
        .build()
        .unwrap();
    let handler = |_d: Delivery| async move { Ok::<(), sqs_consumer::BoxError>(()) };
    run_while(&consumer, handler, async {
        eventually("answered", LIMIT, || q.requests().deletes() == 1).await;
        sleep(secs(1)).await; // for what the answer leads to
    })
    .await;
    let stats = consumer.stats();
    (text(&logs), stats)
}

#[tokio::test(start_paused = true)]
async fn an_ack_on_success_refused_for_good_is_warned_about() {
    let (text, stats) = ack_on_success_answered_with("AccessDenied").await;
    let warning = text
        .lines()
        .find(|l| l.contains("acking a delivery its handler left unsettled failed"))
        .unwrap_or_else(|| panic!("no warning: {text}"));
    assert!(warning.contains("AccessDenied"), "{warning}");
    assert_eq!((stats.acked, stats.lost), (0, 0), "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn an_ack_on_success_that_finds_the_delivery_lost_is_no_failure_to_warn_about() {
    let (text, stats) = ack_on_success_answered_with("ReceiptHandleIsInvalid").await;
    assert!(
        !text.contains("left unsettled failed"),
        "a loss is counted, not warned about as a failed call: {text}"
    );
    assert_eq!((stats.acked, stats.lost), (0, 1), "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn a_delivery_dropped_and_lost_before_its_handler_failed_is_not_released() {
    let q = queue(10);
    q.send("lost").unwrap();
    let consumer = Consumer::in_memory(&q)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let (receipt_tx, mut receipt) = mpsc::unbounded_channel::<String>();
    let handler = move |d: Delivery| {
        let receipt_tx = receipt_tx.clone();
        async move {
            let _ = receipt_tx.send(d.message().receipt_handle().unwrap().to_owned());
            drop(d); // left to the outcome
            sleep(secs(15)).await; // lost meanwhile, at the extension at 5 s
            Err::<(), _>("failed after the loss")
        }
    };
    run_while(&consumer, handler, async {
        // Deleted elsewhere: the extension finds the receipt handle invalid.
        q.delete(&receipt.recv().await.unwrap()).unwrap();
        eventually("lost", LIMIT, || consumer.stats().lost == 1).await;
        eventually("failed", LIMIT, || consumer.stats().handler_errors == 1).await;
        sleep(secs(1)).await; // for a release the outcome might send
    })
    .await;
    assert_eq!(
        q.requests().visibility_changes(),
        1,
        "the extension that found it lost, and no release with a stale receipt handle"
    );
    assert_eq!(consumer.stats().released, 0);
}

#[tokio::test(start_paused = true)]
async fn the_keeper_lets_go_of_what_the_outcome_acked() {
    let q = queue(10);
    q.send("acked by the outcome").unwrap();
    let consumer = Consumer::in_memory(&q)
        .ack_mode(AckMode::OnSuccess)
        .build()
        .unwrap();
    let handler = |_d: Delivery| async move {
        sleep(secs(1)).await;
        Ok::<(), sqs_consumer::BoxError>(())
    };
    run_while(&consumer, handler, async {
        eventually("acked", LIMIT, || consumer.stats().acked == 1).await;
        sleep(secs(60)).await; // six timeouts
    })
    .await;
    assert_eq!(
        q.requests().visibility_changes(),
        0,
        "no extension for a deleted message"
    );
}
