//! The deletes an AWS Lambda invocation answers for: Lambda deletes the messages of an SQS
//! event that its function reports done, so an ack there either sends nothing (the delete is
//! left to Lambda) or is sent at once; either way the receipts whose delete succeeded are
//! recorded, for the answer. The queue's other calls (visibility changes, the dead-letter
//! step's sends) go to SQS as usual.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use aws_sdk_sqs::types::Message;
use futures_util::future::BoxFuture;

use crate::error::Error;
use crate::limits::VisibilityTimeout;
use crate::queue::backlog::Backlog;
use crate::queue::{BatchEntry, BatchResult, NewMessage, Queue, Receive, Transport};

/// When an invocation's deletes reach SQS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deletes {
    /// Lambda sends them, for the records reported done: nothing is sent here, and each is
    /// answered with success at once.
    LeftToLambda,
    /// Sent at once, as a worker's are.
    SentAtOnce,
}

/// The receipt handles whose delete succeeded (or was left to Lambda): shared by the queue
/// that takes the deletes and whoever answers for them.
#[derive(Debug, Clone)]
pub(crate) struct DeferredDeletes {
    done: Arc<Mutex<HashSet<String>>>,
    deletes: Deletes,
}

impl DeferredDeletes {
    pub(crate) fn new(deletes: Deletes) -> Self {
        Self {
            done: Arc::default(),
            deletes,
        }
    }

    fn record<'a>(&self, receipts: impl IntoIterator<Item = &'a str>) {
        self.lock().extend(receipts.into_iter().map(str::to_owned));
    }

    /// Whether a delete of `receipt` succeeded (or was left to Lambda); forgets it.
    pub(crate) fn take(&self, receipt: &str) -> bool {
        self.lock().remove(receipt)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.done.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `queue`, its deletes recorded in `deletes`, and sent or answered at once as it says.
pub(crate) fn deferring(queue: Queue, deletes: DeferredDeletes) -> Queue {
    let deferring = Deferring {
        name: queue.name().to_owned(),
        short_name: queue.short_name().to_owned(),
        queue: queue.clone(),
        deletes,
    };
    queue.through(deferring)
}

struct Deferring {
    /// The queue's calls, each already bounded in time.
    queue: Queue,
    deletes: DeferredDeletes,
    name: String,
    short_name: String,
}

impl Transport for Deferring {
    fn describe(&self) -> &str {
        &self.name
    }

    fn short_name(&self) -> &str {
        &self.short_name
    }

    fn resolve(&self) -> BoxFuture<'_, Result<String, Error>> {
        Box::pin(self.queue.resolve())
    }

    fn is_fifo(&self) -> bool {
        self.queue.is_fifo()
    }

    fn receive<'a>(&'a self, request: Receive<'a>) -> BoxFuture<'a, Result<Vec<Message>, Error>> {
        Box::pin(self.queue.receive(request))
    }

    fn send_message<'a>(&'a self, message: NewMessage<'a>) -> BoxFuture<'a, Result<String, Error>> {
        Box::pin(self.queue.send_message(message))
    }

    fn delete_batch<'a>(&'a self, entries: &'a [BatchEntry<'a>]) -> BoxFuture<'a, BatchResult> {
        if self.deletes.deletes == Deletes::LeftToLambda {
            self.deletes.record(entries.iter().map(|e| e.receipt));
            let answers = entries.iter().map(|_| Ok(())).collect();
            return Box::pin(std::future::ready(Ok(answers)));
        }
        Box::pin(async move {
            let answers = self.queue.delete_batch(entries).await?;
            let deleted = entries.iter().zip(&answers).filter(|(_, a)| a.is_ok());
            self.deletes.record(deleted.map(|(e, _)| e.receipt));
            Ok(answers)
        })
    }

    fn change_visibility_batch<'a>(
        &'a self,
        entries: &'a [BatchEntry<'a>],
    ) -> BoxFuture<'a, BatchResult> {
        Box::pin(self.queue.change_visibility_batch(entries))
    }

    fn visibility_timeout(&self) -> BoxFuture<'_, Result<VisibilityTimeout, Error>> {
        Box::pin(self.queue.visibility_timeout())
    }

    fn backlog(&self) -> BoxFuture<'_, Result<Backlog, Error>> {
        Box::pin(self.queue.backlog())
    }
}

#[cfg(test)]
mod tests;
