//! The in-memory queue's state and its rules: what each SQS call does to it, at a given
//! instant. Nothing here waits or locks; `MemoryQueue` does both around it.

use crate::memory::refusal::{invalid_receipt, refuse};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName as Attr};
use tokio::time::Instant;

use crate::call_retries::random_u64;
use crate::error::Error;
use crate::limits::{whole_secs, HARD_LIMIT, MAX_BATCH, MAX_VISIBILITY_SECS};
use crate::memory::counts::{Action, RequestCounts};
use crate::memory::faults::{next_draw, Fault, Faults, InjectedFaults};
use crate::queue::{BatchEntry, BatchResult};

/// The FIFO deduplication window.
const DEDUP_WINDOW: Duration = Duration::from_secs(300);

/// The queue's own settings that its rules depend on.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    pub(crate) visibility_timeout: Duration,
    pub(crate) delay: Duration,
    pub(crate) fifo: bool,
    pub(crate) content_based_deduplication: bool,
    /// A redrive policy's `maxReceiveCount`, if the queue has one.
    pub(crate) max_receive_count: Option<u32>,
}

/// Everything a queue holds.
#[derive(Default)]
pub(crate) struct QueueState {
    /// Messages in send order; the key is the queue's own sequence number.
    messages: BTreeMap<u64, Stored>,
    /// Every message that was not receivable when last looked at, by when it becomes so
    /// (delayed, or in flight), and every other one by sequence number: a receive looks at
    /// what it can take, not at every message held (120,000 may be in flight).
    hidden: BTreeSet<(Instant, u64)>,
    visible: BTreeSet<u64>,
    next_seq: u64,
    dedup: HashMap<String, (Instant, String)>,
    requests: RequestCounts,
    faults: HashMap<Action, VecDeque<String>>,
    /// Per action, the error code every call fails with until the instant.
    outages: HashMap<Action, (String, Instant)>,
    /// The random faults' generator, and what they injected.
    rng: u64,
    injected: InjectedFaults,
}

/// One message.
pub(crate) struct Stored {
    id: String,
    body: String,
    sent_ms: u128,
    /// When the message may next be received (delay or visibility).
    available_at: Instant,
    /// The random part of the latest receive's receipt handle, if any (the handle itself is
    /// `queue.seq.receive_count.nonce`, rebuilt when needed).
    receipt: Option<u64>,
    /// When the latest receive's request arrived; the 12-hour limit counts from it.
    received_at: Option<Instant>,
    first_receive_ms: Option<u128>,
    receive_count: u32,
    group: Option<String>,
    dedup_id: Option<String>,
    dead_letter_source: Option<String>,
    /// Message attributes, by name.
    attributes: Vec<(String, MessageAttributeValue)>,
    /// The `AWSTraceHeader` system attribute.
    trace_header: Option<String>,
}

impl Stored {
    fn in_flight(&self, now: Instant) -> bool {
        self.receipt.is_some() && self.available_at > now
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }
}

/// A message to send.
pub(crate) struct Outgoing {
    pub(crate) body: String,
    pub(crate) delay: Option<Duration>,
    pub(crate) attributes: Vec<(String, MessageAttributeValue)>,
    pub(crate) trace_header: Option<String>,
    pub(crate) group_id: Option<String>,
    pub(crate) deduplication_id: Option<String>,
}

/// Which attributes a receive asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Selection<'a> {
    /// `MessageAttributeNames`: `All`, `.*`, names, or `prefix.*`; `None`: all.
    pub(crate) message: Option<&'a [String]>,
    /// `MessageSystemAttributeNames`; `None`: all.
    pub(crate) system: Option<&'a [Attr]>,
}

impl Selection<'_> {
    /// Every attribute.
    pub(crate) const ALL: Selection<'static> = Selection {
        message: None,
        system: None,
    };

    fn message_attribute(&self, name: &str) -> bool {
        let Some(names) = self.message else {
            return true;
        };
        names.iter().any(|s| match s.as_str() {
            "All" | ".*" => true,
            s => match s.strip_suffix(".*") {
                Some(prefix) => name
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('.')),
                None => s == name,
            },
        })
    }

    /// `true` when every system attribute is asked for.
    fn all_system(&self) -> bool {
        self.system.is_none_or(|names| names.contains(&Attr::All))
    }

    fn system_attribute(&self, name: &Attr) -> bool {
        self.system
            .is_none_or(|names| names.iter().any(|s| s == name || *s == Attr::All))
    }
}

