//! The receive loop: long polls `ReceiveMessage` while `max_in_flight` slots are free, takes
//! one slot per message a receive may return, runs more receives at once while the queue is
//! busy, and backs off on errors and on empty short polls. What it receives goes to its
//! caller, with the slots the messages take.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{watch, OnceCell, OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep, Instant};

use crate::backoff::Backoff;
use crate::error::Error;
use crate::queue::{Queue, Receive};

/// While the queue is busy, how long a receive waits for a whole batch of free slots before
/// it asks for fewer messages.
const GATHER_SLOTS: Duration = Duration::from_millis(20);

/// The receive loop's settings, validated by the builder.
#[derive(Debug, Clone)]
pub(crate) struct ReceiveSettings {
    /// Visibility timeout to ask for on each receive, seconds; `None`: the queue's own.
    pub(crate) visibility_timeout: Option<u32>,
    pub(crate) wait_time: Duration,
    pub(crate) batch_size: u32,
    pub(crate) max_in_flight: usize,
    pub(crate) max_concurrent_receives: usize,
    /// `MessageAttributeNames`: `All`, names, or `prefix.*`.
    pub(crate) message_attribute_names: Vec<String>,
    /// `MessageSystemAttributeNames`, the ones the consumer needs included.
    pub(crate) system_attribute_names: Vec<MessageSystemAttributeName>,
}

/// One receive's worth of messages, with the slots they take.
pub(crate) struct ReceivedBatch {
    pub(crate) messages: Vec<Message>,
    pub(crate) permits: Vec<OwnedSemaphorePermit>,
    /// Just before the request was sent: SQS's 12-hour limit counts from the request.
    pub(crate) received_at: Instant,
    /// When the answer arrived: SQS starts each message's visibility timeout when it hands
    /// the message out, which in a long poll can be long after the request.
    pub(crate) returned_at: Instant,
    /// The visibility timeout the receive applied, seconds.
    pub(crate) timeout: u32,
}

/// What one receive came back with.
enum Answer {
    Batch(ReceivedBatch),
    /// An empty answer.
    Empty,
    /// A transient failure (already waited out).
    Nothing,
}

/// The back-off states shared by the receives under way.
struct Backoffs {
    failures: Backoff,
    idle: Backoff,
}

/// Receives from one queue, within `max_in_flight` slots.
#[derive(Debug)]
pub(crate) struct Receiver {
    queue: Queue,
    settings: ReceiveSettings,
    permits: Arc<Semaphore>,
    /// The visibility timeout in force, seconds: the builder's, or the queue's read once.
    visibility: OnceCell<u32>,
    /// `true` while receiving is paused.
    paused: watch::Sender<bool>,
}

impl Receiver {
    pub(crate) fn new(queue: Queue, settings: ReceiveSettings) -> Self {
        Self {
            queue,
            permits: Arc::new(Semaphore::new(settings.max_in_flight)),
            settings,
            visibility: OnceCell::new(),
            paused: watch::Sender::new(false),
        }
    }

    pub(crate) fn settings(&self) -> &ReceiveSettings {
        &self.settings
    }

    /// Slots taken right now: deliveries held, and receives under way.
    pub(crate) fn slots_taken(&self) -> usize {
        self.settings.max_in_flight - self.permits.available_permits()
    }

    /// Stops receiving (`true`): the receives under way are abandoned at once and none starts
    /// until receiving resumes (`false`).
    pub(crate) fn pause(&self, paused: bool) {
        self.paused
            .send_if_modified(|p| std::mem::replace(p, paused) != paused);
    }

    pub(crate) fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Receives until a fatal error (or until the caller drops this future), handing each
    /// non-empty answer to `on_batch`.
    ///
    /// Several receives may be under way at once: one to start with, one more each time a
    /// receive comes back full while slots are still free (up to
    /// `max_concurrent_receives`), and back to one when a receive comes back empty. Each
    /// receive holds the slots for the messages it asks for.
    pub(crate) async fn run(&self, mut on_batch: impl FnMut(ReceivedBatch)) -> Result<(), Error> {
        let timeout = self.resolve_visibility_timeout().await?;
        let backoffs = Mutex::new(Backoffs {
            failures: Backoff::new(Duration::from_millis(200), Duration::from_secs(20)),
            idle: Backoff::new(Duration::from_millis(50), Duration::from_secs(2)),
        });
        let settings = &self.settings;
        let most = settings
            .max_concurrent_receives
            .min(
                settings
                    .max_in_flight
                    .div_ceil(settings.batch_size as usize),
            )
            .max(1);
        let mut target = 1;
        let mut busy = false;
        let mut receives = FuturesUnordered::new();
        let mut paused = self.paused.subscribe();
        tracing::info!(
            queue = %self.queue.name(),
            visibility_timeout = timeout,
            max_in_flight = settings.max_in_flight,
            fifo = self.queue.is_fifo(),
            "consumer started"
        );
        loop {
            if *paused.borrow_and_update() {
                // Abandon the receives under way (their long polls end on our side; their
                // slots come free) and wait for `resume`.
                receives = FuturesUnordered::new();
                (target, busy) = (1, false);
                tracing::info!(queue = %self.queue.name(), "receiving paused");
                if paused.wait_for(|p| !*p).await.is_err() {
                    return Ok(());
                }
                tracing::info!(queue = %self.queue.name(), "receiving resumed");
                continue;
            }
            while receives.len() < target {
                // The first receive waits for a slot (for a whole batch of them while the
                // queue is busy: receives of 10 cost the least); more receives start only on
                // a whole batch of slots free now.
                let first = receives.is_empty();
                let acquire = async {
                    match (first, busy) {
                        (true, false) => self.acquire_permits().await,
                        (true, true) => {
                            // Not for long: handlers that hold their slots a while must not
                            // leave the queue unread.
                            match tokio::time::timeout(GATHER_SLOTS, self.acquire_batch()).await {
                                Ok(permits) => permits,
                                Err(_) => self.acquire_permits().await,
                            }
                        }
                        (false, _) => self.try_acquire_batch(),
                    }
                };
                let permits = tokio::select! {
                    permits = acquire => permits,
                    _ = paused.wait_for(|p| *p) => break,
                };
                let Some(permits) = permits else {
                    if receives.is_empty() {
                        return Ok(()); // the slots are gone: the consumer is being dropped
                    }
                    break;
                };
                receives.push(self.receive_once(permits, timeout, &backoffs));
            }
            if receives.is_empty() {
                continue; // paused while waiting for a slot
            }
            let outcome = tokio::select! {
                outcome = receives.next() => outcome,
                _ = paused.wait_for(|p| *p) => continue,
            };
            let Some(outcome) = outcome else {
                continue;
            };
            match outcome? {
                Answer::Batch(batch) => {
                    busy = batch.messages.len() == settings.batch_size as usize;
                    if busy && target < most && self.permits.available_permits() > 0 {
                        target += 1;
                    }
                    on_batch(batch);
                }
                Answer::Empty => {
                    target = 1;
                    busy = false;
                }
                Answer::Nothing => {}
            }
        }
    }

