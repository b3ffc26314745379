//! Effectively once (`ConsumerBuilder::idempotency`), on `MemoryQueue`: every outcome of the
//! guide's table, a lease lost mid-handler, two consumers racing for one key, and a store
//! that fails. Each scenario runs with `MemoryStore` on the paused clock and with
//! `DynamoDbStore` (feature `dynamodb`) against the test command's DynamoDB on the real clock
//! (moto's in the first half of the test command, dynalite in the second).

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{run_while, secs};
use futures::future::BoxFuture;
use futures::StreamExt;
#[cfg(feature = "dynamodb")]
use sqs_consumer::idempotency::DynamoDbStore;
use sqs_consumer::idempotency::{
    Begun, Hold, Key, MemoryStore, Owner, Ownership, Store, StoreError, StoreFuture,
};
use sqs_consumer::memory::Action;
use sqs_consumer::{
    AckMode, Batch, BoxError, Consumer, ConsumerBuilder, Delivery, MemoryQueue, RetryPolicy,
};
use tokio::time::{sleep, Instant};

/// Where the store under test keeps its records.
#[derive(Debug, Clone, Copy, PartialEq)]
enum On {
    /// `MemoryStore`, on the paused clock.
    Memory,
    /// `DynamoDbStore` on the test command's DynamoDB (moto's, or dynalite), on the real
    /// clock.
    #[cfg(feature = "dynamodb")]
    DynamoDb,
}

/// Runs each scenario `name(on)` with `MemoryStore` (paused clock) as `name::memory`, and with
/// `DynamoDbStore` against the test command's DynamoDB (real time) as `name::dynamodb`; that
/// one is ignored unless ignored tests are asked for.
macro_rules! on_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[tokio::test(start_paused = true)]
            async fn memory() {
                super::$name(On::Memory).await;
            }

            #[cfg(feature = "dynamodb")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs a DynamoDB-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
            async fn dynamodb() {
                super::$name(On::DynamoDb).await;
            }
        }
    )*};
}

on_stores!(
    a_message_whose_delete_was_lost_comes_back_and_is_acked_without_its_handler,
    a_key_another_message_holds_is_delayed_until_the_hold_ends_then_skipped,
    a_delayed_duplicate_waits_for_the_hold_and_does_not_spin,
    a_failed_handler_gives_its_key_back_so_that_the_retry_runs,
    a_released_or_dropped_delivery_gives_its_key_back,
    an_error_after_the_ack_does_not_reopen_the_done_key,
    a_lease_lost_mid_handler_reports_its_ack_lost_and_the_later_receive_owns_the_key,
    a_receive_of_a_held_message_waits_for_its_lease_and_then_takes_the_key,
    two_consumers_racing_for_one_key_run_the_handler_once,
    a_store_that_keeps_failing_before_the_handler_is_a_failure_never_done,
    a_store_failing_at_the_ack_leaves_the_message_to_come_back_and_run_again,
    a_key_function_that_fails_sends_the_delivery_to_the_failure_step_with_its_error,
    a_batch_handler_gets_only_the_deliveries_whose_key_is_free,
    with_no_lease_to_extend_the_writes_are_two_per_message,
    an_expired_record_is_taken_though_the_store_still_keeps_it,
);

async fn an_expired_record_is_taken_though_the_store_still_keeps_it(on: On) {
    // DynamoDB's TTL deletes an expired item late (neither moto nor dynalite deletes it at
    // all): the store reads the record's expiry, never its presence.
    let s = Setup::new(on).await;
    let key = Key::new(s.q.name(), "order-9");
    let (first, other) = (Owner::new("m-1", "r-1"), Owner::new("m-2", "r-2"));
    let hold = Hold::new(secs(1), secs(1));
    assert_eq!(
        s.store.begin(&key, &first, hold).await.unwrap(),
        Begun::Started
    );
    let begun = s.store.begin(&key, &other, hold).await.unwrap();
    assert!(matches!(begun, Begun::InProgress { .. }), "{begun:?}");
    sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        s.store.begin(&key, &other, hold).await.unwrap(),
        Begun::Started
    );
    let first_done = s.store.complete(&key, &first, secs(60)).await.unwrap();
    assert_eq!(
        first_done,
        Ownership::Taken,
        "the record is the other's now"
    );
    assert_eq!(
        s.store.complete(&key, &other, secs(60)).await.unwrap(),
        Ownership::Ours
    );
    assert_eq!(s.store.records().await, (1, 0));
}

