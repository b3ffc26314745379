//! `Consumer`: the receive loop, back-pressure, handler tasks, graceful shutdown, and the
//! delivery stream.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use aws_sdk_sqs::types::Message;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt};
use tokio::sync::{mpsc, OnceCell, OwnedSemaphorePermit, Semaphore};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::{sleep, Instant};
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::config::{ConsumerBuilder, Settings};
use crate::context::Context;
use crate::delivery::{Delivery, Received};
use crate::error::Error;
use crate::fifo;
use crate::handler::Handler;
use crate::memory::MemoryQueue;
use crate::queue::{Queue, Receive};
use crate::stats::{bump, Stats};

/// While the queue is busy, how long a receive waits for a whole batch of free slots before
/// it asks for fewer messages.
const GATHER_SLOTS: Duration = Duration::from_millis(20);

/// What happens to each delivery handed out: run a handler, or send it down a stream.
type Dispatch = Arc<dyn Fn(Delivery) -> BoxFuture<'static, ()> + Send + Sync>;

/// Receives messages from one SQS queue and hands each to a handler as a [`Delivery`].
///
/// Build one with [`Consumer::builder`] (a real queue) or [`Consumer::in_memory`] (a
/// [`MemoryQueue`]), then call [`run`](Consumer::run), [`run_until`](Consumer::run_until)
/// or [`stream`](Consumer::stream).
///
/// The consumer long-polls `ReceiveMessage` only while fewer than
/// [`max_in_flight`](ConsumerBuilder::max_in_flight) deliveries are held, asks for no more
/// messages than there are free slots, and runs each handler as its own task. Every delivery
/// starts its visibility heartbeat the moment it is received. On a FIFO queue (URL ending in
/// `.fifo`) the messages of one message group are handled one at a time, in order.
pub struct Consumer {
    inner: Arc<Inner>,
}

struct Inner {
    ctx: Arc<Context>,
    settings: Settings,
    permits: Arc<Semaphore>,
    /// The visibility timeout in force, seconds: the builder's, or the queue's read once.
    visibility: OnceCell<u32>,
}

/// What one receive came back with.
enum Answer {
    Batch(Batch),
    /// An empty answer.
    Empty,
    /// A transient failure (already waited out).
    Nothing,
}

/// The back-off states shared by the receives under way.
struct Backoffs {
    failures: Backoff,
    idle: Backoff,
}

/// One receive's worth of messages, with the slots they take.
struct Batch {
    messages: Vec<Message>,
    permits: Vec<OwnedSemaphorePermit>,
    /// Just before the request was sent: SQS's 12-hour limit counts from the request.
    received_at: Instant,
    /// When the answer arrived: SQS starts each message's visibility timeout when it hands
    /// the message out, which in a long poll can be long after the request.
    returned_at: Instant,
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
                ctx: Arc::new(Context::new(queue, settings.retry_policy)),
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

    /// Deliveries held right now: handlers running, FIFO deliveries waiting their turn, and
    /// deliveries moved elsewhere and not yet settled or dropped.
    pub fn in_flight(&self) -> usize {
        self.inner.settings.max_in_flight - self.inner.permits.available_permits()
    }

    /// A snapshot of the consumer's counters.
    pub fn stats(&self) -> Stats {
        self.inner
            .ctx
            .counters
            .snapshot(u64::try_from(self.in_flight()).unwrap_or(u64::MAX))
    }

    /// Receives messages and calls `handler` for each, until a fatal error.
    ///
    /// The same as [`run_until`](Consumer::run_until) with a signal that never comes.
    pub async fn run<H: Handler>(&self, handler: H) -> Result<(), Error> {
        self.run_until(handler, std::future::pending()).await
    }

