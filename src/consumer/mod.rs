//! `Consumer`: what a consumer does once built (`crate::builder` builds it).
//!
//! Beside it: its `DeliveryStream` (`stream.rs`), and the process's stop signal
//! (`shutdown_signal.rs`, feature `signal`).

#[cfg(feature = "signal")]
pub(crate) mod shutdown_signal;
pub(crate) mod stream;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::consumer::stream::DeliveryStream;
use crate::engine::{ConsumerSettings, Engine};
use crate::error::Error;
use crate::handler::batch::BatchHandler;
use crate::handler::Handler;
use crate::queue::backlog::Backlog;
use crate::queue::Queue;
use crate::receive::Receiving;
use crate::stats::Stats;

/// Receives messages from one SQS queue and hands each to a handler as a
/// [`Delivery`](crate::Delivery).
///
/// Build one with [`Consumer::builder`] (a real queue) or [`Consumer::in_memory`] (a
/// [`MemoryQueue`](crate::MemoryQueue)), then call [`run`](Consumer::run),
/// [`run_until`](Consumer::run_until) or [`stream`](Consumer::stream).
///
/// The consumer long-polls `ReceiveMessage` only while fewer than
/// [`max_in_flight`](crate::ConsumerBuilder::max_in_flight) deliveries are held, asks for no
/// more messages than there are free slots, and runs each handler as its own task. Every
/// delivery is kept hidden by the keeper from the moment it is received. On a FIFO queue (URL
/// ending in `.fifo`) the messages of one message group are handled one at a time, in order.
///
/// A consumer is cheap to clone, and every clone is the same consumer (as an
/// `aws_sdk_sqs::Client` is): give one to a signal task, an admin endpoint or a health check
/// to [`pause`](Consumer::pause), [`resume`](Consumer::resume), read the
/// [`stats`](Consumer::stats) of, or [`shutdown`](Consumer::shutdown) a consumer that is
/// running elsewhere.
///
/// ```
/// use std::time::Duration;
/// use sqs_consumer::{Consumer, Delivery, MemoryQueue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqs_consumer::Error> {
/// let queue = MemoryQueue::new();
/// queue.send("hello")?;
/// let consumer = Consumer::in_memory(&queue).wait_time(Duration::from_secs(1)).build()?;
///
/// // Stop once the message is acked (a real service would wait for SIGTERM here).
/// let watcher = consumer.clone();
/// tokio::spawn(async move {
///     while watcher.stats().acked == 0 {
///         tokio::time::sleep(Duration::from_millis(10)).await;
///     }
///     watcher.shutdown();
/// });
/// consumer.run(|delivery: Delivery| delivery.ack()).await?; // returns after the shutdown
/// assert!(queue.is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Consumer {
    engine: Arc<Engine>,
}

impl Consumer {
    pub(crate) fn new(queue: Queue, settings: ConsumerSettings) -> Self {
        Self {
            engine: Arc::new(Engine::new(queue, settings)),
        }
    }

    /// The engine, for a consumer driven by events (feature `lambda`), and the unit tests.
    #[cfg(any(feature = "lambda", test))]
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    #[cfg(test)]
    pub(crate) fn receive_settings(&self) -> &crate::receive::ReceiveSettings {
        self.engine.receive_settings()
    }

    /// Deliveries held right now: handlers running, FIFO deliveries waiting their turn, and
    /// deliveries moved elsewhere and not yet settled or dropped (as
    /// [`Stats::in_flight`](crate::Stats::in_flight) counts them).
    pub fn in_flight(&self) -> usize {
        self.engine.in_flight()
    }

    /// `true` when the consumer's keeper and settle calls run on a thread of their own (see
    /// [`isolated_keeper`](crate::ConsumerBuilder::isolated_keeper)).
    pub fn has_isolated_keeper(&self) -> bool {
        self.engine.is_isolated()
    }

