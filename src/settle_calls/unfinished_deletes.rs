//! Remembers messages whose delete did not go through although it should have (an ack of a
//! delivery that was lost, or the second half of a move to the dead-letter queue), so that
//! when one comes back to this consumer it is deleted instead of handled again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

/// How many message ids are remembered; the oldest are forgotten first. About 64 bytes each.
const CAPACITY: usize = 10_000;

/// Why a message is to be deleted when it comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unfinished {
    /// Its handler's work was done, but the ack found the delivery lost.
    Ack,
    /// Its copy is in the dead-letter queue, but deleting the original failed.
    Move,
}

/// A bounded map of message ids, oldest evicted first.
#[derive(Debug, Default)]
pub(crate) struct UnfinishedDeletes {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ids: HashMap<String, Unfinished>,
    order: VecDeque<String>,
}

impl UnfinishedDeletes {
    /// Remembers `message_id` (once: a second call keeps the first kind).
    pub(crate) fn remember(&self, message_id: &str, unfinished: Unfinished) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.ids.contains_key(message_id) {
            return;
        }
        inner.ids.insert(message_id.to_owned(), unfinished);
        inner.order.push_back(message_id.to_owned());
        while inner.order.len() > CAPACITY {
            if let Some(old) = inner.order.pop_front() {
                inner.ids.remove(&old);
            }
        }
    }

    /// What was left unfinished for `message_id`, if anything (and forgets it).
    pub(crate) fn take(&self, message_id: &str) -> Option<Unfinished> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let unfinished = inner.ids.remove(message_id)?;
        inner.order.retain(|id| id != message_id);
        Some(unfinished)
    }
}

#[cfg(test)]
mod tests;
