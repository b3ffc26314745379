//! Tower services as handlers (feature `tower`): `ServiceHandler` and `ServiceBatchHandler`.

use std::fmt;
use std::future::poll_fn;
use std::sync::{Mutex, PoisonError};

use futures_util::future::BoxFuture;
use tower_service::Service;

use crate::delivery::Delivery;
use crate::error::BoxError;
use crate::handler::batch::{Batch, BatchHandler};
use crate::handler::Handler;

/// A [`tower::Service`](tower_service::Service) that takes each [`Delivery`], as a
/// [`Handler`]: every `tower` layer (`timeout`, `concurrency_limit`, `rate_limit`, retries,
/// tracing) then applies to your handler.
///
/// The service's `Ok(())` and its error are the handler's outcome: the consumer's
/// [`AckMode`](crate::AckMode), [`RetryPolicy`](crate::RetryPolicy) and dead-letter step
/// apply to them as to a closure's. Settle the delivery in the service (`ack`, `release`) as
/// in any handler.
///
/// `poll_ready` is back-pressure: the consumer starts no receive until a clone of the
/// service is ready, as it starts none while every
/// [`max_in_flight`](crate::ConsumerBuilder::max_in_flight) slot is taken. A service that is
/// not ready holds back receives, never a received message: what the receives under way
/// bring is handed out as it arrives. Each delivery's call waits for a ready clone of its
/// own, its lease kept meanwhile, so when one receive brings more than the service has room
/// for, the rest wait there; the wait counts toward
/// [`handler_timeout`](crate::ConsumerBuilder::handler_timeout). A `poll_ready` error is the
/// outcome of the delivery it was for.
///
/// The service is cloned for each delivery (tower's usual pattern), so it must be `Clone`; a
/// layer whose service is not (`RateLimit`) goes under a `buffer` layer, which is.
///
/// ```
/// use std::time::Duration;
/// use sqs_consumer::{Consumer, Delivery, MemoryQueue, ServiceHandler};
/// use tower::ServiceBuilder;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqs_consumer::Error> {
/// let queue = MemoryQueue::new();
/// queue.send("hello")?;
/// let consumer = Consumer::in_memory(&queue).build()?;
///
/// let service = ServiceBuilder::new()
///     .concurrency_limit(4) // at most 4 handled at once; receives wait for room
///     .timeout(Duration::from_secs(60))
///     .service_fn(|delivery: Delivery| async move {
///         println!("handling {}", delivery.message_id());
///         delivery.ack().await
///     });
/// let emptied = async {
///     while !queue.is_empty() {
///         tokio::time::sleep(Duration::from_millis(10)).await;
///     }
/// };
/// consumer.run_until(ServiceHandler::new(service), emptied).await?;
/// # Ok(()) }
/// ```
pub struct ServiceHandler<S> {
    service: ReadyService<S>,
}

impl<S> ServiceHandler<S> {
    /// A handler that calls `service` (a clone of it) for each delivery.
    pub fn new(service: S) -> Self {
        Self {
            service: ReadyService::new(service),
        }
    }
}

impl<S> fmt::Debug for ServiceHandler<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceHandler").finish_non_exhaustive()
    }
}

impl<S> Handler for ServiceHandler<S>
where
    S: Service<Delivery, Response = ()> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    fn handle(&self, delivery: Delivery) -> BoxFuture<'static, Result<(), BoxError>> {
        self.service.call(delivery)
    }

    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.service.ready())
    }
}

/// A [`tower::Service`](tower_service::Service) that takes each [`Batch`], as a
/// [`BatchHandler`] for [`Consumer::run_batch`](crate::Consumer::run_batch): what
/// [`ServiceHandler`] is for one delivery at a time, with the same back-pressure.
///
/// ```
/// use std::time::Duration;
/// use sqs_consumer::{Batch, Consumer, MemoryQueue, ServiceBatchHandler};
/// use tower::ServiceBuilder;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqs_consumer::Error> {
/// let queue = MemoryQueue::new();
/// queue.send("hello")?;
/// let consumer = Consumer::in_memory(&queue).build()?;
///
/// let service = ServiceBuilder::new()
///     .timeout(Duration::from_secs(60))
///     .service_fn(|batch: Batch| async move { batch.ack_all().await });
/// let watched = queue.clone();
/// let emptied = async move {
///     while !watched.is_empty() {
///         tokio::time::sleep(Duration::from_millis(10)).await;
///     }
/// };
/// consumer.run_batch_until(ServiceBatchHandler::new(service), emptied).await?;
/// # Ok(()) }
/// ```
pub struct ServiceBatchHandler<S> {
    service: ReadyService<S>,
}

impl<S> ServiceBatchHandler<S> {
    /// A batch handler that calls `service` (a clone of it) for each batch.
    pub fn new(service: S) -> Self {
        Self {
            service: ReadyService::new(service),
        }
    }
}

impl<S> fmt::Debug for ServiceBatchHandler<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceBatchHandler")
            .finish_non_exhaustive()
    }
}

impl<S> BatchHandler for ServiceBatchHandler<S>
where
    S: Service<Batch, Response = ()> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    fn handle(&self, batch: Batch) -> BoxFuture<'static, Result<(), BoxError>> {
        self.service.call(batch)
    }

    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.service.ready())
    }
}

/// A service, cloned for each call (behind a lock: handlers are shared between tasks, and a
/// service need not be `Sync`).
struct ReadyService<S> {
    original: Mutex<S>,
}

impl<S> ReadyService<S> {
    fn new(service: S) -> Self {
        Self {
            original: Mutex::new(service),
        }
    }
}

impl<S: Clone> ReadyService<S> {
    fn fresh_clone(&self) -> S {
        self.original
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Completes once a clone of the service is ready, then lets it go: a ready clone kept
    /// for later would hold what its readiness reserved (a concurrency limit's permit, a
    /// buffer's slot) from the calls waiting for it. An error is logged; the next call polls
    /// a clone of its own and gets it.
    async fn ready<R>(&self)
    where
        S: Service<R>,
        S::Error: Into<BoxError>,
    {
        let mut service = self.fresh_clone();
        if let Err(err) = poll_fn(|cx| service.poll_ready(cx)).await {
            let err: BoxError = err.into();
            tracing::warn!(error = %err, "the handler's service is not ready; the next delivery gets this error");
        }
    }

    /// Calls a clone of the service with `request`, once it is ready.
    fn call<R: Send + 'static>(&self, request: R) -> BoxFuture<'static, Result<(), BoxError>>
    where
        S: Service<R, Response = ()> + Send + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send + 'static,
    {
        let mut service = self.fresh_clone();
        Box::pin(async move {
            poll_fn(|cx| service.poll_ready(cx))
                .await
                .map_err(Into::into)?;
            service.call(request).await.map_err(Into::into)
        })
    }
}
