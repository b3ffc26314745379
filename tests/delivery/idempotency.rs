//! Effectively once (`ConsumerBuilder::idempotency`), on `MemoryQueue` and `MemoryStore` on
//! the paused clock: every outcome of the guide's table, a lease lost mid-handler, two
//! consumers racing for one key, and a store that fails.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{run_while, secs};
use futures::StreamExt;
use sqs_consumer::idempotency::MemoryStore;
use sqs_consumer::memory::Action;
use sqs_consumer::{
    AckMode, Batch, BoxError, Consumer, ConsumerBuilder, Delivery, MemoryQueue, RetryPolicy,
};
use tokio::time::{sleep, Instant};

/// The queue's visibility timeout.
const TIMEOUT: u64 = 10;

fn queue() -> MemoryQueue {
    common::memory_queue(TIMEOUT)
}

/// A consumer of `queue` recording in `store`, keyed by the body's part before `:`.
fn keyed_by_order(queue: &MemoryQueue, store: &MemoryStore) -> ConsumerBuilder {
    Consumer::in_memory(queue)
        .wait_time(secs(1))
        .idempotency(store.clone())
        .idempotency_key(|d: &Delivery| -> Result<String, BoxError> {
            let (order, _) = d.body().split_once(':').ok_or("no order id")?;
            Ok(order.to_owned())
        })
}

/// How many times the handler ran, per body.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<String, u32>>>);

impl Runs {
    fn ran(&self, body: &str) {
        *self.0.lock().unwrap().entry(body.to_owned()).or_default() += 1;
    }

    fn of(&self, body: &str) -> u32 {
        self.0.lock().unwrap().get(body).copied().unwrap_or(0)
    }

    fn total(&self) -> u32 {
        self.0.lock().unwrap().values().sum()
    }
}

/// What an ack of the n-th receive of a message answered.
type AckOfReceive = (u32, Result<(), String>);

