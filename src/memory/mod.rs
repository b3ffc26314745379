//! The in-memory SQS queue and its helpers, for tests, examples and local development.
//!
//! [`MemoryQueue`] (also at the crate root) is a queue with SQS's visibility semantics on
//! tokio's clock; [`MemoryQueueBuilder`] sets it up, [`SendOptions`] sends with a delay or to a
//! FIFO group, [`RequestCounts`] counts the requests a consumer made per [`Action`], and
//! [`Faults`] injects random failures into them ([`InjectedFaults`] counts what was injected).
//! The guide's [`testing`](crate::guide::testing) page shows them at work.

// `model.rs` holds the state and SQS's rules; this file the handle, its lock and its long
// polls; `builder.rs` its settings; `counts.rs` what it counts; `faults.rs` the random faults
// it can inject; `seam.rs` the crate's queue seam served from it.

pub(crate) mod builder;
pub(crate) mod counts;
pub(crate) mod faults;
mod model;
mod refusal;
mod seam;

pub use builder::MemoryQueueBuilder;
pub use counts::{Action, RequestCounts};
pub use faults::{Faults, InjectedFaults};

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageAttributeValue};
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

use crate::call_retries::random_u64;
use crate::error::Error;
use crate::limits::{MAX_BATCH, MAX_WAIT_SECS};
use crate::memory::faults::Fault;
use crate::memory::model::{Outgoing, QueueState, Rules, Selection};
use crate::memory::refusal::refuse;
use crate::queue::backlog::Backlog;
use crate::queue::{BatchEntry, BatchResult};

/// An in-memory SQS queue, for tests, examples and local development.
///
/// It models what a consumer depends on, on tokio's clock (so a test on a paused clock runs
/// 12 hours in milliseconds): visibility timeouts; receipt handles that change on every
/// receive, answered as AWS answers them (see [`change_visibility`](MemoryQueue::change_visibility)
/// and [`delete`](MemoryQueue::delete)); the 12-hour limit counted from the receive;
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
    /// `memory:<name>`, as the queue is named in a consumer's logs.
    label: String,
    /// Part of every receipt handle, so a handle of another queue is refused.
    id: u64,
    settings: QueueSettings,
    state: Mutex<QueueState>,
    /// Wakes long polls when something may have become receivable.
    changed: Notify,
}

/// A queue's settings, validated by its builder.
#[derive(Clone)]
pub(crate) struct QueueSettings {
    pub(crate) latency: Duration,
    pub(crate) rules: Rules,
    pub(crate) dead_letter: Option<MemoryQueue>,
    pub(crate) faults: Option<Faults>,
}

/// Options for [`MemoryQueue::send_with`].
#[derive(Debug, Clone, Default)]
pub struct SendOptions {
    delay: Option<Duration>,
    attributes: Vec<(String, String)>,
    trace_header: Option<String>,
    group_id: Option<String>,
    deduplication_id: Option<String>,
}

