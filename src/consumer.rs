//! `Consumer`: the receive loop, back-pressure and handler tasks.

use std::any::Any;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::config::{ConsumerBuilder, Settings};
use crate::delivery::Delivery;
use crate::error::Error;
use crate::handler::Handler;
use crate::memory::MemoryQueue;
use crate::queue::{Queue, Receive};

/// Receives messages from one SQS queue and hands each to a handler as a [`Delivery`].
///
/// Build one with [`Consumer::builder`] (a real queue) or [`Consumer::in_memory`] (a
/// [`MemoryQueue`]), then call [`run`](Consumer::run).
///
/// The consumer long-polls `ReceiveMessage` only while fewer than
/// [`max_in_flight`](ConsumerBuilder::max_in_flight) deliveries are held, asks for no more
/// messages than there are free slots, and runs each handler as its own task. Every delivery
/// starts its visibility heartbeat the moment it is received.
pub struct Consumer {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Queue,
    settings: Settings,
    permits: Arc<Semaphore>,
    /// The visibility timeout in force, seconds: the builder's, or the queue's read once.
    visibility: OnceCell<u32>,
}

impl Consumer {
    /// A consumer of the queue at `queue_url`, through `client`.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use sqs_consumer::{Consumer, Delivery};
    ///
    /// let config = aws_config::load_from_env().await;
    /// let client = aws_sdk_sqs::Client::new(&config);
    /// let consumer = Consumer::builder(client, "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs")
    ///     .visibility_timeout(Duration::from_secs(60))
    ///     .max_in_flight(64)
    ///     .build()?;
    /// consumer
    ///     .run(|delivery: Delivery| async move {
    ///         println!("got {}", delivery.body());
    ///         delivery.ack().await
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> ConsumerBuilder {
        ConsumerBuilder::new(Queue::Sqs {
            client,
            url: Arc::from(queue_url.into()),
        })
    }

    /// A consumer of an in-memory queue, for tests and examples.
    pub fn in_memory(queue: &MemoryQueue) -> ConsumerBuilder {
        ConsumerBuilder::new(Queue::Memory(queue.clone()))
    }

    pub(crate) fn new(queue: Queue, settings: Settings) -> Self {
        Self {
            inner: Arc::new(Inner {
                queue,
                permits: Arc::new(Semaphore::new(settings.max_in_flight)),
                settings,
                visibility: OnceCell::new(),
            }),
        }
    }

    #[cfg(test)]
    pub(crate) fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Deliveries held right now: handlers running, plus deliveries moved elsewhere and not
    /// yet settled or dropped.
    pub fn in_flight(&self) -> usize {
        self.inner.settings.max_in_flight - self.inner.permits.available_permits()
    }

    /// Receives messages and calls `handler` for each, until a fatal error.
    ///
    /// Each delivery's handler runs as its own task. A handler error is logged with the
    /// message id; a panic is caught and logged, and the consumer carries on. Transient
    /// receive errors (throttling, 5xx, timeouts) are retried with jittered back-off; a fatal
    /// one (the queue does not exist, access denied, an invalid request) ends `run` with that
    /// error at once.
    ///
    /// Dropping the returned future stops receiving and aborts the handlers it started;
    /// their deliveries are dropped, so their messages return when their visibility
    /// timeouts lapse.
    pub async fn run<H: Handler>(&self, handler: H) -> Result<(), Error> {
        let queue = &self.inner.queue;
        let settings = &self.inner.settings;
        let timeout = self.resolve_visibility_timeout().await?;
        let handler = Arc::new(handler);
        let mut handlers = JoinSet::new();
        let mut failures = Backoff::new(Duration::from_millis(200), Duration::from_secs(20));
        let mut idle = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        tracing::info!(
            queue = %queue.describe(),
            visibility_timeout = timeout,
            max_in_flight = settings.max_in_flight,
            "consumer started"
        );
        loop {
            // Handlers catch their own panics; this only frees the finished tasks' slots.
            while handlers.try_join_next().is_some() {}
            let Some(permits) = self.acquire_permits().await else {
                return Ok(());
            };
            let received_at = Instant::now();
            let request = Receive {
                max_messages: u32::try_from(permits.len()).unwrap_or(settings.batch_size),
                wait: settings.wait_time,
                visibility: settings.visibility_timeout,
            };
            match queue.receive(request).await {
                Ok(messages) => {
                    failures.reset();
                    let waited = received_at.elapsed();
                    if messages.is_empty() {
                        if settings.wait_time.is_zero() || waited < settings.wait_time / 2 {
                            // Short polling (or a server that answers early): do not spin.
                            sleep(idle.next_delay()).await;
                        }
                        continue;
                    }
                    idle.reset();
                    tracing::debug!(count = messages.len(), "received");
                    let mut permits = permits.into_iter();
                    for message in messages {
                        let Some(receipt) = message.receipt_handle().map(str::to_owned) else {
                            tracing::warn!(
                                message_id = message.message_id().unwrap_or_default(),
                                "skipped a message without a receipt handle"
                            );
                            continue;
                        };
                        // A server that returns more than asked still gets every message
                        // handled (and heartbeated); only the slot accounting is exceeded.
                        let permit = permits.next();
                        let delivery = Delivery::start(
                            queue.clone(),
                            message,
                            receipt,
                            received_at,
                            timeout,
                            permit,
                        );
                        handlers.spawn(run_handler(handler.clone(), delivery));
                    }
                }
                Err(err) if err.is_fatal() => {
                    tracing::error!(queue = %queue.describe(), error = %err, "receive failed; stopping");
                    return Err(err);
                }
                Err(err) => {
                    let wait = failures.next_delay();
                    tracing::warn!(error = %err, retry_in = ?wait, "receive failed; retrying");
                    sleep(wait).await;
                }
            }
        }
    }

    /// Waits for one free slot, then takes as many more as one receive may use.
    async fn acquire_permits(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        let sem = &self.inner.permits;
        let first = sem.clone().acquire_owned().await.ok()?;
        let mut permits = vec![first];
        while permits.len() < self.inner.settings.batch_size as usize {
            match sem.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        Some(permits)
    }

    async fn resolve_visibility_timeout(&self) -> Result<u32, Error> {
        if let Some(t) = self.inner.settings.visibility_timeout {
            return Ok(t);
        }
        self.inner
            .visibility
            .get_or_try_init(|| async {
                let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(20));
                loop {
                    match self.inner.queue.visibility_timeout().await {
                        Ok(t) => return Ok(t),
                        Err(err) if err.is_fatal() => return Err(err),
                        Err(err) => {
                            let wait = backoff.next_delay();
                            tracing::warn!(error = %err, retry_in = ?wait, "reading the queue's visibility timeout failed; retrying");
                            sleep(wait).await;
                        }
                    }
                }
            })
            .await
            .copied()
    }
}

async fn run_handler<H: Handler>(handler: Arc<H>, delivery: Delivery) {
    let span = tracing::info_span!(
        "delivery",
        message_id = %delivery.message_id(),
        receive_count = delivery.receive_count()
    );
    async move {
        match AssertUnwindSafe(handler.handle(delivery))
            .catch_unwind()
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "handler failed"),
            Err(panic) => tracing::error!(panic = panic_message(&*panic), "handler panicked"),
        }
    }
    .instrument(span)
    .await
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("queue", &self.inner.queue.describe())
            .field("settings", &self.inner.settings)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}
