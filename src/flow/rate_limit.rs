//! `RateLimit`: a budget of messages received per second, a token bucket shared by several
//! consumers.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::{sleep, Instant};

/// The most messages one receive takes: the most a burst needs to hold for receives to stay
/// at their cheapest.
const MOST_PER_RECEIVE: u32 = 10;

/// A cap on the messages received per second, by one consumer
/// ([`max_receive_rate`](crate::ConsumerBuilder::max_receive_rate)) or by every consumer that
/// shares it ([`rate_limit`](crate::ConsumerBuilder::rate_limit)).
///
/// It is a token bucket: a token for each message, added at `per_second` and held up to the
/// **burst**, one second's worth rounded up, at least 1 and at most 10 (one receive's worth).
/// A receive asks for no more messages than the tokens it holds, so no received message waits
/// for a token while its visibility timeout runs: the waiting is done before the
/// `ReceiveMessage` request, while the messages are still in the queue. Tokens a receive
/// holds but does not use (it came back with fewer messages, or a pause or a stop came
/// first) go back to the bucket; a long poll answered late pays for its messages when they
/// arrive, so its answer and the next receive together stay within one burst.
///
/// While the queue keeps up, each receive waits for a whole burst of tokens and asks for
/// that many messages: at 10 per second or more, receives of 10 (the cheapest: 0.1 receive
/// requests per message); below, receives of the burst. On a quiet queue a long poll starts
/// on the first token. Consumers sharing a budget are served in turn, first come first served.
///
/// ```
/// # fn example(orders: sqs_consumer::ConsumerBuilder, emails: sqs_consumer::ConsumerBuilder)
/// # -> Result<(), sqs_consumer::Error> {
/// use sqs_consumer::RateLimit;
///
/// let limit = RateLimit::new(50.0); // at most 50 messages a second across both queues
/// let orders = orders.rate_limit(&limit).build()?;
/// let emails = emails.rate_limit(&limit).build()?;
/// # let _ = (orders, emails);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimit {
    shared: Arc<Shared>,
}

struct Shared {
    per_second: f64,
    burst: u32,
    /// Held by the receive waiting for tokens: waiters are served in turn.
    turn: tokio::sync::Mutex<()>,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Tokens there to take.
    tokens: f64,
    /// When `tokens` was last brought up to date; `None` before the first use (full then).
    at: Option<Instant>,
}

impl RateLimit {
    /// A budget of `per_second` messages a second. A consumer refuses to build with a rate
    /// that is not a finite number from 0.001 to 100000 ([`Error::InvalidConfig`], field
    /// `rate_limit`).
    ///
    /// [`Error::InvalidConfig`]: crate::Error::InvalidConfig
    pub fn new(per_second: f64) -> Self {
        let burst = if per_second.is_finite() && per_second > 0.0 {
            // In 1..=10 after the clamp, so the cast is exact.
            per_second.ceil().clamp(1.0, f64::from(MOST_PER_RECEIVE)) as u32
        } else {
            1
        };
        Self {
            shared: Arc::new(Shared {
                per_second,
                burst,
                turn: tokio::sync::Mutex::new(()),
                bucket: Mutex::new(Bucket {
                    tokens: f64::from(burst),
                    at: None,
                }),
            }),
        }
    }

    /// The rate, messages per second.
    pub fn per_second(&self) -> f64 {
        self.shared.per_second
    }

    /// The most tokens the bucket holds: the most messages received at once after a pause.
    pub fn burst(&self) -> u32 {
        self.shared.burst
    }

    /// Waits for at least `at_least` tokens (no more than the burst), then takes as many as
    /// are there, up to `want`. Waiters are served in turn; a wait dropped takes nothing.
    pub(crate) async fn take(&self, want: usize, at_least: usize) -> usize {
        let burst = self.shared.burst as usize;
        let (want, at_least) = (want.min(burst), at_least.clamp(1, burst));
        let _turn = self.shared.turn.lock().await;
        loop {
            match self.try_take_now(want, at_least) {
                Ok(taken) => return taken,
                Err(wait) => sleep(wait).await,
            }
        }
    }

    /// `want` tokens if they are there now and no receive is waiting for its turn; else none.
    pub(crate) fn try_take(&self, want: usize) -> usize {
        let want = want.min(self.shared.burst as usize);
        match self.shared.turn.try_lock() {
            Ok(_turn) => self.try_take_now(want, want).unwrap_or(0),
            Err(_) => 0,
        }
    }

    /// Gives back `n` tokens taken and not used.
    pub(crate) fn give_back(&self, n: usize) {
        self.reconcile(n, 0, Duration::ZERO);
    }

    /// A receive that took `taken` tokens `out_for` ago came back with `received` messages;
    /// the tokens for the rest go back (the bucket holding no more than its burst).
    ///
    /// A receive out for longer than its tokens take to earn (a long poll, answered late)
    /// pays for its messages now, when they arrive: the bucket refilled behind it, and
    /// without this its answer and the next receive would bring two bursts at once. Its
    /// tokens go back and the messages are taken from what is there. A receive answered
    /// sooner keeps what it took: the little the bucket earned meanwhile is not lost, so the
    /// rate is reached whatever the server's latency.
    pub(crate) fn reconcile(&self, taken: usize, received: usize, out_for: Duration) {
        if taken == 0 {
            return;
        }
        let (burst, per_second) = (f64::from(self.shared.burst), self.shared.per_second);
        let mut bucket = self.bucket();
        bucket.refill(Instant::now(), per_second, self.shared.burst);
        let unused = (taken - received.min(taken)) as f64;
        bucket.tokens = if out_for.as_secs_f64() * per_second >= taken as f64 {
            // Never below 0: `tokens + taken` is at least `taken`, or the burst if the cap
            // cut it, and `received <= taken <= burst`.
            ((bucket.tokens + taken as f64).min(burst) - received as f64).max(0.0)
        } else {
            (bucket.tokens + unused).min(burst.max(bucket.tokens))
        };
    }

