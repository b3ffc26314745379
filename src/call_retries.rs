//! How each call path waits between tries, in one table (the guide's errors page, "Who
//! retries, who times out", describes it), and the exponential back-off with jitter and the
//! small source of randomness that carry it out.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Waits between tries: the first, then doubling (each jittered) up to the longest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    pub(crate) first: Duration,
    pub(crate) longest: Duration,
}

impl Schedule {
    /// A back-off that follows the schedule.
    pub(crate) fn backoff(self) -> Backoff {
        Backoff::new(self.first, self.longest)
    }

    /// The wait after `failures` failed tries (0: after the first), jittered.
    pub(crate) fn wait_after(self, failures: u8) -> Duration {
        let doubled = self.first.saturating_mul(1u32 << failures.min(16));
        jitter(doubled.min(self.longest))
    }
}

/// A receive that failed transiently: retried for as long as the consumer runs.
pub(crate) const RECEIVE: Schedule = Schedule {
    first: Duration::from_millis(200),
    longest: Duration::from_secs(20),
};

/// An empty short poll (a wait time of 0): no setting makes the consumer spin.
pub(crate) const EMPTY_SHORT_POLL: Schedule = Schedule {
    first: Duration::from_millis(50),
    longest: Duration::from_secs(2),
};

/// A visibility extension that failed transiently: retried until the send margin before the
/// delivery's deadline, each wait at most a quarter of what is left and at least
/// [`EXTENSION_MIN_WAIT`].
pub(crate) const EXTENSION: Schedule = Schedule {
    first: Duration::from_millis(200),
    longest: Duration::from_secs(5),
};

/// The shortest wait before an extension is tried again (or looked at again, while its
/// delivery's ack or release is under way).
pub(crate) const EXTENSION_MIN_WAIT: Duration = Duration::from_millis(100);

/// An ack's or a release's try that failed transiently.
pub(crate) const SETTLE: Schedule = Schedule {
    first: Duration::from_millis(100),
    longest: Duration::from_secs(2),
};

/// How long an ack retries transient failures (the keeper keeps its message hidden
/// meanwhile) before it reports the error.
pub(crate) const ACK_RETRY_WINDOW: Duration = Duration::from_secs(20);

/// Tries of a release before its error is reported; the message returns anyway when its
/// visibility lapses.
pub(crate) const RELEASE_ATTEMPTS: u32 = 4;

/// An idempotency store's call that failed transiently: tried again while the delivery's
/// lease allows, for at most [`ACK_RETRY_WINDOW`].
pub(crate) const IDEMPOTENCY: Schedule = Schedule {
    first: Duration::from_millis(100),
    longest: Duration::from_secs(2),
};

/// How long one call of an idempotency store may take before it counts as failed
/// (retryable): no call path waits for a store without a bound.
pub(crate) const IDEMPOTENCY_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A payload read from S3 (or an object delete after an ack) that failed transiently.
#[cfg(feature = "s3")]
pub(crate) const PAYLOAD: Schedule = Schedule {
    first: Duration::from_millis(200),
    longest: Duration::from_secs(2),
};

/// Tries of a payload read (while its delivery is kept hidden) before the delivery meets the
/// retry policy, and of an object delete before it is logged and left.
#[cfg(feature = "s3")]
pub(crate) const PAYLOAD_ATTEMPTS: u32 = 4;

/// A random 64-bit number from the standard library's per-process hash keys.
///
/// Good enough for jitter and for unique-looking ids; not for anything secret.
pub(crate) fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(0x5157_5f63_6f6e_7375);
    hasher.finish()
}

/// A duration drawn uniformly from `[d / 2, d]`: spreads retries of many clients apart while
/// keeping at least half of the intended wait.
pub(crate) fn jitter(d: Duration) -> Duration {
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let half = nanos / 2;
    let extra = if half == 0 {
        0
    } else {
        random_u64() % (half + 1)
    };
    Duration::from_nanos(half + extra)
}

/// Doubling delays from `initial` up to `max`, each jittered; `reset` starts over.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next: initial,
        }
    }

    /// The delay to wait now; the one after it is twice as long, up to the maximum.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        jitter(d)
    }

    pub(crate) fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests;
