//! The keeper's schedule for a held delivery: extensions at half the timeout, the
//! 12-hour cap, letting go once settled or dropped.
use super::*;

#[tokio::test(start_paused = true)]
async fn extends_at_half_the_timeout_by_the_timeout_again_and_again() {
    let q = queue(30);
    q.send("job").unwrap();
    let d = hold(&q, None).await;
    let r = d.received_at();
    assert_eq!(d.deadline(), r + secs(30));
    for round in 1..=10u64 {
        // Just before and just after each half-way point.
        sleep_until(r + secs(15 * round) - Duration::from_millis(100)).await;
        assert_eq!(
            extensions(&q),
            round - 1,
            "no early extension in round {round}"
        );
        sleep_until(r + secs(15 * round) + Duration::from_millis(100)).await;
        assert_eq!(extensions(&q), round, "one extension per half timeout");
        assert_eq!(d.deadline(), r + secs(15 * round + 30));
    }
    // Still hidden after 5 timeouts.
    assert_eq!(q.in_flight_len(), 1);
    assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
    assert!(!d.is_lost());
    let stats = d.context().stats(0);
    assert_eq!((stats.extended, stats.capped), (10, 0), "none cut short");
}

#[tokio::test(start_paused = true)]
async fn holding_and_settling_wake_the_keeper_only_when_it_must() {
    let q = queue(30);
    for i in 0..20 {
        q.send(format!("m{i}")).unwrap();
    }
    let keeper = Keeper::new(KeeperRuntime::Caller);
    let run = RunTies::new(Default::default(), keeper.clone());
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(hold_in(&q, None, run.clone()).await);
        tokio::task::yield_now().await;
    }
    // The first started the keeper; the others are due with its first timer (15 s).
    assert_eq!(keeper.rings(), 1);
    for d in held.drain(..10) {
        d.ack().await.unwrap();
    }
    for d in held.drain(..5) {
        d.release().await.unwrap();
    }
    drop(held.drain(..));
    // The releases (visibility changes to 0) are done; the drops sent nothing.
    sleep(Duration::from_millis(100)).await;
    assert_eq!(extensions(&q), 5);
    assert_eq!(
        keeper.rings(),
        1,
        "settling and dropping do not wake the keeper"
    );
    // One due before the keeper's first timer (at 2 s) rings it, and is extended then.
    q.send("short").unwrap();
    let short = hold_in(&q, Some(4), run.clone()).await;
    assert_eq!(keeper.rings(), 2);
    sleep(Duration::from_millis(2_100)).await;
    assert_eq!(extensions(&q), 6);
    short.ack().await.unwrap();
    // At 15 s the keeper wakes for the leases it was told to let go of without being woken:
    // nothing is sent for them.
    let before = extensions(&q);
    sleep(secs(20)).await;
    assert_eq!(extensions(&q), before);
    assert_eq!(keeper.rings(), 2);
}

/// A settled or dropped delivery's lease (and with it its `delivery` span, which ends
/// when the last handle goes) leaves the keeper within `LET_GO_WITHIN`, though the
/// keeper's next timer is a whole half timeout away and letting go does not ring it.
#[tokio::test(start_paused = true)]
async fn a_settled_lease_leaves_the_keeper_within_a_second() {
    use crate::keeper::LET_GO_WITHIN;
    let q = queue(30);
    for i in 0..3 {
        q.send(format!("m{i}")).unwrap();
    }
    let keeper = Keeper::new(KeeperRuntime::Caller);
    let run = RunTies::new(Default::default(), keeper.clone());
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(hold_in(&q, None, run.clone()).await);
    }
    sleep(secs(2)).await;
    let leases: Vec<Arc<Lease>> = held.iter().map(|d| d.lease().clone()).collect();
    let mut held = held.into_iter();
    held.next().unwrap().ack().await.unwrap();
    held.next().unwrap().release().await.unwrap();
    drop(held);
    let settled = Instant::now();
    while leases.iter().any(|l| Arc::strong_count(l) > 1) {
        assert!(settled.elapsed() <= LET_GO_WITHIN, "still kept");
        sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(keeper.rings(), 1, "letting go did not ring the keeper");
}

