//! The crate's queue seam, served by a `MemoryQueue`: each call waits out the queue's
//! latency, as a network round trip would, and meets the queue's random faults, if any.

use std::future::Future;

use aws_sdk_sqs::types::Message;
use futures_util::future::BoxFuture;

use crate::error::Error;
use crate::limits::VisibilityTimeout;
use crate::memory::counts::Action;
use crate::memory::faults::{lost_answer, Fault};
use crate::memory::model::{Outgoing, Selection};
use crate::memory::refusal::refuse;
use crate::memory::MemoryQueue;
use crate::queue::backlog::Backlog;
use crate::queue::{BatchEntry, BatchResult, NewMessage, Receive, Transport};

impl MemoryQueue {
    /// `call`, disturbed by a random fault if one is drawn for `action`.
    async fn disturbed<T>(
        &self,
        action: Action,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        match self.draw_fault(action) {
            None => call.await,
            Some(Fault::InternalError) => {
                self.round_trip().await;
                Err(refuse(action, "InternalError", "injected failure"))
            }
            Some(Fault::Throttle) => {
                self.round_trip().await;
                Err(refuse(action, "ThrottlingException", "injected throttling"))
            }
            Some(Fault::LostAnswer) => {
                let _ = call.await;
                Err(lost_answer(action))
            }
            Some(Fault::HeldAnswer(hold)) => {
                let result = call.await;
                tokio::time::sleep(hold).await;
                result
            }
        }
    }
}

/// A receive served to its end even if its caller goes away, as SQS serves a long poll whose
/// client has gone: the messages it takes stay hidden for their visibility timeout, their
/// receive counts raised. Runs on a task of its own (outside a runtime, in place).
pub(crate) async fn served<F>(receive: F) -> Result<Vec<Message>, Error>
where
    F: Future<Output = Result<Vec<Message>, Error>> + Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.spawn(receive).await.unwrap_or_else(|_| {
            Err(refuse(
                Action::ReceiveMessage,
                "InternalError",
                "the receive ended without an answer (its runtime is shutting down)",
            ))
        }),
        Err(_) => receive.await,
    }
}

impl Transport for MemoryQueue {
    fn describe(&self) -> &str {
        self.label()
    }

    fn short_name(&self) -> &str {
        self.name()
    }

    fn resolve(&self) -> BoxFuture<'_, Result<String, Error>> {
        Box::pin(std::future::ready(Ok(self.label().to_owned())))
    }

    fn backlog(&self) -> BoxFuture<'_, Result<Backlog, Error>> {
        Box::pin(self.disturbed(Action::GetQueueAttributes, async move {
            self.round_trip().await;
            self.backlog_request()
        }))
    }

    fn is_fifo(&self) -> bool {
        MemoryQueue::is_fifo(self)
    }

    fn receive<'a>(&'a self, req: Receive<'a>) -> BoxFuture<'a, Result<Vec<Message>, Error>> {
        let visibility = req.visibility_timeout.map(VisibilityTimeout::duration);
        let (queue, max, wait) = (self.clone(), req.max_messages, req.wait);
        let (message, system) = (
            req.message_attribute_names.to_vec(),
            req.system_attribute_names.to_vec(),
        );
        Box::pin(served(async move {
            let select = Selection {
                message: Some(&message),
                system: Some(&system),
            };
            let call = queue.receive_selected(max, wait, visibility, select);
            queue.disturbed(Action::ReceiveMessage, call).await
        }))
    }

    fn send_message<'a>(&'a self, m: NewMessage<'a>) -> BoxFuture<'a, Result<String, Error>> {
        Box::pin(self.disturbed(Action::SendMessage, async move {
            self.round_trip().await;
            self.enqueue(Outgoing {
                body: m.body.to_owned(),
                delay: None,
                attributes: m
                    .attributes
                    .iter()
                    .map(|(name, value)| (name.clone(), value.clone()))
                    .collect(),
                trace_header: None,
                group_id: m.group_id.map(str::to_owned),
                deduplication_id: m.deduplication_id.map(str::to_owned),
            })
        }))
    }

    fn delete_batch<'a>(&'a self, entries: &'a [BatchEntry<'a>]) -> BoxFuture<'a, BatchResult> {
        const DELETE: Action = Action::DeleteMessageBatch;
        Box::pin(self.disturbed(DELETE, async move {
            self.round_trip().await;
            self.request_batch(DELETE, entries)
        }))
    }

    fn change_visibility_batch<'a>(
        &'a self,
        entries: &'a [BatchEntry<'a>],
    ) -> BoxFuture<'a, BatchResult> {
        const CHANGE: Action = Action::ChangeMessageVisibilityBatch;
        Box::pin(self.disturbed(CHANGE, async move {
            self.round_trip().await;
            self.request_batch(CHANGE, entries)
        }))
    }

    fn visibility_timeout(&self) -> BoxFuture<'_, Result<VisibilityTimeout, Error>> {
        Box::pin(self.disturbed(Action::GetQueueAttributes, async move {
            self.round_trip().await;
            let timeout = self.visibility_timeout_request()?;
            Ok(VisibilityTimeout::at_most_max(timeout.as_secs()))
        }))
    }
}

#[cfg(test)]
mod tests;