    /// A snapshot of the consumer's counters.
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }

    /// The URL of the queue this consumer receives from.
    ///
    /// For a queue given by URL, that URL. For one given by name or ARN, the URL `GetQueueUrl`
    /// answered: asked once (when the consumer starts, or here if that is first) and
    /// remembered. The call is bounded by the
    /// [`request_timeout`](crate::ConsumerBuilder::request_timeout) and not retried here.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// use sqs_consumer::{Consumer, MemoryQueue};
    ///
    /// let queue = MemoryQueue::builder().name("orders").build()?;
    /// let consumer = Consumer::in_memory(&queue).build()?;
    /// assert_eq!(consumer.queue_url().await?, "memory:orders");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// For a name or ARN: the queue does not exist (a fatal [`Error::Sqs`] naming it), or a
    /// transient failure (retryable).
    pub async fn queue_url(&self) -> Result<String, Error> {
        self.engine.receiver().queue_url().await
    }

    /// How many messages the queue holds, approximately: visible, in flight (received by any
    /// consumer and not yet deleted) and delayed; one `GetQueueAttributes` call (plus, the
    /// first time, the `GetQueueUrl` of a queue given by name or ARN). Nothing in the
    /// consumer calls it: it costs a request only when you do.
    ///
    /// Feed an autoscaler from it (the queue's depth per worker) and from the message age
    /// (the `sqs_consumer_message_age_seconds` histogram with feature `metrics`, or
    /// [`Delivery::age`](crate::Delivery::age)): see the guide's
    /// [age and backlog](crate::guide::handlers#message-age-and-backlog) section.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// use sqs_consumer::{Consumer, MemoryQueue};
    ///
    /// let queue = MemoryQueue::new();
    /// queue.send("a")?;
    /// queue.send("b")?;
    /// let consumer = Consumer::in_memory(&queue).build()?;
    /// let backlog = consumer.backlog().await?;
    /// assert_eq!((backlog.visible, backlog.in_flight, backlog.delayed), (2, 0, 0));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The call's failure: retryable (throttling, 5xx, no answer within the request timeout)
    /// or fatal (the queue does not exist, access denied).
    pub async fn backlog(&self) -> Result<Backlog, Error> {
        self.engine.receiver().backlog().await
    }

    /// A clone of this consumer, by its former name.
    #[deprecated(since = "0.1.0", note = "a `Consumer` is cheap to clone: clone it")]
    pub fn handle(&self) -> Consumer {
        self.clone()
    }

    /// Starts the same graceful stop as a [`run_until`](Consumer::run_until) signal, for
    /// every `run*` and stream of this consumer that is running, and for any started later
    /// (they return, or end, at once). Returns at once; the `run*` futures return (and the
    /// streams end) once their shutdown is done. It cannot be undone: build a new consumer to
    /// receive again.
    pub fn shutdown(&self) {
        self.engine.request_shutdown();
    }

    /// Receives messages and calls `handler` for each, until a fatal error.
    ///
    /// The same as [`run_until`](Consumer::run_until) with a signal that never comes.
    ///
    /// # Errors
    ///
    /// As [`run_until`](Consumer::run_until): only a fatal error ends it (a missing queue,
    /// access denied, no credentials), with that error.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// use sqs_consumer::{Consumer, Delivery, MemoryQueue};
    ///
    /// let queue = MemoryQueue::new();
    /// queue.send("job 1")?;
    /// let consumer = Consumer::in_memory(&queue).build()?;
    /// let stopper = consumer.clone();
    /// consumer
    ///     .run(move |delivery: Delivery| {
    ///         let stopper = stopper.clone();
    ///         async move {
    ///             println!("{}", delivery.body());
    ///             delivery.ack().await?;
    ///             stopper.shutdown(); // only for this example: stop after one message
    ///             Ok::<(), sqs_consumer::Error>(())
    ///         }
    ///     })
    ///     .await?;
    /// assert!(queue.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn run<H: Handler>(&self, handler: H) -> Result<(), Error> {
        self.run_until(handler, std::future::pending()).await
    }

    /// Receives messages and calls `handler` for each until `signal` completes (or
    /// [`shutdown`](Consumer::shutdown) is called, or a fatal error), then shuts down gracefully.
    ///
    /// Each delivery's handler runs as its own task. A handler error is logged with the
    /// message id; a panic is caught and logged, and the consumer carries on. Transient
    /// receive errors (throttling, 5xx, timeouts) are retried with jittered back-off; a fatal
    /// one (the queue does not exist, access denied, an invalid request) ends the loop with
    /// that error, after the same shutdown.
    ///
    /// The shutdown, in order:
    /// 1. no receive starts after the signal;
    /// 2. the receives under way are awaited, not abandoned: SQS still serves a long poll
    ///    whose client went away, and the message it takes stays hidden for a whole
    ///    visibility timeout with its receive count raised. Each ends within its
    ///    [`wait_time`](crate::ConsumerBuilder::wait_time) (at the latest
    ///    [`request_timeout`](crate::ConsumerBuilder::request_timeout) after it, on a server
    ///    that does not answer), so **a stop takes up to the wait time** (20 s by default;
    ///    less as soon as a message arrives). Meanwhile the run goes on as before the signal
    ///    (a message released now could be taken again by one of those receives): what they
    ///    bring is handled like any delivery while the shutdown timeout allows; what they
    ///    bring after it is kept hidden, then released (visible again) once they are all in;
    /// 3. FIFO deliveries still waiting their turn are released (visible again at once);
    /// 4. running handlers may finish, until
    ///    [`shutdown_timeout`](crate::ConsumerBuilder::shutdown_timeout) after the signal
    ///    (25 s by default; or until the receives are in, if that is later), their
    ///    deliveries still kept hidden by the keeper; a delivery a handler drops now
    ///    is released at once;
    /// 5. handlers still running then are cancelled and their messages released;
    /// 6. the acks and releases under way are waited for, 3 s at most; then `run_until`
    ///    returns: **with the defaults, at most 28 s after the signal**, inside the 30 s
    ///    grace period of Kubernetes, ECS and systemd. Each step says at `info` what it
    ///    waits for and for how long at most.
    ///
    /// [`shutdown_signal`](crate::shutdown_signal) (default feature `signal`) is the
    /// signal a process gets: SIGTERM or Ctrl-C.
    ///
    /// A shorter `wait_time` makes the stop quicker at the cost of more receive requests on
    /// a quiet queue (one every `wait_time`).
    ///
    /// Dropping the returned future instead (an aborted task, a `select!` or a timeout
    /// around it) cannot wait: it aborts the handlers it started and releases their
    /// messages in the background, and the keeper lets go of them. It abandons no
    /// receive: the one under way finishes in the background (the server still serves it),
    /// and what it brings is released at once (visibility 0), not left hidden for a
    /// visibility timeout.
    ///
    /// ```no_run
    /// # async fn example(consumer: sqs_consumer::Consumer) -> Result<(), sqs_consumer::Error> {
    /// use futures::FutureExt;
    /// use sqs_consumer::Delivery;
    ///
    /// let ctrl_c = tokio::signal::ctrl_c().map(|_| ());
    /// consumer.run_until(|d: Delivery| d.ack(), ctrl_c).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A fatal error, at once: the queue does not exist, access is denied, no region, an
    /// invalid credentials configuration, or (with no `visibility_timeout` set) a queue
    /// whose own timeout is 0 ([`Error::InvalidConfig`]). Transient failures (credentials
    /// that cannot be had included) are retried, and end it with the last of them once they
    /// have gone on for [`give_up_after`](crate::ConsumerBuilder::give_up_after) with no
    /// receive answered; see the guide's [errors](crate::guide::errors) page.
    pub async fn run_until<H, S>(&self, handler: H, signal: S) -> Result<(), Error>
    where
        H: Handler,
        S: Future<Output = ()>,
    {
        self.engine
            .run_until(self.engine.each(handler), signal)
            .await
    }

    /// Receives messages and calls `handler` with deliveries together, as a
    /// [`Batch`](crate::Batch) (each receive's, or several receives' with a
    /// [`batch_window`](crate::ConsumerBuilder::batch_window)), until a fatal error.
    ///
    /// The same as [`run_batch_until`](Consumer::run_batch_until) with a signal that never
    /// comes.
    ///
    /// # Errors
    ///
    /// As [`run_until`](Consumer::run_until).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// use sqs_consumer::{Batch, Consumer, MemoryQueue};
    ///
    /// let queue = MemoryQueue::new();
    /// for i in 0..3 {
    ///     queue.send(format!("row {i}"))?;
    /// }
    /// let consumer = Consumer::in_memory(&queue).build()?;
    /// let stopper = consumer.clone();
    /// consumer
    ///     .run_batch(move |batch: Batch| {
    ///         let stopper = stopper.clone();
    ///         async move {
    ///             println!("{} rows", batch.len());
    ///             batch.ack_all().await?; // one DeleteMessageBatch
    ///             stopper.shutdown(); // only for this example
    ///             Ok::<(), sqs_consumer::Error>(())
    ///         }
    ///     })
    ///     .await?;
    /// assert!(queue.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn run_batch<H: BatchHandler>(&self, handler: H) -> Result<(), Error> {
        self.run_batch_until(handler, std::future::pending()).await
    }

    /// Receives messages and calls `handler` with deliveries together until `signal`
    /// completes (or a fatal error), then shuts down as [`run_until`](Consumer::run_until)
    /// does.
    ///
    /// By default a handler batch holds what one `ReceiveMessage` returned (at most
    /// [`receive_batch_size`](crate::ConsumerBuilder::receive_batch_size)), in receive order. With a
    /// [`batch_window`](crate::ConsumerBuilder::batch_window), a batch collects the
    /// deliveries of several receives, up to [`max_batch`](crate::ConsumerBuilder::max_batch),
    /// and is handed out when full or when its window has passed since its first delivery
    /// (a shutdown hands a filling batch out once the receives under way are in). Each
    /// delivery keeps its own lease,
    /// while its batch fills too. On a FIFO queue a batch holds at most one message of each message
    /// group; a group's next message comes in a later batch, once the one before it was
    /// acked (if it ended otherwise, the rest of the group from that receive is released).
    /// [`handler_timeout`](crate::ConsumerBuilder::handler_timeout) and
    /// [`ack_mode`](crate::ConsumerBuilder::ack_mode) apply to the whole batch.
    ///
    /// ```no_run
    /// # async fn example(consumer: sqs_consumer::Consumer) -> Result<(), sqs_consumer::Error> {
    /// # async fn insert_rows(_: Vec<String>) -> Result<(), std::io::Error> { Ok(()) }
    /// use sqs_consumer::Batch;
    ///
    /// let ctrl_c = async { let _ = tokio::signal::ctrl_c().await; };
    /// consumer
    ///     .run_batch_until(|batch: Batch| async move {
    ///         insert_rows(batch.iter().map(|d| d.body().to_owned()).collect()).await?;
    ///         batch.ack_all().await?; // one DeleteMessageBatch
    ///         Ok::<(), sqs_consumer::BoxError>(())
    ///     }, ctrl_c)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`run_until`](Consumer::run_until).
    pub async fn run_batch_until<H, S>(&self, handler: H, signal: S) -> Result<(), Error>
    where
        H: BatchHandler,
        S: Future<Output = ()>,
    {
        self.engine
            .run_until(self.engine.batches(handler), signal)
            .await
    }

    /// Pauses receiving: no receive starts until [`resume`](Consumer::resume). The
    /// receives under way are not abandoned (the server would still hand them a message):
    /// each ends within its [`wait_time`](crate::ConsumerBuilder::wait_time), and what it
    /// brings is handled as usual. Deliveries already received stay kept hidden;
    /// handlers go on running, and acks and releases go out as usual. Affects every `run*`
    /// and stream of this consumer; [`Stats::reserved`](crate::Stats::reserved) falls to 0
    /// once the receives under way are in.
    pub fn pause(&self) {
        self.engine.set_receiving(Receiving::Paused);
    }

    /// Starts receiving again at once after [`pause`](Consumer::pause).
    pub fn resume(&self) {
        self.engine.set_receiving(Receiving::Active);
    }

    /// `true` while receiving is paused.
    pub fn is_paused(&self) -> bool {
        self.engine.is_paused()
    }

    /// The deliveries as a stream, for driving your own concurrency with `futures`
    /// combinators.
    ///
    /// The same guarantees as [`run`](Consumer::run): kept hidden from the receive on, one
    /// [`max_in_flight`](crate::ConsumerBuilder::max_in_flight) slot per delivery until it is
    /// settled or dropped, and on a FIFO queue one delivery of a message group at a time (the
    /// next is yielded once the one before it was acked; if it ended otherwise, the rest of
    /// the group is released). A fatal error is yielded once, and the stream ends.
    ///
    /// Dropping the stream stops receiving and releases the deliveries it had not yielded at
    /// once (visible again, not kept until the receives under way are in);
    /// deliveries yielded and dropped after that are released at once. The receives under
    /// way are not abandoned: a task finishes them in the background and releases what they
    /// bring. [`shutdown`](Consumer::shutdown) ends it as
    /// [`stream_until`](Consumer::stream_until)'s signal would. Must be called within a tokio
    /// runtime.
    ///
    /// ```no_run
    /// # async fn example(consumer: sqs_consumer::Consumer) {
    /// use futures::StreamExt;
    ///
    /// consumer
    ///     .stream()
    ///     .for_each_concurrent(16, |delivery| async move {
    ///         if let Ok(delivery) = delivery {
    ///             let _ = delivery.ack().await;
    ///         }
    ///     })
    ///     .await;
    /// # }
    /// ```
    pub fn stream(&self) -> DeliveryStream {
        DeliveryStream::start(self.engine.clone(), None)
    }

    /// The deliveries as a stream, as [`stream`](Consumer::stream), until `signal` completes;
    /// then the same graceful shutdown as [`run_until`](Consumer::run_until), and the stream
    /// ends.
    ///
    /// On the signal (or [`shutdown`](Consumer::shutdown)), no receive starts; the receives under
    /// way are awaited as [`run_until`](Consumer::run_until) does, what they bring is
    /// yielded; then deliveries not yet yielded are released (visible again at once), and the
    /// stream waits (until [`shutdown_timeout`](crate::ConsumerBuilder::shutdown_timeout)
    /// after the signal) until every delivery it yielded has been settled or dropped, then
    /// for the acks and releases under way, and ends. A delivery still held after the timeout
    /// stays yours: the keeper goes on extending it, and dropping it releases it at once.
    ///
    /// ```no_run
    /// # async fn example(consumer: sqs_consumer::Consumer) {
    /// use futures::StreamExt;
    ///
    /// let ctrl_c = async { let _ = tokio::signal::ctrl_c().await; };
    /// consumer
    ///     .stream_until(ctrl_c)
    ///     .for_each_concurrent(16, |delivery| async move {
    ///         if let Ok(delivery) = delivery {
    ///             let _ = delivery.ack().await;
    ///         }
    ///     })
    ///     .await; // returns once the stream has drained
    /// # }
    /// ```
    pub fn stream_until<S>(&self, signal: S) -> DeliveryStream
    where
        S: Future<Output = ()> + Send + 'static,
    {
        DeliveryStream::start(self.engine.clone(), Some(Box::pin(signal)))
    }
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("queue", &self.engine.queue_name())
            .field("settings", self.engine.receive_settings())
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

/// The former name of a [`Consumer`] clone, from [`Consumer::handle`].
#[deprecated(since = "0.1.0", note = "a `Consumer` is cheap to clone: clone it")]
pub type ConsumerHandle = Consumer;
