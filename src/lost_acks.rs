//! Remembers messages whose ack failed because their delivery was lost, so that their
//! redelivery is deleted instead of handled again.

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, PoisonError};

/// How many message ids are remembered; the oldest are forgotten first. About 64 bytes each.
const CAPACITY: usize = 10_000;

/// A bounded set of message ids, oldest evicted first.
#[derive(Debug, Default)]
pub(crate) struct LostAcks {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ids: HashSet<String>,
    order: VecDeque<String>,
}

impl LostAcks {
    pub(crate) fn remember(&self, message_id: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if !inner.ids.insert(message_id.to_owned()) {
            return;
        }
        inner.order.push_back(message_id.to_owned());
        while inner.order.len() > CAPACITY {
            if let Some(old) = inner.order.pop_front() {
                inner.ids.remove(&old);
            }
        }
    }

    /// `true` (and forgets it) if `message_id` was remembered.
    pub(crate) fn take(&self, message_id: &str) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.ids.remove(message_id) {
            inner.order.retain(|id| id != message_id);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_taken_and_stays_bounded() {
        let acks = LostAcks::default();
        acks.remember("a");
        acks.remember("a");
        assert!(acks.take("a"));
        assert!(!acks.take("a"));
        for i in 0..CAPACITY + 5 {
            acks.remember(&i.to_string());
        }
        assert!(!acks.take("0"), "the oldest is forgotten");
        assert!(acks.take(&(CAPACITY + 4).to_string()));
        let inner = acks.inner.lock().unwrap();
        assert_eq!(inner.ids.len(), CAPACITY - 1);
        assert_eq!(inner.order.len(), CAPACITY - 1);
    }
}