/// What one pass of a receive found.
pub(crate) struct Pass {
    pub(crate) messages: Vec<Message>,
    /// When the next hidden or delayed message becomes visible.
    pub(crate) wake: Option<Instant>,
    /// Messages past their redrive policy's receive count: they move to the dead-letter queue.
    pub(crate) dead: Vec<Stored>,
}

impl QueueState {
    /// Counts a request of `action` and fails it if a fault was injected for it.
    pub(crate) fn request(&mut self, action: Action) -> Result<(), Error> {
        self.requests.request(action);
        self.take_fault(action)
    }

    fn take_fault(&mut self, action: Action) -> Result<(), Error> {
        if let Some((code, until)) = self.outages.get(&action) {
            if Instant::now() < *until {
                return Err(refuse(action, code, "injected outage"));
            }
        }
        match self.faults.get_mut(&action).and_then(VecDeque::pop_front) {
            Some(code) => Err(refuse(action, &code, "injected failure")),
            None => Ok(()),
        }
    }

    /// Fails every call of `action` with `code` until `until`.
    pub(crate) fn fail_until(&mut self, action: Action, code: &str, until: Instant) {
        self.outages.insert(action, (code.to_owned(), until));
    }

    pub(crate) fn inject(&mut self, action: Action, code: &str, times: usize) {
        let faults = self.faults.entry(action).or_default();
        faults.extend(std::iter::repeat_n(code.to_owned(), times));
    }

    pub(crate) fn requests(&self) -> RequestCounts {
        self.requests
    }

    /// Counts an answered receive that returned `messages` messages.
    pub(crate) fn answered_receive(&mut self, messages: usize) {
        self.requests.answered_receive(messages);
    }

    /// A state whose random faults are drawn from `seed`.
    pub(crate) fn seeded(seed: u64) -> Self {
        Self {
            rng: seed,
            ..Self::default()
        }
    }

    /// Draws a random fault for a call of `action`. One that fails the call without acting
    /// counts as its request.
    pub(crate) fn draw(&mut self, faults: &Faults, action: Action) -> Option<Fault> {
        let fault = faults.pick(action, next_draw(&mut self.rng))?;
        self.injected.count(fault);
        if matches!(fault, Fault::InternalError | Fault::Throttle) {
            self.requests.request(action);
        }
        Some(fault)
    }

    pub(crate) fn injected(&self) -> InjectedFaults {
        self.injected
    }

    /// Enqueues a message; returns its id (the first one's, for a FIFO duplicate).
    pub(crate) fn send(
        &mut self,
        rules: &Rules,
        m: Outgoing,
        now: Instant,
    ) -> Result<String, Error> {
        const SEND: Action = Action::SendMessage;
        let delay = match m.delay {
            Some(_) if rules.fifo => {
                return Err(refuse(
                    SEND,
                    "InvalidParameterValue",
                    "FIFO queues take no per-message delay",
                ))
            }
            Some(d) if whole_secs(d).is_none_or(|s| s > 900) => {
                return Err(refuse(
                    SEND,
                    "InvalidParameterValue",
                    "DelaySeconds must be whole seconds in 0..=900",
                ))
            }
            Some(d) => d,
            None => rules.delay,
        };
        if m.attributes.len() > 10 {
            return Err(refuse(
                SEND,
                "InvalidParameterValue",
                "a message takes at most 10 message attributes",
            ));
        }
        let mut dedup_key = None;
        if rules.fifo {
            if m.group_id.is_none() {
                return Err(refuse(
                    SEND,
                    "MissingParameter",
                    "FIFO queues need a MessageGroupId",
                ));
            }
            let key = match (&m.deduplication_id, rules.content_based_deduplication) {
                (Some(id), _) => format!("id:{id}"),
                (None, true) => format!("body:{}", m.body),
                (None, false) => {
                    return Err(refuse(
                        SEND,
                        "InvalidParameterValue",
                        "FIFO queues without content-based deduplication need a \
                         MessageDeduplicationId",
                    ))
                }
            };
            self.dedup.retain(|_, (expires, _)| *expires > now);
            if let Some((_, id)) = self.dedup.get(&key) {
                return Ok(id.clone());
            }
            dedup_key = Some(key);
        }
        let id = new_message_id();
        if let Some(key) = dedup_key {
            self.dedup.insert(key, (now + DEDUP_WINDOW, id.clone()));
        }
        self.insert(
            now,
            Stored {
                id: id.clone(),
                body: m.body,
                sent_ms: epoch_ms(),
                available_at: now + delay,
                receipt: None,
                received_at: None,
                first_receive_ms: None,
                receive_count: 0,
                group: m.group_id,
                dedup_id: m.deduplication_id,
                dead_letter_source: None,
                attributes: m.attributes,
                trace_header: m.trace_header,
            },
        );
        Ok(id)
    }

