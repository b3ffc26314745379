use super::*;
use crate::lease::adaptive_visibility::AdaptiveVisibility;
use crate::memory::MemoryQueue;
use crate::test_support::{context, seconds};

fn lease() -> Arc<Lease> {
    let ctx = context(&MemoryQueue::new());
    let now = Instant::now();
    Arc::new(Lease::new(
        Arc::new(ctx),
        Message::builder().receipt_handle("r").build(),
        now,
        now,
        seconds(30),
        Span::none(),
    ))
}

#[tokio::test]
async fn an_extension_answer_racing_a_settle_call_does_not_lose_the_delivery() {
    // An extension sent just before the ack reaches SQS just after the delete, and fails.
    let l = lease();
    l.begin_release();
    assert!(!l.extension_lost(LostReason::ReceiptHandleInvalid));
    assert_eq!(l.state(), State::Settling);
    l.acked();
    assert_eq!(l.drop_delivery(), Dropped::Settled);
    assert_eq!(l.ended().await, End::Acked);
    assert_eq!(l.context().stats(0).lost, 0);
}

#[tokio::test(start_paused = true)]
async fn the_first_deadline_allows_for_the_answers_way_back_never_before_the_request() {
    let ctx = Arc::new(context(&MemoryQueue::new()));
    let t0 = Instant::now();
    let at = |request: u64, answer: u64, timeout: u32| {
        let lease = Lease::new(
            ctx.clone(),
            Message::builder().receipt_handle("r").build(),
            t0 + Duration::from_millis(request),
            t0 + Duration::from_millis(answer),
            seconds(timeout.into()),
            Span::none(),
        );
        (lease.deadline() - t0).as_millis()
    };
    // A long poll answered 10 s after its request: 1 s (at most) for the way back.
    assert_eq!(at(0, 10_000, 30), 39_000);
    // A quarter of a short timeout.
    assert_eq!(at(0, 10_000, 2), 11_500);
    // Never before the request: an answer 200 ms after it.
    assert_eq!(at(0, 200, 30), 30_000);
}

