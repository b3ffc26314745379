//! A delivery's `max_in_flight` slot, and its slot of a shared `InFlightLimit`: taken at the
//! receive, given back once the delivery's ack or release is sent (or when it is dropped).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The `max_in_flight` slot a delivery takes, and its slot of a shared
/// [`InFlightLimit`](crate::InFlightLimit) if its consumer has one: both come free when its
/// settle call is sent (see [`Slot::free_early`]) or when it is dropped.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    own: Option<Arc<Semaphore>>,
    shared: Option<Arc<Semaphore>>,
    /// The consumer's budget of settle calls under way (twice `max_in_flight`): while `own`
    /// is held, where the slot may go once freed early; once `own` is `None`, the one of them
    /// it holds.
    settles: Option<Arc<Semaphore>>,
}

impl Slot {
    pub(crate) fn new(
        own: OwnedSemaphorePermit,
        shared: Option<OwnedSemaphorePermit>,
        settles: &Arc<Semaphore>,
    ) -> Self {
        let own = hold_one(own);
        Self {
            settles: own.as_ref().map(|_| settles.clone()),
            own,
            shared: shared.and_then(hold_one),
        }
    }

    /// Its delivery's ack or release is about to be sent: the slot comes free now, so that
    /// the next receive need not wait a round trip for the answer, if the consumer's budget
    /// of settle calls under way has room (one of them is held instead until this one
    /// ends). Otherwise it stays taken until the delivery is dropped: settle calls that
    /// are not answered hold the receives back. `true` if it came free.
    pub(crate) fn free_early(&mut self) -> bool {
        let (Some(own), Some(settles)) = (&self.own, &self.settles) else {
            return false;
        };
        let Ok(settle) = settles.try_acquire() else {
            return false;
        };
        settle.forget();
        own.add_permits(1);
        self.own = None;
        if let Some(shared) = self.shared.take() {
            shared.add_permits(1);
        }
        true
    }

    /// Whether it came free early, at its delivery's ack.
    pub(crate) fn is_freed_early(&self) -> bool {
        self.own.is_none() && self.settles.is_some()
    }
}

/// Keeps one permit of `permit` (giving back any more) as the semaphore to return it to.
fn hold_one(permit: OwnedSemaphorePermit) -> Option<Arc<Semaphore>> {
    let n = permit.num_permits();
    if n == 0 {
        return None;
    }
    let semaphore = permit.semaphore().clone();
    permit.forget();
    semaphore.add_permits(n - 1);
    Some(semaphore)
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.is_freed_early() {
            if let Some(settles) = self.settles.take() {
                settles.add_permits(1);
            }
            return;
        }
        for semaphore in [self.own.take(), self.shared.take()].into_iter().flatten() {
            semaphore.add_permits(1);
        }
    }
}

#[cfg(test)]
mod tests;