    /// Receives messages and calls `handler` for each until `signal` completes (or a fatal
    /// error), then shuts down gracefully.
    ///
    /// Each delivery's handler runs as its own task. A handler error is logged with the
    /// message id; a panic is caught and logged, and the consumer carries on. Transient
    /// receive errors (throttling, 5xx, timeouts) are retried with jittered back-off; a fatal
    /// one (the queue does not exist, access denied, an invalid request) ends the loop with
    /// that error, after the same shutdown.
    ///
    /// The shutdown, in order:
    /// 1. receiving stops at once: a pending long poll is abandoned, no receive starts after
    ///    the signal;
    /// 2. FIFO deliveries still waiting their turn are released (visible again at once);
    /// 3. running handlers may finish, for up to
    ///    [`shutdown_timeout`](ConsumerBuilder::shutdown_timeout), their deliveries still
    ///    kept hidden by their heartbeats; a delivery a handler drops now is released at once;
    /// 4. handlers still running then are cancelled and their messages released;
    /// 5. the acks and releases under way are waited for; then `run_until` returns.
    ///
    /// Dropping the returned future instead cannot wait: it stops receiving, aborts the
    /// handlers it started, and releases their messages in the background. No heartbeat of
    /// theirs keeps running.
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
    pub async fn run_until<H, S>(&self, handler: H, signal: S) -> Result<(), Error>
    where
        H: Handler,
        S: Future<Output = ()>,
    {
        let mut groups = JoinSet::new();
        let shutdown = CancellationToken::new();
        // Locals drop in reverse order: if this future is dropped, the guard cancels first,
        // so the deliveries the aborted handlers drop release their messages at once.
        let _release_on_drop = shutdown.clone().drop_guard();
        let handler = Arc::new(handler);
        let dispatch: Dispatch = Arc::new(move |d| Box::pin(run_handler(handler.clone(), d)));
        let result = tokio::select! {
            biased;
            () = signal => {
                tracing::info!(queue = %self.inner.ctx.queue_name, "shutdown signal: receiving stopped");
                Ok(())
            }
            result = self.inner.receive_loop(&shutdown, &mut groups, &dispatch) => result,
        };
        self.inner.shut_down(&shutdown, groups).await;
        result
    }

    /// The deliveries as a stream, for driving your own concurrency with `futures`
    /// combinators.
    ///
    /// The same guarantees as [`run`](Consumer::run): heartbeats from the receive on, one
    /// [`max_in_flight`](ConsumerBuilder::max_in_flight) slot per delivery until it is
    /// settled or dropped, and on a FIFO queue one delivery of a message group at a time (the
    /// next is yielded once the one before it was acked; if it ended otherwise, the rest of
    /// the group is released). A fatal error is yielded once, and the stream ends.
    ///
    /// Dropping the stream stops receiving and releases the deliveries it had not yielded;
    /// deliveries yielded and dropped after that are released at once. Must be called within
    /// a tokio runtime.
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
        let (tx, rx) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let inner = self.inner.clone();
        let token = shutdown.clone();
        let pump = tokio::spawn(async move {
            let mut groups = JoinSet::new();
            let out = tx.clone();
            let dispatch: Dispatch = Arc::new(move |d| {
                // A send fails only once the stream is gone; the delivery is then dropped
                // and released.
                let _ = out.send(Ok(d));
                Box::pin(std::future::ready(()))
            });
            let result = tokio::select! {
                () = token.cancelled() => Ok(()),
                result = inner.receive_loop(&token, &mut groups, &dispatch) => result,
            };
            if let Err(err) = result {
                let _ = tx.send(Err(err));
            }
            // Let the FIFO groups already received finish handing out their deliveries.
            while groups.join_next().await.is_some() {}
        });
        DeliveryStream {
            rx,
            pump: pump.abort_handle(),
            _shutdown: shutdown.drop_guard(),
        }
    }
}

impl Inner {
    /// Receives and dispatches until shutdown is signalled (the caller drops this future) or
    /// a fatal error.
    ///
    /// Several receives may be under way at once: one to start with, one more each time a
    /// receive comes back full while slots are still free (up to
    /// `max_concurrent_receives`), and back to one when a receive comes back empty. Each
    /// receive holds the slots for the messages it asks for.
    async fn receive_loop(
        &self,
        shutdown: &CancellationToken,
        groups: &mut JoinSet<()>,
        dispatch: &Dispatch,
    ) -> Result<(), Error> {
        let timeout = self.resolve_visibility_timeout().await?;
        let backoffs = Mutex::new(Backoffs {
            failures: Backoff::new(Duration::from_millis(200), Duration::from_secs(20)),
            idle: Backoff::new(Duration::from_millis(50), Duration::from_secs(2)),
        });
        let settings = &self.settings;
        let most = settings
            .max_concurrent_receives
            .min(
                settings
                    .max_in_flight
                    .div_ceil(settings.batch_size as usize),
            )
            .max(1);
        let mut target = 1;
        let mut busy = false;
        let mut receives = FuturesUnordered::new();
        tracing::info!(
            queue = %self.ctx.queue_name,
            visibility_timeout = timeout,
            max_in_flight = settings.max_in_flight,
            fifo = self.ctx.fifo,
            "consumer started"
        );
        loop {
            // Group tasks log their own failures; this only frees finished ones.
            while groups.try_join_next().is_some() {}
            while receives.len() < target {
                // The first receive waits for a slot (for a whole batch of them while the
                // queue is busy: receives of 10 cost the least); more receives start only on
                // a whole batch of slots free now.
                let permits = match (receives.is_empty(), busy) {
                    (true, false) => self.acquire_permits().await,
                    (true, true) => {
                        // Not for long: handlers that hold their slots a while must not
                        // leave the queue unread.
                        match tokio::time::timeout(GATHER_SLOTS, self.acquire_batch()).await {
                            Ok(permits) => permits,
                            Err(_) => self.acquire_permits().await,
                        }
                    }
                    (false, _) => self.try_acquire_batch(),
                };
                let Some(permits) = permits else {
                    if receives.is_empty() {
                        return Ok(()); // the slots are gone: the consumer is being dropped
                    }
                    break;
                };
                receives.push(self.receive_once(permits, &backoffs));
            }
            let Some(outcome) = receives.next().await else {
                continue;
            };
            match outcome? {
                Answer::Batch(batch) => {
                    busy = batch.messages.len() == settings.batch_size as usize;
                    if busy && target < most && self.permits.available_permits() > 0 {
                        target += 1;
                    }
                    self.dispatch(batch, timeout, shutdown, groups, dispatch);
                }
                Answer::Empty => {
                    target = 1;
                    busy = false;
                }
                Answer::Nothing => {}
            }
        }
    }

