//! Adaptive visibility: the timeout each receive asks for, from how long the consumer's
//! recent deliveries were held.
//!
//! A delivery is held from the receive's answer until its ack, release or move starts (or
//! it is dropped). The estimate is the 90th percentile of the last [`SAMPLE`] holds, each
//! weighted [`DECAY`] times its successor (newer holds count more), times [`MARGIN`], plus
//! [`SLACK`], rounded up to whole seconds and clamped to `[min, max]`. The margin is the
//! keeper's: it extends halfway through the timeout (up to a quarter second early, to share
//! a request), so a delivery held no longer than the percentile settles before its first
//! extension. Until a delivery has been held, the start
//! value (the consumer's visibility timeout, clamped) is used.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::limits::VisibilityTimeout;

/// How many holds the estimate looks at: the newest ones.
pub(crate) const SAMPLE: usize = 100;

/// Each hold weighs this much of the next newer one's weight.
pub(crate) const DECAY: f64 = 0.97;

/// The quantile of the weighted sample the estimate rests on.
pub(crate) const QUANTILE: f64 = 0.9;

/// The timeout is the quantile times this: the keeper extends halfway through it.
pub(crate) const MARGIN: f64 = 2.0;

/// Added to the quantile times the margin: the keeper may send an extension this much early.
pub(crate) const SLACK: Duration = Duration::from_millis(500);

/// A consumer's visibility estimate, shared by its receive loop (which asks for it) and its
/// deliveries (which report how long they were held).
#[derive(Debug)]
pub(crate) struct AdaptiveVisibility {
    min: VisibilityTimeout,
    max: VisibilityTimeout,
    /// The newest hold last.
    holds: Mutex<VecDeque<Duration>>,
}

impl AdaptiveVisibility {
    /// Bounds, `min <= max` (the builder checked).
    pub(crate) fn new(min: VisibilityTimeout, max: VisibilityTimeout) -> Self {
        Self {
            min,
            max,
            holds: Mutex::new(VecDeque::with_capacity(SAMPLE)),
        }
    }

    /// A delivery was held for `held`.
    pub(crate) fn held_for(&self, held: Duration) {
        let mut holds = self.lock();
        if holds.len() == SAMPLE {
            holds.pop_front();
        }
        holds.push_back(held);
    }

    /// The visibility timeout for the next receive, in `[min, max]`; `start` (clamped) until
    /// a delivery has been held.
    pub(crate) fn visibility_timeout(&self, start: VisibilityTimeout) -> VisibilityTimeout {
        let Some(quantile) = weighted_quantile(&self.lock()) else {
            return start.clamp(self.min, self.max);
        };
        let secs = (quantile.as_secs_f64() * MARGIN + SLACK.as_secs_f64()).ceil();
        // A float cast saturates; the clamp keeps it in range.
        VisibilityTimeout::at_most_max(secs as u64).clamp(self.min, self.max)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Duration>> {
        // Every update is a push or a pop: a poisoned lock still holds consistent data.
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The smallest hold whose cumulative weight (shortest first) reaches [`QUANTILE`] of the
/// whole, the newest weighing 1 and each older one [`DECAY`] times the next; `None` if empty.
fn weighted_quantile(holds: &VecDeque<Duration>) -> Option<Duration> {
    let mut weighted: Vec<(Duration, f64)> = Vec::with_capacity(holds.len());
    let mut weight = 1.0;
    for &held in holds.iter().rev() {
        weighted.push((held, weight));
        weight *= DECAY;
    }
    weighted.sort_unstable_by_key(|&(held, _)| held);
    let total: f64 = weighted.iter().map(|&(_, w)| w).sum();
    let mut sum = 0.0;
    for &(held, w) in &weighted {
        sum += w;
        if sum >= QUANTILE * total {
            return Some(held);
        }
    }
    weighted.last().map(|&(held, _)| held)
}

#[cfg(test)]
mod tests;