    fn insert(&mut self, now: Instant, m: Stored) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.place(seq, m.available_at, now);
        self.messages.insert(seq, m);
    }

    /// Files message `seq`, receivable from `at`, in the index.
    fn place(&mut self, seq: u64, at: Instant, now: Instant) {
        if at > now {
            self.hidden.insert((at, seq));
        } else {
            self.visible.insert(seq);
        }
    }

    /// Takes message `seq`, filed as receivable from `at`, out of the index.
    fn unplace(&mut self, seq: u64, at: Instant) {
        if !self.hidden.remove(&(at, seq)) {
            self.visible.remove(&seq);
        }
    }

    /// Moves what has become receivable by `now` among the visible.
    fn promote(&mut self, now: Instant) {
        while let Some(&(at, seq)) = self.hidden.first() {
            if at > now {
                break;
            }
            self.hidden.pop_first();
            self.visible.insert(seq);
        }
    }

    /// One pass over the queue for a receive of up to `max` messages, hiding each for
    /// `visibility`, with the attributes `select` asks for. `requested_at` is when the request
    /// arrived: SQS counts the 12-hour limit from it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn receive(
        &mut self,
        rules: &Rules,
        queue_id: u64,
        max: usize,
        visibility: Duration,
        select: Selection<'_>,
        requested_at: Instant,
        now: Instant,
    ) -> Pass {
        self.promote(now);
        let taken = if rules.fifo {
            self.fifo_candidates(max, now)
        } else {
            // The receivable ones, oldest first.
            self.visible
                .iter()
                .take(max + self.dead_letter_room(rules, max))
                .copied()
                .collect()
        };
        let mut messages = Vec::new();
        let mut dead = Vec::new();
        for seq in taken {
            if messages.len() >= max {
                break;
            }
            let Some(m) = self.messages.get_mut(&seq) else {
                continue;
            };
            if rules
                .max_receive_count
                .is_some_and(|max| m.receive_count >= max)
            {
                dead.push(seq);
                continue;
            }
            let before = m.available_at;
            m.receive_count += 1;
            let nonce = random_u64();
            let receipt = format!("{queue_id:016x}.{seq}.{}.{nonce:016x}", m.receive_count);
            m.receipt = Some(nonce);
            m.received_at = Some(requested_at);
            m.first_receive_ms.get_or_insert_with(epoch_ms);
            m.available_at = now + visibility;
            messages.push(to_message(m, seq, receipt, rules.fifo, select));
            let after = m.available_at;
            self.unplace(seq, before);
            self.place(seq, after, now);
        }
        let mut moved = Vec::with_capacity(dead.len());
        for seq in dead {
            if let Some(m) = self.messages.remove(&seq) {
                self.unplace(seq, m.available_at);
                moved.push(m);
            }
        }
        Pass {
            messages,
            wake: self.hidden.first().map(|(at, _)| *at),
            dead: moved,
        }
    }

    /// How many more than `max` to look at on a queue with a redrive policy: messages past
    /// their receive count move away instead of being taken.
    fn dead_letter_room(&self, rules: &Rules, max: usize) -> usize {
        match rules.max_receive_count {
            Some(_) => self.visible.len().saturating_sub(max),
            None => 0,
        }
    }

    /// A FIFO queue's receivable messages, in order: none of a group with a message in
    /// flight, nor any after an earlier message of its group that is not receivable yet.
    fn fifo_candidates(&self, max: usize, now: Instant) -> Vec<u64> {
        let mut blocked: HashSet<&str> = self
            .messages
            .values()
            .filter(|m| m.in_flight(now))
            .filter_map(|m| m.group.as_deref())
            .collect();
        let mut out = Vec::new();
        for (seq, m) in &self.messages {
            let group = m.group.as_deref();
            if m.available_at > now {
                // Later messages of its group must wait for this one.
                blocked.extend(group);
                continue;
            }
            if out.len() >= max {
                break;
            }
            if group.is_some_and(|g| blocked.contains(g)) {
                continue;
            }
            out.push(*seq);
        }
        out
    }

    /// Takes a message moved here from a source queue's redrive.
    pub(crate) fn accept_moved(&mut self, mut m: Stored, source: &str, now: Instant) {
        m.available_at = now;
        m.receipt = None;
        m.received_at = None;
        m.first_receive_ms = None;
        m.receive_count = 0;
        m.dead_letter_source = Some(source.to_owned());
        self.insert(now, m);
    }

    /// Deletes a message by the receipt handle of its latest receive.
    pub(crate) fn delete(
        &mut self,
        rules: &Rules,
        queue_id: u64,
        receipt: &str,
        action: Action,
        now: Instant,
    ) -> Result<(), Error> {
        let handle = parse_receipt(queue_id, receipt, action)?;
        let seq = handle.seq;
        let Some(m) = self.messages.get(&seq) else {
            if seq < self.next_seq {
                // Already deleted: SQS answers success.
                return Ok(());
            }
            return Err(invalid_receipt(action));
        };
        if !handle.is_latest(m) {
            // AWS: "the request succeeds, but the message might not be deleted". Here it never
            // is: the message comes back after its timeout, the worst AWS may do.
            return Ok(());
        }
        if rules.fifo && !m.in_flight(now) {
            return Err(refuse(
                action,
                "ReceiptHandleIsInvalid",
                "the message's visibility timeout has expired",
            ));
        }
        let at = m.available_at;
        self.unplace(seq, at);
        self.messages.remove(&seq);
        Ok(())
    }

    /// Hides a message for `visibility` from now.
    pub(crate) fn change_visibility(
        &mut self,
        queue_id: u64,
        receipt: &str,
        visibility: Duration,
        action: Action,
        now: Instant,
    ) -> Result<(), Error> {
        let handle = parse_receipt(queue_id, receipt, action)?;
        let seq = handle.seq;
        let secs = whole_secs(visibility)
            .filter(|s| *s <= u64::from(MAX_VISIBILITY_SECS))
            .ok_or_else(|| {
                refuse(
                    action,
                    "InvalidParameterValue",
                    &format!(
                        "Value {visibility:?} for parameter VisibilityTimeout is invalid. \
                         Reason: Must be whole seconds between 0 and 43200."
                    ),
                )
            })?;
        // AWS's answer for a message that was deleted or received again since this handle:
        // the delivery is gone.
        let m = self
            .messages
            .get_mut(&seq)
            .filter(|m| handle.is_latest(m))
            .ok_or_else(|| {
                refuse(
                    action,
                    "InvalidParameterValue",
                    &format!(
                        "Value {receipt} for parameter ReceiptHandle is invalid. Reason: \
                         Message does not exist or is not available for visibility timeout \
                         change."
                    ),
                )
            })?;
        if !m.in_flight(now) {
            // Its timeout lapsed and nobody received it since: AWS answers success and leaves
            // the message visible. An extension that arrives late is not an error, it is lost.
            return Ok(());
        }
        let ends = now + visibility;
        if m.received_at.is_some_and(|r| ends > r + HARD_LIMIT) {
            return Err(refuse(
                action,
                "InvalidParameterValue",
                &format!(
                    "Value {secs} for parameter VisibilityTimeout is invalid. Reason: Total \
                     VisibilityTimeout for the message is beyond the limit [43200 seconds]"
                ),
            ));
        }
        let before = m.available_at;
        m.available_at = ends;
        self.unplace(seq, before);
        self.place(seq, ends, now);
        Ok(())
    }

    /// `DeleteMessageBatch` or `ChangeMessageVisibilityBatch`: one result per entry, in order.
    /// A fault injected for the single action fails just one entry.
    pub(crate) fn request_batch(
        &mut self,
        rules: &Rules,
        queue_id: u64,
        action: Action,
        entries: &[BatchEntry<'_>],
        now: Instant,
    ) -> BatchResult {
        self.request(action)?;
        match entries.len() {
            0 => return Err(refuse(action, "EmptyBatchRequest", "no entries")),
            n if n > MAX_BATCH => {
                return Err(refuse(
                    action,
                    "TooManyEntriesInBatchRequest",
                    "at most 10 entries",
                ))
            }
            _ => {}
        }
        let ids: HashSet<&str> = entries.iter().map(|e| e.id).collect();
        if ids.len() != entries.len() {
            return Err(refuse(
                action,
                "BatchEntryIdsNotDistinct",
                "two entries have the same id",
            ));
        }
        let results = entries
            .iter()
            .map(|e| {
                self.requests.entry(action);
                match action {
                    Action::DeleteMessageBatch => self
                        .take_fault(Action::DeleteMessage)
                        .and_then(|()| self.delete(rules, queue_id, e.receipt, action, now)),
                    _ => self
                        .take_fault(Action::ChangeMessageVisibility)
                        .and_then(|()| {
                            let visibility = e.visibility_timeout.duration();
                            self.change_visibility(queue_id, e.receipt, visibility, action, now)
                        }),
                }
            })
            .collect();
        Ok(results)
    }

    /// Messages held, visible or not.
    pub(crate) fn len(&self) -> usize {
        self.messages.len()
    }

    /// Messages a receive could return at `now`.
    pub(crate) fn visible_len(&self, now: Instant) -> usize {
        let visible = |m: &&Stored| m.available_at <= now;
        self.messages.values().filter(visible).count()
    }

    /// Messages received and still hidden at `now`.
    pub(crate) fn in_flight_len(&self, now: Instant) -> usize {
        self.messages.values().filter(|m| m.in_flight(now)).count()
    }

    /// Messages sent and not yet receivable because of a delay.
    pub(crate) fn delayed_len(&self, now: Instant) -> usize {
        let delayed = |m: &&Stored| m.receipt.is_none() && m.available_at > now;
        self.messages.values().filter(delayed).count()
    }
}

