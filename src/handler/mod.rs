//! The `Handler` trait: what `Consumer::run` calls for each delivery.
//!
//! Beside it: `Batch` and `BatchHandler` (`batch.rs`) and the batch windows that gather them
//! (`batch_window.rs`), tower services as handlers (`service.rs`, feature `tower`), and running
//! a handler on its deliveries (`handling.rs`).

pub(crate) mod batch;
pub(crate) mod batch_window;
pub(crate) mod handling;
#[cfg(feature = "tower")]
pub(crate) mod service;

use std::future::Future;

use futures_util::future::BoxFuture;

use crate::delivery::Delivery;
use crate::error::BoxError;

/// Handles one [`Delivery`] at a time; the consumer runs many at once, each as its own task.
///
/// Implemented for every `Fn(Delivery) -> impl Future<Output = Result<(), E>>` whose error
/// converts into a [`BoxError`] (so `anyhow::Error`, `std::io::Error` and the crate's own
/// [`Error`](crate::Error) all work). Implement it yourself when a closure is awkward.
///
/// A handler error is logged with the message id and its whole chain of causes. What happens
/// to a delivery the handler did not settle follows from its outcome and the consumer's
/// [`AckMode`](crate::AckMode): by default it gets the [`RetryPolicy`](crate::RetryPolicy)
/// (the message is received again once its visibility timeout lapses), and an `Ok` without
/// settling is counted and warned about; with `AckMode::OnSuccess`, `Ok` acks it; with
/// `AckMode::Always`, every outcome does. A handler
/// that runs past the consumer's
/// [`handler_timeout`](crate::ConsumerBuilder::handler_timeout) is stopped, as if it had
/// failed.
///
/// Handlers run on your runtime's threads. Do CPU-bound or blocking work in
/// [`tokio::task::spawn_blocking`]: a handler that blocks its thread stalls every task on it.
/// The keeper that keeps messages hidden runs on a thread of their own for a client on the
/// SDK's default HTTP client, and on your runtime otherwise, where blocked handlers delay
/// them and enough of them lose messages (see the guide's [keeper](crate::guide::keeper)
/// page and [`Stats::late_extensions`](crate::Stats::late_extensions)).
///
/// Move the delivery into the returned future. A closure whose `async move` block does not
/// use the delivery (`|_d| async move { .. }`) drops it before the work starts, which stops
/// its keeper's extensions and frees its slot:
///
/// ```
/// # use sqs_consumer::{Delivery, Error};
/// # async fn work() {}
/// let handler = |delivery: Delivery| async move {
///     work().await;
///     delivery.ack().await // the delivery lives (and stays hidden) until here
/// };
/// # let _ = handler;
/// ```
pub trait Handler: Send + Sync + 'static {
    /// Handles one delivery.
    fn handle(&self, delivery: Delivery) -> BoxFuture<'static, Result<(), BoxError>>;

    /// Completes when the handler can take another delivery. With no receive under way, the
    /// consumer waits for it before the next, as it waits for a free
    /// [`max_in_flight`](crate::ConsumerBuilder::max_in_flight) slot; with receives under way,
    /// it starts one more only if this completes at once. So a handler that is not ready
    /// holds back receives, never a received message. Unlike a panic in `handle`, a panic
    /// in `ready` is not caught: it unwinds out of the `run*` future. Defaults to ready at
    /// once; `ServiceHandler` (feature `tower`) polls its service's `poll_ready`.
    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

impl<F, Fut, E> Handler for F
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<BoxError>,
{
    fn handle(&self, delivery: Delivery) -> BoxFuture<'static, Result<(), BoxError>> {
        let fut = self(delivery);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}
