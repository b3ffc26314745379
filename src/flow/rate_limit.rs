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
/// shares it ([`shared_rate_limit`](crate::ConsumerBuilder::shared_rate_limit)).
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
/// let orders = orders.shared_rate_limit(&limit).build()?;
/// let emails = emails.shared_rate_limit(&limit).build()?;
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
    /// `shared_rate_limit`).
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
/// (`max_receive_rate`), one shared with other consumers (`shared_rate_limit`), both or none.
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
mod tests;
