//! A delivery's `max_in_flight` slot, and its slot of a shared `InFlightLimit`: taken at the
//! receive, given back when the delivery is dropped.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The `max_in_flight` slot a delivery takes, and its slot of a shared
/// [`InFlightLimit`](crate::InFlightLimit) if its consumer has one: both come free when it
/// is dropped. Two words: the semaphores the slots are given back to.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    own: Option<Arc<Semaphore>>,
    shared: Option<Arc<Semaphore>>,
}

impl Slot {
    pub(crate) fn new(own: OwnedSemaphorePermit, shared: Option<OwnedSemaphorePermit>) -> Self {
        Self {
            own: hold_one(own),
            shared: shared.and_then(hold_one),
        }
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
        for semaphore in [self.own.take(), self.shared.take()].into_iter().flatten() {
            semaphore.add_permits(1);
        }
    }
}
