//! Extensions due close together share requests, early within the window, never late.
use super::*;

/// `n` deliveries of a queue of timeout `t` seconds, received `gap` apart and kept by
/// one keeper.
async fn held_apart(t: u64, n: usize, gap: Duration) -> (MemoryQueue, Vec<Delivery>) {
    let q = queue(t);
    for _ in 0..n {
        q.send("job").unwrap();
    }
    let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(hold_in(&q, None, run.clone()).await);
        sleep(gap).await;
    }
    (q, held)
}

#[tokio::test(start_paused = true)]
async fn extensions_due_close_together_share_requests_early_within_the_window_never_late() {
    // 20 deliveries received 37 ms apart (0.7 s in all) at T = 10 s, kept by one keeper.
    let (q, held) = held_apart(10, 20, Duration::from_millis(37)).await;
    let first = held[0].received_at();
    let t = secs(10);
    // Every extension is seen as a change of its deadline (sent + T, on this queue without
    // latency): the clock moves 10 ms at a time, and extensions of one delivery are about
    // half a timeout apart.
    let mut deadlines: Vec<Vec<Instant>> = held.iter().map(|d| vec![d.deadline()]).collect();
    while Instant::now() < first + secs(16) {
        sleep(Duration::from_millis(10)).await;
        for (d, seen) in held.iter().zip(&mut deadlines) {
            if seen.last() != Some(&d.deadline()) {
                seen.push(d.deadline());
            }
        }
    }
    let window = COALESCE_WINDOW.min(t / 8);
    let mut extensions = 0;
    for (i, seen) in deadlines.iter().enumerate() {
        assert!(seen.len() >= 3, "delivery {i}: {} deadlines", seen.len());
        // The first is due halfway through the first timeout; each next one half a
        // timeout after the previous was due or answered (here: sent), whichever is later,
        // but no more than the window past halfway through the new timeout.
        let mut due = seen[0] - t / 2;
        for pair in seen.windows(2) {
            let (old, new) = (pair[0], pair[1]);
            let sent = new - t;
            assert!(sent <= due, "delivery {i}: sent {:?} late", sent - due);
            assert!(
                due - sent <= window,
                "delivery {i}: sent {:?} early",
                due - sent
            );
            assert!(due <= old - t / 2 + window, "delivery {i}: due too late");
            // Each one gains more than a third of a timeout: none is wasted.
            assert!(new - old >= t / 2 - window, "delivery {i}");
            due = (due.max(sent) + t / 2).clamp(sent + t / 2, sent + t / 2 + window);
            extensions += 1;
        }
    }
    let requests = q.requests().requests(Action::ChangeMessageVisibilityBatch);
    assert_eq!(q.requests().visibility_changes(), extensions);
    // Alone, each would be a request of its own; 250 ms windows over 0.7 s make 3 or 4
    // rounds per half timeout.
    assert!(
        requests * 4 <= extensions,
        "{requests} requests for {extensions} extensions"
    );
    assert_eq!(q.in_flight_len(), 20);
    assert!(held.iter().all(|d| !d.is_lost()));
}

#[tokio::test(start_paused = true)]
async fn extensions_go_early_only_with_one_that_is_due() {
    // Two deliveries received 200 ms apart (T = 10 s): due at 5 s and 5.2 s.
    let q = queue(10);
    for _ in 0..4 {
        q.send("job").unwrap();
    }
    let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
    let first = hold_in(&q, None, run.clone()).await;
    sleep(Duration::from_millis(200)).await;
    let second = hold_in(&q, None, run.clone()).await;
    let r = first.received_at();
    // Both held: the second goes early, with the first, in one request.
    sleep_until(r + secs(5) + Duration::from_millis(1)).await;
    assert_eq!(extensions(&q), 2);
    assert_eq!(
        q.requests().requests(Action::ChangeMessageVisibilityBatch),
        1
    );
    assert_eq!(second.deadline(), r + secs(15));
    drop((first, second));

    // The first one's ack is under way when it falls due (calls take 200 ms): nothing
    // goes then; the second, due 200 ms later, goes at its own time (its handler might
    // have acked it by then too).
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(10))
        .latency(Duration::from_millis(200))
        .build()
        .expect("valid queue");
    q.send("first").unwrap();
    q.send("second").unwrap();
    let first = hold_in(&q, None, run.clone()).await;
    let second = hold_in(&q, None, run).await;
    let due = first.deadline() - secs(5);
    assert_eq!(
        second.deadline() - secs(5),
        due + Duration::from_millis(200)
    );
    sleep_until(due - Duration::from_millis(50)).await;
    let ack = tokio::spawn(first.ack());
    sleep_until(due + Duration::from_millis(190)).await;
    assert_eq!(extensions(&q), 0, "none sent early alone");
    ack.await.expect("joined").expect("ack");
    sleep_until(due + secs(1)).await;
    assert_eq!(extensions(&q), 1);
    // Sent at its own due time: the deadline counts from the call.
    assert_eq!(second.deadline(), due + Duration::from_millis(10_200));
}

#[tokio::test(start_paused = true)]
async fn at_a_one_second_timeout_extensions_go_early_by_an_eighth_of_it_at_most() {
    // Three deliveries received 100 ms apart (T = 1 s): due at 0.5, 0.6 and 0.7 s. The
    // window is 125 ms: the second goes with the first, the third at its own time.
    let ms = Duration::from_millis;
    let (q, held) = held_apart(1, 3, ms(100)).await;
    let r = held[0].received_at();
    sleep_until(r + ms(501)).await;
    assert_eq!(extensions(&q), 2, "the first and the second, early");
    assert_eq!(held[1].deadline(), r + ms(1_500));
    assert_eq!(held[2].deadline(), r + ms(1_200));
    sleep_until(r + ms(701)).await;
    assert_eq!(extensions(&q), 3);
    assert_eq!(held[2].deadline(), r + ms(1_700));
    assert_eq!(
        q.requests().requests(Action::ChangeMessageVisibilityBatch),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn an_ack_or_release_under_way_holds_back_a_due_extension() {
    // Every call takes 600 ms; the extensions are due 5 s after the receive's answer.
    // The ack and the release start 300 ms before that and are still under way when the
    // extensions fall due: none is sent.
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(10))
        .latency(Duration::from_millis(600))
        .build()
        .expect("valid queue");
    q.send("acked").unwrap();
    q.send("released").unwrap();
    let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
    let (acked, released) = tokio::join!(hold_in(&q, None, run.clone()), hold_in(&q, None, run));
    let due = acked.deadline() - secs(5);
    assert_eq!(released.deadline() - secs(5), due);
    sleep_until(due - Duration::from_millis(300)).await;
    let (ack, release) = tokio::join!(acked.ack(), released.release());
    ack.expect("ack");
    release.expect("release");
    sleep(secs(30)).await;
    assert_eq!(
        q.requests().visibility_changes(),
        1,
        "the release's own change"
    );
    assert_eq!(q.requests().deletes(), 1);
    assert_eq!(q.len(), 1);
}
