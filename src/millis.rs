//! Instants kept in fewer bytes: a held lease keeps two, and 120,000 leases may be held at
//! once, where a tokio `Instant` takes sixteen bytes. Both forms count whole milliseconds and
//! round down, so an instant kept never comes back later than it was: a deadline or the
//! 12-hour cap derived from one is never overrun by the rounding.

use std::time::Duration;

use tokio::time::Instant;

/// What [`Millis`] count from: one per consumer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Epoch(Instant);

/// An instant as whole milliseconds from an [`Epoch`], rounded down (to the earlier
/// millisecond); eight bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Millis(i64);

impl Epoch {
    /// An epoch at the current instant.
    pub(crate) fn now() -> Self {
        Self(Instant::now())
    }

    /// `instant` in milliseconds from the epoch, rounded down.
    pub(crate) fn millis(&self, instant: Instant) -> Millis {
        let whole = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        if instant >= self.0 {
            Millis(whole(instant - self.0))
        } else {
            // Before the epoch (a lease made for an earlier receive): the earlier millisecond.
            let before = self.0 - instant;
            let part = i64::from(!before.subsec_nanos().is_multiple_of(1_000_000));
            Millis(-whole(before).saturating_add(part))
        }
    }

    /// The instant `millis` stands for.
    pub(crate) fn instant(&self, millis: Millis) -> Instant {
        let magnitude = Duration::from_millis(millis.0.unsigned_abs());
        if millis.0 >= 0 {
            self.0 + magnitude
        } else {
            // `None` only for an instant the platform cannot hold, which no lease was given.
            self.0.checked_sub(magnitude).unwrap_or(self.0)
        }
    }
}

/// `instant` as whole milliseconds after `start`, rounded down, in four bytes: 0 before it,
/// and at most `u32::MAX` (49 days; a lease lives at most 12 hours).
pub(crate) fn millis_after(start: Instant, instant: Instant) -> u32 {
    u32::try_from(instant.saturating_duration_since(start).as_millis()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
