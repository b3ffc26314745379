//! Batch windows: the deliveries of several receives collected into one batch for a batch
//! handler, handed out when the batch is full or its window has passed since its first
//! delivery. Every delivery in a filling batch keeps its lease: it is a delivery from its
//! receive on, and the keeper extends it like any other.

use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};
use tracing::instrument::WithSubscriber;

use crate::delivery::Delivery;

/// How the deliveries of a batch handler are grouped into batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batching {
    /// The most deliveries in one batch.
    pub(crate) max: usize,
    /// How long a batch may fill from its first delivery; zero: no collector, each
    /// receive's deliveries are handed out as they come (in batches of at most `max`).
    pub(crate) window: Duration,
}

impl Default for Batching {
    fn default() -> Self {
        Self {
            max: 10,
            window: Duration::ZERO,
        }
    }
}

/// Hands a batch to the batch handler; completes when the handler is done with it.
pub(crate) type HandOutFilled = Box<dyn Fn(Vec<Delivery>) -> BoxFuture<'static, ()> + Send + Sync>;

/// The filling batch of one run: deliveries go in with [`push`](Collector::push); its task
/// hands batches over.
#[derive(Debug)]
pub(crate) struct Collector {
    deliveries: mpsc::UnboundedSender<Vec<Delivery>>,
}

impl Collector {
    /// A collector and the task that fills its batches and runs their handlers. Dropping the
    /// collector (the run's shutdown does, once its receives are in) hands a filling batch
    /// over at once; the task ends when every batch it handed out is done.
    pub(crate) fn start(
        batching: Batching,
        hand_out: HandOutFilled,
    ) -> (Self, BoxFuture<'static, ()>) {
        let (deliveries, incoming) = mpsc::unbounded_channel();
        let task = Box::pin(fill(incoming, batching, hand_out));
        (Self { deliveries }, task)
    }

    /// Adds one receive's deliveries to the filling batch. If the collector's task is gone
    /// (the run was cut short), they are dropped: each meets the retry policy.
    pub(crate) fn push(&self, deliveries: Vec<Delivery>) {
        let _ = self.deliveries.send(deliveries);
    }
}

/// The collector's task.
async fn fill(
    mut incoming: mpsc::UnboundedReceiver<Vec<Delivery>>,
    batching: Batching,
    hand_out: HandOutFilled,
) {
    let mut filling = Filling::new(batching);
    let mut handed = JoinSet::new();
    loop {
        let due = filling.due;
        tokio::select! {
            got = incoming.recv() => match got {
                Some(deliveries) => {
                    for filled in filling.add(deliveries, Instant::now()) {
                        hand(&mut handed, &hand_out, filled);
                    }
                }
                None => break,
            },
            () = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                hand(&mut handed, &hand_out, filling.take());
            }
            Some(_) = handed.join_next(), if !handed.is_empty() => {}
        }
    }
    if !filling.is_empty() {
        hand(&mut handed, &hand_out, filling.take());
    }
    while handed.join_next().await.is_some() {}
}

/// Hands `batch` over in a task of its own, which logs for the collector's subscriber.
fn hand(handed: &mut JoinSet<()>, hand_out: &HandOutFilled, filled: Vec<Delivery>) {
    handed.spawn(hand_out(filled).with_current_subscriber());
}

/// A batch filling up, and when its window ends.
#[derive(Debug)]
struct Filling {
    batching: Batching,
    deliveries: Vec<Delivery>,
    /// The first delivery's arrival plus the window.
    due: Option<Instant>,
}

impl Filling {
    fn new(batching: Batching) -> Self {
        Self {
            batching,
            deliveries: Vec::new(),
            due: None,
        }
    }

    fn is_empty(&self) -> bool {
        self.deliveries.is_empty()
    }

    /// Adds deliveries that arrived `now`; the batches now full.
    fn add(&mut self, deliveries: Vec<Delivery>, now: Instant) -> Vec<Vec<Delivery>> {
        if deliveries.is_empty() {
            return Vec::new();
        }
        if self.deliveries.is_empty() {
            self.due = Some(now + self.batching.window);
        }
        self.deliveries.extend(deliveries);
        let mut full = Vec::new();
        while self.deliveries.len() >= self.batching.max {
            let rest = self.deliveries.split_off(self.batching.max);
            full.push(std::mem::replace(&mut self.deliveries, rest));
            // What is left arrived now: its window starts now.
            self.due = Some(now + self.batching.window);
        }
        if self.deliveries.is_empty() {
            self.due = None;
        }
        full
    }

    /// The filling batch, handed out as it is.
    fn take(&mut self) -> Vec<Delivery> {
        self.due = None;
        std::mem::take(&mut self.deliveries)
    }
}

#[cfg(test)]
mod tests;
