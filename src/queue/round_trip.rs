//! How long the queue's requests take to be answered: what a partial batch may wait for the
//! rest of its receive (see `crate::settle_calls::request_batch`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A moving average of the round trips of a queue's answered requests, receives aside (a long
/// poll's time is its wait). Shared by the clones of a queue, and with the keeper's client: its first answered request (the
/// read of its visibility timeout, with the default settings) sets it before the first
/// settle, so the first batches wait for their receive's other settles as later ones do.
#[derive(Debug, Clone, Default)]
pub(crate) struct RoundTrip(Arc<AtomicU64>);

impl RoundTrip {
    /// The estimate; zero until a request has been answered.
    pub(crate) fn get(&self) -> Duration {
        Duration::from_micros(self.0.load(Ordering::Relaxed))
    }

    /// Folds an answered request's time in: the first one as it is, then each new one
    /// weighing an eighth, so one slow answer (or a request that timed out, which is not
    /// counted at all) does not make the batches wait long.
    pub(crate) fn learn(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(match old {
                    0 => took,
                    old => old - old / 8 + took / 8,
                })
            });
    }
}

#[cfg(test)]
impl RoundTrip {
    pub(crate) fn is_shared_with(&self, other: &RoundTrip) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests;