/// A receipt handle of this queue, taken apart.
struct Handle {
    seq: u64,
    receive_count: Option<u32>,
    nonce: Option<u64>,
}

impl Handle {
    /// `true` if it is the handle of `m`'s latest receive.
    fn is_latest(&self, m: &Stored) -> bool {
        m.receipt.is_some()
            && self.nonce == m.receipt
            && self.receive_count == Some(m.receive_count)
    }
}

fn parse_receipt(queue_id: u64, receipt: &str, action: Action) -> Result<Handle, Error> {
    let mut parts = receipt.split('.');
    let queue = parts.next().and_then(|p| u64::from_str_radix(p, 16).ok());
    let seq = parts.next().and_then(|p| p.parse::<u64>().ok());
    let receive_count = parts.next().and_then(|p| p.parse::<u32>().ok());
    let nonce = parts.next().and_then(|p| u64::from_str_radix(p, 16).ok());
    match (queue, seq) {
        (Some(q), Some(seq)) if q == queue_id && parts.next().is_none() => Ok(Handle {
            seq,
            receive_count,
            nonce,
        }),
        _ => Err(invalid_receipt(action)),
    }
}

fn to_message(m: &Stored, seq: u64, receipt: String, fifo: bool, select: Selection<'_>) -> Message {
    let mut b = Message::builder()
        .message_id(&m.id)
        .receipt_handle(receipt)
        .body(&m.body);
    let all = select.all_system();
    let add = |b: aws_sdk_sqs::types::builders::MessageBuilder, name: Attr, value: String| {
        if all || select.system_attribute(&name) {
            b.attributes(name, value)
        } else {
            b
        }
    };
    b = add(
        b,
        Attr::ApproximateReceiveCount,
        m.receive_count.to_string(),
    );
    b = add(b, Attr::SentTimestamp, m.sent_ms.to_string());
    if let Some(first) = m.first_receive_ms {
        b = add(b, Attr::ApproximateFirstReceiveTimestamp, first.to_string());
    }
    if let Some(g) = &m.group {
        b = add(b, Attr::MessageGroupId, g.clone());
    }
    if let Some(d) = &m.dedup_id {
        b = add(b, Attr::MessageDeduplicationId, d.clone());
    }
    if let Some(src) = &m.dead_letter_source {
        b = add(b, Attr::DeadLetterQueueSourceArn, src.clone());
    }
    if let Some(header) = &m.trace_header {
        b = add(b, Attr::AwsTraceHeader, header.clone());
    }
    if fifo {
        b = add(b, Attr::SequenceNumber, format!("{seq:020}"));
    }
    for (name, value) in &m.attributes {
        if select.message_attribute(name) {
            b = b.message_attributes(name, value.clone());
        }
    }
    b.build()
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