    /// Takes up to `want` if `at_least` are there; else how long until they are.
    fn try_take_now(&self, want: usize, at_least: usize) -> Result<usize, Duration> {
        let mut bucket = self.bucket();
        bucket.refill(Instant::now(), self.shared.per_second, self.shared.burst);
        // A hair of slack: the sleep computed below must not end a rounding short.
        let there = (bucket.tokens + 1e-9).floor();
        if there >= at_least as f64 {
            // `there` is in 0..=burst, so the cast is exact.
            let taken = want.min(there as usize);
            bucket.tokens = (bucket.tokens - taken as f64).max(0.0);
            return Ok(taken);
        }
        let missing = at_least as f64 - bucket.tokens;
        Err(Duration::from_secs_f64(missing / self.shared.per_second))
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.shared
            .bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Bucket {
    /// Adds the tokens earned since the last update, up to the burst.
    fn refill(&mut self, now: Instant, per_second: f64, burst: u32) {
        if let Some(at) = self.at {
            let earned = now.saturating_duration_since(at).as_secs_f64() * per_second;
            self.tokens = (self.tokens + earned).min(f64::from(burst).max(self.tokens));
        }
        self.at = Some(now);
    }
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("per_second", &self.shared.per_second)
            .field("burst", &self.shared.burst)
            .finish()
    }
}

/// The rate limits one consumer's receives keep to: its own
/// (`max_receive_rate`), one shared with other consumers (`rate_limit`), both or none.
#[derive(Debug, Clone, Default)]
pub(crate) struct RateLimits {
    own: Option<RateLimit>,
    shared: Option<RateLimit>,
}

impl RateLimits {
    pub(crate) fn new(own: Option<RateLimit>, shared: Option<RateLimit>) -> Self {
        Self { own, shared }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.own.is_none() && self.shared.is_none()
    }

    /// The tokens a receive on a quiet queue (its last answer short or empty) asks for, with
    /// `slots` free: one under a budget shared with other consumers (a long poll on a quiet
    /// queue holds back one message's worth of it, not a burst), else as many as there are.
    pub(crate) fn quiet_want(&self, slots: usize) -> usize {
        if self.shared.is_some() {
            1
        } else {
            slots
        }
    }

    /// Each limit, this consumer's own first.
    fn each(&self) -> impl Iterator<Item = &RateLimit> {
        self.own.iter().chain(self.shared.iter())
    }
}

/// Tokens taken from one or two buckets for one receive; those not spent go back when this
/// is dropped (a receive that came back short, failed, or never started).
#[derive(Debug)]
pub(crate) struct Tokens {
    taken: Vec<(RateLimit, usize)>,
    /// When the first of them was taken.
    at: Instant,
}

impl Default for Tokens {
    fn default() -> Self {
        Self {
            taken: Vec::new(),
            at: Instant::now(),
        }
    }
}

impl Tokens {
    /// Takes tokens for up to `want` messages from each of `limits` in order (waiting for
    /// `at_least`), and gives back to the earlier ones what the later ones did not match.
    /// With no limits: `want`, and nothing to give back.
    pub(crate) async fn take(limits: &RateLimits, want: usize, at_least: usize) -> (usize, Self) {
        let mut tokens = Self::default();
        let mut granted = want;
        for limit in limits.each() {
            let n = limit.take(granted, at_least.min(granted)).await;
            tokens.taken.push((limit.clone(), n));
            granted = granted.min(n);
        }
        tokens.at = Instant::now();
        tokens.keep(granted);
        (granted, tokens)
    }

    /// Tokens for exactly `want` messages from every limit if they are there now, without
    /// waiting; `None` (and nothing taken) if any is short.
    pub(crate) fn try_take(limits: &RateLimits, want: usize) -> Option<Self> {
        let mut tokens = Self::default();
        for limit in limits.each() {
            let n = limit.try_take(want);
            tokens.taken.push((limit.clone(), n));
            if n < want {
                return None; // `tokens` gives every one back
            }
        }
        Some(tokens)
    }

    /// Keeps `n` of each limit's tokens (spent on `n` messages) and gives the rest back now.
    pub(crate) fn keep(&mut self, n: usize) {
        for (limit, taken) in &mut self.taken {
            let surplus = taken.saturating_sub(n);
            limit.give_back(surplus);
            *taken -= surplus;
        }
    }

    /// The receive came back with `messages`: each limit pays for them now (see
    /// [`RateLimit::reconcile`]).
    pub(crate) fn spend(mut self, messages: usize) {
        let out_for = self.at.elapsed();
        for (limit, taken) in self.taken.drain(..) {
            limit.reconcile(taken, messages.min(taken), out_for);
        }
    }
}

impl Drop for Tokens {
    fn drop(&mut self) {
        for (limit, taken) in self.taken.drain(..) {
            limit.give_back(taken);
        }
    }
}

#[cfg(test)]
mod tests {
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
}
