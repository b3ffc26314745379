//! `Batch` and `BatchHandler`: deliveries handled together.

use std::fmt;
use std::future::Future;

use futures_util::future::BoxFuture;

use crate::delivery::{self, Delivery};
use crate::error::{BoxError, Error};

/// Deliveries handled together, in receive order, for
/// [`Consumer::run_batch`](crate::Consumer::run_batch): one receive's, or with a
/// [`batch_window`](crate::ConsumerBuilder::batch_window) several receives' (up to
/// [`max_batch`](crate::ConsumerBuilder::max_batch)).
///
/// Each delivery keeps its own lease (kept by the keeper) and can be settled alone; [`ack_all`] and
/// [`release_all`] settle them together, in as few requests as SQS allows (one per 10). On a FIFO queue a batch never holds two messages of one message group: a
/// group's later messages come in a later batch, once the one before them was acked.
///
/// [`ack_all`]: Batch::ack_all
/// [`release_all`]: Batch::release_all
///
/// ```
/// # async fn store(_: &[&str]) -> Result<(), std::io::Error> { Ok(()) }
/// use sqs_consumer::Batch;
///
/// let handler = |batch: Batch| async move {
///     let bodies: Vec<&str> = batch.iter().map(|d| d.body()).collect();
///     store(&bodies).await?; // one bulk write
///     batch.ack_all().await?; // one DeleteMessageBatch
///     Ok::<(), sqs_consumer::BoxError>(())
/// };
/// # let _ = handler;
/// ```
pub struct Batch {
    deliveries: Vec<Delivery>,
}

impl Batch {
    pub(crate) fn new(deliveries: Vec<Delivery>) -> Self {
        Self { deliveries }
    }

    /// How many deliveries the batch holds (at most the consumer's `max_batch`).
    pub fn len(&self) -> usize {
        self.deliveries.len()
    }

    /// `true` when the batch holds no delivery.
    pub fn is_empty(&self) -> bool {
        self.deliveries.is_empty()
    }

    /// The deliveries, in receive order.
    pub fn iter(&self) -> std::slice::Iter<'_, Delivery> {
        self.deliveries.iter()
    }

    /// Deletes every message of the batch, their deletes together (one `DeleteMessageBatch`
    /// for up to 10), each retried as [`Delivery::ack`] retries. `Ok` when all were acked;
    /// otherwise the first error (the others were still attempted; a lost delivery is
    /// remembered as [`Delivery::ack`] remembers it).
    ///
    /// # Errors
    ///
    /// The first delivery's error, as [`Delivery::ack`] returns it.
    pub async fn ack_all(self) -> Result<(), Error> {
        first_error(delivery::ack_all(self.deliveries).await)
    }

    /// Makes every message of the batch visible again at once, their visibility changes
    /// together, each retried as [`Delivery::release`] retries. `Ok` when all were released;
    /// otherwise the first error.
    ///
    /// # Errors
    ///
    /// The first delivery's error, as [`Delivery::release`] returns it.
    pub async fn release_all(self) -> Result<(), Error> {
        first_error(delivery::release_all(self.deliveries).await)
    }
}

/// `Ok` when every result is; otherwise the first error.
fn first_error(results: Vec<Result<(), Error>>) -> Result<(), Error> {
    results
        .into_iter()
        .find_map(Result::err)
        .map_or(Ok(()), Err)
}

impl IntoIterator for Batch {
    type Item = Delivery;
    type IntoIter = std::vec::IntoIter<Delivery>;

    fn into_iter(self) -> Self::IntoIter {
        self.deliveries.into_iter()
    }
}

impl<'a> IntoIterator for &'a Batch {
    type Item = &'a Delivery;
    type IntoIter = std::slice::Iter<'a, Delivery>;

    fn into_iter(self) -> Self::IntoIter {
        self.deliveries.iter()
    }
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.deliveries).finish()
    }
}

/// Handles the deliveries of one receive together: what
/// [`Consumer::run_batch`](crate::Consumer::run_batch) calls.
///
/// Implemented for every `Fn(Batch) -> impl Future<Output = Result<(), E>>` whose error
/// converts into a [`BoxError`], as [`Handler`](crate::Handler) is for single deliveries.
/// What happens to deliveries the handler leaves unsettled follows the consumer's
/// [`AckMode`](crate::AckMode), as for a single handler.
pub trait BatchHandler: Send + Sync + 'static {
    /// Handles one batch.
    fn handle(&self, batch: Batch) -> BoxFuture<'static, Result<(), BoxError>>;

    /// Completes when the handler can take another batch: the consumer waits for it before
    /// each receive, and a panic in it unwinds out of the `run*` future, as
    /// [`Handler::ready`](crate::Handler::ready) says. Defaults to ready at once.
    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

impl<F, Fut, E> BatchHandler for F
where
    F: Fn(Batch) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<BoxError>,
{
    fn handle(&self, batch: Batch) -> BoxFuture<'static, Result<(), BoxError>> {
        let fut = self(batch);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests;
