use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::memory::counts::Action;
use crate::test_support::seconds;
use crate::MemoryQueue;

fn queue() -> MemoryQueue {
    MemoryQueue::builder()
        .visibility_timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// A batcher of `call`s on `q`.
fn batcher(q: &MemoryQueue, call: Call) -> Arc<Batcher> {
    Arc::new(Batcher::new(
        Queue::new(q.clone()),
        call,
        TaskTracker::new(),
        KeeperRuntime::Caller,
        RequestsAtOnce::default(),
    ))
}

/// Sends `n` messages and receives them all; returns their receipt handles.
async fn held(q: &MemoryQueue, n: usize) -> Vec<String> {
    for i in 0..n {
        q.send(format!("m{i}")).unwrap();
    }
    let mut handles = Vec::new();
    while handles.len() < n {
        for m in q.receive(10, Duration::ZERO).await.unwrap() {
            handles.push(m.receipt_handle().unwrap().to_owned());
        }
    }
    handles
}

/// Submits every handle at once, each from its own task; returns each result.
async fn submit_all(
    batcher: Arc<Batcher>,
    handles: Vec<String>,
    visibility_timeout: VisibilityTimeout,
) -> Vec<Result<(), Error>> {
    let tasks: Vec<_> = handles
        .into_iter()
        .map(|h| {
            let b = batcher.clone();
            tokio::spawn(async move { b.submit(&h, visibility_timeout, None).await })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    results
}

fn entry(receipt: &str) -> Entry {
    Entry {
        receipt: receipt.to_owned(),
        visibility_timeout: VisibilityTimeout::ZERO,
        cohort: None,
        submitted: Instant::now(),
        reply: oneshot::channel().0,
        told: None,
        _pending: TaskTracker::new().token(),
    }
}

#[test]
fn a_batch_takes_ten_in_order_and_never_one_handle_twice() {
    let mut waiting: VecDeque<Entry> = ["a", "b", "a", "c", "d", "e", "f", "g", "h", "i", "j", "k"]
        .into_iter()
        .map(entry)
        .collect();
    let first: Vec<String> = take_request(&mut waiting)
        .into_iter()
        .map(|e| e.receipt)
        .collect();
    assert_eq!(first, ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]);
    let rest: Vec<&str> = waiting.iter().map(|e| e.receipt.as_str()).collect();
    assert_eq!(rest, ["a", "k"], "the second \"a\" waits, in its place");
}

/// The batcher reads no further ahead than its request slots can send at once: what is
/// past that stays in the inbox, where submissions keep their order.
#[test]
fn the_batcher_takes_off_the_inbox_what_its_request_slots_can_send() {
    for (at_once, slots) in [(RequestsAtOnce::default(), 40), (RequestsAtOnce(20), 200)] {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..slots + 5 {
            assert!(tx.send(Submission::One(entry(&format!("r{i}")))).is_ok());
        }
        let mut waiting = VecDeque::new();
        assert_eq!(take_queued(&mut rx, &mut waiting, at_once), slots);
        assert_eq!((waiting.len(), rx.len()), (slots, 5));
        let more = take_queued(&mut rx, &mut waiting, at_once);
        assert_eq!(more, 0, "full: nothing more");
    }
}

/// A request for every 10 slots, so every slot's delete can be under way at once; at
/// least 4, at most 64.
#[test]
fn the_requests_under_way_at_once_follow_the_slots() {
    let at_once = |slots| RequestsAtOnce::for_slots(slots).0;
    assert_eq!(at_once(1), 4);
    assert_eq!(at_once(40), 4);
    assert_eq!(at_once(41), 5);
    assert_eq!(at_once(200), 20);
    assert_eq!(at_once(640), 64);
    assert_eq!(at_once(120_000), 64);
    assert_eq!(RequestsAtOnce::default(), RequestsAtOnce::for_slots(40));
}

/// With no runtime to run the batching task on, every entry fails, and its error names
/// the batch request it would have gone in.
#[test]
fn without_a_runtime_each_entry_fails_naming_its_batch_request() {
    let q = queue();
    for (call, request) in [
        (Call::Delete, "SQS DeleteMessageBatch failed"),
        (
            Call::ChangeVisibility,
            "SQS ChangeMessageVisibilityBatch failed",
        ),
    ] {
        let b = batcher(&q, call);
        let one = futures::executor::block_on(b.submit("r", VisibilityTimeout::ZERO, None));
        let many = futures::executor::block_on(b.submit_many(&[
            ("r", VisibilityTimeout::ZERO),
            ("s", VisibilityTimeout::ZERO),
        ]));
        for result in std::iter::once(one).chain(many) {
            let err = result.expect_err("no runtime, no batch request");
            assert!(err.is_retryable(), "{err}");
            assert!(err.to_string().starts_with(request), "{err}");
        }
    }
}

#[test]
fn the_batcher_lets_passes_go_by_while_each_brings_more_up_to_a_full_batch() {
    // Each pass brought one more: on, until they make a full batch with those taken.
    assert!(one_more_pass(None, 0, 1));
    assert!(one_more_pass(Some(0), 1, 1));
    assert!(one_more_pass(Some(7), 8, 1));
    assert!(!one_more_pass(Some(8), 9, 1));
    assert!(!one_more_pass(None, 9, 1));
    // Those taken count: two taken and seven queued are not a full batch, eight are.
    assert!(one_more_pass(Some(6), 7, 2));
    assert!(!one_more_pass(Some(7), 8, 2));
    assert!(!one_more_pass(None, 0, 10));
}

#[test]
fn a_pass_that_brings_nothing_ends_the_wait_once_others_came() {
    assert!(!one_more_pass(Some(1), 1, 1));
    assert!(!one_more_pass(Some(3), 3, 1));
    // Alone so far, the first waits for company.
    assert!(one_more_pass(Some(0), 0, 1));
    // A pass that brings more is not quiet, nor is one that finds fewer queued.
    assert!(one_more_pass(Some(1), 2, 1));
    assert!(one_more_pass(Some(2), 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_lone_entry_goes_out_at_once() {
    let q = queue();
    let h = held(&q, 1).await;
    let batcher = Batcher::new(
        Queue::new(q.clone()),
        Call::Delete,
        TaskTracker::new(),
        KeeperRuntime::Caller,
        RequestsAtOnce::default(),
    );
    let start = Instant::now();
    batcher
        .submit(&h[0], VisibilityTimeout::ZERO, None)
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 1);
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn entries_arriving_while_a_request_is_under_way_wait_for_it_together() {
    let q = queue_with_50_ms_requests();
    let h = held(&q, 6).await;
    let base = q.requests().requests(Action::DeleteMessageBatch);
    let batcher = batcher(&q, Call::Delete);
    let start = Instant::now();
    // One entry first (it goes at once), then five more, 5 ms apart, while it is out.
    let mut tasks = Vec::new();
    for handle in h {
        let b = batcher.clone();
        tasks.push(tokio::spawn(async move {
            b.submit(&handle, VisibilityTimeout::ZERO, None)
                .await
                .unwrap();
            start.elapsed()
        }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    // The first answered after one round trip; the rest left together when it came
    // back, so none waited more than one round trip for a slot.
    assert_eq!(done[0], Duration::from_millis(50));
    assert!(
        done[1..].iter().all(|d| *d == Duration::from_millis(100)),
        "{done:?}"
    );
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch) - base, 2);
    assert!(q.is_empty());
}

/// Submits `handle`'s delete as one of `cohort`, which it leaves first (as an ack does);
/// returns when it was answered.
fn ack_in(
    batcher: &Arc<Batcher>,
    cohort: &Arc<Cohort>,
    handle: String,
    start: Instant,
) -> tokio::task::JoinHandle<Duration> {
    let (b, c) = (batcher.clone(), cohort.clone());
    tokio::spawn(async move {
        c.leave();
        b.submit(&handle, VisibilityTimeout::ZERO, Some(c))
            .await
            .unwrap();
        start.elapsed()
    })
}

/// Acks `handles` one a millisecond, each in the next of `cohorts` by turns; when each
/// was answered, from the first.
async fn acks_a_millisecond_apart(
    batcher: &Arc<Batcher>,
    handles: Vec<String>,
    cohorts: &[Arc<Cohort>],
) -> Vec<Duration> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (handle, cohort) in handles.into_iter().zip(cohorts.iter().cycle()) {
        tasks.push(ack_in(batcher, cohort, handle, start));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut answered = Vec::new();
    for t in tasks {
        answered.push(t.await.unwrap());
    }
    answered
}

/// Messages stay held a minute; every request takes 50 ms.
fn queue_with_50_ms_requests() -> MemoryQueue {
    MemoryQueue::builder()
        .visibility_timeout(Duration::from_secs(60))
        .latency(Duration::from_millis(50))
        .build()
        .unwrap()
}

/// A delete batcher that has learned the round trip from one request (deleting `handle`),
/// and the delete requests made so far.
async fn taught_the_round_trip(q: &MemoryQueue, handle: String) -> (Arc<Batcher>, u64) {
    let batcher = batcher(q, Call::Delete);
    batcher
        .submit(&handle, VisibilityTimeout::ZERO, None)
        .await
        .unwrap();
    (batcher, q.requests().requests(Action::DeleteMessageBatch))
}

#[tokio::test(start_paused = true)]
async fn the_acks_of_one_receive_wait_for_each_other_with_no_request_under_way() {
    let q = queue_with_50_ms_requests();
    let mut h = held(&q, 11).await;
    let (batcher, base) = taught_the_round_trip(&q, h.pop().unwrap()).await;
    let cohort = Arc::new(Cohort::default());
    (0..10).for_each(|_| cohort.join());
    let start = Instant::now();
    // Three acks now, seven 2 ms later: one request for the ten.
    let mut tasks: Vec<_> = h
        .drain(..3)
        .map(|handle| ack_in(&batcher, &cohort, handle, start))
        .collect();
    tokio::time::sleep(Duration::from_millis(2)).await;
    tasks.extend(
        h.drain(..)
            .map(|handle| ack_in(&batcher, &cohort, handle, start)),
    );
    for t in tasks {
        assert_eq!(t.await.unwrap(), Duration::from_millis(52));
    }
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch) - base, 1);
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn acks_that_cannot_end_the_wait_for_their_cohort_do_not_wake_the_batcher() {
    let q = queue_with_50_ms_requests();
    let mut h = held(&q, 6).await;
    let (batcher, base) = taught_the_round_trip(&q, h.pop().unwrap()).await;
    // A receive of five (a partial batch): one ack a millisecond, the first four leaving
    // others of the cohort still to come.
    five_acks_rung_by_the_fifth(&batcher, h).await;
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch) - base, 1);
}

#[tokio::test(start_paused = true)]
async fn entries_already_sent_do_not_count_towards_a_full_batch_that_rings() {
    let q = queue_with_50_ms_requests();
    let mut h = held(&q, 16).await;
    let (batcher, base) = taught_the_round_trip(&q, h.pop().unwrap()).await;
    // Ten acks of no cohort: a full batch, sent.
    let sent = h.split_off(5);
    for result in submit_all(batcher.clone(), sent, seconds(0)).await {
        result.unwrap();
    }
    // Then a receive of five, as above: only the fifth ends the wait.
    five_acks_rung_by_the_fifth(&batcher, h).await;
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch) - base, 2);
}

/// Acks the five `handles` of one receive a millisecond apart; asserts that each was
/// answered when the fifth rang the batcher, which woke once while it waited.
async fn five_acks_rung_by_the_fifth(batcher: &Arc<Batcher>, handles: Vec<String>) {
    let cohort = Arc::new(Cohort::default());
    (0..5).for_each(|_| cohort.join());
    for done in acks_a_millisecond_apart(batcher, handles, &[cohort]).await {
        assert_eq!(done, Duration::from_millis(54), "rung by the fifth");
    }
    let wakes = batcher.bell.wakes.load(Ordering::SeqCst);
    assert_eq!(wakes, 1, "the batcher woke {wakes} times while it waited");
}

#[tokio::test(start_paused = true)]
async fn the_first_acks_wait_for_their_cohort_on_the_round_trip_of_the_queues_other_calls() {
    let q = queue_with_50_ms_requests();
    let h = held(&q, 5).await;
    // The consumer's first call: the read of the queue's visibility timeout.
    let queue = Queue::new(q.clone());
    queue.visibility_timeout().await.unwrap();
    let batcher = Arc::new(Batcher::new(
        queue,
        Call::Delete,
        TaskTracker::new(),
        KeeperRuntime::Caller,
        RequestsAtOnce::default(),
    ));
    // The batcher's first request: a receive of five, acked one a millisecond.
    let cohort = Arc::new(Cohort::default());
    (0..5).for_each(|_| cohort.join());
    for done in acks_a_millisecond_apart(&batcher, h, &[cohort]).await {
        assert_eq!(done, Duration::from_millis(54), "sent with the fifth");
    }
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 1);
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_batch_filled_while_its_cohorts_are_awaited_goes_at_once() {
    let q = queue_with_50_ms_requests();
    let mut h = held(&q, 11).await;
    let (batcher, base) = taught_the_round_trip(&q, h.pop().unwrap()).await;
    // Five acks each of two receives of ten, one a millisecond.
    let cohorts = [Arc::new(Cohort::default()), Arc::new(Cohort::default())];
    for c in &cohorts {
        (0..10).for_each(|_| c.join());
    }
    for done in acks_a_millisecond_apart(&batcher, h, &cohorts).await {
        assert_eq!(done, Duration::from_millis(59), "sent with the tenth");
    }
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch) - base, 1);
}

