//! How a delivery is lost, and how an ack, a release or an extension under way meet its
//! deadline.
use super::*;

#[tokio::test(start_paused = true)]
async fn an_ack_racing_an_extension_is_not_reported_lost() {
    // The extension due at 5 s is throttled; the keeper would retry it 100..200 ms
    // later, but the ack goes out at 5.01 s and stops it: no extension races the delete,
    // and the successful ack is not turned into a "lost" one. (An extension already
    // under way when the ack starts is covered in `lease/mod.rs`.)
    let q = queue(10);
    q.send("m").unwrap();
    let d = hold(&q, None).await;
    let r = d.received_at();
    sleep_until(r + secs(4)).await;
    q.fail_next(Action::ChangeMessageVisibility, "RequestThrottled", 1);
    sleep_until(r + secs(5) + Duration::from_millis(10)).await;
    let ctx = d.context().clone();
    d.ack().await.expect("the delete succeeded");
    assert!(q.is_empty());
    sleep(secs(1)).await;
    assert_eq!(
        extensions(&q),
        1,
        "the throttled try, and no retry after the ack"
    );
    assert_eq!(ctx.stats(0).lost, 0, "not counted as lost either");
}

/// A queue of timeout `t` seconds whose deletes take effect at once and are answered
/// `hold` later.
fn holding_delete_answers(t: u64, hold: Duration) -> MemoryQueue {
    MemoryQueue::builder()
        .visibility_timeout(secs(t))
        .faults(
            crate::memory::Faults::new(1)
                .held_answer(1.0, hold)
                .actions([Action::DeleteMessageBatch]),
        )
        .build()
        .expect("valid queue")
}

/// Waits for `lost`: a lapse before an answer, at `deadline` and before `by`.
async fn lost_at_its_deadline(
    lost: impl std::future::Future<Output = LostReason>,
    deadline: Instant,
    by: Instant,
) {
    let reason = tokio::time::timeout_at(by, lost)
        .await
        .expect("lost at its deadline");
    assert_eq!(reason, LostReason::LapsedBeforeAnswer);
    assert!(
        Instant::now() >= deadline,
        "lost {:?} before its deadline",
        deadline - Instant::now()
    );
}

/// A release under way is not extended (an extension landing after it would hide the
/// message again). Its release lets go of the lease at once, but on another thread the
/// keeper may come to its timer first: it sends nothing then, and looks at it again
/// until its let-go comes or its deadline passes; lost then, not when it fell due.
#[tokio::test(start_paused = true)]
async fn a_kept_lease_whose_release_is_under_way_is_lost_at_its_deadline_not_before() {
    // What a release does before it lets go of the lease.
    kept_while_released(|lease| _ = lease.begin_release()).await;
}

#[tokio::test(start_paused = true)]
async fn a_release_trying_again_is_not_extended_while_its_try_is_under_way() {
    // What a release whose first try failed does before its second.
    kept_while_released(|lease| {
        lease.begin_release();
        lease.waiting_to_retry();
        lease.retrying();
    })
    .await;
}

/// Holds a message (T = 4 s) and at 1 s does to its lease what a release under way does
/// (`release`), its keeper still keeping it: lost at its deadline, never extended.
async fn kept_while_released(release: impl FnOnce(&Lease)) {
    let q = queue(4);
    q.send("m").unwrap();
    let d = hold(&q, None).await;
    let (r, deadline) = (d.received_at(), d.deadline());
    let lost = d.lost();
    sleep_until(r + secs(1)).await;
    release(d.lease());
    lost_at_its_deadline(lost, deadline, deadline + secs(1)).await;
    assert_eq!(extensions(&q), 0, "no extension while it is released");
}