/// Waits until `done` holds, for at most `limit` (on the paused clock, sleeps cost nothing).
async fn until(limit: Duration, done: impl Fn() -> bool) {
    let end = Instant::now() + limit;
    while !done() && Instant::now() < end {
        sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_whose_delete_was_lost_comes_back_and_is_acked_without_its_handler() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:ship").unwrap();
    let consumer = Consumer::in_memory(&q)
        .wait_time(secs(1))
        .idempotency(store.clone())
        .build()
        .unwrap();
    let runs = Runs::default();
    let acks: Arc<Mutex<Vec<bool>>> = Arc::default();
    let handler = {
        let (runs, acks, q) = (runs.clone(), acks.clone(), q.clone());
        move |d: Delivery| {
            let (runs, acks, q) = (runs.clone(), acks.clone(), q.clone());
            async move {
                runs.ran(d.body());
                // The delete fails past the ack's retries: an outage.
                q.fail_for(Action::DeleteMessage, "InternalError", secs(30));
                q.fail_for(Action::DeleteMessageBatch, "InternalError", secs(30));
                let acked = d.ack().await;
                acks.lock().unwrap().push(acked.is_ok());
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(secs(120), || q.is_empty())).await;
    assert!(q.is_empty(), "the message came back and was deleted");
    assert_eq!(runs.total(), 1, "the handler ran once");
    assert_eq!(
        *acks.lock().unwrap(),
        [false],
        "the first ack's delete failed"
    );
    let stats = consumer.stats();
    assert_eq!((stats.duplicates_skipped, stats.acked), (1, 1));
    assert_eq!(store.done(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_key_another_message_holds_is_delayed_until_the_hold_ends_then_skipped() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:first").unwrap();
    let consumer = keyed_by_order(&q, &store).build().unwrap();
    let runs = Runs::default();
    let handler = {
        let (runs, q) = (runs.clone(), q.clone());
        move |d: Delivery| {
            let (runs, q) = (runs.clone(), q.clone());
            async move {
                runs.ran(d.body());
                if d.body() == "order-1:first" {
                    // A producer's duplicate arrives while this one is being handled, which
                    // takes 3 timeouts: its lease (and its claim) is extended meanwhile.
                    q.send("order-1:again").unwrap();
                    sleep(secs(3 * TIMEOUT)).await;
                }
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(secs(300), || q.is_empty())).await;
    assert!(q.is_empty());
    assert_eq!(runs.of("order-1:first"), 1);
    assert_eq!(runs.of("order-1:again"), 0, "the duplicate never ran");
    let stats = consumer.stats();
    assert!(stats.duplicates_delayed >= 1, "{stats:?}");
    assert_eq!(stats.duplicates_skipped, 1, "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn a_delayed_duplicate_waits_for_the_hold_and_does_not_spin() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:first").unwrap();
    let consumer = keyed_by_order(&q, &store).build().unwrap();
    let handler = {
        let q = q.clone();
        move |d: Delivery| {
            let q = q.clone();
            async move {
                if d.body() == "order-1:first" {
                    q.send("order-1:again").unwrap();
                    sleep(secs(3 * TIMEOUT)).await;
                }
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(secs(300), || q.is_empty())).await;
    // Each delay lasts until the first's hold would end: at least a visibility timeout while
    // its lease is extended, so a few in 30 s, never a loop.
    let delayed = consumer.stats().duplicates_delayed;
    assert!((1..=4).contains(&delayed), "delayed {delayed} times");
}

#[tokio::test(start_paused = true)]
async fn a_failed_handler_gives_its_key_back_so_that_the_retry_runs() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:x").unwrap();
    let consumer = keyed_by_order(&q, &store)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |d: Delivery| {
            let runs = runs.clone();
            async move {
                runs.ran(d.body());
                if d.receive_count() == 1 {
                    return Err::<(), BoxError>("failed on purpose".into());
                }
                d.ack().await?;
                Ok(())
            }
        }
    };
    run_while(&consumer, handler, until(secs(60), || q.is_empty())).await;
    assert!(q.is_empty());
    assert_eq!(runs.of("order-1:x"), 2, "the retry ran");
    assert_eq!((store.done(), store.in_progress()), (1, 0));
    assert_eq!(
        consumer.stats().duplicates_delayed,
        0,
        "the key was given back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_released_or_dropped_delivery_gives_its_key_back() {
    for release in [false, true] {
        let (q, store) = (queue(), MemoryStore::new());
        q.send("order-1:x").unwrap();
        let consumer = keyed_by_order(&q, &store).build().unwrap();
        let mut stream = consumer.stream();
        let d = stream.next().await.unwrap().unwrap();
        assert_eq!(store.in_progress(), 1, "claimed before it is handed out");
        if release {
            // Released for later: released at once, the stream would take it again.
            d.release_after(secs(60)).await.unwrap();
        } else {
            drop(d);
        }
        until(secs(5), || store.in_progress() == 0).await;
        assert_eq!(
            (store.in_progress(), store.done()),
            (0, 0),
            "release: {release}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_after_the_ack_does_not_reopen_the_done_key() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:x").unwrap();
    let consumer = keyed_by_order(&q, &store)
        .ack_mode(AckMode::OnSuccess)
        .build()
        .unwrap();
    let handler = |d: Delivery| async move {
        d.ack().await?;
        Err::<(), BoxError>("failed after the ack".into())
    };
    run_while(&consumer, handler, until(secs(30), || q.is_empty())).await;
    sleep(secs(1)).await;
    assert!(q.is_empty());
    assert_eq!((store.done(), store.in_progress()), (1, 0));
    q.send("order-1:again").unwrap();
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |d: Delivery| {
            let runs = runs.clone();
            async move {
                runs.ran(d.body());
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(secs(30), || q.is_empty())).await;
    assert_eq!(runs.total(), 0, "a duplicate of a done key never runs");
    assert_eq!(consumer.stats().duplicates_skipped, 1);
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_mid_handler_reports_its_ack_lost_and_the_later_receive_owns_the_key() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:x").unwrap();
    let consumer = keyed_by_order(&q, &store).build().unwrap();
    let acks: Arc<Mutex<Vec<AckOfReceive>>> = Arc::default();
    let handler = {
        let (acks, q) = (acks.clone(), q.clone());
        move |d: Delivery| {
            let (acks, q) = (acks.clone(), q.clone());
            async move {
                let receive = d.receive_count();
                if receive == 1 {
                    // Every extension fails: the lease lapses and SQS hands the message out
                    // again, to this consumer.
                    q.fail_for(
                        Action::ChangeMessageVisibility,
                        "InternalError",
                        secs(3 * TIMEOUT),
                    );
                    q.fail_for(
                        Action::ChangeMessageVisibilityBatch,
                        "InternalError",
                        secs(3 * TIMEOUT),
                    );
                    sleep(secs(4 * TIMEOUT)).await;
                } else {
                    sleep(secs(1)).await;
                }
                let acked = d.ack().await.map_err(|e| e.to_string());
                acks.lock().unwrap().push((receive, acked));
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(
        &consumer,
        handler,
        until(secs(120), || acks.lock().unwrap().len() == 2),
    )
    .await;
    let acks = acks.lock().unwrap().clone();
    assert_eq!(acks.len(), 2, "{acks:?}");
    let later = acks.iter().find(|(receive, _)| *receive == 2).unwrap();
    assert!(later.1.is_ok(), "the later receive acks: {acks:?}");
    let earlier = acks.iter().find(|(receive, _)| *receive == 1).unwrap();
    assert!(
        earlier.1.as_ref().is_err_and(|e| e.contains("was lost")),
        "the earlier ack reports the loss: {acks:?}"
    );
    assert!(q.is_empty());
    assert_eq!((store.done(), store.in_progress()), (1, 0));
    assert_eq!(consumer.stats().acked, 1);
}

#[tokio::test(start_paused = true)]
async fn the_ack_of_a_delivery_whose_key_a_later_receive_took_is_lost_with_that_reason() {
    // The key taken over by hand, as a later receive of the same message takes it.
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:x").unwrap();
    let consumer = keyed_by_order(&q, &store).build().unwrap();
    let mut stream = consumer.stream();
    let d = stream.next().await.unwrap().unwrap();
    let key = sqs_consumer::idempotency::Key::new(q.name(), "order-1");
    let later = sqs_consumer::idempotency::Owner::new(d.message_id(), "a later receipt");
    let begun = sqs_consumer::idempotency::Store::begin(&store, &key, &later, secs(60)).await;
    assert_eq!(begun.unwrap(), sqs_consumer::idempotency::Begun::Started);
    let err = d.ack().await.unwrap_err();
    assert!(err.is_lost(), "{err}");
    assert_eq!(
        err.kind(),
        sqs_consumer::ErrorKind::Lost(sqs_consumer::LostReason::KeyTaken)
    );
    assert_eq!(q.len(), 1, "not deleted: the later receive owns it");
    assert_eq!(consumer.stats().lost_acks, 1);
}

#[tokio::test(start_paused = true)]
async fn two_consumers_racing_for_one_key_run_the_handler_once() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:a").unwrap();
    q.send("order-1:b").unwrap();
    let one = keyed_by_order(&q, &store)
        .receive_batch_size(1)
        .build()
        .unwrap();
    let two = keyed_by_order(&q, &store)
        .receive_batch_size(1)
        .build()
        .unwrap();
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |d: Delivery| {
            let runs = runs.clone();
            async move {
                runs.ran(d.body());
                sleep(secs(5)).await;
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    let both = async {
        tokio::select! {
            r = one.run(handler.clone()) => panic!("ended: {r:?}"),
            r = two.run(handler) => panic!("ended: {r:?}"),
            () = until(secs(120), || q.is_empty()) => {}
        }
    };
    both.await;
    assert!(q.is_empty());
    assert_eq!(runs.total(), 1, "one of the two ran");
    let skipped = one.stats().duplicates_skipped + two.stats().duplicates_skipped;
    assert_eq!(skipped, 1);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_keeps_failing_before_the_handler_is_a_failure_never_done() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:x").unwrap();
    store.fail_next(1_000);
    let failed = common::memory_queue(TIMEOUT);
    let consumer = keyed_by_order(&q, &store)
        .dead_letter(&failed, 1)
        .build()
        .unwrap();
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |d: Delivery| {
            let runs = runs.clone();
            async move {
                runs.ran(d.body());
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(secs(120), || failed.len() == 1)).await;
    assert_eq!(runs.total(), 0, "the handler never ran");
    assert_eq!((failed.len(), q.len()), (1, 0), "moved by the failure step");
    assert_eq!(consumer.stats().idempotency_failures, 1);
    assert!(store.calls() > 2, "retried: {} calls", store.calls());
    // Retried within the lease: the store's 20 s at most, and before the 10 s deadline.
    assert!(store.calls() < 40, "{} calls", store.calls());
}

#[tokio::test(start_paused = true)]
async fn a_store_failing_at_the_ack_leaves_the_message_to_come_back_and_run_again() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:x").unwrap();
    let consumer = keyed_by_order(&q, &store).build().unwrap();
    let runs = Runs::default();
    let acks: Arc<Mutex<Vec<String>>> = Arc::default();
    let handler = {
        let (runs, acks, store) = (runs.clone(), acks.clone(), store.clone());
        move |d: Delivery| {
            let (runs, acks, store) = (runs.clone(), acks.clone(), store.clone());
            async move {
                runs.ran(d.body());
                if d.receive_count() == 1 {
                    store.fail_next(1_000);
                }
                let acked = d.ack().await;
                store.fail_next(0);
                acks.lock().unwrap().push(match acked {
                    Ok(()) => "ok".to_owned(),
                    Err(e) => format!("{e}"),
                });
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(secs(120), || q.is_empty())).await;
    let acks = acks.lock().unwrap().clone();
    assert_eq!(acks.len(), 2, "{acks:?}");
    assert!(acks[0].contains("idempotency store"), "{acks:?}");
    assert_eq!(acks[1], "ok");
    assert_eq!(runs.total(), 2, "not done, so run again");
    assert_eq!(consumer.stats().idempotency_failures, 1);
    assert_eq!(consumer.stats().acked, 1);
}

#[tokio::test(start_paused = true)]
async fn a_key_function_that_fails_sends_the_delivery_to_the_failure_step_with_its_error() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("no order id here").unwrap();
    let failed = common::memory_queue(TIMEOUT);
    let consumer = keyed_by_order(&q, &store)
        .dead_letter(&failed, 1)
        .build()
        .unwrap();
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |d: Delivery| {
            let runs = runs.clone();
            async move {
                runs.ran(d.body());
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(secs(60), || failed.len() == 1)).await;
    assert_eq!(runs.total(), 0);
    let copy = failed.receive(1, Duration::ZERO).await.unwrap().remove(0);
    let failure = copy
        .message_attributes()
        .and_then(|a| a.get("sqs-consumer.failure"))
        .and_then(|v| v.string_value())
        .unwrap()
        .to_owned();
    assert!(failure.contains("no order id"), "{failure}");
    assert_eq!(consumer.stats().handler_errors, 1);
    assert_eq!(store.calls(), 0, "no key, no call");
}

#[tokio::test(start_paused = true)]
async fn a_batch_handler_gets_only_the_deliveries_whose_key_is_free() {
    let (q, store) = (queue(), MemoryStore::new());
    q.send("order-1:x").unwrap();
    let consumer = keyed_by_order(&q, &store)
        .ack_mode(AckMode::OnSuccess)
        .build()
        .unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let handler = {
        let seen = seen.clone();
        move |batch: Batch| {
            let seen = seen.clone();
            async move {
                for d in batch {
                    seen.lock().unwrap().push(d.body().to_owned());
                }
                Ok::<(), BoxError>(())
            }
        }
    };
    let run = || {
        let (consumer, handler, q) = (consumer.clone(), handler.clone(), q.clone());
        async move {
            tokio::select! {
                r = consumer.run_batch(handler) => panic!("ended: {r:?}"),
                () = until(secs(30), || q.is_empty()) => {}
            }
        }
    };
    run().await;
    q.send("order-1:again").unwrap();
    q.send("order-2:y").unwrap();
    run().await;
    assert!(q.is_empty());
    assert_eq!(*seen.lock().unwrap(), ["order-1:x", "order-2:y"]);
    assert_eq!(consumer.stats().duplicates_skipped, 1);
    assert_eq!(store.done(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_fifo_message_is_keyed_by_its_deduplication_id() {
    let q = common::memory_fifo(TIMEOUT);
    let store = MemoryStore::new();
    let consumer = Consumer::in_memory(&q)
        .wait_time(secs(1))
        .idempotency(store.clone())
        .build()
        .unwrap();
    let message = sqs_consumer::memory::SendOptions::new()
        .group_id("g")
        .deduplication_id("dedup-1");
    q.send_with("first", message).unwrap();
    run_while(
        &consumer,
        |d: Delivery| d.ack(),
        until(secs(30), || q.is_empty()),
    )
    .await;
    // Past FIFO's 5-minute deduplication window, SQS takes the same id again; the store
    // still knows it.
    sleep(secs(301)).await;
    let again = sqs_consumer::memory::SendOptions::new()
        .group_id("g")
        .deduplication_id("dedup-1");
    q.send_with("resent", again).unwrap();
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |d: Delivery| {
            let runs = runs.clone();
            async move {
                runs.ran(d.body());
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(secs(30), || q.is_empty())).await;
    assert!(q.is_empty());
    assert_eq!(runs.total(), 0);
    assert_eq!(consumer.stats().duplicates_skipped, 1);
}

#[tokio::test(start_paused = true)]
async fn a_done_key_is_kept_for_the_keep_time_and_no_longer() {
    let (q, store) = (queue(), MemoryStore::new());
    let consumer = keyed_by_order(&q, &store)
        .idempotency_keep_done(secs(3600))
        .build()
        .unwrap();
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |d: Delivery| {
            let runs = runs.clone();
            async move {
                runs.ran(d.body());
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    for (body, wait) in [("order-1:a", 0), ("order-1:b", 3_000), ("order-1:c", 3_601)] {
        sleep(secs(wait)).await;
        q.send(body).unwrap();
        run_while(&consumer, handler.clone(), until(secs(30), || q.is_empty())).await;
    }
    assert_eq!(runs.of("order-1:a"), 1);
    assert_eq!(runs.of("order-1:b"), 0, "within the hour: skipped");
    assert_eq!(runs.of("order-1:c"), 1, "past it: run");
}

#[tokio::test(start_paused = true)]
async fn the_settings_are_checked_naming_the_field() {
    let q = queue();
    let err = Consumer::in_memory(&q)
        .idempotency_key(|d: &Delivery| -> Result<String, BoxError> { Ok(d.body().to_owned()) })
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("idempotency_key"), "{err}");
    for keep in [Duration::ZERO, secs(366 * 24 * 3600)] {
        let err = Consumer::in_memory(&q)
            .idempotency(MemoryStore::new())
            .idempotency_keep_done(keep)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("idempotency_keep_done"), "{err}");
        assert!(err.to_string().contains("1 s..=365 days"), "{err}");
    }
}

#[tokio::test(start_paused = true)]
async fn with_no_lease_to_extend_the_writes_are_two_per_message() {
    let (q, store) = (queue(), MemoryStore::new());
    for i in 0..20 {
        q.send(format!("order-{i}:x")).unwrap();
    }
    let consumer = keyed_by_order(&q, &store).build().unwrap();
    run_while(
        &consumer,
        |d: Delivery| d.ack(),
        until(secs(30), || q.is_empty()),
    )
    .await;
    sleep(secs(1)).await;
    assert_eq!(store.done(), 20);
    assert_eq!(store.calls(), 40, "begin and complete, each once");
}