#[tokio::test(start_paused = true)]
async fn an_answer_does_not_send_a_batch_whose_receives_others_are_still_coming() {
    let q = queue_with_50_ms_requests();
    let mut h = held(&q, 12).await;
    let (batcher, base) = taught_the_round_trip(&q, h.pop().unwrap()).await;
    let start = Instant::now();
    // A request under way from 0 to 50 ms.
    let under_way = {
        let (b, handle) = (batcher.clone(), h.pop().unwrap());
        tokio::spawn(async move { b.submit(&handle, VisibilityTimeout::ZERO, None).await })
    };
    let cohort = Arc::new(Cohort::default());
    (0..10).for_each(|_| cohort.join());
    // Three acks at 10 ms, seven at 55 ms: after the answer, within one round trip of
    // the first three.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut tasks: Vec<_> = h
        .drain(..3)
        .map(|handle| ack_in(&batcher, &cohort, handle, start))
        .collect();
    tokio::time::sleep(Duration::from_millis(45)).await;
    tasks.extend(
        h.drain(..)
            .map(|handle| ack_in(&batcher, &cohort, handle, start)),
    );
    under_way.await.unwrap().unwrap();
    for t in tasks {
        assert_eq!(t.await.unwrap(), Duration::from_millis(105));
    }
    assert_eq!(
        q.requests().requests(Action::DeleteMessageBatch) - base,
        2,
        "the one under way, then the ten together"
    );
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_ack_waits_for_its_cohort_at_most_one_round_trip() {
    let q = queue_with_50_ms_requests();
    let mut h = held(&q, 2).await;
    let batcher = batcher(&q, Call::Delete);
    // Before any request the round trip is unknown: nothing waits.
    let cohort = Arc::new(Cohort::default());
    (0..3).for_each(|_| cohort.join());
    let start = Instant::now();
    let first = ack_in(&batcher, &cohort, h.pop().unwrap(), start);
    assert_eq!(first.await.unwrap(), Duration::from_millis(50));
    // Now known: an ack whose cohort never follows leaves one round trip later.
    let start = Instant::now();
    let second = ack_in(&batcher, &cohort, h.pop().unwrap(), start);
    assert_eq!(second.await.unwrap(), Duration::from_millis(100));
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn eleven_entries_take_two_requests() {
    let q = queue();
    let h = held(&q, 11).await;
    let batcher = batcher(&q, Call::Delete);
    let results = submit_all(batcher, h, seconds(0)).await;
    assert!(results.iter().all(Result::is_ok));
    let r = q.requests();
    assert_eq!(
        (r.requests(Action::DeleteMessageBatch), r.deletes()),
        (2, 11)
    );
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_same_handle_twice_goes_in_two_requests() {
    let q = queue();
    let h = held(&q, 1).await;
    let batcher = batcher(&q, Call::ChangeVisibility);
    let results = submit_all(batcher, vec![h[0].clone(), h[0].clone()], seconds(30)).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(
        q.requests().requests(Action::ChangeMessageVisibilityBatch),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_entry_goes_back_to_its_own_caller() {
    let q = queue();
    let h = held(&q, 3).await;
    // The second entry carries no valid receipt handle; the others are fine.
    let batcher = batcher(&q, Call::Delete);
    let bad = "not-a-handle".to_owned();
    let results = submit_all(batcher, vec![h[0].clone(), bad, h[2].clone()], seconds(0)).await;
    assert!(results[0].is_ok() && results[2].is_ok());
    let err = results[1].as_ref().unwrap_err();
    assert!(err.is_lost(), "{err}");
    assert_eq!(
        q.requests().requests(Action::DeleteMessageBatch),
        1,
        "one request for all three"
    );
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn failures_go_back_to_their_callers_untried_again() {
    let q = queue();
    let h = held(&q, 3).await;
    let batcher = batcher(&q, Call::Delete);
    // Two entries fail transiently: their callers hear it, the batcher does not retry.
    q.fail_next(Action::DeleteMessage, "InternalError", 2);
    let results = submit_all(batcher.clone(), h.clone(), seconds(0)).await;
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|e| e.is_retryable()), "{failed:?}");
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 1);
    assert_eq!(q.len(), 2);
    // A whole request refused: every caller gets the error, once.
    q.fail_next(Action::DeleteMessageBatch, "AccessDenied", 1);
    let results = submit_all(batcher.clone(), h.clone(), seconds(0)).await;
    for r in &results {
        let err = r.as_ref().unwrap_err();
        assert!(
            err.is_fatal() && err.code() == Some("AccessDenied"),
            "{err}"
        );
    }
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 2);
    // Callers that try again get through.
    let results = submit_all(batcher, h, seconds(0)).await;
    assert!(results.iter().all(Result::is_ok));
    assert!(q.is_empty());
}

#[test]
fn a_batcher_outlives_the_runtime_that_started_it() {
    let q = queue();
    let batcher = batcher(&q, Call::Delete);
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    };
    for _ in 0..2 {
        // Each runtime is gone before the next starts: the second one's submit finds the
        // first batching task gone and starts its own.
        runtime().block_on(async {
            let h = held(&q, 1).await;
            batcher
                .submit(&h[0], VisibilityTimeout::ZERO, None)
                .await
                .unwrap();
        });
    }
    assert!(q.is_empty());
    assert_eq!(q.requests().deletes(), 2);
}

#[tokio::test(start_paused = true)]
async fn entries_submitted_together_share_requests() {
    let q = queue();
    let h = held(&q, 30).await;
    let batcher = batcher(&q, Call::ChangeVisibility);
    let results = submit_all(batcher, h, seconds(30)).await;
    assert!(results.iter().all(Result::is_ok));
    let r = q.requests();
    assert_eq!(r.visibility_changes(), 30);
    assert_eq!(r.requests(Action::ChangeMessageVisibilityBatch), 3);
}

#[tokio::test(start_paused = true)]
async fn entries_submitted_together_go_in_one_request() {
    let q = MemoryQueue::builder()
        .visibility_timeout(Duration::from_secs(60))
        .latency(Duration::from_millis(5))
        .build()
        .unwrap();
    let h = held(&q, 10).await;
    let batcher = batcher(&q, Call::Delete);
    let entries: Vec<(&str, VisibilityTimeout)> = h
        .iter()
        .map(|r| (r.as_str(), VisibilityTimeout::ZERO))
        .collect();
    let results = batcher.submit_many(&entries).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 1);
    assert!(q.is_empty());
}