/// Whoever settles or drops a delivery lets go of its lease, often more than one of
/// them: the first tells the keeper, the others add nothing to its inbox (a full inbox
/// rings the keeper).
#[tokio::test(start_paused = true)]
async fn a_lease_let_go_of_again_and_again_is_forgotten_once() {
    let q = queue(30);
    q.send("a").unwrap();
    let keeper = Keeper::new(KeeperRuntime::Caller);
    let run = RunTies::new(Default::default(), keeper.clone());
    let d = hold_in(&q, None, run.clone()).await;
    sleep(secs(1)).await;
    assert_eq!(keeper.rings(), 1);
    let lease = d.lease().clone();
    for _ in 0..2_000 {
        keeper.let_go(&lease);
    }
    assert_eq!(
        keeper.rings(),
        1,
        "one command for the keeper, not one per call"
    );
    let let_go_at = Instant::now();
    while Arc::strong_count(&lease) > 2 {
        assert!(let_go_at.elapsed() <= secs(2), "still kept");
        sleep(Duration::from_millis(10)).await;
    }
    drop(d);
    sleep(secs(20)).await;
    assert_eq!(extensions(&q), 0, "a lease let go of is not extended");
}

#[test]
fn a_keeper_gone_with_its_runtime_is_started_again_by_the_next_delivery() {
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let q = queue(30);
    q.send("a").unwrap();
    q.send("b").unwrap();
    let keeper = Keeper::new(KeeperRuntime::Caller);
    let run = RunTies::new(Default::default(), keeper.clone());
    let first = paused().block_on(async {
        let d = hold_in(&q, None, run.clone()).await;
        tokio::task::yield_now().await;
        d
    });
    // That runtime is gone, and the keeper's task with it.
    assert_eq!(keeper.rings(), 1);
    paused().block_on(async {
        // Due after the gone keeper's first timer: it rings all the same, and is kept.
        let second = hold_in(&q, None, run.clone()).await;
        assert_eq!(keeper.rings(), 2);
        sleep(secs(15) + Duration::from_millis(100)).await;
        assert_eq!(extensions(&q), 1);
        assert!(!second.is_lost());
        second.ack().await.unwrap();
    });
    drop(first);
}

/// An extension answered after its delivery was acked extends nothing: it is not
/// counted, and nothing more is sent for it.
#[tokio::test(start_paused = true)]
async fn an_extension_answered_after_the_ack_is_not_counted() {
    // Extensions are answered 300 ms late; the one due at 5 s is under way when the
    // handler acks at 5.1 s.
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(10))
        .faults(
            crate::memory::Faults::new(1)
                .held_answer(1.0, Duration::from_millis(300))
                .actions([Action::ChangeMessageVisibilityBatch]),
        )
        .build()
        .expect("valid queue");
    q.send("job").unwrap();
    // The keeper outlives the delivery, as a consumer's does.
    let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
    let d = hold_in(&q, None, run.clone()).await;
    let r = d.received_at();
    let ctx = d.context().clone();
    sleep_until(r + Duration::from_millis(5_100)).await;
    assert_eq!(extensions(&q), 1, "under way");
    d.ack().await.expect("ack");
    sleep(secs(30)).await;
    let stats = ctx.stats(0);
    assert_eq!((stats.acked, stats.extended), (1, 0));
    assert_eq!(extensions(&q), 1);
}

#[tokio::test(start_paused = true)]
async fn a_late_extension_is_counted() {
    let q = queue(10);
    q.send("job").unwrap();
    let d = hold(&q, None).await;
    let late = || d.context().stats(0).late_extensions;
    // Due at 5 s. Done 1 s late: not counted (only later than min(T/4, 1 s) counts).
    tokio::time::advance(Duration::from_millis(6_000)).await;
    sleep(Duration::from_millis(1)).await;
    assert_eq!((extensions(&q), late()), (1, 0));
    // Next due at 6 + 5 = 11 s; jump the clock to about 13 s at once, as a runtime
    // whose threads were blocked for two seconds would see it.
    tokio::time::advance(secs(7)).await;
    sleep(Duration::from_millis(1)).await;
    assert_eq!((extensions(&q), late()), (2, 1));
    assert!(!d.is_lost());
}

