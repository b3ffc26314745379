//! `MemoryQueueBuilder`: a `MemoryQueue`'s settings and their validation.

use std::time::Duration;

use crate::error::Error;
use crate::limits::{self, RECEIVE_COUNTS};
use crate::memory::faults::Faults;
use crate::memory::model::Rules;
use crate::memory::{MemoryQueue, QueueSettings};

/// Builds a [`MemoryQueue`]; see [`MemoryQueue::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct MemoryQueueBuilder {
    name: Option<String>,
    latency: Duration,
    visibility_timeout: Duration,
    delay: Duration,
    fifo: bool,
    content_based_deduplication: bool,
    dead_letter: Option<(MemoryQueue, u32)>,
    faults: Option<Faults>,
}

impl MemoryQueue {
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
            faults: None,
        }
    }
}

impl MemoryQueueBuilder {
    /// The queue's name, shown in logs. Defaults to a random name (ending in `.fifo` for a
    /// FIFO queue).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How long every request takes, as a network round trip would (on tokio's clock):
    /// receives, the consumer's deletes and visibility changes, and its reads of the queue's
    /// attributes. Defaults to 0.
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// The queue's `VisibilityTimeout`, whole seconds in 0..=43200. Defaults to 30 s.
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = timeout;
        self
    }

    /// The queue's `DelaySeconds`, whole seconds, at most 15 minutes. Defaults to 0.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Makes it a FIFO queue. Defaults to `false` (a standard queue).
    pub fn fifo(mut self, fifo: bool) -> Self {
        self.fifo = fifo;
        self
    }

    /// FIFO content-based deduplication: the body stands in for a missing deduplication id.
    /// Defaults to `false`.
    pub fn content_based_deduplication(mut self, on: bool) -> Self {
        self.content_based_deduplication = on;
        self
    }

    /// A redrive policy: a message received `max_receive_count` times (1..=1000) without a
    /// delete moves to `queue` on its next receive. Defaults to none.
    pub fn dead_letter_queue(mut self, queue: &MemoryQueue, max_receive_count: u32) -> Self {
        self.dead_letter = Some((queue.clone(), max_receive_count));
        self
    }

    /// Random faults to inject into the calls a consumer makes (see [`Faults`]), to test how
    /// it copes. Defaults to none.
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = Some(faults);
        self
    }

    /// Checks the settings and creates the queue.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the first setting out of its range.
    pub fn build(self) -> Result<MemoryQueue, Error> {
        limits::VisibilityTimeout::of("visibility_timeout", self.visibility_timeout)?;
        limits::delay("delay", self.delay)?;
        if let Some(faults) = &self.faults {
            faults.validate()?;
        }
        let mut max_receive_count = None;
        if let Some((dlq, max)) = &self.dead_letter {
            limits::in_range("max_receive_count", *max, RECEIVE_COUNTS, "1..=1000")?;
            if dlq.is_fifo() != self.fifo {
                return Err(Error::invalid(
                    "dead_letter_queue",
                    dlq.name(),
                    "a queue of the same kind (FIFO or standard) as the source",
                ));
            }
            max_receive_count = Some(*max);
        }
        Ok(MemoryQueue::with_settings(
            self.name,
            QueueSettings {
                latency: self.latency,
                rules: Rules {
                    visibility_timeout: self.visibility_timeout,
                    delay: self.delay,
                    fifo: self.fifo,
                    content_based_deduplication: self.content_based_deduplication,
                    max_receive_count,
                },
                dead_letter: self.dead_letter.map(|(q, _)| q),
                faults: self.faults,
            },
        ))
    }
}