/// The store under test, each call counted, and failing on demand (a store of the user's
/// own, wrapping the crate's).
#[derive(Debug, Clone)]
struct TestStore {
    inner: Arc<dyn Store>,
    memory: Option<MemoryStore>,
    #[cfg(feature = "dynamodb")]
    dynamodb: Option<(aws_sdk_dynamodb::Client, String)>,
    calls: Arc<AtomicU64>,
    failing: Arc<AtomicU32>,
}

impl TestStore {
    async fn new(on: On) -> Self {
        let memory = MemoryStore::new();
        let store = Self {
            inner: Arc::new(memory.clone()),
            memory: Some(memory),
            #[cfg(feature = "dynamodb")]
            dynamodb: None,
            calls: Arc::default(),
            failing: Arc::default(),
        };
        match on {
            On::Memory => store,
            #[cfg(feature = "dynamodb")]
            On::DynamoDb => {
                let client = common::dynamodb::client();
                let table = common::unique_name("idempotency");
                DynamoDbStore::create_table(&client, &table).await.unwrap();
                Self {
                    inner: Arc::new(DynamoDbStore::new(client.clone(), table.clone())),
                    memory: None,
                    dynamodb: Some((client, table)),
                    ..store
                }
            }
        }
    }

    /// Makes the next `calls` calls fail with a retryable error, without reaching the store.
    fn fail_next(&self, calls: u32) {
        self.failing.store(calls, Ordering::SeqCst);
    }

    /// Calls made so far (each one request to DynamoDB), failed ones included.
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// How many unexpired records are in each state: (done, in progress).
    async fn records(&self) -> (usize, usize) {
        if let Some(memory) = &self.memory {
            return (memory.done(), memory.in_progress());
        }
        #[cfg(feature = "dynamodb")]
        if let Some((client, table)) = &self.dynamodb {
            return common::dynamodb::records(client, table).await;
        }
        unreachable!("a store of either kind")
    }

    fn call(&self) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let failing = self
            .failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match failing {
            Ok(_) => Err(StoreError::retryable("failing on purpose")),
            Err(_) => Ok(()),
        }
    }
}

impl Store for TestStore {
    fn begin<'a>(&'a self, key: &'a Key, owner: &'a Owner, hold: Hold) -> StoreFuture<'a, Begun> {
        Box::pin(async move {
            self.call()?;
            self.inner.begin(key, owner, hold).await
        })
    }

    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        hold: Hold,
    ) -> StoreFuture<'a, Ownership> {
        Box::pin(async move {
            self.call()?;
            self.inner.extend(key, owner, hold).await
        })
    }

    fn complete<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        keep_for: Duration,
    ) -> StoreFuture<'a, Ownership> {
        Box::pin(async move {
            self.call()?;
            self.inner.complete(key, owner, keep_for).await
        })
    }

    fn abandon<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.call()?;
            self.inner.abandon(key, owner).await
        })
    }
}

/// A scenario's queue and store, and its time unit: the queue's visibility timeout, 10 s on
/// the paused clock and 2 s on the real one.
struct Setup {
    q: MemoryQueue,
    store: TestStore,
    t: u64,
}

impl Setup {
    async fn new(on: On) -> Self {
        let t = match on {
            On::Memory => 10,
            #[cfg(feature = "dynamodb")]
            On::DynamoDb => 2,
        };
        Self {
            q: common::memory_queue(t),
            store: TestStore::new(on).await,
            t,
        }
    }

    /// `n` visibility timeouts.
    fn t(&self, n: u64) -> Duration {
        secs(n * self.t)
    }

    /// A consumer recording in the store, keyed by the body's part before `:`.
    fn keyed_by_order(&self) -> ConsumerBuilder {
        keyed_by_order(&self.q, &self.store)
    }

