//! `MemoryQueue`: an in-memory SQS queue with the real visibility semantics, on tokio time.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName as Attr};
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

use crate::backoff::random_u64;
use crate::config::{visibility_secs, whole_secs};
use crate::error::{classify_code, Error};
use crate::heartbeat::{HARD_LIMIT, MAX_VISIBILITY_SECS};

/// The answer to a batch request: each entry's id and result, or the whole request's error.
pub(crate) type BatchResult = Result<Vec<(String, Result<(), Error>)>, Error>;

/// The FIFO deduplication window.
const DEDUP_WINDOW: Duration = Duration::from_secs(300);
/// The longest delay SQS allows on a queue or a message.
const MAX_DELAY_SECS: u64 = 900;

/// An in-memory SQS queue, for tests, examples and local development.
///
/// It models what a consumer depends on, on tokio's clock (so a test on a paused clock runs
/// 12 hours in milliseconds): visibility timeouts; receipt handles that change on every
/// receive, with old ones refused (`ReceiptHandleIsInvalid`); `MessageNotInflight` for a
/// visibility change after the timeout lapsed; the 12-hour limit counted from the receive;
/// `ApproximateReceiveCount`; queue and message delay; redrive to a dead-letter queue after
/// `maxReceiveCount` receives; FIFO message groups (one group is locked while any of its
/// messages is in flight) and deduplication; long polling; and a count of requests per
/// action. [`fail_next`](MemoryQueue::fail_next) makes the next calls of an action fail, to
/// test error paths.
///
/// Clones share the same queue.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqs_consumer::Error> {
/// use std::time::Duration;
/// use sqs_consumer::MemoryQueue;
///
/// let queue = MemoryQueue::builder()
///     .visibility_timeout(Duration::from_secs(10))
///     .build()?;
/// queue.send("hello")?;
/// let messages = queue.receive(10, Duration::ZERO).await?;
/// assert_eq!(messages[0].body(), Some("hello"));
/// assert_eq!(queue.in_flight_len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryQueue {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    id: u64,
    settings: Settings,
    state: Mutex<State>,
    /// Wakes long polls when something may have become receivable.
    changed: Notify,
}

#[derive(Clone)]
struct Settings {
    latency: Duration,
    visibility_timeout: u32,
    delay: Duration,
    fifo: bool,
    content_based_deduplication: bool,
    dead_letter: Option<(MemoryQueue, u32)>,
}

#[derive(Default)]
struct State {
    /// Messages in send order; the key is the queue's own sequence number.
    messages: BTreeMap<u64, Stored>,
    next_seq: u64,
    dedup: HashMap<String, (Instant, String)>,
    requests: RequestCounts,
    faults: HashMap<Action, VecDeque<String>>,
}

struct Stored {
    id: String,
    body: String,
    sent_ms: u128,
    /// When the message may next be received (delay or visibility).
    available_at: Instant,
    /// The receipt handle of the latest receive, if any.
    receipt: Option<String>,
    /// When the latest receive's request arrived, on tokio's clock; the 12-hour limit counts
    /// from it.
    received_at: Option<Instant>,
    first_receive_ms: Option<u128>,
    receive_count: u32,
    group: Option<String>,
    dedup_id: Option<String>,
    dead_letter_source: Option<String>,
}

impl Stored {
    fn in_flight(&self, now: Instant) -> bool {
        self.receipt.is_some() && self.available_at > now
    }
}

/// The SQS actions a [`MemoryQueue`] serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// `SendMessage`.
    SendMessage,
    /// `ReceiveMessage`.
    ReceiveMessage,
    /// `DeleteMessage`.
    DeleteMessage,
    /// `ChangeMessageVisibility`.
    ChangeMessageVisibility,
    /// `GetQueueAttributes`.
    GetQueueAttributes,
    /// `DeleteMessageBatch` (a fault fails the whole request).
    DeleteMessageBatch,
    /// `ChangeMessageVisibilityBatch` (a fault fails the whole request).
    ChangeMessageVisibilityBatch,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::SendMessage => "SendMessage",
            Action::ReceiveMessage => "ReceiveMessage",
            Action::DeleteMessage => "DeleteMessage",
            Action::ChangeMessageVisibility => "ChangeMessageVisibility",
            Action::GetQueueAttributes => "GetQueueAttributes",
            Action::DeleteMessageBatch => "DeleteMessageBatch",
            Action::ChangeMessageVisibilityBatch => "ChangeMessageVisibilityBatch",
        }
    }
}