#[tokio::test(start_paused = true)]
async fn an_ack_unanswered_at_its_deadline_is_lost_there_and_reported_lost() {
    // The delete takes effect, but its answer comes 6 s late: after the 4 s deadline,
    // which nothing extends while the delete is under way.
    let q = holding_delete_answers(4, secs(6));
    q.send("m").unwrap();
    let d = hold(&q, None).await;
    let (r, deadline) = (d.received_at(), d.deadline());
    let lost = d.lost();
    let ctx = d.context().clone();
    let ack = tokio::spawn(d.ack());
    // Not when the answer came.
    lost_at_its_deadline(lost, deadline, r + secs(5)).await;
    let err = ack.await.unwrap().expect_err("answered after the deadline");
    assert!(err.is_lost(), "{err}");
    assert!(Instant::now() >= r + secs(6), "the answer was awaited");
    let stats = ctx.stats(0);
    assert_eq!((stats.acked, stats.lost_acks, stats.lost), (0, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_delete_still_under_way_at_the_last_safe_moment_is_extended_then() {
    // T = 10 s; the delete's answer comes 9.5 s after it was sent. The keeper holds back
    // the extension due at 5 s while the delete is under way, and sends it only at the
    // last moment one can reach SQS before the deadline (1 s before it).
    let q = holding_delete_answers(10, Duration::from_millis(9_500));
    q.send("m").unwrap();
    let d = hold(&q, None).await;
    let deadline = d.deadline();
    let ack = tokio::spawn(d.ack());
    sleep_until(deadline - Duration::from_millis(1_020)).await;
    assert_eq!(
        extensions(&q),
        0,
        "held back while the delete may still be answered"
    );
    sleep_until(deadline - secs(1)).await;
    assert_eq!(extensions(&q), 1, "sent at the last safe moment");
    ack.await.unwrap().expect("answered before the deadline");
    assert_eq!(extensions(&q), 1);
}

#[tokio::test(start_paused = true)]
async fn an_ack_waiting_to_try_its_delete_again_is_extended_on_time() {
    // T = 10 s; deletes fail from 4 s to 7 s, so at 5 s the ack waits between tries. Only
    // a try under way puts the extension off to the last moment (9 s): between tries it
    // goes when due, leaving room to retry it.
    let q = queue(10);
    q.send("m").unwrap();
    let d = hold(&q, None).await;
    let r = d.received_at();
    sleep_until(r + secs(4)).await;
    q.fail_for(Action::DeleteMessage, "InternalError", secs(3));
    let ack = tokio::spawn(d.ack());
    sleep_until(r + secs(6)).await;
    assert_eq!(
        extensions(&q),
        1,
        "extended when due, between the delete's tries"
    );
    ack.await.unwrap().expect("acked once deletes work again");
    assert!(q.requests().deletes() > 1, "the delete was tried again");
}

#[tokio::test(start_paused = true)]
async fn an_ack_answered_just_before_its_deadline_is_an_ack() {
    let q = holding_delete_answers(4, Duration::from_millis(3_900));
    q.send("m").unwrap();
    let d = hold(&q, None).await;
    let ctx = d.context().clone();
    d.ack().await.expect("answered in time");
    let stats = ctx.stats(0);
    assert_eq!((stats.acked, stats.lost_acks, stats.lost), (1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn message_not_in_flight_loses_the_delivery() {
    let q = queue(10);
    q.send("job").unwrap();
    let d = hold(&q, None).await;
    // AWS rarely if ever answers this (a lapsed handle gets 200), but if it does, the
    // delivery is gone.
    q.fail_next(Action::ChangeMessageVisibility, "MessageNotInflight", 1);
    let lost = d.lost();
    assert_eq!(lost.await, LostReason::NotInFlight);
    assert!(d.is_lost());
    assert!(matches!(
        d.ack().await,
        Err(Error::Lost {
            reason: LostReason::NotInFlight,
            ..
        })
    ));
}

/// A release whose call fails once the delivery is lost (here through an outage of
/// visibility changes) is `Error::Lost`, the failure its source: not the bare 500.
#[tokio::test(start_paused = true)]
async fn a_release_failing_once_lost_is_reported_lost_with_the_failure_as_source() {
    let q = queue(10);
    q.send("job").unwrap();
    let d = hold(&q, None).await;
    for action in [
        Action::ChangeMessageVisibility,
        Action::ChangeMessageVisibilityBatch,
    ] {
        q.fail_for(action, "InternalError", secs(600));
    }
    assert_eq!(d.lost().await, LostReason::ExtensionFailed);
    match d.release().await {
        Err(Error::Lost {
            reason: LostReason::ExtensionFailed,
            source: Some(source),
            ..
        }) => assert!(source.to_string().contains("InternalError"), "{source}"),
        other => panic!("expected Error::Lost with the 500 as source, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn an_invalid_receipt_handle_loses_the_delivery() {
    let q = queue(10);
    q.send("job").unwrap();
    let d = hold(&q, None).await;
    q.change_visibility(&receipt_of(&d), Duration::ZERO)
        .unwrap();
    // Another receiver takes it: our handle is now stale.
    assert_eq!(q.receive(1, Duration::ZERO).await.unwrap().len(), 1);
    assert_eq!(d.lost().await, LostReason::ReceiptHandleInvalid);
    let deletes = q.requests().deletes();
    let err = d.ack().await.expect_err("ack with a stale handle fails");
    assert!(err.is_lost(), "{err}");
    // The delete is still sent: a lease lost to a lapsed timeout alone still has the
    // latest handle, and AWS deletes the message then; with a stale handle it answers
    // success and deletes nothing. Either way the ack says the delivery was lost.
    assert_eq!(q.requests().deletes(), deletes + 1, "the delete is sent");
    assert_eq!(q.in_flight_len(), 1, "the other receiver's delivery stays");
}

#[tokio::test(start_paused = true)]
async fn a_transient_extension_error_is_retried_and_the_delivery_survives() {
    let q = queue(10);
    q.send("job").unwrap();
    let d = hold(&q, None).await;
    q.fail_next(Action::ChangeMessageVisibility, "RequestThrottled", 2);
    sleep(secs(60)).await;
    assert!(!d.is_lost());
    assert_eq!(q.in_flight_len(), 1);
    assert!(
        extensions(&q) >= 2 + 11,
        "two failures, then one success per 5 s"
    );
    d.ack().await.expect("ack after retried extensions");
    assert!(q.is_empty());
}

/// A delivery held on a queue of T = 10 s whose extensions all fail transiently.
async fn held_with_failing_extensions() -> (MemoryQueue, Delivery) {
    let q = queue(10);
    q.send("job").unwrap();
    let d = hold(&q, None).await;
    q.fail_next(Action::ChangeMessageVisibility, "InternalError", 10_000);
    (q, d)
}

#[tokio::test(start_paused = true)]
async fn extensions_failing_until_the_deadline_lose_the_delivery() {
    let (q, d) = held_with_failing_extensions().await;
    let r = d.received_at();
    let lost = d.lost();
    assert_eq!(lost.await, LostReason::ExtensionFailed);
    assert_eq!(Instant::now(), r + secs(10), "lost exactly at the deadline");
    let tries = extensions(&q);
    assert!(
        (3..=30).contains(&tries),
        "bounded retries in the half window, got {tries}"
    );
}

/// A keeper held up past a deadline with no extension left to try (a starved runtime,
/// here a clock moved on at once) finds the delivery lost when it runs again.
#[tokio::test(start_paused = true)]
async fn a_deadline_passed_while_the_keeper_was_held_up_loses_the_delivery() {
    let (q, d) = held_with_failing_extensions().await;
    let r = d.received_at();
    // The tries end a call margin (1 s) before the deadline; then the keeper waits for it.
    sleep_until(r + Duration::from_millis(9_500)).await;
    let tries = extensions(&q);
    assert!(!d.is_lost());
    tokio::time::advance(secs(3)).await;
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(d.lease().lost_reason(), Some(LostReason::ExtensionFailed));
    assert_eq!(extensions(&q), tries, "no try after the last one");
}

/// The last try of a failed extension may go exactly a call margin before the deadline.
#[tokio::test(start_paused = true)]
async fn an_extension_retried_exactly_at_its_last_moment_is_sent() {
    // T = 1 s: a call margin of 250 ms. Calls take 150 ms: the extension due halfway
    // fails 350 ms before the deadline and is tried again 100 ms later (its shortest
    // wait), exactly at the last moment a call can still reach SQS in time.
    let ms = Duration::from_millis;
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(1))
        .latency(ms(150))
        .build()
        .expect("valid queue");
    q.send("job").unwrap();
    let d = hold(&q, None).await;
    let deadline = d.deadline();
    q.fail_next(Action::ChangeMessageVisibility, "RequestThrottled", 1);
    sleep_until(deadline + ms(500)).await;
    assert_eq!(extensions(&q), 2, "the failed try and the last one");
    assert!(!d.is_lost());
    assert_eq!(d.deadline(), deadline - ms(250) + secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_release_tries_four_times_on_transient_errors_and_once_on_others() {
    for (code, tries) in [
        ("InternalError", 4),
        ("AccessDenied", 1),
        ("ReceiptHandleIsInvalid", 1),
        ("MessageNotInflight", 1),
    ] {
        let q = queue(30);
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        let before = extensions(&q);
        q.fail_next(Action::ChangeMessageVisibility, code, 10);
        let err = d.release().await.expect_err(code);
        assert_eq!(extensions(&q) - before, tries, "{code}: tries");
        match code {
            "InternalError" => assert!(err.is_retryable(), "{err}"),
            "AccessDenied" => assert!(err.is_fatal(), "{err}"),
            // An answer that the delivery is gone is `Error::Lost`, with its reason.
            _ => {
                let expected = match code {
                    "MessageNotInflight" => LostReason::NotInFlight,
                    _ => LostReason::ReceiptHandleInvalid,
                };
                assert!(
                    matches!(err, Error::Lost { reason, .. } if reason == expected),
                    "{code}: {err:?}"
                );
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn release_after_hides_for_the_delay_and_refuses_past_the_limit() {
    let q = queue(10);
    q.send("a").unwrap();
    q.send("b").unwrap();
    q.send("d").unwrap();
    let a = hold(&q, None).await;
    let b = hold(&q, None).await;
    let d = hold(&q, None).await;
    let start = Instant::now();
    a.release_after(secs(120)).await.expect("release_after");
    sleep_until(start + secs(119)).await;
    assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
    sleep_until(start + secs(120)).await;
    assert_eq!(
        q.receive(1, Duration::ZERO).await.unwrap()[0].body(),
        Some("a")
    );

    // Refused before anything is sent: no visibility change reaches the queue.
    let sent = extensions(&q);
    // 120 s after the receive, the limit (12 hours less a 5 s margin) is 43,075 s away.
    let allowed = match b.release_after(secs(43_076)).await {
        Err(Error::PastHardDeadline { allowed, .. }) => allowed,
        other => panic!("expected PastHardDeadline, got {other:?}"),
    };
    assert_eq!(allowed, secs(43_075));
    assert_eq!(
        extensions(&q),
        sent,
        "nothing sent for a refused release_after"
    );
    // What the error allows is taken.
    d.release_after(allowed).await.expect("the allowed delay");
    assert_eq!(extensions(&q), sent + 1);
    q.send("c").unwrap();
    let c = hold(&q, None).await;
    let sent = extensions(&q);
    let err = c.release_after(secs(43_201)).await.expect_err("over 12 h");
    assert_eq!(
        extensions(&q),
        sent,
        "nothing sent for a refused release_after"
    );
    assert!(
        matches!(
            err,
            Error::InvalidConfig {
                field: "release_after",
                ..
            }
        ),
        "{err}"
    );
}
