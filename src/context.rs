//! What every delivery of one consumer shares: the queue, the counters, the retry policy,
//! and the settle calls still in flight.

use tokio_util::task::TaskTracker;

use crate::batch::{Batcher, Call};
use crate::lost_acks::LostAcks;
use crate::queue::Queue;
use crate::retry::RetryPolicy;
use crate::stats::Counters;

#[derive(Debug)]
pub(crate) struct Context {
    pub(crate) queue: Queue,
    /// The queue's URL or name, for logs.
    pub(crate) queue_name: String,
    pub(crate) fifo: bool,
    pub(crate) retry: RetryPolicy,
    pub(crate) counters: Counters,
    pub(crate) lost_acks: LostAcks,
    /// Deletes and visibility changes under way on behalf of deliveries (batch entries, and
    /// the releases of dropped deliveries): neither a cancelled caller nor a `Drop` cuts them
    /// short, and shutdown waits for them.
    pub(crate) settles: TaskTracker,
    /// Every delete goes through this, in batches.
    pub(crate) deletes: Batcher,
    /// Every visibility change (extensions and releases) goes through this, in batches.
    pub(crate) visibility: Batcher,
}

impl Context {
    pub(crate) fn new(queue: Queue, retry: RetryPolicy) -> Self {
        let fifo = queue.is_fifo();
        let settles = TaskTracker::new();
        Self {
            queue_name: queue.describe(),
            deletes: Batcher::new(queue.clone(), Call::Delete, settles.clone()),
            visibility: Batcher::new(queue.clone(), Call::ChangeVisibility, settles.clone()),
            queue,
            fifo,
            retry,
            counters: Counters::default(),
            lost_acks: LostAcks::default(),
            settles,
        }
    }

    /// Waits until every settle call sent so far has finished.
    pub(crate) async fn flush_settles(&self) {
        self.settles.close();
        self.settles.wait().await;
        self.settles.reopen();
    }
}
