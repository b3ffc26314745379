//! What a `MemoryQueue` counts: requests per action, and the deletes and visibility changes
//! they asked for.

/// The SQS actions a [`MemoryQueue`](crate::MemoryQueue) serves.
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

/// Every action, in declaration order.
const ACTIONS: [Action; 7] = [
    Action::SendMessage,
    Action::ReceiveMessage,
    Action::DeleteMessage,
    Action::ChangeMessageVisibility,
    Action::GetQueueAttributes,
    Action::DeleteMessageBatch,
    Action::ChangeMessageVisibilityBatch,
];

impl Action {
    /// The action's name in SQS's API.
    pub fn name(self) -> &'static str {
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

/// What a [`MemoryQueue`](crate::MemoryQueue) has served so far, failed calls included: one
/// number per billed request ([`requests`](RequestCounts::requests), [`total`](RequestCounts::total))
/// and one per entry ([`deletes`](RequestCounts::deletes),
/// [`visibility_changes`](RequestCounts::visibility_changes)), so a delete counts as a delete
/// whether it went alone or in a request batch.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqs_consumer::Error> {
/// use std::time::Duration;
/// use sqs_consumer::{MemoryQueue};
/// use sqs_consumer::memory::{Action};
///
/// let queue = MemoryQueue::new();
/// queue.send("a")?;
/// let m = queue.receive(10, Duration::ZERO).await?;
/// queue.delete(m[0].receipt_handle().unwrap_or_default())?;
/// let counts = queue.requests();
/// assert_eq!(counts.requests(Action::ReceiveMessage), 1);
/// assert_eq!(counts.deletes(), 1);
/// assert_eq!(counts.total(), 3); // SendMessage, ReceiveMessage, DeleteMessage
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    requests: [u64; ACTIONS.len()],
    deletes: u64,
    visibility_changes: u64,
    empty_receives: u64,
    non_empty_receives: u64,
}

impl RequestCounts {
    /// Requests of `action`, as SQS bills them: a batch request counts once.
    pub fn requests(&self, action: Action) -> u64 {
        self.requests[action as usize]
    }

    /// All requests together, as SQS bills them.
    pub fn total(&self) -> u64 {
        self.requests.iter().sum()
    }

    /// Messages asked to be deleted: `DeleteMessage` requests plus `DeleteMessageBatch`
    /// entries.
    pub fn deletes(&self) -> u64 {
        self.deletes
    }

    /// Visibility changes asked for (extensions and releases): `ChangeMessageVisibility`
    /// requests plus `ChangeMessageVisibilityBatch` entries.
    pub fn visibility_changes(&self) -> u64 {
        self.visibility_changes
    }

    /// `ReceiveMessage` requests that returned no message (SQS bills them too).
    pub fn empty_receives(&self) -> u64 {
        self.empty_receives
    }

    /// `ReceiveMessage` requests that returned at least one message. With
    /// [`empty_receives`](RequestCounts::empty_receives) it accounts for every receive that
    /// was answered; a receive abandoned by its caller before its answer is in neither.
    pub fn non_empty_receives(&self) -> u64 {
        self.non_empty_receives
    }

    /// Counts an answered receive that returned `messages` messages.
    pub(crate) fn answered_receive(&mut self, messages: usize) {
        if messages == 0 {
            self.empty_receives += 1;
        } else {
            self.non_empty_receives += 1;
        }
    }

    /// Counts one request of `action`, and the entry of a single delete or visibility change.
    pub(crate) fn request(&mut self, action: Action) {
        self.requests[action as usize] += 1;
        match action {
            Action::DeleteMessage => self.deletes += 1,
            Action::ChangeMessageVisibility => self.visibility_changes += 1,
            _ => {}
        }
    }

    /// Counts one entry of a batch request of `action`.
    pub(crate) fn entry(&mut self, action: Action) {
        match action {
            Action::DeleteMessageBatch => self.deletes += 1,
            Action::ChangeMessageVisibilityBatch => self.visibility_changes += 1,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
