//! `RetryPolicy`: what happens to a delivery that is dropped without being settled.

use std::time::Duration;

use crate::call_retries::jitter;
use crate::error::Error;
use crate::limits::{secs_rounded_up, VisibilityTimeout};

/// What happens to a delivery that ends without being settled: its handler returned an
/// error, panicked, or dropped it without calling `ack`, `release` or `release_after`.
///
/// An explicit [`release_after`](crate::Delivery::release_after) (or `release`, or `ack`)
/// always wins over the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RetryPolicy {
    /// Leave the message hidden: SQS delivers it again when its current visibility timeout
    /// lapses (between half a timeout and a whole one after the drop). The default.
    #[default]
    Leave,
    /// Make the message visible again at once (`ChangeMessageVisibility` to 0).
    ReleaseNow,
    /// Make the message visible again after an exponential back-off on its receive count:
    /// `base * 2^(receive_count - 1)`, at most `max`, with jitter (a uniform draw between
    /// half and all of it), rounded up to whole seconds, and never past SQS's 12-hour limit
    /// counted from the receive.
    Backoff {
        /// The delay after the first receive. At least 1 s.
        base: Duration,
        /// The longest delay, at most 43200 s (12 hours).
        max: Duration,
    },
}

impl RetryPolicy {
    /// Back-off from `base`, doubling with every receive, up to `max`.
    pub fn backoff(base: Duration, max: Duration) -> Self {
        RetryPolicy::Backoff { base, max }
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if let RetryPolicy::Backoff { base, max } = self {
            let allowed = "Backoff with 1 s <= base <= max <= 43200 s";
            if *base < Duration::from_secs(1)
                || base > max
                || *max > VisibilityTimeout::MAX.duration()
            {
                return Err(Error::invalid("retry_policy", self, allowed));
            }
        }
        Ok(())
    }

    /// The visibility timeout to set on a delivery dropped unsettled, or `None` to leave it.
    /// `room` is how long the message may still stay hidden (the 12-hour limit).
    pub(crate) fn visibility_on_drop(
        &self,
        receive_count: u32,
        room: Duration,
    ) -> Option<VisibilityTimeout> {
        match self {
            RetryPolicy::Leave => None,
            RetryPolicy::ReleaseNow => Some(VisibilityTimeout::ZERO),
            RetryPolicy::Backoff { base, max } => {
                let doublings = receive_count.saturating_sub(1).min(31);
                let delay = base.saturating_mul(1u32 << doublings).min(*max);
                let delay = jitter(delay);
                let secs = secs_rounded_up(delay).min(room.as_secs());
                Some(VisibilityTimeout::at_most_max(secs))
            }
        }
    }
}

#[cfg(test)]
mod tests;
