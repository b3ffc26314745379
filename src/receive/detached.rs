//! A `ReceiveMessage` request that outlives whoever awaits it.
//!
//! SQS still serves a long poll whose client went away: the next message that arrives is
//! handed to it and stays hidden for a whole visibility timeout, with its receive count
//! raised. So the request runs on a task of its own. Awaited to its end, it is an ordinary
//! receive. If the future awaiting it is dropped first (a dropped `run`, a `select!` or a
//! timeout around it), the request still runs to its end, and whatever it brings is made
//! visible again at once (a visibility change to 0), not left hidden for its timeout.

use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::sleep;
use tracing::instrument::WithSubscriber;
use tracing::Instrument;

use crate::call_retries;
use crate::error::Error;
use crate::limits::VisibilityTimeout;
use crate::limits::MAX_BATCH;
use crate::queue::{BatchEntry, Queue, Receive, ENTRY_IDS};

/// Tries of the release of what an abandoned receive brought.
const RELEASE_TRIES: u32 = 4;

/// What a receive asks for, owned: the request runs on a task of its own.
#[derive(Debug, Clone)]
pub(crate) struct ReceiveRequest {
    pub(crate) max_messages: u32,
    pub(crate) wait: Duration,
    pub(crate) visibility_timeout: Option<VisibilityTimeout>,
    pub(crate) message_attribute_names: Vec<String>,
    pub(crate) system_attribute_names: Vec<MessageSystemAttributeName>,
}

impl ReceiveRequest {
    fn as_receive(&self) -> Receive<'_> {
        Receive {
            max_messages: self.max_messages,
            wait: self.wait,
            visibility_timeout: self.visibility_timeout,
            message_attribute_names: &self.message_attribute_names,
            system_attribute_names: &self.system_attribute_names,
        }
    }
}

/// Sends `request` to `queue` on a task of its own and waits for its answer; if this future
/// is dropped before the answer, the answer's messages are released at once. Outside a
/// runtime the request runs in place.
pub(crate) async fn receive(queue: &Queue, request: ReceiveRequest) -> Result<Vec<Message>, Error> {
    let Ok(runtime) = Handle::try_current() else {
        return queue.receive(request.as_receive()).await;
    };
    let (tx, rx) = oneshot::channel();
    let task = {
        let queue = queue.clone();
        async move {
            let result = queue.receive(request.as_receive()).await;
            let _ = tx.send(result.map(|messages| Brought { messages, queue }));
        }
    };
    runtime.spawn(task.in_current_span().with_current_subscriber());
    match rx.await {
        Ok(Ok(mut brought)) => Ok(std::mem::take(&mut brought.messages)),
        Ok(Err(err)) => Err(err),
        Err(_) => Err(Error::runtime_gone("ReceiveMessage")),
    }
}

/// A receive's messages until they are taken: dropped untaken (nobody waits for the answer
/// any more), they are released at once, in the background.
struct Brought {
    messages: Vec<Message>,
    queue: Queue,
}

impl Drop for Brought {
    fn drop(&mut self) {
        let messages = std::mem::take(&mut self.messages);
        if messages.is_empty() {
            return;
        }
        // Only a spawn: the release is awaited by nobody.
        if let Ok(runtime) = Handle::try_current() {
            let queue = self.queue.clone();
            runtime.spawn(
                release(queue, messages)
                    .in_current_span()
                    .with_current_subscriber(),
            );
        }
    }
}

/// Makes `messages` visible again at once, in requests of up to 10, each tried up to
/// [`RELEASE_TRIES`] times on transient failures.
async fn release(queue: Queue, messages: Vec<Message>) {
    tracing::info!(
        count = messages.len(),
        "releasing what a receive brought after its run was dropped"
    );
    let receipts: Vec<&str> = messages
        .iter()
        .filter_map(Message::receipt_handle)
        .collect();
    for chunk in receipts.chunks(MAX_BATCH) {
        let entries: Vec<BatchEntry<'_>> = chunk
            .iter()
            .zip(ENTRY_IDS)
            .map(|(receipt, id)| BatchEntry {
                id,
                receipt,
                visibility_timeout: VisibilityTimeout::ZERO,
            })
            .collect();
        release_chunk(&queue, &entries).await;
    }
}

async fn release_chunk(queue: &Queue, entries: &[BatchEntry<'_>]) {
    let mut backoff = call_retries::SETTLE.backoff();
    for attempt in 1..=RELEASE_TRIES {
        let err = match queue.change_visibility_batch(entries).await {
            Ok(results) => {
                let failed = results.iter().filter(|r| r.is_err()).count();
                if failed > 0 {
                    tracing::warn!(
                        failed,
                        "releasing messages of a dropped run's receive failed; they return when \
                         their visibility lapses"
                    );
                }
                return;
            }
            Err(err) => err,
        };
        if !err.is_retryable() || attempt == RELEASE_TRIES {
            tracing::warn!(
                error = %err.chain(),
                count = entries.len(),
                "releasing messages of a dropped run's receive failed; they return when their \
                 visibility lapses"
            );
            return;
        }
        sleep(backoff.next_delay()).await;
    }
}

#[cfg(test)]
mod tests;