#[tokio::test(start_paused = true)]
async fn an_extension_held_up_until_the_deadline_nears_is_not_sent() {
    // T = 10 s, due at 5 s, deadline at 10 s; no call may leave later than 1 s before it
    // (SQS answers a change that arrives after the deadline with success, doing nothing).
    let q = queue(10);
    q.send("on time").unwrap();
    q.send("too late").unwrap();
    let on_time = hold(&q, None).await;
    // The runtime is held up until 8.9 s: still time to send.
    tokio::time::advance(Duration::from_millis(8_900)).await;
    sleep(Duration::from_millis(1)).await;
    assert_eq!(extensions(&q), 1);
    assert!(!on_time.is_lost());
    assert_eq!(
        on_time.deadline(),
        on_time.received_at() + Duration::from_millis(18_900)
    );

    let too_late = hold(&q, None).await;
    let r = too_late.received_at();
    // Held up until 9.1 s: lost, and nothing sent.
    tokio::time::advance(Duration::from_millis(9_100)).await;
    assert_eq!(too_late.lost().await, LostReason::ExtensionFailed);
    assert_eq!(Instant::now(), r + Duration::from_millis(9_100));
    assert_eq!(extensions(&q), 1, "no extension for the late one");
    let stats = too_late.context().stats(0);
    assert_eq!(stats.late_extensions, 1, "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn with_a_short_timeout_the_send_margin_and_the_late_threshold_are_a_quarter_of_it() {
    // T = 2 s, due at 1 s, deadline at 2 s: a quarter of T (0.5 s), not 1 s, is both the
    // margin before the deadline and how late an extension may be before it counts late.
    let q = queue(2);
    q.send("on time").unwrap();
    q.send("too late").unwrap();
    let on_time = hold(&q, None).await;
    // Held up until 1.45 s: 0.45 s late (not counted), 0.55 s left: sent.
    tokio::time::advance(Duration::from_millis(1_450)).await;
    sleep(Duration::from_millis(1)).await;
    assert_eq!(extensions(&q), 1);
    assert!(!on_time.is_lost());
    assert_eq!(on_time.context().stats(0).late_extensions, 0);
    on_time.ack().await.unwrap();

    let too_late = hold(&q, None).await;
    // Held up until 1.55 s: 0.55 s late (counted), 0.45 s left: lost, nothing sent.
    tokio::time::advance(Duration::from_millis(1_550)).await;
    assert_eq!(too_late.lost().await, LostReason::ExtensionFailed);
    assert_eq!(extensions(&q), 1, "no extension for the late one");
    assert_eq!(too_late.context().stats(0).late_extensions, 1);
}

#[tokio::test(start_paused = true)]
async fn zero_timeout_sends_no_extension() {
    let q = queue(30);
    q.send("job").unwrap();
    let d = hold(&q, Some(0)).await;
    sleep(secs(600)).await;
    assert_eq!(extensions(&q), 0);
    assert!(!d.is_lost());
    assert_eq!(d.deadline(), d.received_at());
}

#[tokio::test(start_paused = true)]
async fn ack_release_and_drop_each_let_the_keeper_go() {
    let q = queue(10);
    for _ in 0..3 {
        q.send("job").unwrap();
    }
    // One keeper for the three, alive to the end (as a consumer's is): a keeper of its
    // own would end with its delivery, and so would the keeper, whatever settling did.
    let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
    let acked = hold_in(&q, None, run.clone()).await;
    let released = hold_in(&q, None, run.clone()).await;
    let dropped = hold_in(&q, None, run.clone()).await;
    sleep(secs(6)).await;
    assert_eq!(extensions(&q), 3, "each extended once at 5 s");

    acked.ack().await.expect("ack");
    released.release().await.expect("release");
    drop(dropped);
    let after_settling = extensions(&q);
    assert_eq!(after_settling, 4, "the release itself is one call");
    sleep(secs(120)).await;
    assert_eq!(
        extensions(&q),
        after_settling,
        "no extension after settling"
    );
    assert_eq!(q.requests().deletes(), 1);
    // The acked one is gone; the other two are back.
    assert_eq!(q.len(), 2);
    assert_eq!(q.receive(10, Duration::ZERO).await.unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_delivery_returns_when_its_timeout_lapses() {
    let q = queue(10);
    q.send("job").unwrap();
    let d = hold(&q, None).await;
    let r = d.received_at();
    sleep_until(r + secs(6)).await; // extended at 5 s: hidden until 15 s
    drop(d);
    sleep_until(r + secs(14)).await;
    assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
    sleep_until(r + secs(15)).await;
    let again = q.receive(10, Duration::ZERO).await.unwrap();
    assert_eq!(again.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn holding_13_hours_caps_the_last_extension_warns_once_then_loses_it() {
    let q = queue(30);
    q.send("long job").unwrap();
    let d = hold(&q, None).await;
    let r = d.received_at();
    let limit = r + HARD_LIMIT - CAP_MARGIN;
    assert_eq!(d.hard_deadline(), r + HARD_LIMIT);

    sleep_until(limit - secs(1)).await;
    assert_eq!(
        d.deadline(),
        limit,
        "the last extension ends exactly at the margin"
    );
    assert_eq!(q.in_flight_len(), 1, "still hidden just before the limit");
    assert!(!d.is_lost());
    // Counted where the warning is logged, once per delivery.
    let capped = || d.context().stats(0).capped;
    assert_eq!(capped(), 1);

    // Hold on to 13 hours: the message goes to another receiver at the limit.
    let lost = d.lost();
    sleep_until(r + secs(13 * 3600)).await;
    assert_eq!(lost.await, LostReason::HardDeadline);
    assert!(d.is_lost());
    assert_eq!(capped(), 1, "warned once only");
    let other = q.receive(10, Duration::ZERO).await.unwrap();
    assert_eq!(other.len(), 1, "another receiver gets it");
    // One every 15 s from 15 s to 43,170 s, the last one cut to 25 s; none refused
    // (the queue refuses any that would end past the 12 hours).
    assert_eq!(extensions(&q), 43_170 / 15);
    match d.ack().await {
        Err(Error::Lost { reason, .. }) => assert_eq!(reason, LostReason::HardDeadline),
        other => panic!("ack of a lost delivery must report it, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn late_retries_near_the_limit_stop_extending_instead_of_spinning() {
    // T = 30: the capped extensions are due at 43,170 s and 43,180 s. Failures make
    // the first land late (0.3..0.6 s) and the second less late (0.1..0.2 s), so the
    // second can no longer gain anything: the keeper must let go, not retry at once
    // forever.
    let q = queue(30);
    q.send("job").unwrap();
    let d = hold(&q, None).await;
    let r = d.received_at();
    sleep_until(r + secs(43_169)).await;
    q.fail_next(Action::ChangeMessageVisibility, "AccessDenied", 2);
    sleep_until(r + secs(43_175)).await;
    let first_late = d.deadline() - (r + secs(43_194));
    assert!(
        first_late >= Duration::from_millis(300) && first_late < secs(1),
        "{first_late:?}"
    );
    q.fail_next(Action::ChangeMessageVisibility, "AccessDenied", 1);
    let before = extensions(&q);
    assert_eq!(d.lost().await, LostReason::HardDeadline);
    assert_eq!(
        Instant::now(),
        r + secs(43_194) + first_late,
        "lost at its deadline"
    );
    assert_eq!(
        extensions(&q) - before,
        1,
        "one failed call, then nothing more"
    );
}