impl SendOptions {
    /// No options: the queue's delay, no group, no deduplication id.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hides the message for `delay` after the send (standard queues only, whole seconds, at
    /// most 15 min). Defaults to the queue's own delay.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// A string message attribute (at most 10 per message, as SQS allows). Defaults to none.
    #[must_use]
    pub fn message_attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.push((name.into(), value.into()));
        self
    }

    /// The X-Ray trace header SQS keeps as the `AWSTraceHeader` system attribute (what
    /// `SendMessage`'s `MessageSystemAttributes` carry). Defaults to none.
    #[must_use]
    pub fn aws_trace_header(mut self, header: impl Into<String>) -> Self {
        self.trace_header = Some(header.into());
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
            QueueSettings {
                latency: Duration::ZERO,
                rules: Rules {
                    visibility_timeout: Duration::from_secs(30),
                    delay: Duration::ZERO,
                    fifo: false,
                    content_based_deduplication: false,
                    max_receive_count: None,
                },
                dead_letter: None,
                faults: None,
            },
        )
    }

    pub(crate) fn with_settings(name: Option<String>, settings: QueueSettings) -> Self {
        let id = random_u64();
        let name = name.unwrap_or_else(|| {
            let base = format!("memory-{:08x}", id as u32);
            if settings.rules.fifo {
                format!("{base}.fifo")
            } else {
                base
            }
        });
        Self {
            inner: Arc::new(Inner {
                label: format!("memory:{name}"),
                name,
                id,
                state: Mutex::new(QueueState::seeded(
                    settings.faults.as_ref().map_or(0, Faults::seed),
                )),
                settings,
                changed: Notify::new(),
            }),
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// `true` for a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.inner.settings.rules.fifo
    }

    /// The queue's visibility timeout.
    pub fn visibility_timeout(&self) -> Duration {
        self.inner.settings.rules.visibility_timeout
    }

    /// Sends a message with default options; returns its message id.
    ///
    /// # Errors
    ///
    /// As [`send_with`](MemoryQueue::send_with).
    pub fn send(&self, body: impl Into<String>) -> Result<String, Error> {
        self.send_with(body, SendOptions::default())
    }

    /// Sends a message; returns its message id (the first one's, for a FIFO duplicate).
    ///
    /// # Errors
    ///
    /// The SQS error AWS would answer: `InvalidParameterValue` for a delay that is not whole
    /// seconds in 0..=900 (or any delay on a FIFO queue), `MissingParameter` for a FIFO
    /// message without a group id, `InvalidParameterValue` for a FIFO message without a
    /// deduplication id on a queue without content-based deduplication; or an error made
    /// with [`fail_next`](MemoryQueue::fail_next).
    pub fn send_with(
        &self,
        body: impl Into<String>,
        options: SendOptions,
    ) -> Result<String, Error> {
        let mut attributes = Vec::with_capacity(options.attributes.len());
        for (name, value) in options.attributes {
            attributes.push((name, string_attribute(value)?));
        }
        self.enqueue(Outgoing {
            body: body.into(),
            delay: options.delay,
            attributes,
            trace_header: options.trace_header,
            group_id: options.group_id,
            deduplication_id: options.deduplication_id,
        })
    }

    /// `SendMessage`, as the seam and [`send_with`](MemoryQueue::send_with) make it.
    pub(crate) fn enqueue(&self, outgoing: Outgoing) -> Result<String, Error> {
        let mut state = self.lock();
        state.request(Action::SendMessage)?;
        let id = state.send(&self.inner.settings.rules, outgoing, Instant::now())?;
        drop(state);
        self.inner.changed.notify_waiters();
        Ok(id)
    }

    /// Receives up to `max_messages` (1..=10), waiting up to `wait` (at most 20 s) for the
    /// first one, with the queue's visibility timeout.
    ///
    /// # Errors
    ///
    /// As [`receive_with_visibility`](MemoryQueue::receive_with_visibility).
    pub async fn receive(&self, max_messages: u32, wait: Duration) -> Result<Vec<Message>, Error> {
        self.receive_with_visibility(max_messages, wait, None).await
    }

    /// Like [`receive`](MemoryQueue::receive), with the visibility timeout (whole seconds,
    /// at most 12 hours) the received messages get; `None` uses the queue's.
    ///
    /// As on SQS, a receive whose caller goes away (its future dropped, say by a timeout or a
    /// `select!`) is still served until its wait ends: the first messages that arrive are
    /// taken, hidden for their visibility timeout, their receive counts raised, and nobody
    /// sees them until that timeout lapses.
    ///
    /// # Errors
    ///
    /// An SQS error for what SQS refuses (`max_messages` out of 1..=10, a wait over 20 s, a
    /// visibility past 12 hours), or one made to fail with
    /// [`fail_next`](MemoryQueue::fail_next).
    pub async fn receive_with_visibility(
        &self,
        max_messages: u32,
        wait: Duration,
        visibility: Option<Duration>,
    ) -> Result<Vec<Message>, Error> {
        let queue = self.clone();
        seam::served(async move {
            queue
                .receive_selected(max_messages, wait, visibility, Selection::ALL)
                .await
        })
        .await
    }

    /// A receive that returns only the attributes `select` names.
    pub(crate) async fn receive_selected(
        &self,
        max_messages: u32,
        wait: Duration,
        visibility: Option<Duration>,
        select: Selection<'_>,
    ) -> Result<Vec<Message>, Error> {
        const RECEIVE: Action = Action::ReceiveMessage;
        self.lock().request(RECEIVE)?;
        if !(1..=MAX_BATCH).contains(&(max_messages as usize)) {
            return Err(refuse(
                RECEIVE,
                "InvalidParameterValue",
                "MaxNumberOfMessages must be in 1..=10",
            ));
        }
        if wait > Duration::from_secs(MAX_WAIT_SECS) {
            return Err(refuse(
                RECEIVE,
                "InvalidParameterValue",
                "WaitTimeSeconds must be in 0..=20",
            ));
        }
        let visibility = visibility.unwrap_or(self.inner.settings.rules.visibility_timeout);
        if crate::limits::VisibilityTimeout::of("VisibilityTimeout", visibility).is_err() {
            return Err(refuse(
                RECEIVE,
                "InvalidParameterValue",
                "VisibilityTimeout must be whole seconds in 0..=43200",
            ));
        }
        // Half the round trip on the way there, half on the way back.
        let latency = self.inner.settings.latency;
        let half = latency / 2;
        let sent = Instant::now();
        if !half.is_zero() {
            tokio::time::sleep(half).await;
        }
        // SQS counts the 12-hour limit from the moment it got the request.
        let requested_at = Instant::now();
        let until = requested_at + wait;
        // An answer given at once is back one round trip after the request was sent, with the
        // timer's rounding paid once, not on each half; a long-polled one half a round trip
        // after it is given.
        let mut back_at = sent + latency;
        loop {
            // Register for wake-ups before looking, so a send in between is not missed.
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (messages, wake) =
                self.receive_pass(max_messages as usize, visibility, select, requested_at);
            let now = Instant::now();
            if !messages.is_empty() || now >= until {
                self.lock().answered_receive(messages.len());
                if !half.is_zero() {
                    sleep_until(back_at).await;
                }
                return Ok(messages);
            }
            let wake = wake.map_or(until, |w| w.min(until));
            tokio::select! {
                _ = &mut changed => {}
                _ = sleep_until(wake) => {}
            }
            back_at = Instant::now() + half;
        }
    }

    /// One pass over the queue; also returns when the next hidden message becomes visible.
    fn receive_pass(
        &self,
        max: usize,
        visibility: Duration,
        select: Selection<'_>,
        requested_at: Instant,
    ) -> (Vec<Message>, Option<Instant>) {
        let settings = &self.inner.settings;
        let pass = self.lock().receive(
            &settings.rules,
            self.inner.id,
            max,
            visibility,
            select,
            requested_at,
            Instant::now(),
        );
        if let Some(dlq) = &settings.dead_letter {
            for m in pass.dead {
                tracing::debug!(message_id = %m.id(), queue = %self.name(), "moved to the dead-letter queue");
                dlq.lock().accept_moved(m, self.name(), Instant::now());
                dlq.inner.changed.notify_waiters();
            }
        }
        (pass.messages, pass.wake)
    }

    /// Deletes a message by the receipt handle of its latest receive.
    ///
    /// As on AWS: a handle of a message already deleted succeeds; a handle older than the
    /// message's latest receive succeeds too but deletes nothing (AWS: "the message might not
    /// be deleted"; here it never is); a string that is no receipt handle of this queue is
    /// refused with `ReceiptHandleIsInvalid`. On a FIFO queue the delete must come while the
    /// message is still in flight.
    ///
    /// # Errors
    ///
    /// `ReceiptHandleIsInvalid` for a string that is no receipt handle of this queue, or an
    /// error made with [`fail_next`](MemoryQueue::fail_next).
    pub fn delete(&self, receipt: &str) -> Result<(), Error> {
        const DELETE: Action = Action::DeleteMessage;
        let mut state = self.lock();
        state.request(DELETE)?;
        let rules = &self.inner.settings.rules;
        let result = state.delete(rules, self.inner.id, receipt, DELETE, Instant::now());
        drop(state);
        self.inner.changed.notify_waiters();
        result
    }

    /// Hides a message for `visibility` from now (whole seconds).
    ///
    /// Answered as AWS answers: `InvalidParameterValue` "Message does not exist or is not
    /// available for visibility timeout change" once the message was deleted or received
    /// again since this handle; success, with no effect, once its timeout lapsed (the message
    /// stays visible); `InvalidParameterValue` for a fraction of a second, past 43200 s, or
    /// past 12 hours after the receive; `ReceiptHandleIsInvalid` for a string that is no
    /// receipt handle of this queue.
    ///
    /// # Errors
    ///
    /// As described above: the SQS error AWS would answer.
    pub fn change_visibility(&self, receipt: &str, visibility: Duration) -> Result<(), Error> {
        const CHANGE: Action = Action::ChangeMessageVisibility;
        let mut state = self.lock();
        state.request(CHANGE)?;
        let now = Instant::now();
        let result = state.change_visibility(self.inner.id, receipt, visibility, CHANGE, now);
        drop(state);
        // Long polls recompute when the next hidden message becomes visible.
        self.inner.changed.notify_waiters();
        result
    }

    /// `DeleteMessageBatch` or `ChangeMessageVisibilityBatch`, for the seam.
    pub(crate) fn request_batch(&self, action: Action, entries: &[BatchEntry<'_>]) -> BatchResult {
        let rules = &self.inner.settings.rules;
        let result =
            self.lock()
                .request_batch(rules, self.inner.id, action, entries, Instant::now());
        self.inner.changed.notify_waiters();
        result
    }

    /// `GetQueueAttributes` for the visibility timeout, for the seam.
    /// How the queue names itself in a consumer's logs: `memory:<name>`.
    pub(crate) fn label(&self) -> &str {
        &self.inner.label
    }

    /// A `GetQueueAttributes` call for the approximate counts.
    pub(crate) fn backlog_request(&self) -> Result<Backlog, Error> {
        let mut state = self.lock();
        state.request(Action::GetQueueAttributes)?;
        let now = Instant::now();
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        Ok(Backlog::new(
            count(state.visible_len(now)),
            count(state.in_flight_len(now)),
            count(state.delayed_len(now)),
        ))
    }

    pub(crate) fn visibility_timeout_request(&self) -> Result<Duration, Error> {
        self.lock().request(Action::GetQueueAttributes)?;
        Ok(self.visibility_timeout())
    }

    /// A random fault for a call of `action`, if the queue injects any.
    pub(crate) fn draw_fault(&self, action: Action) -> Option<Fault> {
        let faults = self.inner.settings.faults.as_ref()?;
        self.lock().draw(faults, action)
    }

    /// The random faults injected so far (see [`MemoryQueueBuilder::faults`]).
    ///
    /// [`MemoryQueueBuilder::faults`]: crate::memory::MemoryQueueBuilder::faults
    pub fn injected(&self) -> InjectedFaults {
        self.lock().injected()
    }

    /// Waits out the configured request latency.
    pub(crate) async fn round_trip(&self) {
        let latency = self.inner.settings.latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }

    /// Makes the next `times` calls of `action` fail with the SQS error `code` (for example
    /// `"RequestThrottled"`, `"InternalError"`, `"MessageNotInflight"`), without acting.
    ///
    /// A fault for `DeleteMessage` or `ChangeMessageVisibility` also fails single entries of
    /// the batch calls (each entry takes one); a fault for a batch action fails the whole
    /// batch request.
    pub fn fail_next(&self, action: Action, code: &str, times: usize) {
        self.lock().inject(action, code, times);
    }

    /// Makes every call of `action` fail with the SQS error `code` for `duration` from now
    /// (on tokio's clock), without acting: an outage of that action. Like
    /// [`fail_next`](MemoryQueue::fail_next), a fault for `DeleteMessage` or
    /// `ChangeMessageVisibility` also fails the single entries of the batch calls.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// use std::time::Duration;
    /// use sqs_consumer::memory::{Action, MemoryQueue};
    ///
    /// let queue = MemoryQueue::new();
    /// queue.fail_for(Action::DeleteMessage, "InternalError", Duration::from_secs(10));
    /// queue.send("hello")?;
    /// let message = queue.receive(1, Duration::ZERO).await?.remove(0);
    /// assert!(queue.delete(message.receipt_handle().unwrap()).is_err());
    /// tokio::time::advance(Duration::from_secs(10)).await;
    /// assert!(queue.delete(message.receipt_handle().unwrap()).is_ok());
    /// # Ok(()) }
    /// ```
    pub fn fail_for(&self, action: Action, code: &str, duration: Duration) {
        self.lock()
            .fail_until(action, code, tokio::time::Instant::now() + duration);
    }

    /// Requests served so far, per action, and the deletes and visibility changes asked for.
    pub fn requests(&self) -> RequestCounts {
        self.lock().requests()
    }

    /// Messages in the queue, visible, hidden or delayed.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// `true` when the queue holds no message at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages that a receive could return now (`ApproximateNumberOfMessages`).
    pub fn visible_len(&self) -> usize {
        self.lock().visible_len(Instant::now())
    }

    /// Messages received and still hidden (`ApproximateNumberOfMessagesNotVisible`).
    pub fn in_flight_len(&self) -> usize {
        self.lock().in_flight_len(Instant::now())
    }

    /// Messages sent but not yet receivable because of a delay
    /// (`ApproximateNumberOfMessagesDelayed`).
    pub fn delayed_len(&self) -> usize {
        self.lock().delayed_len(Instant::now())
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
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
            .field("fifo", &self.is_fifo())
            .field("visibility_timeout", &self.visibility_timeout())
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// A `String` message attribute holding `value`.
fn string_attribute(value: String) -> Result<MessageAttributeValue, Error> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|err| {
            refuse(
                counts::Action::SendMessage,
                "InvalidParameterValue",
                &err.to_string(),
            )
        })
}