    /// One receive with the slots it holds; on an empty answer or a transient failure, it
    /// also waits out the back-off before it completes. An error only when it is fatal.
    async fn receive_once(
        &self,
        permits: Vec<OwnedSemaphorePermit>,
        backoffs: &Mutex<Backoffs>,
    ) -> Result<Answer, Error> {
        let settings = &self.settings;
        let received_at = Instant::now();
        let request = Receive {
            max_messages: u32::try_from(permits.len()).unwrap_or(settings.batch_size),
            wait: settings.wait_time,
            visibility: settings.visibility_timeout,
        };
        let result = self.ctx.queue.receive(request).await;
        let backoff = |pick: fn(&mut Backoffs) -> &mut Backoff| {
            let mut b = backoffs.lock().unwrap_or_else(PoisonError::into_inner);
            pick(&mut b).next_delay()
        };
        let reset = |b: &mut Backoffs, idle: bool| {
            b.failures.reset();
            if idle {
                b.idle.reset();
            }
        };
        match result {
            Ok(messages) if messages.is_empty() => {
                reset(
                    &mut backoffs.lock().unwrap_or_else(PoisonError::into_inner),
                    false,
                );
                let waited = received_at.elapsed();
                if settings.wait_time.is_zero() || waited < settings.wait_time / 2 {
                    // Short polling (or a server that answers early): do not spin.
                    sleep(backoff(|b| &mut b.idle)).await;
                }
                Ok(Answer::Empty)
            }
            Ok(messages) => {
                reset(
                    &mut backoffs.lock().unwrap_or_else(PoisonError::into_inner),
                    true,
                );
                tracing::debug!(count = messages.len(), "received");
                Ok(Answer::Batch(Batch {
                    messages,
                    permits,
                    received_at,
                    returned_at: Instant::now(),
                }))
            }
            Err(err) if err.is_fatal() => {
                tracing::error!(queue = %self.ctx.queue_name, error = %err, "receive failed; stopping");
                Err(err)
            }
            Err(err) => {
                drop(permits);
                let wait = backoff(|b| &mut b.failures);
                tracing::warn!(error = %err, retry_in = ?wait, "receive failed; retrying");
                sleep(wait).await;
                Ok(Answer::Nothing)
            }
        }
    }

    /// Turns a receive into deliveries (heartbeats start here) and starts their groups.
    /// Never awaits, so a shutdown cannot cut it in half.
    fn dispatch(
        &self,
        batch: Batch,
        timeout: u32,
        shutdown: &CancellationToken,
        groups: &mut JoinSet<()>,
        dispatch: &Dispatch,
    ) {
        let ctx = &self.ctx;
        let mut permits = batch.permits.into_iter();
        let mut deliveries = Vec::with_capacity(batch.messages.len());
        for mut message in batch.messages {
            // A server that returns more than asked still gets every message handled (and
            // heartbeated); only the slot accounting is exceeded.
            let permit = permits.next();
            // The delivery keeps the receipt handle (once: real ones run to hundreds of bytes,
            // and 120,000 deliveries may be held at once).
            let receipt = message.receipt_handle.take();
            let message_id = message.message_id().unwrap_or_default();
            let Some(receipt) = receipt else {
                tracing::warn!(%message_id, "skipped a message without a receipt handle");
                continue;
            };
            if ctx.lost_acks.take(message_id) {
                bump(&ctx.counters.skipped_redeliveries);
                tracing::info!(
                    %message_id,
                    "deleting a redelivered message whose ack had failed (its delivery was \
                     lost); the handler is not called again"
                );
                let ctx = ctx.clone();
                self.ctx.settles.spawn(async move {
                    if let Err(err) = ctx.deletes.submit(&receipt, 0).await {
                        tracing::warn!(error = %err, "deleting a redelivered message failed");
                    }
                    drop(permit);
                });
                continue;
            }
            let received = Received {
                receipt,
                received_at: batch.received_at,
                returned_at: batch.returned_at,
                timeout,
                permit,
                shutdown: shutdown.clone(),
            };
            deliveries.push(Delivery::start(ctx.clone(), message, received));
        }
        for group in fifo::partition(deliveries, ctx.fifo) {
            let dispatch = dispatch.clone();
            // Boxed: the task then moves a pointer around, not the whole state machine.
            groups.spawn(Box::pin(fifo::run_group(
                group,
                shutdown.clone(),
                move |d| dispatch(d),
            )));
        }
    }