    /// Waits until the store holds `done` and `in_progress` records, for at most `limit`.
    async fn until_records(&self, limit: Duration, want: (usize, usize)) -> (usize, usize) {
        let end = Instant::now() + limit;
        loop {
            let records = self.store.records().await;
            if records == want || Instant::now() >= end {
                return records;
            }
            sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A consumer of `queue` recording in `store`, keyed by the body's part before `:`.
fn keyed_by_order(queue: &MemoryQueue, store: &(impl Store + Clone)) -> ConsumerBuilder {
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

/// A handler that counts its runs per body and acks.
fn counting_acks(
    runs: &Runs,
) -> impl Fn(Delivery) -> BoxFuture<'static, Result<(), BoxError>> + Clone {
    let runs = runs.clone();
    move |d: Delivery| {
        let runs = runs.clone();
        Box::pin(async move {
            runs.ran(d.body());
            d.ack().await?;
            Ok(())
        })
    }
}

async fn a_message_whose_delete_was_lost_comes_back_and_is_acked_without_its_handler(on: On) {
    let s = Setup::new(on).await;
    let q = s.q.clone();
    q.send("order-1:ship").unwrap();
    let consumer = Consumer::in_memory(&q)
        .wait_time(secs(1))
        .idempotency(s.store.clone())
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
                // The delete fails past the ack's 20 s of retries: an outage.
                q.fail_for(Action::DeleteMessage, "InternalError", secs(25));
                q.fail_for(Action::DeleteMessageBatch, "InternalError", secs(25));
                let acked = d.ack().await;
                acks.lock().unwrap().push(acked.is_ok());
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(
        &consumer,
        handler,
        until(secs(60) + s.t(4), || q.is_empty()),
    )
    .await;
    assert!(q.is_empty(), "the message came back and was deleted");
    assert_eq!(runs.total(), 1, "the handler ran once");
    assert_eq!(
        *acks.lock().unwrap(),
        [false],
        "the first ack's delete failed"
    );
    let stats = consumer.stats();
    assert_eq!((stats.duplicates_skipped, stats.acked), (1, 1));
    assert_eq!(s.store.records().await, (1, 0));
}

async fn a_key_another_message_holds_is_delayed_until_the_hold_ends_then_skipped(on: On) {
    let s = Setup::new(on).await;
    let q = s.q.clone();
    q.send("order-1:first").unwrap();
    let consumer = s.keyed_by_order().build().unwrap();
    let runs = Runs::default();
    let hold = s.t(3);
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
                    sleep(hold).await;
                }
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(s.t(30), || q.is_empty())).await;
    assert!(q.is_empty());
    assert_eq!(runs.of("order-1:first"), 1);
    assert_eq!(runs.of("order-1:again"), 0, "the duplicate never ran");
    let stats = consumer.stats();
    assert!(stats.duplicates_delayed >= 1, "{stats:?}");
    assert_eq!(stats.duplicates_skipped, 1, "{stats:?}");
}

async fn a_delayed_duplicate_waits_for_the_hold_and_does_not_spin(on: On) {
    let s = Setup::new(on).await;
    let q = s.q.clone();
    q.send("order-1:first").unwrap();
    let consumer = s.keyed_by_order().build().unwrap();
    let hold = s.t(3);
    let handler = {
        let q = q.clone();
        move |d: Delivery| {
            let q = q.clone();
            async move {
                if d.body() == "order-1:first" {
                    q.send("order-1:again").unwrap();
                    sleep(hold).await;
                }
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(s.t(30), || q.is_empty())).await;
    // Each delay lasts until the first's hold would end: at least a visibility timeout while
    // its lease is extended, so a few in 3 timeouts, never a loop.
    let delayed = consumer.stats().duplicates_delayed;
    assert!((1..=4).contains(&delayed), "delayed {delayed} times");
}

async fn a_failed_handler_gives_its_key_back_so_that_the_retry_runs(on: On) {
    let s = Setup::new(on).await;
    let q = s.q.clone();
    q.send("order-1:x").unwrap();
    let consumer = s
        .keyed_by_order()
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
    run_while(&consumer, handler, until(s.t(6), || q.is_empty())).await;
    assert!(q.is_empty());
    assert_eq!(runs.of("order-1:x"), 2, "the retry ran");
    assert_eq!(s.store.records().await, (1, 0));
    assert_eq!(
        consumer.stats().duplicates_delayed,
        0,
        "the key was given back"
    );
}

async fn a_released_or_dropped_delivery_gives_its_key_back(on: On) {
    for release in [false, true] {
        let s = Setup::new(on).await;
        s.q.send("order-1:x").unwrap();
        let consumer = s.keyed_by_order().build().unwrap();
        let mut stream = consumer.stream();
        let d = stream.next().await.unwrap().unwrap();
        assert_eq!(
            s.store.records().await,
            (0, 1),
            "claimed before it is handed out"
        );
        if release {
            // Released for later: released at once, the stream would take it again.
            d.release_after(s.t(6)).await.unwrap();
        } else {
            drop(d);
        }
        let records = s.until_records(s.t(1), (0, 0)).await;
        assert_eq!(records, (0, 0), "release: {release}");
    }
}

async fn an_error_after_the_ack_does_not_reopen_the_done_key(on: On) {
    let s = Setup::new(on).await;
    let q = s.q.clone();
    q.send("order-1:x").unwrap();
    let consumer = s
        .keyed_by_order()
        .ack_mode(AckMode::OnSuccess)
        .build()
        .unwrap();
    let handler = |d: Delivery| async move {
        d.ack().await?;
        Err::<(), BoxError>("failed after the ack".into())
    };
    run_while(&consumer, handler, until(s.t(3), || q.is_empty())).await;
    sleep(secs(1)).await;
    assert!(q.is_empty());
    assert_eq!(s.store.records().await, (1, 0));
    q.send("order-1:again").unwrap();
    let runs = Runs::default();
    run_while(
        &consumer,
        counting_acks(&runs),
        until(s.t(3), || q.is_empty()),
    )
    .await;
    assert_eq!(runs.total(), 0, "a duplicate of a done key never runs");
    assert_eq!(consumer.stats().duplicates_skipped, 1);
}

async fn a_lease_lost_mid_handler_reports_its_ack_lost_and_the_later_receive_owns_the_key(on: On) {
    let s = Setup::new(on).await;
    let q = s.q.clone();
    q.send("order-1:x").unwrap();
    let consumer = s.keyed_by_order().build().unwrap();
    let acks: Arc<Mutex<Vec<AckOfReceive>>> = Arc::default();
    let (outage, hold) = (s.t(3), s.t(4));
    let handler = {
        let (acks, q) = (acks.clone(), q.clone());
        move |d: Delivery| {
            let (acks, q) = (acks.clone(), q.clone());
            async move {
                let receive = d.receive_count();
                if receive == 1 {
                    // Every extension fails: the lease lapses and SQS hands the message out
                    // again, to this consumer.
                    q.fail_for(Action::ChangeMessageVisibility, "InternalError", outage);
                    q.fail_for(
                        Action::ChangeMessageVisibilityBatch,
                        "InternalError",
                        outage,
                    );
                    sleep(hold).await;
                } else {
                    sleep(secs(1)).await;
                }
                let acked = d.ack().await.map_err(|e| e.to_string());
                acks.lock().unwrap().push((receive, acked));
                Ok::<(), BoxError>(())
            }
        }
    };
    let both_acked = until(s.t(12), || acks.lock().unwrap().len() == 2);
    run_while(&consumer, handler, both_acked).await;
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
    assert_eq!(s.store.records().await, (1, 0));
    assert_eq!(consumer.stats().acked, 1);
}

async fn a_receive_of_a_held_message_waits_for_its_lease_and_then_takes_the_key(on: On) {
    let s = Setup::new(on).await;
    s.q.send("order-1:x").unwrap();
    let consumer = s.keyed_by_order().build().unwrap();
    let mut stream = consumer.stream();
    let d = stream.next().await.unwrap().unwrap();
    // This consumer receives no more: the message, once visible again, stays in the queue.
    consumer.pause();
    // Another receive of the same message, as a server that hands a held message out twice
    // would make (the store is called by hand, as that receive's consumer would).
    let key = Key::new(s.q.name(), "order-1");
    let other = Owner::new(d.message_id(), "another receipt");
    let hold = Hold::new(s.t(1), s.t(2));
    let begun = s.store.begin(&key, &other, hold).await.unwrap();
    assert!(
        matches!(begun, Begun::InProgress { ends_in } if ends_in <= s.t(1)),
        "waits for the held delivery's lease: {begun:?}"
    );
    // Its extensions fail until the lease lapses: then the other receive takes the key.
    s.q.fail_for(Action::ChangeMessageVisibility, "InternalError", s.t(3));
    s.q.fail_for(
        Action::ChangeMessageVisibilityBatch,
        "InternalError",
        s.t(3),
    );
    tokio::time::timeout(s.t(2), d.lost()).await.expect("lost");
    sleep(secs(1)).await;
    assert_eq!(
        s.store.begin(&key, &other, hold).await.unwrap(),
        Begun::Started
    );
    let err = d.ack().await.unwrap_err();
    assert!(err.is_lost(), "{err}");
    assert_eq!(s.q.len(), 1, "not deleted: the other receive owns it");
    assert_eq!(s.store.records().await, (0, 1), "the other receive's claim");
}

async fn two_consumers_racing_for_one_key_run_the_handler_once(on: On) {
    let s = Setup::new(on).await;
    let q = s.q.clone();
    q.send("order-1:a").unwrap();
    q.send("order-1:b").unwrap();
    let one = s.keyed_by_order().receive_batch_size(1).build().unwrap();
    let two = s.keyed_by_order().receive_batch_size(1).build().unwrap();
    let runs = Runs::default();
    let hold = s.t(1) / 2;
    let handler = {
        let runs = runs.clone();
        move |d: Delivery| {
            let runs = runs.clone();
            async move {
                runs.ran(d.body());
                sleep(hold).await;
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    tokio::select! {
        r = one.run(handler.clone()) => panic!("ended: {r:?}"),
        r = two.run(handler) => panic!("ended: {r:?}"),
        () = until(s.t(12), || q.is_empty()) => {}
    }
    assert!(q.is_empty());
    assert_eq!(runs.total(), 1, "one of the two ran");
    let skipped = one.stats().duplicates_skipped + two.stats().duplicates_skipped;
    assert_eq!(skipped, 1);
}

async fn a_store_that_keeps_failing_before_the_handler_is_a_failure_never_done(on: On) {
    let s = Setup::new(on).await;
    s.q.send("order-1:x").unwrap();
    s.store.fail_next(1_000);
    let failed = common::memory_queue(s.t);
    let consumer = s.keyed_by_order().dead_letter(&failed, 1).build().unwrap();
    let runs = Runs::default();
    run_while(
        &consumer,
        counting_acks(&runs),
        until(s.t(12), || failed.len() == 1),
    )
    .await;
    assert_eq!(runs.total(), 0, "the handler never ran");
    assert_eq!(
        (failed.len(), s.q.len()),
        (1, 0),
        "moved by the failure step"
    );
    assert_eq!(consumer.stats().idempotency_failures, 1);
    let calls = s.store.calls();
    // Retried within the lease: before its deadline, and for 20 s at most.
    assert!((3..40).contains(&calls), "{calls} calls");
}

async fn a_store_failing_at_the_ack_leaves_the_message_to_come_back_and_run_again(on: On) {
    let s = Setup::new(on).await;
    let q = s.q.clone();
    q.send("order-1:x").unwrap();
    let consumer = s.keyed_by_order().build().unwrap();
    let runs = Runs::default();
    let acks: Arc<Mutex<Vec<String>>> = Arc::default();
    let handler = {
        let (runs, acks, store) = (runs.clone(), acks.clone(), s.store.clone());
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
    run_while(&consumer, handler, until(s.t(12), || q.is_empty())).await;
    let acks = acks.lock().unwrap().clone();
    assert_eq!(acks.len(), 2, "{acks:?}");
    assert!(acks[0].contains("idempotency store"), "{acks:?}");
    assert_eq!(acks[1], "ok");
    assert_eq!(runs.total(), 2, "not done, so run again");
    assert_eq!(consumer.stats().idempotency_failures, 1);
    assert_eq!(consumer.stats().acked, 1);
}

async fn a_key_function_that_fails_sends_the_delivery_to_the_failure_step_with_its_error(on: On) {
    let s = Setup::new(on).await;
    s.q.send("no order id here").unwrap();
    let failed = common::memory_queue(s.t);
    let consumer = s.keyed_by_order().dead_letter(&failed, 1).build().unwrap();
    let runs = Runs::default();
    run_while(
        &consumer,
        counting_acks(&runs),
        until(s.t(6), || failed.len() == 1),
    )
    .await;
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
    assert_eq!(s.store.calls(), 0, "no key, no call");
}

async fn a_batch_handler_gets_only_the_deliveries_whose_key_is_free(on: On) {
    let s = Setup::new(on).await;
    let q = s.q.clone();
    q.send("order-1:x").unwrap();
    let consumer = s
        .keyed_by_order()
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
    let limit = s.t(3);
    let run = || {
        let (consumer, handler, q) = (consumer.clone(), handler.clone(), q.clone());
        async move {
            tokio::select! {
                r = consumer.run_batch(handler) => panic!("ended: {r:?}"),
                () = until(limit, || q.is_empty()) => {}
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
    assert_eq!(s.store.records().await, (2, 0));
}

async fn with_no_lease_to_extend_the_writes_are_two_per_message(on: On) {
    let s = Setup::new(on).await;
    for i in 0..20 {
        s.q.send(format!("order-{i}:x")).unwrap();
    }
    let consumer = s.keyed_by_order().build().unwrap();
    let q = s.q.clone();
    run_while(
        &consumer,
        |d: Delivery| d.ack(),
        until(s.t(3), || q.is_empty()),
    )
    .await;
    sleep(secs(1)).await;
    assert_eq!(s.store.records().await, (20, 0));
    assert_eq!(s.store.calls(), 40, "begin and complete, each once");
}

#[tokio::test(start_paused = true)]
async fn a_fifo_message_is_keyed_by_its_deduplication_id() {
    let q = common::memory_fifo(10);
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
    let other = sqs_consumer::memory::SendOptions::new()
        .group_id("g")
        .deduplication_id("dedup-2");
    q.send_with("other", other).unwrap();
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
    assert_eq!((runs.of("resent"), runs.of("other")), (0, 1));
    assert_eq!(consumer.stats().duplicates_skipped, 1);
}

#[tokio::test(start_paused = true)]
async fn without_a_key_function_each_message_is_keyed_by_its_own_id() {
    let q = common::memory_queue(10);
    for body in ["a", "b", "c"] {
        q.send(body).unwrap();
    }
    let consumer = Consumer::in_memory(&q)
        .idempotency(MemoryStore::new())
        .build()
        .unwrap();
    let keys: Arc<Mutex<Vec<(Key, Key)>>> = Arc::default();
    let handler = {
        let (keys, name) = (keys.clone(), q.name().to_owned());
        move |d: Delivery| {
            let (keys, name) = (keys.clone(), name.clone());
            async move {
                let own = Key::new(&name, d.message_id());
                keys.lock()
                    .unwrap()
                    .push((d.idempotency_key().unwrap(), own));
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(secs(30), || q.is_empty())).await;
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3, "each ran, none waited for another's key");
    for (held, own) in &keys {
        assert_eq!(held, own);
    }
    assert_eq!(consumer.stats().duplicates_delayed, 0);
}

#[tokio::test(start_paused = true)]
async fn a_done_key_is_kept_for_the_keep_time_and_no_longer() {
    let (q, store) = (common::memory_queue(10), MemoryStore::new());
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
    let q = MemoryQueue::new();
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
async fn a_stop_gives_back_the_keys_of_what_it_releases_before_it_returns() {
    /// A store whose calls take half a second.
    #[derive(Debug, Clone)]
    struct Slow(MemoryStore);

    impl Store for Slow {
        fn begin<'a>(&'a self, k: &'a Key, o: &'a Owner, h: Hold) -> StoreFuture<'a, Begun> {
            Box::pin(async move {
                sleep(Duration::from_millis(500)).await;
                self.0.begin(k, o, h).await
            })
        }

        fn extend<'a>(&'a self, k: &'a Key, o: &'a Owner, h: Hold) -> StoreFuture<'a, Ownership> {
            Box::pin(async move {
                sleep(Duration::from_millis(500)).await;
                self.0.extend(k, o, h).await
            })
        }

        fn complete<'a>(
            &'a self,
            k: &'a Key,
            o: &'a Owner,
            d: Duration,
        ) -> StoreFuture<'a, Ownership> {
            Box::pin(async move {
                sleep(Duration::from_millis(500)).await;
                self.0.complete(k, o, d).await
            })
        }

        fn abandon<'a>(&'a self, k: &'a Key, o: &'a Owner) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                sleep(Duration::from_millis(500)).await;
                self.0.abandon(k, o).await
            })
        }
    }

    let (q, store) = (common::memory_queue(10), MemoryStore::new());
    q.send("order-1:x").unwrap();
    let consumer = keyed_by_order(&q, &Slow(store.clone()))
        .shutdown_timeout(secs(1))
        .build()
        .unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let started = started.clone();
        move |d: Delivery| {
            let started = started.clone();
            async move {
                started.notify_one();
                sleep(secs(1000)).await;
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    let signal = started.notified();
    consumer.run_until(handler, signal).await.unwrap();
    assert_eq!(
        store.in_progress(),
        0,
        "given back before the stop returned"
    );
    assert_eq!(q.visible_len(), 1, "released");
}

/// A DynamoDB that takes each request and never answers: every store call ends at the
/// consumer's 5 s bound, the claim gives up within the 20 s that a delivery's store calls are
/// retried for, and the delivery goes to the failure step without its handler. Real clock:
/// the requests go over loopback.
#[cfg(feature = "dynamodb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_store_bounds_each_call_and_the_delivery_goes_to_the_failure_step() {
    const CALL_TIMEOUT: Duration = Duration::from_secs(5);
    const RETRY_WINDOW: Duration = Duration::from_secs(20);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicU64::new(0));
    let silent = tokio::spawn({
        let requests = requests.clone();
        async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = listener.accept().await {
                requests.fetch_add(1, Ordering::SeqCst);
                held.push(connection);
            }
        }
    });
    let store = DynamoDbStore::new(common::dynamodb::client_at(&endpoint), "silent");
    let (q, failed) = (common::memory_queue(2), common::memory_queue(2));
    q.send("order-1:x").unwrap();
    let consumer = keyed_by_order(&q, &store)
        .dead_letter(&failed, 1)
        .build()
        .unwrap();
    let runs = Runs::default();
    let started = Instant::now();
    let limit = RETRY_WINDOW + 2 * CALL_TIMEOUT;
    // Moved: copied to the failure queue, and then deleted from its own.
    run_while(
        &consumer,
        counting_acks(&runs),
        until(limit, || failed.len() == 1 && q.is_empty()),
    )
    .await;
    let took = started.elapsed();
    silent.abort();
    assert_eq!(runs.total(), 0, "the handler never ran");
    assert_eq!((failed.len(), q.len()), (1, 0), "moved by the failure step");
    assert_eq!(consumer.stats().idempotency_failures, 1);
    assert!(
        took >= CALL_TIMEOUT,
        "each call waits out its bound: {took:?}"
    );
    assert!(took < limit, "gave up within the retry window: {took:?}");
    let requests = requests.load(Ordering::SeqCst);
    // One request per call, each cut at 5 s, within 20 s.
    assert!((2..=5).contains(&requests), "{requests} requests");
}

/// A store error that trying again cannot help (a missing table, a denied permission) is not
/// tried again: one call, then the failure step, without the handler.
#[tokio::test(start_paused = true)]
async fn a_fatal_store_error_is_not_tried_again() {
    /// A store whose every call fails for good, counted.
    #[derive(Debug, Clone, Default)]
    struct Refusing(Arc<AtomicU64>);

    impl Refusing {
        fn refuse<'a, T: Send + 'a>(&'a self) -> StoreFuture<'a, T> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(StoreError::fatal("no such table")) })
        }
    }

    impl Store for Refusing {
        fn begin<'a>(&'a self, _: &'a Key, _: &'a Owner, _: Hold) -> StoreFuture<'a, Begun> {
            self.refuse()
        }

        fn extend<'a>(&'a self, _: &'a Key, _: &'a Owner, _: Hold) -> StoreFuture<'a, Ownership> {
            self.refuse()
        }

        fn complete<'a>(
            &'a self,
            _: &'a Key,
            _: &'a Owner,
            _: Duration,
        ) -> StoreFuture<'a, Ownership> {
            self.refuse()
        }

        fn abandon<'a>(&'a self, _: &'a Key, _: &'a Owner) -> StoreFuture<'a, ()> {
            self.refuse()
        }
    }

    let (q, failed, store) = (
        common::memory_queue(10),
        common::memory_queue(10),
        Refusing::default(),
    );
    q.send("order-1:x").unwrap();
    let consumer = keyed_by_order(&q, &store)
        .dead_letter(&failed, 1)
        .build()
        .unwrap();
    let runs = Runs::default();
    run_while(
        &consumer,
        counting_acks(&runs),
        until(secs(60), || failed.len() == 1),
    )
    .await;
    assert_eq!(runs.total(), 0, "the handler never ran");
    assert_eq!(failed.len(), 1, "moved by the failure step");
    assert_eq!(store.0.load(Ordering::SeqCst), 1, "one call");
}