#[tokio::test(start_paused = true)]
async fn a_delete_answered_after_the_deadline_is_no_ack() {
    let l = lease();
    l.begin_release();
    tokio::time::advance(Duration::from_millis(30_001)).await;
    let err = l
        .finish_ack(Ok(()), None)
        .expect_err("the message may have gone to another consumer first");
    assert!(matches!(
        err,
        Error::Lost {
            reason: LostReason::LapsedBeforeAnswer,
            ..
        }
    ));
    let stats = l.context().stats(0);
    assert_eq!((stats.acked, stats.lost_acks, stats.lost), (0, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_delete_answered_at_the_deadline_is_an_ack() {
    let l = lease();
    l.begin_release();
    tokio::time::advance(Duration::from_millis(30_000)).await;
    assert_eq!(l.deadline(), Instant::now());
    l.finish_ack(Ok(()), None).expect("not after the deadline");
    assert_eq!(l.context().stats(0).acked, 1);
}

/// A delete's success that arrived in time makes the ack, however late its caller
/// finishes it; the keeper neither extends nor lapses the lease after it.
#[tokio::test(start_paused = true)]
async fn a_delete_that_arrived_in_time_is_an_ack_whenever_its_caller_looks() {
    let l = lease();
    assert_eq!(l.begin_ack(), None);
    tokio::time::advance(Duration::from_millis(29_000)).await;
    l.answered(&Ok(()));
    assert!(!l.is_extendable() && !l.is_deleting());
    tokio::time::advance(Duration::from_millis(5_000)).await;
    assert!(!l.lapsed(LostReason::LapsedBeforeAnswer), "not lapsed");
    l.finish_ack(Ok(()), None).expect("answered in time");
    let stats = l.context().stats(0);
    assert_eq!((stats.acked, stats.lost), (1, 0));
}

/// A success that arrived after the deadline, or a failure, or a release's success,
/// proves nothing: the lease lapses as before.
#[tokio::test(start_paused = true)]
async fn a_late_success_a_failure_or_a_release_is_no_ack_where_it_arrives() {
    let late = lease();
    late.begin_ack();
    tokio::time::advance(Duration::from_millis(30_001)).await;
    late.answered(&Ok(()));
    assert!(late.lapsed(LostReason::LapsedBeforeAnswer));
    assert!(late.finish_ack(Ok(()), None).unwrap_err().is_lost());

    let failed = lease();
    failed.begin_ack();
    failed.answered(&Err(failed_delete(ErrorKind::Retryable)));
    assert!(failed.is_deleting(), "still extended while it retries");
    tokio::time::advance(Duration::from_millis(30_001)).await;
    assert!(failed.lapsed(LostReason::LapsedBeforeAnswer));

    let released = lease();
    released.begin_release();
    released.answered(&Ok(()));
    tokio::time::advance(Duration::from_millis(30_001)).await;
    assert!(released.lapsed(LostReason::LapsedBeforeAnswer));
}

/// A delete's failure of `kind`, as the SQS error classification makes it.
fn failed_delete(kind: ErrorKind) -> Error {
    Error::Sqs {
        operation: "DeleteMessage",
        code: Some("Some.Code".into()),
        message: "no".into(),
        kind,
        source: "4xx".into(),
    }
}

/// A move's delete that fails: lost, for the reason SQS gave, if the failure says so;
/// any other failure is the move's error and the lease still holds.
#[tokio::test]
async fn a_moves_failed_delete_is_lost_only_when_its_failure_says_so() {
    let gone = lease();
    gone.begin_ack();
    let err = gone
        .finish_move(
            Err(failed_delete(ErrorKind::Lost(LostReason::NotInFlight))),
            None,
        )
        .expect_err("lost");
    assert!(matches!(
        err,
        Error::Lost {
            reason: LostReason::NotInFlight,
            ..
        }
    ));
    assert_eq!(gone.lost_reason(), Some(LostReason::NotInFlight));
    let stats = gone.context().stats(0);
    assert_eq!((stats.lost, stats.dead_lettered), (1, 0));

    let held = lease();
    held.begin_ack();
    let err = held
        .finish_move(Err(failed_delete(ErrorKind::Retryable)), None)
        .expect_err("failed");
    assert!(err.is_retryable(), "the failure itself: {err}");
    assert_eq!(held.lost_reason(), None, "still held");
    assert_eq!(held.context().stats(0).lost, 0);
}

#[tokio::test]
async fn an_acks_delete_that_finds_it_gone_is_lost_for_the_reason_sqs_gave() {
    let l = lease();
    l.begin_ack();
    let failed = failed_delete(ErrorKind::Lost(LostReason::NotInFlight));
    let err = l.finish_ack(Err(failed), None).expect_err("lost");
    assert!(matches!(
        err,
        Error::Lost {
            reason: LostReason::NotInFlight,
            source: Some(_),
            ..
        }
    ));
    assert_eq!(l.lost_reason(), Some(LostReason::NotInFlight));
    let stats = l.context().stats(0);
    assert_eq!((stats.acked, stats.lost_acks, stats.lost), (0, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_of_a_lapsed_ack_is_reported_lost() {
    let l = lease();
    l.begin_release();
    l.waiting_to_retry();
    assert!(
        l.lapsed(LostReason::ExtensionFailed),
        "waiting between tries"
    );
    let failed = Error::runtime_gone("DeleteMessage");
    let err = l.finish_ack(Err(failed), None).expect_err("lost");
    assert!(err.is_lost(), "{err}");
    assert_eq!(l.context().stats(0).lost_acks, 1);
    // The transport error is kept as the source.
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        source.is_some_and(|s| s.contains("DeleteMessage")),
        "{err:?}"
    );
}

/// Whatever the delete's failure (a refusal too), an ack of a delivery lost before it is
/// `Error::Lost`, the failure its source; while the lease holds, the failure itself.
#[tokio::test(start_paused = true)]
async fn any_failure_of_an_ack_once_lost_is_reported_lost_with_it_as_the_source() {
    let refused = || Error::Sqs {
        operation: "DeleteMessage",
        code: Some("AccessDenied".into()),
        message: "no".into(),
        kind: ErrorKind::Fatal,
        source: "403".into(),
    };
    let l = lease();
    l.begin_release();
    let err = l
        .finish_ack(Err(refused()), Some(LostReason::ExtensionFailed))
        .expect_err("lost");
    match &err {
        Error::Lost {
            reason: LostReason::ExtensionFailed,
            source: Some(source),
            ..
        } => assert!(source.to_string().contains("AccessDenied"), "{source}"),
        other => panic!("expected Error::Lost with the refusal as source, got {other:?}"),
    }
    assert_eq!(l.context().stats(0).lost_acks, 1);

    let held = lease();
    held.begin_release();
    let err = held.finish_ack(Err(refused()), None).expect_err("refused");
    assert!(err.is_fatal() && !err.is_lost(), "{err}");
    assert_eq!(held.context().stats(0).lost_acks, 0);
}

#[tokio::test]
async fn the_first_reason_wins_and_survives_the_drop() {
    let l = lease();
    let lost = l.lost();
    assert!(l.extension_lost(LostReason::NotInFlight));
    l.mark_lost(LostReason::ReceiptHandleInvalid);
    assert_eq!(l.lost_reason(), Some(LostReason::NotInFlight));
    assert!(
        !l.acked(),
        "an ack of a lost delivery does not make it acked"
    );
    assert_eq!(l.drop_delivery(), Dropped::Settled);
    assert_eq!(lost.await, LostReason::NotInFlight);
    assert_eq!(l.lost_reason(), Some(LostReason::NotInFlight));
    assert_eq!(l.ended().await, End::NotAcked);
    assert_eq!(l.context().stats(0).lost, 1, "counted once");
    assert_eq!(l.context().stats(0).acked, 0, "not counted as acked");
}

/// A waker that reads a figure from the stats the moment it is woken, as a waiter on
/// another thread may.
struct Recorder {
    lease: Arc<Lease>,
    read: fn(&crate::stats::Stats) -> u64,
    seen: std::sync::Mutex<Option<u64>>,
}

impl futures_util::task::ArcWake for Recorder {
    fn wake_by_ref(this: &Arc<Self>) {
        let figure = (this.read)(&this.lease.context().stats(0));
        *this.seen.lock().unwrap() = Some(figure);
    }
}

/// What `read` gave when `waiting` was woken by `act`.
fn seen_at_wake<F: Future>(
    l: &Arc<Lease>,
    read: fn(&crate::stats::Stats) -> u64,
    waiting: F,
    act: impl FnOnce(),
) -> Option<u64> {
    let recorder = Arc::new(Recorder {
        lease: l.clone(),
        read,
        seen: std::sync::Mutex::new(None),
    });
    let waker = futures_util::task::waker(recorder.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    tokio::pin!(waiting);
    assert!(waiting.as_mut().poll(&mut cx).is_pending());
    act();
    let seen = *recorder.seen.lock().unwrap();
    seen
}

#[tokio::test]
async fn a_loss_and_an_ack_are_counted_before_their_waiters_wake() {
    let l = lease();
    let seen = seen_at_wake(
        &l,
        |s| s.lost,
        l.lost(),
        || {
            assert!(l.extension_lost(LostReason::ExtensionFailed));
        },
    );
    assert_eq!(seen, Some(1), "lost: counted when woken");

    let l = lease();
    l.begin_release();
    let seen = seen_at_wake(
        &l,
        |s| s.acked,
        l.ended(),
        || {
            l.acked();
        },
    );
    assert_eq!(seen, Some(1), "acked: counted when woken");
}

#[tokio::test]
async fn dropping_a_held_delivery_wakes_whoever_waits_for_its_end() {
    let l = lease();
    let seen = seen_at_wake(
        &l,
        |s| s.lost,
        l.ended(),
        || {
            assert_eq!(l.drop_delivery(), Dropped::Unsettled);
        },
    );
    assert_eq!(seen, Some(0), "woken by the drop, not lost");
}

#[tokio::test]
async fn a_settle_call_can_find_it_lost() {
    let l = lease();
    l.begin_release();
    l.mark_lost(LostReason::ReceiptHandleInvalid);
    assert_eq!(l.state(), State::Lost(LostReason::ReceiptHandleInvalid));
    l.begin_release(); // no way back to Settling
    assert!(l.lost_reason().is_some());
}

#[tokio::test]
async fn a_delivery_dropped_in_its_handler_waits_for_the_outcome() {
    let l = lease();
    l.enter_handler();
    assert_eq!(l.drop_delivery(), Dropped::Deferred);
    assert_eq!(l.state(), State::Abandoned);
    assert!(l.is_extendable(), "kept hidden until the outcome decides");
    let ended = l.ended();
    assert_eq!(
        l.leave_handler(),
        Left::Abandoned,
        "abandoned: the handler's outcome settles it"
    );
    assert_eq!(l.begin_ack(), None); // AckMode::OnSuccess and Ok
    assert!(l.acked());
    assert_eq!(ended.await, End::Acked);
    assert_eq!(l.context().stats(0).acked, 1);
}

#[tokio::test]
async fn a_delivery_still_held_when_its_handler_returns_decides_for_itself() {
    let l = lease();
    l.enter_handler();
    assert_eq!(
        l.leave_handler(),
        Left::NotAbandoned,
        "moved elsewhere, still held"
    );
    assert_eq!(l.state(), State::Held);
    assert_eq!(l.drop_delivery(), Dropped::Unsettled);
    assert_eq!(l.ended().await, End::NotAcked);
}

#[tokio::test]
async fn a_delivery_in_its_handler_can_still_be_lost_or_settled() {
    let l = lease();
    l.enter_handler();
    assert!(l.extension_lost(LostReason::ExtensionFailed));
    assert_eq!(l.drop_delivery(), Dropped::Settled);
    assert_eq!(l.leave_handler(), Left::NotAbandoned);
    assert_eq!(l.lost_reason(), Some(LostReason::ExtensionFailed));
}

#[tokio::test]
async fn a_delivery_dropped_in_its_handler_and_lost_is_never_acked() {
    let l = lease();
    l.enter_handler();
    assert_eq!(l.drop_delivery(), Dropped::Deferred);
    let lost = l.lost();
    assert!(l.extension_lost(LostReason::ExtensionFailed));
    assert_eq!(lost.await, LostReason::ExtensionFailed);
    assert!(!l.is_extendable());
    assert_eq!(
        l.leave_handler(),
        Left::AbandonedLost(LostReason::ExtensionFailed)
    );
    assert!(l.begin_ack().is_some(), "lost: no ack starts");
    let err = l
        .finish_ack(Ok(()), l.lost_reason())
        .expect_err("a delete that succeeds for a lost delivery is no ack");
    assert!(err.is_lost(), "{err}");
    let stats = l.context().stats(0);
    assert_eq!((stats.acked, stats.lost_acks, stats.lost), (0, 1, 1));
    l.mark_ended();
    assert_eq!(l.ended().await, End::NotAcked);
}

/// A lease handed out now, in a context whose adaptive visibility estimate is returned.
fn lease_with_estimate() -> (Arc<Lease>, Arc<AdaptiveVisibility>) {
    let adaptive = Arc::new(AdaptiveVisibility::new(seconds(1), seconds(43_200)));
    let ctx = context(&MemoryQueue::new()).with_adaptive_visibility(Some(adaptive.clone()));
    let now = Instant::now();
    let lease = Lease::new(
        Arc::new(ctx),
        Message::builder().receipt_handle("r").build(),
        now - Duration::from_secs(5),
        now,
        seconds(30),
        Span::none(),
    );
    (Arc::new(lease), adaptive)
}

#[tokio::test(start_paused = true)]
async fn a_hold_counts_from_the_answer_to_the_settle_once_and_a_lost_one_not_at_all() {
    let (l, adaptive) = lease_with_estimate();
    tokio::time::advance(Duration::from_secs(20)).await;
    l.begin_release();
    // Counted once: 20 s from the answer (not from the request, 5 s before it).
    assert_eq!(adaptive.visibility_timeout(seconds(30)).secs(), 41);
    tokio::time::advance(Duration::from_secs(100)).await;
    l.drop_delivery();
    assert_eq!(adaptive.visibility_timeout(seconds(30)).secs(), 41);

    let (l, adaptive) = lease_with_estimate();
    tokio::time::advance(Duration::from_secs(20)).await;
    assert!(l.extension_lost(LostReason::ExtensionFailed));
    l.drop_delivery();
    assert_eq!(
        adaptive.visibility_timeout(seconds(30)).secs(),
        30,
        "a lost delivery says nothing"
    );

    let (l, adaptive) = lease_with_estimate();
    tokio::time::advance(Duration::from_secs(3)).await;
    assert_eq!(l.drop_delivery(), Dropped::Unsettled);
    assert_eq!(
        adaptive.visibility_timeout(seconds(30)).secs(),
        7,
        "a drop unsettled ends the hold"
    );
}
