//! `ConsumerHandle`: pause, resume, stats and a graceful stop of a consumer, from anywhere.

use std::fmt;
use std::sync::Arc;

use crate::engine::Engine;
use crate::receive::Receiving;
use crate::stats::Stats;

/// A handle to a [`Consumer`](crate::Consumer), from
/// [`Consumer::handle`](crate::Consumer::handle): cheap to clone, `Send + Sync + 'static`,
/// for a signal task, an admin endpoint or a health check to pause, resume, read the stats
/// of, or stop a consumer that is running elsewhere.
///
/// ```
/// use std::time::Duration;
/// use sqs_consumer::{Consumer, Delivery, MemoryQueue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqs_consumer::Error> {
/// let queue = MemoryQueue::new();
/// queue.send("hello")?;
/// let consumer = Consumer::in_memory(&queue).wait_time(Duration::from_secs(1)).build()?;
/// let handle = consumer.handle();
///
/// // Stop once the message is acked (a real service would wait for SIGTERM here).
/// tokio::spawn(async move {
///     while handle.stats().acked == 0 {
///         tokio::time::sleep(Duration::from_millis(10)).await;
///     }
///     handle.shutdown();
/// });
/// consumer.run(|delivery: Delivery| delivery.ack()).await?; // returns after the shutdown
/// assert!(queue.is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ConsumerHandle {
    engine: Arc<Engine>,
}

impl ConsumerHandle {
    pub(crate) fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }

    /// Pauses receiving, as [`Consumer::pause`](crate::Consumer::pause).
    pub fn pause(&self) {
        self.engine.set_receiving(Receiving::Paused);
    }

    /// Resumes receiving, as [`Consumer::resume`](crate::Consumer::resume).
    pub fn resume(&self) {
        self.engine.set_receiving(Receiving::Active);
    }

    /// `true` while receiving is paused.
    pub fn is_paused(&self) -> bool {
        self.engine.is_paused()
    }

    /// A snapshot of the consumer's counters, as
    /// [`Consumer::stats`](crate::Consumer::stats).
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }

    /// Starts the same graceful stop as a [`run_until`](crate::Consumer::run_until) signal,
    /// for every `run*` and stream of this consumer that is running, and for any started
    /// later (they return, or end, at once). Returns at once; the `run*` futures return (and
    /// the streams end) once their shutdown is done. It cannot be undone: build a new
    /// consumer to receive again.
    pub fn shutdown(&self) {
        self.engine.request_shutdown();
    }
}

impl fmt::Debug for ConsumerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerHandle")
            .field("queue", &self.engine.queue_name())
            .field("paused", &self.is_paused())
            .finish_non_exhaustive()
    }
}
