//! The seam: the SQS calls the crate makes, whoever serves them.
//!
//! Beside it: a call's round trip (`round_trip.rs`), a queue's approximate counts
//! (`backlog.rs`), and deletes left to Lambda (`deferred_deletes.rs`, feature `lambda`).
//!
//! [`Transport`] is what a queue implementation provides: the SDK mapping ([`sdk`]) and the
//! in-memory queue (`crate::memory`) each implement it; nothing here knows either. [`Queue`]
//! wraps a transport and gives every call a bounded time: no call path can wait for ever on
//! a server that never answers.

pub(crate) mod backlog;

#[cfg(feature = "lambda")]
pub(crate) mod deferred_deletes;
mod round_trip;
pub(crate) mod sdk;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};
use futures_util::future::BoxFuture;

use crate::error::{Error, ErrorKind};
use crate::limits::VisibilityTimeout;
use crate::queue::backlog::Backlog;
use crate::readable::Secs;

pub(crate) use round_trip::RoundTrip;

/// How long a request may go unanswered (beyond a long poll's wait) before it counts as a
/// transient failure, unless the consumer's `request_timeout` says otherwise. The SDK sets no
/// such limit by default.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One `ReceiveMessage` request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Receive<'a> {
    pub(crate) max_messages: u32,
    pub(crate) wait: Duration,
    /// The visibility timeout to ask for; `None` uses the queue's own.
    pub(crate) visibility_timeout: Option<VisibilityTimeout>,
    /// `MessageAttributeNames`: `All`, `.*`, names, or `prefix.*`.
    pub(crate) message_attribute_names: &'a [String],
    /// `MessageSystemAttributeNames`.
    pub(crate) system_attribute_names: &'a [MessageSystemAttributeName],
}

/// One `SendMessage` request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewMessage<'a> {
    pub(crate) body: &'a str,
    pub(crate) attributes: &'a HashMap<String, MessageAttributeValue>,
    /// `MessageGroupId` (FIFO queues).
    pub(crate) group_id: Option<&'a str>,
    /// `MessageDeduplicationId` (FIFO queues).
    pub(crate) deduplication_id: Option<&'a str>,
}

/// One entry of a `DeleteMessageBatch` or `ChangeMessageVisibilityBatch` request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchEntry<'a> {
    /// Distinct within one request.
    pub(crate) id: &'static str,
    pub(crate) receipt: &'a str,
    /// For a visibility change; ignored by a delete.
    pub(crate) visibility_timeout: VisibilityTimeout,
}

/// Entry ids for a batch request: the entry's position.
pub(crate) const ENTRY_IDS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

/// The answer to a batch request: each entry's result in the order the entries were sent, or
/// the whole request's error.
pub(crate) type BatchResult = Result<Vec<Result<(), Error>>, Error>;

/// What a queue implementation provides. Futures are boxed: one per request, which is cheap
/// next to the request itself.
pub(crate) trait Transport: Send + Sync + 'static {
    /// The queue's URL (once resolved, for a queue given by name or ARN) or name, for logs
    /// and errors.
    fn describe(&self) -> &str;
    /// The queue's name, without the account id its URL and ARN carry.
    fn short_name(&self) -> &str;
    /// The queue's URL: for a queue given by name or ARN, one `GetQueueUrl` the first time,
    /// remembered for every call after it.
    fn resolve(&self) -> BoxFuture<'_, Result<String, Error>>;
    /// `true` for a FIFO queue.
    fn is_fifo(&self) -> bool;
    /// `ReceiveMessage`.
    fn receive<'a>(&'a self, request: Receive<'a>) -> BoxFuture<'a, Result<Vec<Message>, Error>>;
    /// `SendMessage`: the new message's id.
    fn send_message<'a>(&'a self, message: NewMessage<'a>) -> BoxFuture<'a, Result<String, Error>>;
    /// `DeleteMessageBatch`.
    fn delete_batch<'a>(&'a self, entries: &'a [BatchEntry<'a>]) -> BoxFuture<'a, BatchResult>;
    /// `ChangeMessageVisibilityBatch`.
    fn change_visibility_batch<'a>(
        &'a self,
        entries: &'a [BatchEntry<'a>],
    ) -> BoxFuture<'a, BatchResult>;
    /// `GetQueueAttributes` for the queue's `VisibilityTimeout`.
    fn visibility_timeout(&self) -> BoxFuture<'_, Result<VisibilityTimeout, Error>>;
    /// `GetQueueAttributes` for the approximate counts of messages.
    fn backlog(&self) -> BoxFuture<'_, Result<Backlog, Error>>;
}

