//! Client-side batching of `DeleteMessage` and `ChangeMessageVisibility`.
//!
//! SQS bills per request, and a batch request of up to 10 entries costs one. There is no
//! fixed linger: while fewer than [`MAX_REQUESTS_IN_FLIGHT`] batch requests are under way,
//! whatever is queued goes out at once (a lone ack at light load waits for nothing); when
//! they are all busy, entries queue up and leave together, up to 10 a request. Deliveries
//! received together reach their heartbeats together, so their extensions share requests too.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::sleep;

use crate::backoff::Backoff;
use crate::error::Error;
use crate::queue::Queue;

/// The most entries SQS takes in one batch request.
pub(crate) const MAX_ENTRIES: usize = 10;
/// Batch requests under way at once, per action.
pub(crate) const MAX_REQUESTS_IN_FLIGHT: usize = 4;
/// Tries of one entry (or of a whole request) before its error goes back to the caller.
const MAX_ATTEMPTS: u32 = 4;
/// Entries pulled off the channel at a time: enough to fill every request slot.
const LOOKAHEAD: usize = MAX_ENTRIES * MAX_REQUESTS_IN_FLIGHT;

/// Which call a batcher makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Delete,
    ChangeVisibility,
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Call::Delete => "DeleteMessageBatch",
            Call::ChangeVisibility => "ChangeMessageVisibilityBatch",
        }
    }
}

/// One caller's request, waiting for its batch.
struct Entry {
    receipt: String,
    /// Seconds, for `ChangeVisibility`.
    visibility: u32,
    reply: oneshot::Sender<Result<(), Error>>,
}

/// Sends one kind of call in batches; see the module docs.
#[derive(Debug)]
pub(crate) struct Batcher {
    queue: Queue,
    call: Call,
    /// Started on first use, inside the runtime that uses it.
    tx: OnceLock<mpsc::UnboundedSender<Entry>>,
}

impl Batcher {
    pub(crate) fn new(queue: Queue, call: Call) -> Self {
        Self {
            queue,
            call,
            tx: OnceLock::new(),
        }
    }

    /// Deletes (or changes the visibility of) one message as part of a batch, and returns
    /// that entry's own result.
    pub(crate) async fn submit(&self, receipt: &str, visibility: u32) -> Result<(), Error> {
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(run(self.queue.clone(), self.call, rx));
            tx
        });
        let (reply, answer) = oneshot::channel();
        let entry = Entry {
            receipt: receipt.to_owned(),
            visibility,
            reply,
        };
        if tx.send(entry).is_ok() {
            if let Ok(result) = answer.await {
                return result;
            }
        }
        // The batching task is gone (its runtime shut down): send this one on its own.
        self.single(receipt, visibility).await
    }

    async fn single(&self, receipt: &str, visibility: u32) -> Result<(), Error> {
        match self.call {
            Call::Delete => self.queue.delete(receipt).await,
            Call::ChangeVisibility => self.queue.change_visibility(receipt, visibility).await,
        }
    }
}

/// The batching loop: takes what is queued whenever a request slot is free.
async fn run(queue: Queue, call: Call, mut rx: mpsc::UnboundedReceiver<Entry>) {
    let slots = Arc::new(Semaphore::new(MAX_REQUESTS_IN_FLIGHT));
    let mut waiting: VecDeque<Entry> = VecDeque::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        if waiting.is_empty() {
            match rx.recv().await {
                Some(entry) => waiting.push_back(entry),
                None => return,
            }
        }
        while waiting.len() < LOOKAHEAD {
            match rx.try_recv() {
                Ok(entry) => waiting.push_back(entry),
                Err(_) => break,
            }
        }
        let batch = take_batch(&mut waiting);
        tokio::spawn(send(queue.clone(), call, batch, slot));
    }
}

/// Up to 10 entries from the front, in order, never the same receipt handle twice: a second
/// entry for a handle already in the batch waits (in its place) for the next one.
fn take_batch(waiting: &mut VecDeque<Entry>) -> Vec<Entry> {
    let mut batch = Vec::with_capacity(MAX_ENTRIES);
    let mut handles = HashSet::new();
    let mut later = VecDeque::new();
    while let Some(entry) = waiting.pop_front() {
        if batch.len() == MAX_ENTRIES {
            later.push_back(entry);
            break;
        }
        if handles.insert(entry.receipt.clone()) {
            batch.push(entry);
        } else {
            later.push_back(entry);
        }
    }
    later.append(waiting);
    *waiting = later;
    batch
}

/// Sends one batch, retries what failed transiently, and answers every caller.
async fn send(queue: Queue, call: Call, mut batch: Vec<Entry>, _slot: OwnedSemaphorePermit) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    for attempt in 1..=MAX_ATTEMPTS {
        let last = attempt == MAX_ATTEMPTS;
        let answer = match call {
            Call::Delete => {
                let entries: Vec<(String, String)> = batch
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (i.to_string(), e.receipt.clone()))
                    .collect();
                queue.delete_batch(&entries).await
            }
            Call::ChangeVisibility => {
                let entries: Vec<(String, String, u32)> = batch
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (i.to_string(), e.receipt.clone(), e.visibility))
                    .collect();
                queue.change_visibility_batch(&entries).await
            }
        };
        let results = match answer {
            Ok(results) => results,
            Err(err) if err.is_retryable() && !last => {
                let wait = backoff.next_delay();
                tracing::warn!(operation = call.name(), error = %err, retry_in = ?wait, entries = batch.len(), "batch request failed; retrying");
                sleep(wait).await;
                continue;
            }
            Err(err) => {
                let err = Arc::new(err);
                for entry in batch {
                    let _ = entry.reply.send(Err(Error::replicate(&err)));
                }
                return;
            }
        };
        let mut retry = Vec::new();
        for (entry, (_, result)) in batch.into_iter().zip(results) {
            match result {
                Err(err) if err.is_retryable() && !last => retry.push(entry),
                result => {
                    let _ = entry.reply.send(result);
                }
            }
        }
        if retry.is_empty() {
            return;
        }
        batch = retry;
        let wait = backoff.next_delay();
        tracing::warn!(operation = call.name(), entries = batch.len(), retry_in = ?wait, "batch entries failed; retrying them");
        sleep(wait).await;
    }
}
