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
    min: u32,
    max: u32,
    /// The newest hold last.
    holds: Mutex<VecDeque<Duration>>,
}

impl AdaptiveVisibility {
    /// Bounds in whole seconds, `min <= max` (the builder checked).
    pub(crate) fn new(min: u32, max: u32) -> Self {
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

    /// The timeout for the next receive, whole seconds in `[min, max]`; `start` (clamped)
    /// until a delivery has been held.
    pub(crate) fn timeout(&self, start: u32) -> u32 {
        let Some(quantile) = weighted_quantile(&self.lock()) else {
            return start.clamp(self.min, self.max);
        };
        let secs = (quantile.as_secs_f64() * MARGIN + SLACK.as_secs_f64()).ceil();
        // A float cast saturates; the clamp keeps it in range.
        (secs as u32).clamp(self.min, self.max)
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
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn before_any_hold_the_start_value_clamped() {
        let a = AdaptiveVisibility::new(10, 120);
        assert_eq!(a.timeout(30), 30);
        assert_eq!(a.timeout(5), 10);
        assert_eq!(a.timeout(43_200), 120);
    }

    #[test]
    fn steady_holds_give_twice_the_hold_plus_the_slack_rounded_up() {
        let a = AdaptiveVisibility::new(1, 43_200);
        for _ in 0..SAMPLE {
            a.held_for(secs(20.0));
        }
        assert_eq!(a.timeout(30), 41);
        a.held_for(secs(20.2));
        // 20.2 is the newest, but 90 % of the weight is on 20: the quantile stays 20.
        assert_eq!(a.timeout(30), 41);
    }

    #[test]
    fn it_converges_to_the_ninetieth_percentile_of_a_spread() {
        // Holds 1..=100 s, each repeated in random-looking order (a fixed permutation): after
        // the sample is full of a spread, the estimate sits near twice its 90th percentile.
        let a = AdaptiveVisibility::new(1, 43_200);
        for round in 0..5u64 {
            for i in 0..100u64 {
                let hold = (i * 37 + round * 11) % 100 + 1;
                a.held_for(Duration::from_secs(hold));
            }
        }
        let t = a.timeout(30);
        // The unweighted 90th percentile is 90 s (2 x 90 + 0.5, rounded up: 181); the decay moves it a
        // little with the order.
        assert!((170..=195).contains(&t), "{t}");
    }

    #[test]
    fn instant_holds_give_one_second() {
        let a = AdaptiveVisibility::new(1, 43_200);
        a.held_for(Duration::from_millis(200));
        assert_eq!(a.timeout(30), 1);
        a.held_for(Duration::from_millis(300));
        assert_eq!(a.timeout(30), 2);
    }

    #[test]
    fn it_clamps_to_min_and_max_and_never_goes_below_min() {
        let a = AdaptiveVisibility::new(10, 120);
        for _ in 0..SAMPLE {
            a.held_for(Duration::ZERO);
        }
        assert_eq!(a.timeout(30), 10);
        for _ in 0..SAMPLE {
            a.held_for(secs(3_600.0));
        }
        assert_eq!(a.timeout(30), 120);
        a.held_for(Duration::MAX);
        assert_eq!(a.timeout(30), 120);
    }

    #[test]
    fn a_burst_of_slow_holds_raises_it_within_four_deliveries() {
        let a = AdaptiveVisibility::new(1, 43_200);
        for _ in 0..SAMPLE {
            a.held_for(secs(1.0));
        }
        assert_eq!(a.timeout(30), 3);
        let mut raised_after = None;
        for n in 1..=SAMPLE {
            a.held_for(secs(60.0));
            if a.timeout(30) == 121 {
                raised_after = Some(n);
                break;
            }
        }
        assert_eq!(raised_after, Some(4));
    }

    #[test]
    fn it_comes_down_once_fast_holds_outweigh_the_slow_ones() {
        let a = AdaptiveVisibility::new(1, 43_200);
        for _ in 0..SAMPLE {
            a.held_for(secs(60.0));
        }
        let mut lowered_after = None;
        for n in 1..=SAMPLE {
            a.held_for(secs(1.0));
            if a.timeout(30) == 3 {
                lowered_after = Some(n);
                break;
            }
        }
        // Slower down than up: the estimate errs towards no extension.
        let n = lowered_after.expect("lowered within the sample");
        assert!((50..=70).contains(&n), "{n}");
    }

    #[test]
    fn the_sample_is_bounded() {
        let a = AdaptiveVisibility::new(1, 43_200);
        for _ in 0..10 * SAMPLE {
            a.held_for(secs(1.0));
        }
        assert_eq!(a.lock().len(), SAMPLE);
    }
}