/// A queue, and the time each of its calls may take.
#[derive(Clone)]
pub(crate) struct Queue {
    transport: Arc<dyn Transport>,
    fifo: bool,
    request_timeout: Duration,
    round_trip: RoundTrip,
}

impl Queue {
    pub(crate) fn new(transport: impl Transport) -> Self {
        Self {
            fifo: transport.is_fifo(),
            transport: Arc::new(transport),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            round_trip: RoundTrip::default(),
        }
    }

    /// The same queue reached through `transport` (a client of the keeper's own): the server
    /// is the same, so the round trip learned through either is the other's too.
    pub(crate) fn through(&self, transport: impl Transport) -> Self {
        Self {
            fifo: transport.is_fifo(),
            transport: Arc::new(transport),
            request_timeout: self.request_timeout,
            round_trip: self.round_trip.clone(),
        }
    }

    #[cfg(test)]
    pub(crate) fn shares_round_trip_with(&self, other: &Queue) -> bool {
        self.round_trip.is_shared_with(&other.round_trip)
    }

    /// The same queue, its calls answered within `timeout` (a receive: its wait plus that).
    pub(crate) fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The queue's URL (once resolved) or name, for logs and errors.
    pub(crate) fn name(&self) -> &str {
        self.transport.describe()
    }

    /// The queue's name alone: what spans and metrics call it (its URL carries the account).
    pub(crate) fn short_name(&self) -> &str {
        self.transport.short_name()
    }

    pub(crate) fn is_fifo(&self) -> bool {
        self.fifo
    }

    /// How long its requests take to be answered (a moving average; zero before the first).
    pub(crate) fn round_trip(&self) -> Duration {
        self.round_trip.get()
    }

    pub(crate) async fn receive(&self, request: Receive<'_>) -> Result<Vec<Message>, Error> {
        let limit = request.wait + self.request_timeout;
        within(limit, "ReceiveMessage", self.transport.receive(request)).await?
    }

    /// Sends a message (to a queue whose URL is resolved); its id.
    pub(crate) async fn send_message(&self, message: NewMessage<'_>) -> Result<String, Error> {
        let call = self.transport.send_message(message);
        self.timed("SendMessage", call).await
    }

    pub(crate) async fn delete_batch(&self, entries: &[BatchEntry<'_>]) -> BatchResult {
        let call = self.transport.delete_batch(entries);
        self.timed("DeleteMessageBatch", call).await
    }

    pub(crate) async fn change_visibility_batch(&self, entries: &[BatchEntry<'_>]) -> BatchResult {
        let call = self.transport.change_visibility_batch(entries);
        self.timed("ChangeMessageVisibilityBatch", call).await
    }

    /// The queue's URL, resolved (once) if it was given by name or ARN.
    pub(crate) async fn resolve(&self) -> Result<String, Error> {
        within(
            self.request_timeout,
            "GetQueueUrl",
            self.transport.resolve(),
        )
        .await?
    }

    /// The queue's approximate message counts.
    pub(crate) async fn backlog(&self) -> Result<Backlog, Error> {
        let call = self.transport.backlog();
        self.timed("GetQueueAttributes", call).await
    }

    /// The queue's `VisibilityTimeout` attribute.
    pub(crate) async fn visibility_timeout(&self) -> Result<VisibilityTimeout, Error> {
        let call = self.transport.visibility_timeout();
        self.timed("GetQueueAttributes", call).await
    }

    /// `call`'s answer within the request timeout; a successful one teaches the round trip
    /// (a failure may have been quick for want of a server, or slow for a timeout).
    async fn timed<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let started = tokio::time::Instant::now();
        let answer = within(self.request_timeout, operation, call).await?;
        if answer.is_ok() {
            self.round_trip.learn(started.elapsed());
        }
        answer
    }
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `call`'s output, or a retryable error once `limit` has passed without an answer.
async fn within<T>(
    limit: Duration,
    operation: &'static str,
    call: impl Future<Output = T>,
) -> Result<T, Error> {
    tokio::time::timeout(limit, call)
        .await
        .map_err(|elapsed| Error::Sqs {
            operation,
            code: None,
            message: format!("no answer within {}", Secs(limit)),
            kind: ErrorKind::Retryable,
            source: Box::new(elapsed),
        })
}

#[cfg(test)]
mod tests;
