//! `DeadLetterQueue`: the queue named to the builder's dead-letter step.

use crate::memory::MemoryQueue;

/// The queue [`dead_letter`](crate::ConsumerBuilder::dead_letter) moves failed messages to:
/// for a consumer of SQS, a queue URL, name or ARN (a `&str` or a `String`, checked by
/// `build()` as the consumer's own queue is); for a [`MemoryQueue`] consumer, a `&MemoryQueue`.
///
/// ```
/// # fn example(sqs: sqs_consumer::ConsumerBuilder) -> Result<(), sqs_consumer::Error> {
/// use sqs_consumer::{Consumer, MemoryQueue};
///
/// let consumer = sqs.dead_letter("orders-failed", 5).build()?;
///
/// let (queue, failed) = (MemoryQueue::new(), MemoryQueue::new());
/// let in_memory = Consumer::in_memory(&queue).dead_letter(&failed, 5).build()?;
/// # let _ = (consumer, in_memory); Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DeadLetterQueue {
    target: Target,
}

#[derive(Debug, Clone)]
enum Target {
    Sqs(String),
    Memory(MemoryQueue),
}

impl DeadLetterQueue {
    /// The queue's URL, name or ARN, as given, for a consumer of SQS.
    pub(crate) fn sqs(&self) -> Option<&str> {
        match &self.target {
            Target::Sqs(queue) => Some(queue),
            Target::Memory(_) => None,
        }
    }

    /// The queue, for a `MemoryQueue` consumer.
    pub(crate) fn memory(&self) -> Option<&MemoryQueue> {
        match &self.target {
            Target::Memory(queue) => Some(queue),
            Target::Sqs(_) => None,
        }
    }

    /// The queue as given, for an error message.
    pub(crate) fn describe(&self) -> &str {
        match &self.target {
            Target::Sqs(queue) => queue,
            Target::Memory(queue) => queue.name(),
        }
    }
}

impl From<&str> for DeadLetterQueue {
    fn from(queue: &str) -> Self {
        queue.to_owned().into()
    }
}

impl From<&String> for DeadLetterQueue {
    fn from(queue: &String) -> Self {
        queue.clone().into()
    }
}

impl From<String> for DeadLetterQueue {
    fn from(queue: String) -> Self {
        Self {
            target: Target::Sqs(queue),
        }
    }
}

impl From<&MemoryQueue> for DeadLetterQueue {
    fn from(queue: &MemoryQueue) -> Self {
        Self {
            target: Target::Memory(queue.clone()),
        }
    }
}
