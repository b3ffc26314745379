//! The dead-letter step's queue and its copy of a failed message: the original body and
//! message attributes, plus the `sqs-consumer.failure` attribute saying why.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};

use crate::error::Error;
use crate::queue::{NewMessage, Queue};
use crate::readable::Secs;

/// The message attribute the copy carries the failure in, as JSON.
pub(crate) const FAILURE_ATTRIBUTE: &str = "sqs-consumer.failure";

/// How many message attributes SQS takes on one message.
const MAX_ATTRIBUTES: usize = 10;

/// The longest error text the failure keeps, in bytes: the copy stays within SQS's size limit
/// whatever the handler's error says.
const MAX_ERROR_BYTES: usize = 4096;

/// Where a consumer moves the messages its handler keeps failing on.
#[derive(Debug, Clone)]
pub(crate) struct DeadLetter {
    queue: Queue,
    after_receives: u32,
}

/// Why a message is moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The handler returned an error, or `Delivery::fail` was given one: its whole chain.
    Error(String),
    /// The handler panicked, with this message.
    Panic(String),
    /// The handler ran past its time limit.
    Timeout(Duration),
    /// `Delivery::dead_letter` was called with this reason.
    Reason(String),
}

impl Failure {
    /// The `cause` field: what kind of failure it was.
    fn cause(&self) -> &'static str {
        match self {
            Failure::Error(_) => "error",
            Failure::Panic(_) => "panic",
            Failure::Timeout(_) => "timeout",
            Failure::Reason(_) => "reason",
        }
    }

    /// The `error` field: the error chain, the panic, the limit, or the reason.
    fn text(&self) -> String {
        match self {
            Failure::Error(chain) => chain.clone(),
            Failure::Panic(message) => format!("handler panicked: {message}"),
            Failure::Timeout(limit) => format!("handler timed out after {}", Secs(*limit)),
            Failure::Reason(reason) => reason.clone(),
        }
    }
}

/// A copy ready to send, and whether it carries the failure.
#[derive(Debug)]
pub(crate) struct DeadLetterCopy {
    attributes: HashMap<String, MessageAttributeValue>,
    /// The failure as JSON (in the copy, or logged when the copy has no room for it).
    pub(crate) failure: String,
    /// `false` when the original already has 10 message attributes: the copy keeps them all
    /// and the failure is logged instead.
    pub(crate) carries_failure: bool,
}

impl DeadLetter {
    pub(crate) fn new(queue: Queue, after_receives: u32) -> Self {
        Self {
            queue,
            after_receives,
        }
    }

    /// `true` once a failure on the `receive_count`-th receive is to move the message.
    pub(crate) fn is_due(&self, receive_count: u32) -> bool {
        receive_count >= self.after_receives
    }

    /// `true` for a FIFO dead-letter queue.
    pub(crate) fn is_fifo(&self) -> bool {
        self.queue.is_fifo()
    }

    /// The dead-letter queue's URL (once resolved) or name, for logs.
    pub(crate) fn name(&self) -> &str {
        self.queue.name()
    }

    /// The copy of `message` (received `receive_count` times from `source_queue`, the last
    /// time at `received_at`) that says it failed with `failure`.
    pub(crate) fn copy(
        message: &Message,
        failure: &Failure,
        receive_count: u32,
        received_at: SystemTime,
        source_queue: &str,
    ) -> DeadLetterCopy {
        let failure = failure_json(message, failure, receive_count, received_at, source_queue);
        let mut attributes = message.message_attributes().cloned().unwrap_or_default();
        // A message redriven back from the dead-letter queue carries an older failure: the new
        // one takes its place.
        let room = attributes.contains_key(FAILURE_ATTRIBUTE) || attributes.len() < MAX_ATTRIBUTES;
        let value = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(&failure)
            .build();
        let carries_failure = match value {
            Ok(value) if room => {
                attributes.insert(FAILURE_ATTRIBUTE.to_owned(), value);
                true
            }
            _ => false,
        };
        DeadLetterCopy {
            attributes,
            failure,
            carries_failure,
        }
    }

    /// Sends `copy` of `message` (one try, after the queue's URL is resolved): on a FIFO queue
    /// in the original's group, deduplicated by the original's message id.
    pub(crate) async fn send(&self, message: &Message, copy: &DeadLetterCopy) -> Result<(), Error> {
        self.queue.resolve().await?;
        let fifo = self.queue.is_fifo();
        let group_id = message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
            .map(String::as_str);
        self.queue
            .send_message(NewMessage {
                body: message.body().unwrap_or_default(),
                attributes: &copy.attributes,
                group_id: group_id.filter(|_| fifo),
                deduplication_id: message.message_id().filter(|_| fifo),
            })
            .await
            .map(drop)
    }
}

/// The failure attribute's JSON object.
fn failure_json(
    message: &Message,
    failure: &Failure,
    receive_count: u32,
    received_at: SystemTime,
    source_queue: &str,
) -> String {
    let first_received_at = message
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateFirstReceiveTimestamp))
        .and_then(|v| v.parse::<u64>().ok());
    let mut json = String::from("{");
    let _ = write!(json, "\"error\":{}", quoted(&truncated(&failure.text())));
    let _ = write!(json, ",\"cause\":\"{}\"", failure.cause());
    let _ = write!(json, ",\"receive_count\":{receive_count}");
    if let Some(ms) = first_received_at {
        let _ = write!(json, ",\"first_received_at_ms\":{ms}");
    }
    let last = received_at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let _ = write!(json, ",\"last_received_at_ms\":{last}");
    let _ = write!(json, ",\"source_queue\":{}", quoted(source_queue));
    let id = message.message_id().unwrap_or_default();
    let _ = write!(json, ",\"message_id\":{}", quoted(id));
    json.push('}');
    json
}

/// `text` cut to at most [`MAX_ERROR_BYTES`] on a character boundary, marked when cut.
fn truncated(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_BYTES - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// `text` as a JSON string.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