/// How many requests of each action a [`MemoryQueue`] has served (failed ones included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestCounts {
    /// `SendMessage` requests.
    pub send_message: u64,
    /// `ReceiveMessage` requests.
    pub receive_message: u64,
    /// `DeleteMessage` requests.
    pub delete_message: u64,
    /// `ChangeMessageVisibility` requests.
    pub change_message_visibility: u64,
    /// `GetQueueAttributes` requests.
    pub get_queue_attributes: u64,
    /// `DeleteMessageBatch` requests.
    pub delete_message_batch: u64,
    /// `ChangeMessageVisibilityBatch` requests.
    pub change_message_visibility_batch: u64,
    /// Entries in `DeleteMessageBatch` requests.
    pub delete_message_batch_entries: u64,
    /// Entries in `ChangeMessageVisibilityBatch` requests.
    pub change_message_visibility_batch_entries: u64,
}

impl RequestCounts {
    /// Deletes asked for, alone or in batches.
    pub fn deletes(&self) -> u64 {
        self.delete_message + self.delete_message_batch_entries
    }

    /// Visibility changes asked for, alone or in batches.
    pub fn visibility_changes(&self) -> u64 {
        self.change_message_visibility + self.change_message_visibility_batch_entries
    }

    /// All requests together (a batch counts once, as SQS bills it).
    pub fn total(&self) -> u64 {
        self.send_message
            + self.receive_message
            + self.delete_message
            + self.change_message_visibility
            + self.get_queue_attributes
            + self.delete_message_batch
            + self.change_message_visibility_batch
    }

    fn count(&mut self, action: Action) {
        let slot = match action {
            Action::SendMessage => &mut self.send_message,
            Action::ReceiveMessage => &mut self.receive_message,
            Action::DeleteMessage => &mut self.delete_message,
            Action::ChangeMessageVisibility => &mut self.change_message_visibility,
            Action::GetQueueAttributes => &mut self.get_queue_attributes,
            Action::DeleteMessageBatch => &mut self.delete_message_batch,
            Action::ChangeMessageVisibilityBatch => &mut self.change_message_visibility_batch,
        };
        *slot += 1;
    }
}

/// Options for [`MemoryQueue::send_with`].
#[derive(Debug, Clone, Default)]
pub struct SendOptions {
    delay: Option<Duration>,
    group_id: Option<String>,
    deduplication_id: Option<String>,
}

impl SendOptions {
    /// No options: the queue's delay, no group, no deduplication id.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hides the message for `delay` after the send (standard queues only, at most 15 min).
    /// Defaults to the queue's own delay.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The FIFO message group. Required on FIFO queues. Defaults to none.
    #[must_use]
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = Some(group_id.into());
        self
    }

    /// The FIFO deduplication id: a second send with the same id within 5 minutes is
    /// accepted but not enqueued. Required on FIFO queues without content-based
    /// deduplication. Defaults to none.
    #[must_use]
    pub fn deduplication_id(mut self, id: impl Into<String>) -> Self {
        self.deduplication_id = Some(id.into());
        self
    }
}

/// Builds a [`MemoryQueue`]; see [`MemoryQueue::builder`].
#[derive(Debug, Clone)]
pub struct MemoryQueueBuilder {
    name: Option<String>,
    latency: Duration,
    visibility_timeout: Duration,
    delay: Duration,
    fifo: bool,
    content_based_deduplication: bool,
    dead_letter: Option<(MemoryQueue, u32)>,
}