/// The record follows the lease when the keeper's extensions answer late (each one after the
/// record's own look at the deadline): a handler that runs for three timeouts still holds its
/// key against a later receive of its message.
#[tokio::test(start_paused = true)]
async fn the_record_follows_a_lease_whose_extensions_answer_late() {
    use sqs_consumer::memory::Faults;
    let late = Faults::new(7)
        .held_answer(1.0, Duration::from_millis(4_500))
        .actions([
            Action::ChangeMessageVisibility,
            Action::ChangeMessageVisibilityBatch,
        ]);
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(10))
        .faults(late)
        .build()
        .unwrap();
    let store = MemoryStore::new();
    q.send("order-1:x").unwrap();
    let answer = what_a_later_receive_finds(&q, &store, secs(30), |_| {}).await;
    assert!(answer.starts_with("Ok(InProgress"), "{answer}");
}

/// A record extension that fails is tried again before the lease it recorded ends: a later
/// receive of the message, just past that deadline, still finds the key held.
#[tokio::test(start_paused = true)]
async fn a_failed_record_extension_is_tried_again_before_the_recorded_lease_ends() {
    let (q, store) = (common::memory_queue(10), MemoryStore::new());
    q.send("order-1:x").unwrap();
    // The record's first extension (a call's margin before its 10 s) fails.
    let fail_first_extension = |store: &MemoryStore| store.fail_next(1);
    let later = Duration::from_millis(10_300);
    let answer = what_a_later_receive_finds(&q, &store, later, fail_first_extension).await;
    assert!(answer.starts_with("Ok(InProgress"), "{answer}");
}

