//! `Backlog`: how deep a queue is, as SQS counts it.

/// A queue's approximate message counts, from one `GetQueueAttributes` call
/// ([`Consumer::backlog`](crate::Consumer::backlog)).
///
/// SQS's counts are approximate (eventually consistent, within about a minute): good for
/// scaling decisions and alerts, not for exact bookkeeping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backlog {
    /// Messages ready to be received (`ApproximateNumberOfMessages`).
    pub visible: u64,
    /// Messages received and not yet deleted nor visible again, by any consumer
    /// (`ApproximateNumberOfMessagesNotVisible`).
    pub in_flight: u64,
    /// Messages not yet visible because of a delay (`ApproximateNumberOfMessagesDelayed`).
    pub delayed: u64,
}

impl Backlog {
    pub(crate) fn new(visible: u64, in_flight: u64, delayed: u64) -> Self {
        Self {
            visible,
            in_flight,
            delayed,
        }
    }
}