    /// One receive with the slots it holds; on an empty answer or a transient failure, it
    /// also waits out the back-off before it completes. An error only when it is fatal.
    async fn receive_once(
        &self,
        permits: Vec<OwnedSemaphorePermit>,
        timeout: u32,
        backoffs: &Mutex<Backoffs>,
    ) -> Result<Answer, Error> {
        let settings = &self.settings;
        let received_at = Instant::now();
        let request = Receive {
            max_messages: u32::try_from(permits.len()).unwrap_or(settings.batch_size),
            wait: settings.wait_time,
            visibility: settings.visibility_timeout,
            message_attribute_names: &settings.message_attribute_names,
            system_attribute_names: &settings.system_attribute_names,
        };
        let result = self.queue.receive(request).await;
        let backoffs = || backoffs.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(messages) if messages.is_empty() => {
                // Short polling (or a server that answers early): do not spin.
                let early =
                    settings.wait_time.is_zero() || received_at.elapsed() < settings.wait_time / 2;
                let wait = {
                    let mut b = backoffs();
                    b.failures.reset();
                    early.then(|| b.idle.next_delay())
                };
                if let Some(wait) = wait {
                    sleep(wait).await;
                }
                Ok(Answer::Empty)
            }
            Ok(messages) => {
                {
                    let mut b = backoffs();
                    b.failures.reset();
                    b.idle.reset();
                }
                tracing::debug!(count = messages.len(), "received");
                Ok(Answer::Batch(ReceivedBatch {
                    messages,
                    permits,
                    received_at,
                    returned_at: Instant::now(),
                    timeout,
                }))
            }
            Err(err) if err.is_fatal() => {
                tracing::error!(queue = %self.queue.name(), error = %err.chain(), "receive failed; stopping");
                Err(err)
            }
            Err(err) => {
                drop(permits);
                let wait = backoffs().failures.next_delay();
                tracing::warn!(error = %err.chain(), retry_in = ?wait, "receive failed; retrying");
                sleep(wait).await;
                Ok(Answer::Nothing)
            }
        }
    }

    /// Waits for one free slot, then takes as many more as one receive may use.
    async fn acquire_permits(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        let first = self.permits.clone().acquire_owned().await.ok()?;
        Some(self.more_permits(first))
    }

    /// Waits for a whole batch of free slots (fewer if `max_in_flight` is smaller).
    async fn acquire_batch(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        let n = self.batch_permits();
        let all = self.permits.clone().acquire_many_owned(n).await.ok()?;
        Some(split_permits(all))
    }

    /// A whole batch of slots if they are free now.
    fn try_acquire_batch(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        let n = self.batch_permits();
        let all = self.permits.clone().try_acquire_many_owned(n).ok()?;
        Some(split_permits(all))
    }

    fn batch_permits(&self) -> u32 {
        let n = (self.settings.batch_size as usize).min(self.settings.max_in_flight);
        u32::try_from(n).unwrap_or(1)
    }

    fn more_permits(&self, first: OwnedSemaphorePermit) -> Vec<OwnedSemaphorePermit> {
        let sem = &self.permits;
        let mut permits = vec![first];
        while permits.len() < self.settings.batch_size as usize {
            match sem.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        permits
    }

    /// The builder's visibility timeout, or the queue's own, read once (retrying transient
    /// failures with back-off; each read bounded by the request timeout).
    async fn resolve_visibility_timeout(&self) -> Result<u32, Error> {
        if let Some(t) = self.settings.visibility_timeout {
            return Ok(t);
        }
        self.visibility
            .get_or_try_init(|| async {
                let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(20));
                loop {
                    match self.queue.visibility_timeout().await {
                        Ok(t) => return Ok(t),
                        Err(err) if err.is_fatal() => return Err(err),
                        Err(err) => {
                            let wait = backoff.next_delay();
                            tracing::warn!(error = %err.chain(), retry_in = ?wait, "reading the queue's visibility timeout failed; retrying");
                            sleep(wait).await;
                        }
                    }
                }
            })
            .await
            .copied()
    }
}

/// One permit per message.
fn split_permits(mut all: OwnedSemaphorePermit) -> Vec<OwnedSemaphorePermit> {
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