    /// Steps 2 to 5 of the shutdown described on `Consumer::run_until`.
    async fn shut_down(&self, shutdown: &CancellationToken, mut groups: JoinSet<()>) {
        shutdown.cancel();
        let running = groups.len();
        let limit = self.settings.shutdown_timeout;
        if running > 0 {
            tracing::info!(running, timeout = ?limit, "waiting for running handlers");
        }
        let drained =
            tokio::time::timeout(limit, async { while groups.join_next().await.is_some() {} })
                .await
                .is_ok();
        if !drained {
            tracing::warn!(
                running = groups.len(),
                "handlers still running at the shutdown timeout: cancelling them and releasing \
                 their messages"
            );
            groups.shutdown().await;
        }
        self.ctx.flush_settles().await;
        tracing::info!(queue = %self.ctx.queue_name, "consumer stopped");
    }

    /// Waits for one free slot, then takes as many more as one receive may use.
    async fn acquire_permits(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        let first = self.permits.clone().acquire_owned().await.ok()?;
        Some(self.more_permits(first))
    }

    /// Waits for a whole batch of free slots (fewer if `max_in_flight` is smaller).
    async fn acquire_batch(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        let n = self.batch_permits();
        let all = self.permits.clone().acquire_many_owned(n).await.ok()?;
        Some(split_permits(all))
    }

    /// A whole batch of slots if they are free now.
    fn try_acquire_batch(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        let n = self.batch_permits();
        let all = self.permits.clone().try_acquire_many_owned(n).ok()?;
        Some(split_permits(all))
    }

    fn batch_permits(&self) -> u32 {
        let n = (self.settings.batch_size as usize).min(self.settings.max_in_flight);
        u32::try_from(n).unwrap_or(1)
    }

    fn more_permits(&self, first: OwnedSemaphorePermit) -> Vec<OwnedSemaphorePermit> {
        let sem = &self.permits;
        let mut permits = vec![first];
        while permits.len() < self.settings.batch_size as usize {
            match sem.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        permits
    }

    async fn resolve_visibility_timeout(&self) -> Result<u32, Error> {
        if let Some(t) = self.settings.visibility_timeout {
            return Ok(t);
        }
        self.visibility
            .get_or_try_init(|| async {
                let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(20));
                loop {
                    match self.ctx.queue.visibility_timeout().await {
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

/// One permit per message.
fn split_permits(mut all: OwnedSemaphorePermit) -> Vec<OwnedSemaphorePermit> {
    let mut one_each = Vec::with_capacity(all.num_permits());
    while all.num_permits() > 1 {
        match all.split(1) {
            Some(one) => one_each.push(one),
            None => break,
        }
    }
    one_each.push(all);
    one_each
}

async fn run_handler<H: Handler>(handler: Arc<H>, delivery: Delivery) {
    let span = delivery.span().clone();
    let ctx = delivery.context().clone();
    async move {
        match AssertUnwindSafe(handler.handle(delivery))
            .catch_unwind()
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                bump(&ctx.counters.handler_errors);
                tracing::warn!(error = %err, "handler failed");
            }
            Err(panic) => {
                bump(&ctx.counters.handler_panics);
                tracing::error!(panic = panic_message(&*panic), "handler panicked");
            }
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
            .field("queue", &self.inner.ctx.queue_name)
            .field("settings", &self.inner.settings)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// The deliveries of a [`Consumer`], from [`Consumer::stream`].
pub struct DeliveryStream {
    rx: mpsc::UnboundedReceiver<Result<Delivery, Error>>,
    pump: AbortHandle,
    _shutdown: DropGuard,
}

impl Stream for DeliveryStream {
    type Item = Result<Delivery, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for DeliveryStream {
    fn drop(&mut self) {
        // Only a signal; the drop guard then marks the remaining deliveries for release.
        self.pump.abort();
    }
}

impl fmt::Debug for DeliveryStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryStream")
            .field("buffered", &self.rx.len())
            .finish_non_exhaustive()
    }
}
