//! `InFlightLimit`: one budget of held deliveries shared by several consumers.

use std::fmt;
use std::sync::Arc;

use tokio::sync::Semaphore;

/// A cap on the deliveries held at once by every consumer that shares it, for a service that
/// reads several queues with one budget of concurrent work. Pass it to each consumer with
/// [`in_flight_limit`](crate::ConsumerBuilder::shared_in_flight_limit); each consumer's own
/// [`max_in_flight`](crate::ConsumerBuilder::max_in_flight) still applies too.
///
/// The slots are handed out first come, first served: a consumer waiting for one gets the
/// next one freed before any consumer that asked after it, so a busy queue cannot starve a
/// quiet one. A consumer whose last receive came back empty reserves a single slot for its
/// long poll, so an idle queue holds back one slot of the budget, not a whole receive batch of them.
///
/// ```
/// # fn example(orders: sqs_consumer::ConsumerBuilder, emails: sqs_consumer::ConsumerBuilder)
/// # -> Result<(), sqs_consumer::Error> {
/// use sqs_consumer::InFlightLimit;
///
/// let limit = InFlightLimit::new(64); // at most 64 messages held across both queues
/// let orders = orders.shared_in_flight_limit(&limit).build()?;
/// let emails = emails.shared_in_flight_limit(&limit).build()?;
/// # let _ = (orders, emails);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct InFlightLimit {
    slots: Arc<Semaphore>,
    max: usize,
}

impl InFlightLimit {
    /// A budget of `max` deliveries held at once. A consumer refuses to build with a budget
    /// of 0 (it could never receive) or over 120000 ([`Error::InvalidConfig`], field
    /// `in_flight_limit`).
    ///
    /// [`Error::InvalidConfig`]: crate::Error::InvalidConfig
    pub fn new(max: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            max,
        }
    }

    /// The budget.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Slots taken right now, by held deliveries and by receives under way, across every
    /// consumer that shares the budget.
    pub fn in_use(&self) -> usize {
        self.max.saturating_sub(self.slots.available_permits())
    }

    pub(crate) fn semaphore(&self) -> &Arc<Semaphore> {
        &self.slots
    }
}

impl fmt::Debug for InFlightLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightLimit")
            .field("max", &self.max)
            .field("in_use", &self.in_use())
            .finish()
    }
}

#[cfg(test)]
mod tests;
