use super::*;

/// Takes and spends, as a receive answered at once with every message it asked for.
async fn take_spent(limit: &RateLimit, want: usize, at_least: usize) -> usize {
    let n = limit.take(want, at_least).await;
    limit.reconcile(n, n, Duration::ZERO);
    n
}

#[test]
fn the_burst_is_a_second_s_worth_from_1_to_10() {
    let bursts: Vec<u32> = [0.001, 0.5, 1.0, 2.5, 9.0, 10.0, 50.0, 1e5]
        .into_iter()
        .map(|r| RateLimit::new(r).burst())
        .collect();
    assert_eq!(bursts, [1, 1, 1, 3, 9, 10, 10, 10]);
}

#[tokio::test(start_paused = true)]
async fn a_full_bucket_then_the_rate() {
    let limit = RateLimit::new(50.0);
    let start = Instant::now();
    assert_eq!(take_spent(&limit, 10, 10).await, 10, "full at first");
    let mut taken = 0;
    while taken < 1000 {
        taken += take_spent(&limit, 10, 10).await;
    }
    // 1000 more at 50 a second: 20 s, to the millisecond the timer keeps.
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(20) && took <= Duration::from_millis(20_010),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_quiet_receive_starts_on_the_first_token_and_takes_what_is_there() {
    let limit = RateLimit::new(50.0);
    assert_eq!(take_spent(&limit, 10, 10).await, 10);
    let start = Instant::now();
    assert_eq!(take_spent(&limit, 10, 1).await, 1);
    assert_eq!(start.elapsed(), Duration::from_millis(20));
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(take_spent(&limit, 10, 1).await, 5);
}

#[tokio::test(start_paused = true)]
async fn the_bucket_holds_no_more_than_its_burst() {
    let limit = RateLimit::new(2.0);
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(limit.take(10, 1).await, 2);
    limit.give_back(7);
    assert_eq!(
        limit.try_take(10),
        2,
        "given back, still no more than the burst"
    );
    assert_eq!(limit.try_take(1), 0);
}

/// After an idle spell the bucket is full: a receive reconciled then, long-polled or
/// answered soon, with nothing or little received, leaves no more than the burst.
#[tokio::test(start_paused = true)]
async fn after_an_idle_spell_a_reconciled_receive_leaves_no_more_than_the_burst() {
    // A long poll (out longer than its tokens take to earn) that brought nothing.
    let limit = RateLimit::new(2.0);
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(limit.take(2, 1).await, 2);
    tokio::time::advance(Duration::from_secs(20)).await;
    limit.reconcile(2, 0, Duration::from_secs(20));
    assert_eq!(limit.try_take(2), 2, "a long poll's tokens back");
    assert_eq!(limit.try_take(1), 0, "and no more than the burst");
    // A receive answered sooner (0.9 s: 1.8 tokens earned meanwhile) that brought none.
    let limit = RateLimit::new(2.0);
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(limit.take(2, 1).await, 2);
    tokio::time::advance(Duration::from_millis(900)).await;
    limit.reconcile(2, 0, Duration::from_millis(900));
    assert_eq!(limit.try_take(2), 2, "the unused tokens back");
    assert_eq!(limit.try_take(1), 0, "and no more than the burst");
}

#[tokio::test(start_paused = true)]
async fn a_receive_answered_at_once_loses_no_time_to_its_flight() {
    let limit = RateLimit::new(50.0);
    let start = Instant::now();
    assert_eq!(limit.take(10, 10).await, 10);
    tokio::time::advance(Duration::from_millis(5)).await; // the request's flight
    limit.reconcile(10, 10, Duration::from_millis(5));
    assert_eq!(take_spent(&limit, 10, 10).await, 10);
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(200),
        "10 tokens at 50 a second"
    );
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_s_messages_are_paid_for_when_they_arrive() {
    // A long poll holding the whole burst while the bucket fills behind it: its answer
    // takes its share of the refill, so it and the next receive stay within one burst.
    let limit = RateLimit::new(10.0);
    assert_eq!(limit.take(10, 10).await, 10);
    tokio::time::advance(Duration::from_secs(20)).await;
    limit.reconcile(10, 10, Duration::from_secs(20));
    assert_eq!(
        limit.try_take(1),
        0,
        "the refill paid for the poll's messages"
    );
    let start = Instant::now();
    assert_eq!(take_spent(&limit, 10, 10).await, 10);
    assert_eq!(start.elapsed(), Duration::from_secs(1), "then the rate");
    // A poll that brought fewer: the rest of the refill is there at once.
    assert_eq!(limit.take(10, 1).await, 1);
    tokio::time::advance(Duration::from_secs(20)).await;
    limit.reconcile(1, 0, Duration::from_secs(20));
    assert_eq!(limit.try_take(10), 10);
}

/// A receive answered after its tokens were earned again, while another still holds
/// the rest of the burst: its tokens go back, and its messages are paid for from the sum.
#[tokio::test(start_paused = true)]
async fn a_late_answer_gives_its_tokens_back_and_pays_for_its_messages() {
    let limit = RateLimit::new(10.0);
    assert_eq!(limit.take(2, 2).await, 2);
    assert_eq!(limit.take(8, 8).await, 8, "a second receive holds the rest");
    tokio::time::advance(Duration::from_millis(300)).await; // 3 tokens earned
    limit.reconcile(2, 1, Duration::from_millis(300));
    assert_eq!(limit.take(10, 1).await, 4, "3 earned + 2 back - 1 paid for");
}

#[test]
fn debug_shows_the_rate_and_the_burst() {
    let limit = RateLimit::new(5.0);
    assert_eq!(
        format!("{limit:?}"),
        "RateLimit { per_second: 5.0, burst: 5 }"
    );
}

#[tokio::test(start_paused = true)]
async fn tokens_not_spent_go_back() {
    let (own, shared) = (RateLimit::new(10.0), RateLimit::new(5.0));
    let limits = RateLimits::new(Some(own.clone()), Some(shared.clone()));
    let (granted, tokens) = Tokens::take(&limits, 10, 1).await;
    assert_eq!(granted, 5, "the smaller bucket decides");
    assert_eq!(own.try_take(10), 0, "5 back to the bigger one, not 10");
    assert_eq!(own.try_take(5), 5);
    own.give_back(5);
    tokens.spend(3); // answered at once
    assert_eq!(shared.try_take(5), 0);
    assert_eq!(shared.try_take(2), 2, "the 2 not spent came back");
    shared.give_back(2);
    assert_eq!(own.try_take(8), 0, "the bigger one kept 5, not 10");
    assert_eq!(own.try_take(7), 7, "and the 2 of them not spent came back");
    own.give_back(7);
    let (granted, tokens) = Tokens::take(&limits, 10, 1).await;
    assert_eq!(granted, 2);
    drop(tokens); // a receive that never started
    assert_eq!(
        shared.try_take(2),
        2,
        "a receive dropped gives its tokens back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_dropped_takes_nothing_and_keeps_no_one_waiting() {
    let limit = RateLimit::new(1.0);
    assert_eq!(take_spent(&limit, 1, 1).await, 1);
    let waiting = limit.take(1, 1);
    let dropped = tokio::time::timeout(Duration::from_millis(500), waiting).await;
    assert!(dropped.is_err());
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(limit.try_take(1), 1, "the token the dropped wait was owed");
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_turn_and_no_one_jumps_the_line() {
    let limit = RateLimit::new(1.0);
    assert_eq!(take_spent(&limit, 1, 1).await, 1);
    let first = tokio::spawn({
        let limit = limit.clone();
        async move { (take_spent(&limit, 1, 1).await, Instant::now()) }
    });
    tokio::task::yield_now().await;
    let second = tokio::spawn({
        let limit = limit.clone();
        async move { (take_spent(&limit, 1, 1).await, Instant::now()) }
    });
    tokio::task::yield_now().await;
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(limit.try_take(1), 0, "one is waiting: no token for a try");
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!((first.0, second.0), (1, 1));
    assert!(second.1 - first.1 >= Duration::from_secs(1));
}