impl MemoryQueueBuilder {
    /// The queue's name, shown in logs. Defaults to a random name (ending in `.fifo` for a
    /// FIFO queue).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How long every request takes, as a network round trip would (on tokio's clock):
    /// receives, and the consumer's deletes and visibility changes. Defaults to 0.
    #[must_use]
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// The queue's `VisibilityTimeout`, whole seconds in 0..=43200. Defaults to 30 s.
    #[must_use]
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = timeout;
        self
    }

    /// The queue's `DelaySeconds`, at most 15 minutes. Defaults to 0.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Makes it a FIFO queue. Defaults to `false` (a standard queue).
    #[must_use]
    pub fn fifo(mut self, fifo: bool) -> Self {
        self.fifo = fifo;
        self
    }

    /// FIFO content-based deduplication: the body stands in for a missing deduplication id.
    /// Defaults to `false`.
    #[must_use]
    pub fn content_based_deduplication(mut self, on: bool) -> Self {
        self.content_based_deduplication = on;
        self
    }

    /// A redrive policy: a message received `max_receive_count` times (1..=1000) without a
    /// delete moves to `queue` on its next receive. Defaults to none.
    #[must_use]
    pub fn dead_letter_queue(mut self, queue: &MemoryQueue, max_receive_count: u32) -> Self {
        self.dead_letter = Some((queue.clone(), max_receive_count));
        self
    }

    /// Checks the settings and creates the queue.
    pub fn build(self) -> Result<MemoryQueue, Error> {
        let visibility_timeout = visibility_secs("visibility_timeout", self.visibility_timeout)?;
        if whole_secs(self.delay).is_none_or(|s| s > MAX_DELAY_SECS) {
            return Err(Error::invalid(
                "delay",
                self.delay,
                "whole seconds in 0..=900",
            ));
        }
        if let Some((dlq, max)) = &self.dead_letter {
            if !(1..=1000).contains(max) {
                return Err(Error::invalid("max_receive_count", max, "1..=1000"));
            }
            if dlq.is_fifo() != self.fifo {
                return Err(Error::invalid(
                    "dead_letter_queue",
                    dlq.name(),
                    "a queue of the same kind (FIFO or standard) as the source",
                ));
            }
        }
        Ok(MemoryQueue::with_settings(
            self.name,
            Settings {
                latency: self.latency,
                visibility_timeout,
                delay: self.delay,
                fifo: self.fifo,
                content_based_deduplication: self.content_based_deduplication,
                dead_letter: self.dead_letter,
            },
        ))
    }
}

impl Default for MemoryQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryQueue {
    /// A standard queue with a 30-second visibility timeout and no delay.
    pub fn new() -> Self {
        Self::with_settings(
            None,
            Settings {
                latency: Duration::ZERO,
                visibility_timeout: 30,
                delay: Duration::ZERO,
                fifo: false,
                content_based_deduplication: false,
                dead_letter: None,
            },
        )
    }

    fn with_settings(name: Option<String>, settings: Settings) -> Self {
        let id = random_u64();
        let name = name.unwrap_or_else(|| {
            let base = format!("memory-{:08x}", id as u32);
            if settings.fifo {
                format!("{base}.fifo")
            } else {
                base
            }
        });
        Self {
            inner: Arc::new(Inner {
                name,
                id,
                settings,
                state: Mutex::new(State::default()),
                changed: Notify::new(),
            }),
        }
    }

