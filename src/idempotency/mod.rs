//! Effectively once: a store that remembers which messages' work is done, so that a message
//! SQS delivers again is acked without running its handler again.
//!
//! Set one with [`ConsumerBuilder::idempotency`](crate::ConsumerBuilder::idempotency); the
//! guide's page [`guide::idempotency`](crate::guide::idempotency) says what it promises and
//! what it cannot. This module holds the [`Store`] trait and two stores: [`MemoryStore`]
//! (one process, on tokio's clock) and `DynamoDbStore` (feature `dynamodb`).
//!
//! A store keeps one record per [`Key`]: *in progress* for an [`Owner`] (one receive of one
//! message) until it expires, or *done* until it expires. Its four calls, each one
//! conditional write:
//!
//! | call | writes when | answers |
//! |---|---|---|
//! | [`begin`](Store::begin) | no record; or one expired; or one in progress for the same receive; or one in progress for another receive of the same message whose lease has ended (SQS hands a message out again once its earlier receive's visibility lapsed) | [`Begun::Started`]; else [`Begun::Done`] for an unexpired done record, [`Begun::InProgress`] with the time left (until the other receive's lease ends, for the same message; until the record expires, for another) |
//! | [`extend`](Store::extend) | the record is in progress for this owner | [`Ownership::Ours`] or [`Ownership::Taken`] |
//! | [`complete`](Store::complete) | the record is this owner's, or gone, or expired | [`Ownership::Ours`] (done now, or done already by this owner) or [`Ownership::Taken`] |
//! | [`abandon`](Store::abandon) | the record is in progress for this owner: removed | nothing; a done record is never removed |
//!
//! An in-progress record keeps two times ([`Hold`]): when its lease ends (the delivery's
//! deadline: the same message received again takes the key over after it) and when the record
//! expires (a while later: another message with the same key may take it after that).
//!
//! Times are durations from the store's own "now" (tokio's clock for [`MemoryStore`], the
//! system clock for DynamoDB), so the store never compares an instant of one clock with
//! another's.

#[cfg(feature = "dynamodb")]
mod dynamodb;
mod memory;
#[cfg(test)]
mod tests;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::error::BoxError;

#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use dynamodb::DynamoDbStore;
pub use memory::MemoryStore;

/// What a [`Store`]'s calls return: a boxed future, so that the trait can be a trait object.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Where the consumer records which messages' work is in progress and which is done.
///
/// Implement it for a database of your own; each call is one conditional write (or a read
/// and a write under one lock), as the [module's table](self) says. The consumer retries a
/// call that fails with a [retryable](StoreError::retryable) error while the delivery's lease
/// allows, so the store itself should not retry (a client with retries of its own makes a
/// call wait twice).
pub trait Store: fmt::Debug + Send + Sync + 'static {
    /// Marks `key` in progress for `owner`, as `hold` says, unless its work is done or
    /// another receive holds it.
    fn begin<'a>(&'a self, key: &'a Key, owner: &'a Owner, hold: Hold) -> StoreFuture<'a, Begun>;

    /// Moves the times of `owner`'s in-progress record of `key` to what `hold` says.
    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        hold: Hold,
    ) -> StoreFuture<'a, Ownership>;

    /// Marks `key` done by `owner`, kept for `keep_for` from now, unless another owner holds
    /// an unexpired record of it.
    fn complete<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        keep_for: Duration,
    ) -> StoreFuture<'a, Ownership>;

    /// Removes `owner`'s in-progress record of `key`, if it is still there; a done record,
    /// or another owner's, stays.
    fn abandon<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> StoreFuture<'a, ()>;
}

/// What [`Store::begin`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begun {
    /// The key is now in progress for this owner: run the handler.
    Started,
    /// The key's work is done: ack the message without running the handler.
    Done,
    /// Another receive holds the key: try again in `ends_in`.
    InProgress {
        /// How long the other receive's hold lasts yet: until its lease ends, for a receive
        /// of the same message; until its record expires, for another message.
        ends_in: Duration,
    },
}

/// How long an in-progress record holds, from now: until its lease ends, and until the record
/// expires (never before the lease ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    lease: Duration,
    record: Duration,
}

impl Hold {
    /// A hold whose lease ends `lease` from now and whose record expires `record` from now
    /// (at the lease's end, if `record` is shorter).
    pub fn new(lease: Duration, record: Duration) -> Self {
        Self {
            lease,
            record: record.max(lease),
        }
    }

    /// Until the delivery's lease ends: a later receive of the same message may take the key
    /// over after it.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Until the record expires: another message with the same key may take it after it.
    pub fn record(&self) -> Duration {
        self.record
    }
}

