//! The receive loop's slots: taken before a receive, one per message it may return, from the
//! consumer's `max_in_flight` and from a shared `InFlightLimit`; a whole receive batch's worth at once
//! while the queue is busy.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::flow::in_flight_limit::InFlightLimit;
use crate::flow::rate_limit::Tokens;
use crate::flow::slot::Slot;
use crate::receive::{Demand, Load, Receiver, GATHER_SLOTS};

impl Receiver {
    /// The slots for the next receive, and its tokens under a rate limit (no more slots than
    /// tokens). Slots first: tokens waited for while the slots are short would pile up a
    /// second burst behind them. The first receive waits for its tokens (a whole burst of
    /// them while the queue is busy); more receives start only on tokens there now.
    pub(super) async fn acquire(&self, demand: Demand, load: Load) -> Option<(Vec<Slot>, Tokens)> {
        let mut slots = self.acquire_slots_for(demand, load).await?;
        let limits = &self.settings.rate_limits;
        if limits.is_empty() {
            return Some((slots, Tokens::default()));
        }
        // How many tokens to ask for, and to wait for.
        let (want, at_least) = match (demand, load) {
            (Demand::More, _) => {
                let tokens = Tokens::try_take(limits, slots.len())?;
                return Some((slots, tokens));
            }
            (Demand::First, Load::Busy) => (slots.len(), slots.len()),
            (Demand::First, Load::Quiet) => (limits.quiet_want(slots.len()), 1),
        };
        let (granted, tokens) = Tokens::take(limits, want, at_least).await;
        slots.truncate(granted);
        Some((slots, tokens))
    }

    /// The slots for the next receive. The first receive waits for a slot (for a whole receive batch
    /// of them while the queue is busy: receives of 10 cost the least); more receives start
    /// only on a whole receive batch of slots free now.
    pub(super) async fn acquire_slots_for(&self, demand: Demand, load: Load) -> Option<Vec<Slot>> {
        match (demand, load) {
            // A long poll on a quiet queue: with a budget shared with other consumers, it
            // holds back one slot of it, not a whole receive batch.
            (Demand::First, Load::Quiet) => self.acquire_slots(self.idle_slots()).await,
            (Demand::First, Load::Busy) => {
                // Not for long: handlers that hold their slots a while must not leave the
                // queue unread.
                match tokio::time::timeout(GATHER_SLOTS, self.acquire_batch()).await {
                    Ok(slots) => slots,
                    Err(_) => self.acquire_slots(self.batch_slots()).await,
                }
            }
            (Demand::More, _) => self.try_acquire_batch(),
        }
    }

    /// How many slots a receive on a quiet queue asks for: one if the budget is shared (the
    /// next receive asks for a receive batch once this one comes back full), a receive batch otherwise.
    pub(super) fn idle_slots(&self) -> usize {
        match self.settings.shared_in_flight_limit {
            Some(_) => 1,
            None => self.batch_slots(),
        }
    }

    /// A whole receive batch of slots (fewer if `max_in_flight` is smaller).
    pub(super) fn batch_slots(&self) -> usize {
        (self.settings.receive_batch_size as usize).min(self.settings.max_in_flight)
    }

    pub(super) fn shared(&self) -> Option<&Arc<Semaphore>> {
        self.settings
            .shared_in_flight_limit
            .as_ref()
            .map(InFlightLimit::semaphore)
    }

    /// Waits for one free slot (this consumer's, then the shared budget's, first come first
    /// served), then takes as many more as are free now, up to `want`.
    pub(super) async fn acquire_slots(&self, want: usize) -> Option<Vec<Slot>> {
        let own = self.permits.clone().acquire_owned().await.ok()?;
        let shared = match self.shared() {
            Some(shared) => Some(shared.clone().acquire_owned().await.ok()?),
            None => None,
        };
        let mut slots = Vec::with_capacity(want);
        slots.push(Slot::new(own, shared, &self.settles));
        while slots.len() < want {
            match self.try_slot() {
                Some(slot) => slots.push(slot),
                None => break,
            }
        }
        Some(slots)
    }

    /// One slot, if one is free now in both budgets.
    pub(super) fn try_slot(&self) -> Option<Slot> {
        let own = self.permits.clone().try_acquire_owned().ok()?;
        let shared = match self.shared() {
            Some(shared) => Some(shared.clone().try_acquire_owned().ok()?),
            None => None,
        };
        Some(Slot::new(own, shared, &self.settles))
    }

    /// Waits for a whole receive batch of this consumer's slots, then for one of the shared budget
    /// (taking more of it if free now, up to the receive batch).
    pub(super) async fn acquire_batch(&self) -> Option<Vec<Slot>> {
        let n = u32::try_from(self.batch_slots()).unwrap_or(1);
        let own = split_permits(self.permits.clone().acquire_many_owned(n).await.ok()?);
        let Some(shared) = self.shared() else {
            return Some(
                own.into_iter()
                    .map(|own| Slot::new(own, None, &self.settles))
                    .collect(),
            );
        };
        let mut owns = own.into_iter();
        let first = shared.clone().acquire_owned().await.ok()?;
        let mut slots = Vec::with_capacity(owns.len());
        slots.extend(
            owns.next()
                .map(|own| Slot::new(own, Some(first), &self.settles)),
        );
        for own in owns {
            // The rest of this consumer's slots go back if the shared budget is short.
            match shared.clone().try_acquire_owned() {
                Ok(one) => slots.push(Slot::new(own, Some(one), &self.settles)),
                Err(_) => break,
            }
        }
        Some(slots)
    }

    /// A whole receive batch of slots if they are free now, in both budgets.
    pub(super) fn try_acquire_batch(&self) -> Option<Vec<Slot>> {
        let n = u32::try_from(self.batch_slots()).unwrap_or(1);
        let own = split_permits(self.permits.clone().try_acquire_many_owned(n).ok()?);
        let shared = match self.shared() {
            Some(shared) => split_permits(shared.clone().try_acquire_many_owned(n).ok()?)
                .into_iter()
                .map(Some)
                .collect(),
            None => Vec::new(),
        };
        let mut shared = shared.into_iter();
        Some(
            own.into_iter()
                .map(|own| Slot::new(own, shared.next().flatten(), &self.settles))
                .collect(),
        )
    }
}

/// One permit per message.
pub(super) fn split_permits(mut all: OwnedSemaphorePermit) -> Vec<OwnedSemaphorePermit> {
    let mut one_each = Vec::with_capacity(all.num_permits());
    while all.num_permits() > 1 {
        match all.split(1) {
            Some(one) => one_each.push(one),
            None => break,
        }
    }
    one_each.push(all);
    one_each
}