/// What a later receive of `q`'s one message finds when it begins on the key `after` the
/// handler took it (`prepare` runs on the store first); the handler then acks.
async fn what_a_later_receive_finds(
    q: &MemoryQueue,
    store: &MemoryStore,
    after: Duration,
    prepare: impl Fn(&MemoryStore) + Clone + Send + Sync + 'static,
) -> String {
    let consumer = keyed_by_order(q, store).build().unwrap();
    let answers: Arc<Mutex<Vec<String>>> = Arc::default();
    let handler = {
        let (store, answers) = (store.clone(), answers.clone());
        move |d: Delivery| {
            let (store, answers, prepare) = (store.clone(), answers.clone(), prepare.clone());
            async move {
                let key = d.idempotency_key().unwrap();
                prepare(&store);
                sleep(after).await;
                let later_receive = Owner::new(d.message_id(), "a later receipt");
                let hold = Hold::new(secs(10), secs(20));
                let begun = store.begin(&key, &later_receive, hold).await;
                answers.lock().unwrap().push(format!("{begun:?}"));
                d.ack().await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    run_while(&consumer, handler, until(after * 4, || q.is_empty())).await;
    assert_eq!(consumer.stats().acked, 1);
    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers.len(), 1, "{answers:?}");
    answers[0].clone()
}
