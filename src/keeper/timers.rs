//! Where the keeper keeps its leases: each with what happens to it next, in a slab by slot,
//! and one timer per lease packed into one word, in order of when it fires.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LostReason;
use crate::lease::Lease;

/// What happens next to a kept lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Its extension is due.
    Extend,
    /// Its last extension failed transiently: try again.
    Retry,
    /// No extension is possible (or none went through): it is lost at its deadline.
    Expire(LostReason),
    /// An extension is under way; the timer is its deadline, in case no answer comes.
    AwaitingAnswer,
}

/// A lease the keeper holds: a few words each.
pub(super) struct Kept {
    pub(super) lease: Arc<Lease>,
    /// Its timer (its key in `timers`).
    pub(super) timer: u64,
    pub(super) next: Next,
    /// Failed tries of the current extension.
    pub(super) attempt: u8,
    /// The 12-hour cap has been warned about.
    pub(super) capped: bool,
}

/// How a timer's instant is rounded to the millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rounding {
    /// Down: an extension may go that much early, never late.
    Down,
    /// Up: a deadline is never declared passed before it has.
    Up,
}

impl Rounding {
    pub(super) fn for_timer(next: Next) -> Self {
        match next {
            Next::Extend => Rounding::Down,
            Next::Retry | Next::Expire(_) | Next::AwaitingAnswer => Rounding::Up,
        }
    }
}

/// Bits of a timer key that hold the lease's slot; the rest hold milliseconds.
pub(super) const SLOT_BITS: u32 = 24;

/// The keeper's timers, one per kept lease, each packed into one word: the milliseconds from
/// the keeper's start to when it fires, then the lease's slot (120,000 held deliveries cost
/// about 1.5 MB of timers).
pub(super) struct Timers {
    epoch: Instant,
    keys: BTreeSet<u64>,
}

impl Timers {
    /// No timers yet; their milliseconds count from `epoch`.
    pub(super) fn new(epoch: Instant) -> Self {
        Self {
            epoch,
            keys: BTreeSet::new(),
        }
    }

    /// The key of a timer for `slot` at `at`, rounded to the millisecond as `rounding` says.
    pub(super) fn key(&self, at: Instant, slot: u64, rounding: Rounding) -> u64 {
        let since = at.saturating_duration_since(self.epoch);
        let mut ms = since.as_millis();
        if rounding == Rounding::Up
            && since > Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
        {
            ms += 1;
        }
        let ms = u64::try_from(ms)
            .unwrap_or(u64::MAX)
            .min((1 << (64 - SLOT_BITS)) - 1);
        (ms << SLOT_BITS) | (slot & ((1 << SLOT_BITS) - 1))
    }

    /// When the timer of `key` fires.
    pub(super) fn at(&self, key: u64) -> Instant {
        self.epoch + Duration::from_millis(key >> SLOT_BITS)
    }

    pub(super) fn slot(key: u64) -> u64 {
        key & ((1 << SLOT_BITS) - 1)
    }

    pub(super) fn insert(&mut self, at: Instant, slot: u64, next: Next) -> u64 {
        let key = self.key(at, slot, Rounding::for_timer(next));
        self.keys.insert(key);
        key
    }

    pub(super) fn remove(&mut self, key: u64) {
        self.keys.remove(&key);
    }

    /// When the first timer fires.
    pub(super) fn first(&self) -> Option<Instant> {
        self.keys.first().map(|key| self.at(*key))
    }

    /// The timers that fire by `horizon`, first first.
    pub(super) fn due(&self, horizon: Instant) -> Vec<u64> {
        let last = self.key(horizon, (1 << SLOT_BITS) - 1, Rounding::Down);
        self.keys.range(..=last).copied().collect()
    }
}

/// The kept leases, by slot: one word of index per lease, slots reused.
#[derive(Default)]
pub(super) struct Slab {
    slots: Vec<Option<Kept>>,
    free: Vec<u32>,
}

impl Slab {
    pub(super) fn insert(&mut self, kept: Kept) -> u64 {
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(kept);
                u64::from(slot)
            }
            None => {
                self.slots.push(Some(kept));
                (self.slots.len() - 1) as u64
            }
        }
    }

    pub(super) fn get(&self, id: &u64) -> Option<&Kept> {
        self.slots.get(*id as usize).and_then(Option::as_ref)
    }

    pub(super) fn get_mut(&mut self, id: &u64) -> Option<&mut Kept> {
        self.slots.get_mut(*id as usize).and_then(Option::as_mut)
    }

    pub(super) fn remove(&mut self, id: &u64) -> Option<Kept> {
        let kept = self.slots.get_mut(*id as usize)?.take()?;
        self.free.push(u32::try_from(*id).unwrap_or(u32::MAX));
        Some(kept)
    }
}

#[cfg(test)]
mod tests;