    /// A builder for a queue with other settings.
    pub fn builder() -> MemoryQueueBuilder {
        MemoryQueueBuilder {
            name: None,
            latency: Duration::ZERO,
            visibility_timeout: Duration::from_secs(30),
            delay: Duration::ZERO,
            fifo: false,
            content_based_deduplication: false,
            dead_letter: None,
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Waits out the configured request latency.
    pub(crate) async fn round_trip(&self) {
        let latency = self.inner.settings.latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }

    /// `true` for a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.inner.settings.fifo
    }

    /// The queue's visibility timeout.
    pub fn visibility_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.inner.settings.visibility_timeout))
    }

    /// Sends a message with default options; returns its message id.
    pub fn send(&self, body: impl Into<String>) -> Result<String, Error> {
        self.send_with(body, SendOptions::default())
    }

    /// Sends a message; returns its message id (the first one's, for a FIFO duplicate).
    pub fn send_with(
        &self,
        body: impl Into<String>,
        options: SendOptions,
    ) -> Result<String, Error> {
        let body = body.into();
        let settings = &self.inner.settings;
        let mut state = self.lock();
        state.requests.count(Action::SendMessage);
        take_fault(&mut state, Action::SendMessage)?;
        let now = Instant::now();
        let delay = match options.delay {
            Some(_) if settings.fifo => {
                return Err(refuse(
                    Action::SendMessage,
                    "InvalidParameterValue",
                    "FIFO queues take no per-message delay",
                ))
            }
            Some(d) if whole_secs(d).is_none_or(|s| s > MAX_DELAY_SECS) => {
                return Err(refuse(
                    Action::SendMessage,
                    "InvalidParameterValue",
                    "DelaySeconds must be whole seconds in 0..=900",
                ))
            }
            Some(d) => d,
            None => settings.delay,
        };
        let mut dedup_key = None;
        if settings.fifo {
            if options.group_id.is_none() {
                return Err(refuse(
                    Action::SendMessage,
                    "MissingParameter",
                    "FIFO queues need a MessageGroupId",
                ));
            }
            let key = match (
                &options.deduplication_id,
                settings.content_based_deduplication,
            ) {
                (Some(id), _) => format!("id:{id}"),
                (None, true) => format!("body:{body}"),
                (None, false) => {
                    return Err(refuse(
                        Action::SendMessage,
                        "InvalidParameterValue",
                        "FIFO queues without content-based deduplication need a \
                         MessageDeduplicationId",
                    ))
                }
            };
            state.dedup.retain(|_, (expires, _)| *expires > now);
            if let Some((_, id)) = state.dedup.get(&key) {
                return Ok(id.clone());
            }
            dedup_key = Some(key);
        }
        let id = new_message_id();
        if let Some(key) = dedup_key {
            state.dedup.insert(key, (now + DEDUP_WINDOW, id.clone()));
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        state.messages.insert(
            seq,
            Stored {
                id: id.clone(),
                body,
                sent_ms: epoch_ms(),
                available_at: now + delay,
                receipt: None,
                received_at: None,
                first_receive_ms: None,
                receive_count: 0,
                group: options.group_id,
                dedup_id: options.deduplication_id,
                dead_letter_source: None,
            },
        );
        drop(state);
        self.inner.changed.notify_waiters();
        Ok(id)
    }

    /// Receives up to `max_messages` (1..=10), waiting up to `wait` (at most 20 s) for the
    /// first one, with the queue's visibility timeout.
    pub async fn receive(&self, max_messages: u32, wait: Duration) -> Result<Vec<Message>, Error> {
        self.receive_with_visibility(max_messages, wait, None).await
    }

    /// Like [`receive`](MemoryQueue::receive), with the visibility timeout (seconds) the
    /// received messages get; `None` uses the queue's.
    pub async fn receive_with_visibility(
        &self,
        max_messages: u32,
        wait: Duration,
        visibility: Option<u32>,
    ) -> Result<Vec<Message>, Error> {
        {
            let mut state = self.lock();
            state.requests.count(Action::ReceiveMessage);
            take_fault(&mut state, Action::ReceiveMessage)?;
        }
        if !(1..=10).contains(&max_messages) {
            return Err(refuse(
                Action::ReceiveMessage,
                "InvalidParameterValue",
                "MaxNumberOfMessages must be in 1..=10",
            ));
        }
        if wait > Duration::from_secs(20) {
            return Err(refuse(
                Action::ReceiveMessage,
                "InvalidParameterValue",
                "WaitTimeSeconds must be in 0..=20",
            ));
        }
        let visibility = visibility.unwrap_or(self.inner.settings.visibility_timeout);
        if visibility > MAX_VISIBILITY_SECS {
            return Err(refuse(
                Action::ReceiveMessage,
                "InvalidParameterValue",
                "VisibilityTimeout must be in 0..=43200",
            ));
        }
        // Half the round trip on the way there, half on the way back.
        let half = self.inner.settings.latency / 2;
        if !half.is_zero() {
            tokio::time::sleep(half).await;
        }
        // SQS counts the 12-hour limit from the moment it got the request.
        let requested_at = Instant::now();
        let until = requested_at + wait;
        loop {
            // Register for wake-ups before looking, so a send in between is not missed.
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (messages, wake) =
                self.try_receive(max_messages as usize, visibility, requested_at);
            let now = Instant::now();
            if !messages.is_empty() || now >= until {
                if !half.is_zero() {
                    tokio::time::sleep(half).await;
                }
                return Ok(messages);
            }
            let wake = wake.map_or(until, |w| w.min(until));
            tokio::select! {
                _ = &mut changed => {}
                _ = sleep_until(wake) => {}
            }
        }
    }

    /// One pass over the queue; also returns when the next hidden message becomes visible.
    fn try_receive(
        &self,
        max: usize,
        visibility: u32,
        requested_at: Instant,
    ) -> (Vec<Message>, Option<Instant>) {
        let settings = &self.inner.settings;
        let now = Instant::now();
        let mut moved = Vec::new();
        let mut out = Vec::new();
        let mut wake: Option<Instant> = None;
        {
            let mut state = self.lock();
            let mut blocked: HashSet<String> = HashSet::new();
            if settings.fifo {
                blocked.extend(
                    state
                        .messages
                        .values()
                        .filter(|m| m.in_flight(now))
                        .filter_map(|m| m.group.clone()),
                );
            }
            let mut dead = Vec::new();
            for (seq, m) in state.messages.iter_mut() {
                if m.available_at > now {
                    wake = Some(wake.map_or(m.available_at, |w| w.min(m.available_at)));
                    if let (true, Some(g)) = (settings.fifo, &m.group) {
                        // Later messages of the group must wait for this one.
                        blocked.insert(g.clone());
                    }
                    continue;
                }
                if out.len() >= max {
                    break;
                }
                if m.group.as_ref().is_some_and(|g| blocked.contains(g)) {
                    continue;
                }
                if let Some((_, max_receives)) = &settings.dead_letter {
                    if m.receive_count >= *max_receives {
                        dead.push(*seq);
                        continue;
                    }
                }
                m.receive_count += 1;
                let receipt = format!(
                    "{:016x}.{}.{}.{:016x}",
                    self.inner.id,
                    seq,
                    m.receive_count,
                    random_u64()
                );
                m.receipt = Some(receipt.clone());
                m.received_at = Some(requested_at);
                m.first_receive_ms.get_or_insert_with(epoch_ms);
                m.available_at = now + Duration::from_secs(u64::from(visibility));
                out.push(to_message(m, *seq, receipt, settings.fifo));
            }
            for seq in dead {
                if let Some(m) = state.messages.remove(&seq) {
                    moved.push(m);
                }
            }
        }
        if let Some((dlq, _)) = &settings.dead_letter {
            for mut m in moved {
                tracing::debug!(message_id = %m.id, queue = %self.name(), "moved to the dead-letter queue");
                m.dead_letter_source = Some(self.name().to_owned());
                dlq.accept_moved(m);
            }
        }
        (out, wake)
    }

    /// Takes a message moved here from a source queue's redrive.
    fn accept_moved(&self, mut m: Stored) {
        m.available_at = Instant::now();
        m.receipt = None;
        m.received_at = None;
        m.first_receive_ms = None;
        m.receive_count = 0;
        let mut state = self.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        state.messages.insert(seq, m);
        drop(state);
        self.inner.changed.notify_waiters();
    }

    /// Deletes a message by the receipt handle of its latest receive.
    ///
    /// An older receipt handle is refused with `ReceiptHandleIsInvalid`; a handle of a message
    /// already deleted succeeds, as in SQS. On a FIFO queue the delete must come while the
    /// message is still in flight.
    pub fn delete(&self, receipt: &str) -> Result<(), Error> {
        let action = Action::DeleteMessage;
        let mut state = self.lock();
        state.requests.count(action);
        take_fault(&mut state, action)?;
        let result = self.delete_locked(&mut state, receipt, action);
        drop(state);
        self.inner.changed.notify_waiters();
        result
    }

    fn delete_locked(&self, state: &mut State, receipt: &str, action: Action) -> Result<(), Error> {
        let seq = self.parse_receipt(receipt, action)?;
        let now = Instant::now();
        let Some(m) = state.messages.get(&seq) else {
            if seq < state.next_seq {
                return Ok(());
            }
            return Err(invalid_receipt(action));
        };
        if m.receipt.as_deref() != Some(receipt) {
            return Err(invalid_receipt(action));
        }
        if self.inner.settings.fifo && !m.in_flight(now) {
            return Err(refuse(
                action,
                "ReceiptHandleIsInvalid",
                "the message's visibility timeout has expired",
            ));
        }
        state.messages.remove(&seq);
        Ok(())
    }

    /// Sets a message's visibility timeout to `secs` from now.
    ///
    /// Refused with `ReceiptHandleIsInvalid` for an old or unknown handle, with
    /// `MessageNotInflight` once the timeout has lapsed, and with `InvalidParameterValue`
    /// past 43200 s or past 12 hours after the receive.
    pub fn change_visibility(&self, receipt: &str, secs: u32) -> Result<(), Error> {
        let action = Action::ChangeMessageVisibility;
        let mut state = self.lock();
        state.requests.count(action);
        take_fault(&mut state, action)?;
        let result = self.change_locked(&mut state, receipt, secs, action);
        drop(state);
        // Long polls recompute when the next hidden message becomes visible.
        self.inner.changed.notify_waiters();
        result
    }

    fn change_locked(
        &self,
        state: &mut State,
        receipt: &str,
        secs: u32,
        action: Action,
    ) -> Result<(), Error> {
        let seq = self.parse_receipt(receipt, action)?;
        let now = Instant::now();
        let m = state
            .messages
            .get_mut(&seq)
            .filter(|m| m.receipt.as_deref() == Some(receipt))
            .ok_or_else(|| invalid_receipt(action))?;
        if !m.in_flight(now) {
            return Err(refuse(
                action,
                "MessageNotInflight",
                "the message is not in flight",
            ));
        }
        let ends = now + Duration::from_secs(u64::from(secs));
        let limit = m.received_at.map(|r| r + HARD_LIMIT);
        if secs > MAX_VISIBILITY_SECS || limit.is_some_and(|l| ends > l) {
            return Err(refuse(
                action,
                "InvalidParameterValue",
                "the visibility timeout would end more than 12 hours after the receive",
            ));
        }
        m.available_at = ends;
        Ok(())
    }

    /// `DeleteMessageBatch`: one result per entry (`id`, receipt handle), in order.
    pub(crate) fn delete_batch(&self, entries: &[(String, String)]) -> BatchResult {
        self.batch(
            Action::DeleteMessageBatch,
            entries.iter().map(|(id, r)| (id, r, 0)),
        )
    }

    /// `ChangeMessageVisibilityBatch`: one result per entry (`id`, receipt handle, seconds).
    pub(crate) fn change_visibility_batch(&self, entries: &[(String, String, u32)]) -> BatchResult {
        self.batch(
            Action::ChangeMessageVisibilityBatch,
            entries.iter().map(|(id, r, v)| (id, r, *v)),
        )
    }

    fn batch<'a>(
        &self,
        action: Action,
        entries: impl ExactSizeIterator<Item = (&'a String, &'a String, u32)> + Clone,
    ) -> BatchResult {
        let mut state = self.lock();
        state.requests.count(action);
        take_fault(&mut state, action)?;
        match entries.len() {
            0 => return Err(refuse(action, "EmptyBatchRequest", "no entries")),
            1..=10 => {}
            _ => {
                return Err(refuse(
                    action,
                    "TooManyEntriesInBatchRequest",
                    "at most 10 entries",
                ))
            }
        }
        let ids: HashSet<&String> = entries.clone().map(|(id, _, _)| id).collect();
        if ids.len() != entries.len() {
            return Err(refuse(
                action,
                "BatchEntryIdsNotDistinct",
                "two entries have the same id",
            ));
        }
        let results = entries
            .map(|(id, receipt, secs)| {
                // A fault injected for the single action fails just this entry.
                let result = match action {
                    Action::DeleteMessageBatch => {
                        state.requests.delete_message_batch_entries += 1;
                        take_fault(&mut state, Action::DeleteMessage)
                            .and_then(|()| self.delete_locked(&mut state, receipt, action))
                    }
                    _ => {
                        state.requests.change_message_visibility_batch_entries += 1;
                        take_fault(&mut state, Action::ChangeMessageVisibility)
                            .and_then(|()| self.change_locked(&mut state, receipt, secs, action))
                    }
                };
                (id.clone(), result)
            })
            .collect();
        drop(state);
        self.inner.changed.notify_waiters();
        Ok(results)
    }

    /// Makes the next `times` calls of `action` fail with the SQS error `code` (for example
    /// `"RequestThrottled"`, `"InternalError"`, `"MessageNotInflight"`), without acting.
    ///
    /// A fault for `DeleteMessage` or `ChangeMessageVisibility` also fails single entries of
    /// the batch calls (each entry takes one); a fault for a batch action fails the whole
    /// batch request.
    pub fn fail_next(&self, action: Action, code: &str, times: usize) {
        let mut state = self.lock();
        let faults = state.faults.entry(action).or_default();
        faults.extend(std::iter::repeat_n(code.to_owned(), times));
    }

    /// Requests served so far, per action.
    pub fn requests(&self) -> RequestCounts {
        self.lock().requests
    }

    /// Messages in the queue, visible, hidden or delayed.
    pub fn len(&self) -> usize {
        self.lock().messages.len()
    }

    /// `true` when the queue holds no message at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages that a receive could return now (`ApproximateNumberOfMessages`).
    pub fn visible_len(&self) -> usize {
        let now = Instant::now();
        self.lock()
            .messages
            .values()
            .filter(|m| m.available_at <= now)
            .count()
    }

    /// Messages received and still hidden (`ApproximateNumberOfMessagesNotVisible`).
    pub fn in_flight_len(&self) -> usize {
        let now = Instant::now();
        self.lock()
            .messages
            .values()
            .filter(|m| m.in_flight(now))
            .count()
    }

    /// Messages sent but not yet receivable because of a delay
    /// (`ApproximateNumberOfMessagesDelayed`).
    pub fn delayed_len(&self) -> usize {
        let now = Instant::now();
        self.lock()
            .messages
            .values()
            .filter(|m| m.receipt.is_none() && m.available_at > now)
            .count()
    }

    pub(crate) fn visibility_timeout_secs(&self) -> Result<u32, Error> {
        let mut state = self.lock();
        state.requests.count(Action::GetQueueAttributes);
        take_fault(&mut state, Action::GetQueueAttributes)?;
        Ok(self.inner.settings.visibility_timeout)
    }

    fn parse_receipt(&self, receipt: &str, action: Action) -> Result<u64, Error> {
        let mut parts = receipt.split('.');
        let queue = parts.next().and_then(|p| u64::from_str_radix(p, 16).ok());
        let seq = parts.next().and_then(|p| p.parse::<u64>().ok());
        match (queue, seq) {
            (Some(q), Some(seq)) if q == self.inner.id => Ok(seq),
            _ => Err(invalid_receipt(action)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data behind (every update is a
        // single assignment), so a poisoned lock is still usable.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for MemoryQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryQueue")
            .field("name", &self.inner.name)
            .field("fifo", &self.inner.settings.fifo)
            .field("visibility_timeout", &self.visibility_timeout())
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

fn to_message(m: &Stored, seq: u64, receipt: String, fifo: bool) -> Message {
    let mut b = Message::builder()
        .message_id(&m.id)
        .receipt_handle(receipt)
        .body(&m.body)
        .attributes(Attr::ApproximateReceiveCount, m.receive_count.to_string())
        .attributes(Attr::SentTimestamp, m.sent_ms.to_string());
    if let Some(first) = m.first_receive_ms {
        b = b.attributes(Attr::ApproximateFirstReceiveTimestamp, first.to_string());
    }
    if let Some(g) = &m.group {
        b = b.attributes(Attr::MessageGroupId, g);
    }
    if let Some(d) = &m.dedup_id {
        b = b.attributes(Attr::MessageDeduplicationId, d);
    }
    if let Some(src) = &m.dead_letter_source {
        b = b.attributes(Attr::DeadLetterQueueSourceArn, src);
    }
    if fifo {
        b = b.attributes(Attr::SequenceNumber, format!("{seq:020}"));
    }
    b.build()
}

/// The error a [`MemoryQueue`] call fails with; the source of an [`Error::Sqs`].
#[derive(Debug)]
struct MemoryQueueError {
    code: String,
    message: String,
}

impl fmt::Display for MemoryQueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for MemoryQueueError {}

fn refuse(action: Action, code: &str, message: &str) -> Error {
    Error::Sqs {
        operation: action.name(),
        code: Some(code.to_owned()),
        message: message.to_owned(),
        kind: classify_code(code, None),
        source: Box::new(MemoryQueueError {
            code: code.to_owned(),
            message: message.to_owned(),
        }),
    }
}

fn invalid_receipt(action: Action) -> Error {
    refuse(
        action,
        "ReceiptHandleIsInvalid",
        "the receipt handle is not the message's latest",
    )
}

fn take_fault(state: &mut State, action: Action) -> Result<(), Error> {
    match state.faults.get_mut(&action).and_then(VecDeque::pop_front) {
        Some(code) => Err(refuse(action, &code, "injected failure")),
        None => Ok(()),
    }
}

fn epoch_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn new_message_id() -> String {
    let (a, b) = (random_u64(), random_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        (b >> 48) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}
