//! `MemoryStore`: the idempotency store of one process, on tokio's clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{Begun, Hold, Key, Owner, Ownership, Store, StoreError, StoreFuture};

/// An idempotency [`Store`] in this process's memory, on tokio's clock: for tests (on the
/// paused clock, a record's expiry passes with `tokio::time::advance`) and for a single
/// process that consumes alone. Clones share the records.
///
/// Records past their expiry are swept out as others are written, so memory follows the
/// records alive: about 200 bytes each, for as long as
/// [`idempotency_keep_done`](crate::ConsumerBuilder::idempotency_keep_done) keeps them.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), sqs_consumer::Error> {
/// use sqs_consumer::{idempotency::MemoryStore, Consumer, MemoryQueue};
///
/// let (queue, store) = (MemoryQueue::new(), MemoryStore::new());
/// let consumer = Consumer::in_memory(&queue).idempotency(store.clone()).build()?;
/// # let _ = consumer;
/// assert_eq!(store.done(), 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Records>>,
}

#[derive(Debug, Default)]
struct Records {
    records: HashMap<Key, Record>,
    /// How many records there were after the last sweep: the next comes at twice as many.
    swept_at: usize,
    /// Calls still to fail.
    failing: u32,
    /// Calls made, failed ones included.
    calls: u64,
}

#[derive(Debug, Clone)]
struct Record {
    state: State,
    owner: Owner,
    /// When its lease ends (in progress).
    lease_until: Instant,
    expires_at: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    InProgress,
    Done,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `calls` calls fail with a retryable error, as a throttled or unreachable
    /// database would, without writing.
    pub fn fail_next(&self, calls: u32) {
        self.lock().failing = calls;
    }

    /// Keys whose work is done, their records not expired.
    pub fn done(&self) -> usize {
        self.alive(State::Done)
    }

    /// Keys in progress, their records not expired.
    pub fn in_progress(&self) -> usize {
        self.alive(State::InProgress)
    }

    /// Calls the consumer made of the store so far (each would be one request to a
    /// database), failed ones included.
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// Records kept, expired ones not yet swept included.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.lock().records.len()
    }

    fn alive(&self, state: State) -> usize {
        let now = Instant::now();
        let records = self.lock();
        let alive = |r: &&Record| r.state == state && r.expires_at > now;
        records.records.values().filter(alive).count()
    }

    fn lock(&self) -> MutexGuard<'_, Records> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `write` on the records, unless a fault is due.
    fn call<T>(&self, write: impl FnOnce(&mut Records, Instant) -> T) -> Result<T, StoreError> {
        let mut records = self.lock();
        records.calls += 1;
        if records.failing > 0 {
            records.failing -= 1;
            return Err(StoreError::retryable("MemoryStore: an injected failure"));
        }
        Ok(write(&mut records, Instant::now()))
    }
}

impl Records {
    fn live(&self, key: &Key, now: Instant) -> Option<&Record> {
        self.records.get(key).filter(|r| r.expires_at > now)
    }

    fn put(&mut self, key: &Key, record: Record, now: Instant) {
        self.records.insert(key.clone(), record);
        if self.records.len() > self.swept_at.max(1024) * 2 {
            self.records.retain(|_, r| r.expires_at > now);
            self.swept_at = self.records.len();
        }
    }

    fn begin(&mut self, key: &Key, owner: &Owner, hold: Hold, now: Instant) -> Begun {
        match self.live(key, now) {
            Some(r) if r.state == State::Done => return Begun::Done,
            Some(r) if r.owner == *owner => {}
            Some(r) if r.owner.message_id() != owner.message_id() => {
                return Begun::InProgress {
                    ends_in: r.expires_at - now,
                }
            }
            Some(r) if r.lease_until > now => {
                return Begun::InProgress {
                    ends_in: r.lease_until - now,
                }
            }
            _ => {}
        }
        let record = Record {
            state: State::InProgress,
            owner: owner.clone(),
            lease_until: now + hold.lease(),
            expires_at: now + hold.record(),
        };
        self.put(key, record, now);
        Begun::Started
    }

    fn extend(&mut self, key: &Key, owner: &Owner, hold: Hold, now: Instant) -> Ownership {
        match self.records.get_mut(key) {
            Some(r) if r.state == State::InProgress && r.owner == *owner => {
                r.lease_until = now + hold.lease();
                r.expires_at = now + hold.record();
                Ownership::Ours
            }
            _ => Ownership::Taken,
        }
    }

    fn complete(
        &mut self,
        key: &Key,
        owner: &Owner,
        keep_for: Duration,
        now: Instant,
    ) -> Ownership {
        if self.live(key, now).is_some_and(|r| r.owner != *owner) {
            return Ownership::Taken;
        }
        let record = Record {
            state: State::Done,
            owner: owner.clone(),
            lease_until: now,
            expires_at: now + keep_for,
        };
        self.put(key, record, now);
        Ownership::Ours
    }

    fn abandon(&mut self, key: &Key, owner: &Owner) {
        let ours = |r: &Record| r.state == State::InProgress && r.owner == *owner;
        if self.records.get(key).is_some_and(ours) {
            self.records.remove(key);
        }
    }
}

impl Store for MemoryStore {
    fn begin<'a>(&'a self, key: &'a Key, owner: &'a Owner, hold: Hold) -> StoreFuture<'a, Begun> {
        let begun = self.call(|r, now| r.begin(key, owner, hold, now));
        Box::pin(async move { begun })
    }

    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        hold: Hold,
    ) -> StoreFuture<'a, Ownership> {
        let extended = self.call(|r, now| r.extend(key, owner, hold, now));
        Box::pin(async move { extended })
    }

    fn complete<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        keep_for: Duration,
    ) -> StoreFuture<'a, Ownership> {
        let completed = self.call(|r, now| r.complete(key, owner, keep_for, now));
        Box::pin(async move { completed })
    }

    fn abandon<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> StoreFuture<'a, ()> {
        let abandoned = self.call(|r, _| r.abandon(key, owner));
        Box::pin(async move { abandoned })
    }
}