/// Whether a record is (still) the caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// It is: the write was made.
    Ours,
    /// Another owner holds the key: nothing was written.
    Taken,
}

/// The key a message's work is recorded under: the SHA-256 of the consumer's queue name and
/// the key the consumer chose (the message id, a FIFO message's deduplication id, or the
/// key of [`idempotency_key`](crate::ConsumerBuilder::idempotency_key)), as 64 hex digits. So
/// a key of any length is stored in 64 bytes, and one key in two queues is two records.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key(String);

impl Key {
    /// The key of `key` in the queue named `queue` (its name, not its URL).
    pub fn new(queue: &str, key: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(queue.as_bytes());
        hasher.update([0]);
        hasher.update(key.as_bytes());
        Self(hex(&hasher.finalize()))
    }

    /// The 64 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", &self.0[..12.min(self.0.len())])
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who holds a key: one receive of one message. The receive is told by a hash of its
/// receipt handle (a handle is never stored or logged whole).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    message_id: String,
    receive: String,
}

impl Owner {
    /// The owner that is the receive of `message_id` whose receipt handle is `receipt`.
    pub fn new(message_id: &str, receipt: &str) -> Self {
        let digest = Sha256::digest(receipt.as_bytes());
        let mut receive = hex(&digest);
        receive.truncate(32);
        Self {
            message_id: message_id.to_owned(),
            receive,
        }
    }

    /// The SQS message id.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// The receive: 32 hex digits of the SHA-256 of its receipt handle.
    pub fn receive(&self) -> &str {
        &self.receive
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner")
            .field("message_id", &self.message_id)
            .field("receive", &&self.receive[..8.min(self.receive.len())])
            .finish()
    }
}

/// A store's call failed: retryable (throttled, unreachable, timed out) or not.
#[derive(Debug, thiserror::Error)]
#[error("{}", if self.retryable { "idempotency store call failed (retryable)" } else { "idempotency store call failed" })]
pub struct StoreError {
    retryable: bool,
    #[source]
    source: BoxError,
}

impl StoreError {
    /// A failure that may pass: the consumer tries again while the delivery's lease allows.
    pub fn retryable(source: impl Into<BoxError>) -> Self {
        Self {
            retryable: true,
            source: source.into(),
        }
    }

    /// A failure that trying again cannot mend (a missing table, access denied).
    pub fn fatal(source: impl Into<BoxError>) -> Self {
        Self {
            retryable: false,
            source: source.into(),
        }
    }

    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// A consumer's idempotency setting: its store, how long a done key is kept, and the keys
/// its deliveries hold now.
#[derive(Debug, Clone)]
pub(crate) struct Recording {
    pub(crate) store: std::sync::Arc<dyn Store>,
    pub(crate) keep_done: Duration,
    /// The key each delivery holds, by owner: kept here rather than in each lease, which
    /// stays small for the 120,000 a consumer may hold.
    held: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<Owner, Key>>>,
    /// The tasks that keep each claim and give it back: a shutdown waits for them.
    tasks: tokio_util::task::TaskTracker,
}

impl Recording {
    pub(crate) fn new(store: std::sync::Arc<dyn Store>, keep_done: Duration) -> Self {
        Self {
            store,
            keep_done,
            held: std::sync::Arc::default(),
            tasks: tokio_util::task::TaskTracker::new(),
        }
    }

    /// The tasks that keep each claim and give it back.
    pub(crate) fn tasks(&self) -> &tokio_util::task::TaskTracker {
        &self.tasks
    }

    /// Waits until every claim's task has ended (the deliveries have ended, and their keys are
    /// given back or done), or until `end`.
    pub(crate) async fn settled(&self, end: tokio::time::Instant) {
        self.tasks.close();
        let _ = tokio::time::timeout_at(end, self.tasks.wait()).await;
        // A consumer may run again after a stop.
        self.tasks.reopen();
    }

    /// `owner` holds `key` now.
    pub(crate) fn hold(&self, owner: &Owner, key: &Key) {
        self.held().insert(owner.clone(), key.clone());
    }

    /// The key `owner` holds, if it holds one.
    pub(crate) fn key_held_by(&self, owner: &Owner) -> Option<Key> {
        self.held().get(owner).cloned()
    }

    /// How many deliveries hold a key now.
    #[cfg(test)]
    pub(crate) fn held_now(&self) -> usize {
        self.held().len()
    }

    /// `owner` holds no key any more.
    pub(crate) fn forget(&self, owner: &Owner) {
        self.held().remove(owner);
    }

    fn held(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<Owner, Key>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
