//! The `Delivery` guard: one received message, kept hidden while you hold it.
//!
//! Beside it: settling, the one path every ack and release takes (`settle.rs`); what the
//! deliveries of one run share (`run_ties.rs`); the `delivery` span (`span.rs`).

pub(crate) mod run_ties;
pub(crate) mod settle;
pub(crate) mod span;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Span;

use crate::dead_letter::{DeadLetter, Failure};
use crate::delivery::run_ties::RunTies;
use crate::delivery::settle::{move_to_dead_letter, release_unsettled, settle, Moved, Settle};
use crate::delivery::span::{delivery_span, read_trace_parent};
use crate::error::{BoxError, Error, LostReason};
use crate::flow::slot::Slot;
use crate::lease::context::Context;
use crate::lease::{receive_count, Dropped, End, Holder, Lease};
use crate::limits::{secs_rounded_up, HARD_LIMIT, MAX_VISIBILITY_SECS};
use crate::settle_calls::request_batch::Cohort;
use crate::stats::{Counter, Measure};
use crate::trace::parent::TraceParent;

/// One received SQS message, hidden from other consumers while you hold it.
///
/// From the moment it is received, the consumer's keeper calls `ChangeMessageVisibility`
/// halfway through each visibility timeout, so the message stays hidden however long your
/// handler takes (up to SQS's limit of 12 hours after the receive).
///
/// Settle it with [`ack`](Delivery::ack) (delete), [`release`](Delivery::release) (visible
/// again at once) or [`release_after`](Delivery::release_after) (visible again later). Each
/// consumes the delivery, so a message cannot be settled twice. Dropping a delivery without
/// settling it makes the keeper let go of it and applies the consumer's
/// [`RetryPolicy`](crate::RetryPolicy) (by default the message becomes visible again when its
/// current visibility timeout lapses); once the consumer is shutting down, it releases the
/// message at once. Inside a handler, what an unsettled drop means waits for the handler's
/// outcome (see [`AckMode`](crate::AckMode)).
///
/// While held, a delivery counts against the consumer's
/// [`max_in_flight`](crate::ConsumerBuilder::max_in_flight), wherever you move it, until it is
/// settled (an ack counts until it is sent, not answered: see `max_in_flight`).
pub struct Delivery {
    /// The message and its receipt handle, deadline and state, shared with the keeper.
    lease: Arc<Lease>,
    /// What it shares with the run (or stream) that received it.
    run: Arc<RunTies>,
    slot: Slot,
    /// The payload read from S3 (feature `s3`), freed with the delivery; boxed, so that a
    /// delivery stays a few words.
    #[cfg(feature = "s3")]
    payload: Option<Box<crate::payload::pointer::Payload>>,
}

/// What `Delivery::start` needs besides the message.
pub(crate) struct Received {
    /// The instant taken just before the `ReceiveMessage` request was sent; the 12-hour limit
    /// counts from it.
    pub(crate) received_at: Instant,
    /// The instant the answer arrived; the first visibility timeout counts from it (a long
    /// poll may hand the message out long after the request was sent).
    pub(crate) returned_at: Instant,
    /// The visibility timeout the receive applied, in seconds.
    pub(crate) timeout: u32,
    pub(crate) slot: Option<Slot>,
    pub(crate) run: Arc<RunTies>,
    /// The deliveries of the same receive, whose acks may share a request.
    pub(crate) cohort: Option<Arc<Cohort>>,
    /// Who holds it, if it ends before the 12-hour limit (a Lambda invocation).
    pub(crate) holder: Option<Holder>,
}

impl Delivery {
    /// Wraps a received message and hands it to the keeper at once. The message has a receipt
    /// handle (the caller checked).
    pub(crate) fn start(ctx: Arc<Context>, message: Message, received: Received) -> Self {
        let receive_count = receive_count(&message);
        let age = sent_at(&message).map(age_since);
        let span = delivery_span(&ctx, &message, receive_count, age);
        if let Some(age) = age {
            ctx.observe(Measure::MessageAge, age.as_secs_f64());
        }
        ctx.count(Counter::Received);
        ctx.delivery_started();
        let lease = Arc::new(
            Lease::new(
                ctx,
                message,
                received.received_at,
                received.returned_at,
                received.timeout,
                span,
            )
            .in_cohort(received.cohort)
            .held_by(received.holder),
        );
        received.run.keeper().keep(lease.clone());
        received.run.delivery_held();
        Self {
            lease,
            run: received.run,
            slot: received.slot.unwrap_or_default(),
            #[cfg(feature = "s3")]
            payload: None,
        }
    }

    /// The SQS message id.
    pub fn message_id(&self) -> &str {
        self.lease.message().message_id().unwrap_or_default()
    }

    /// The message body (empty if SQS sent none).
    ///
    /// With `ConsumerBuilder::s3_payloads` (feature `s3`), for a message
    /// whose body an Extended Client library stored in S3, the payload read from S3 (the
    /// pointer the queue carried stays in [`message`](Delivery::message)). For an SNS
    /// notification whose `Message` is such a pointer, the body is the envelope as sent, and
    /// `sns()` gives the notification with the payload as its `message`.
    pub fn body(&self) -> &str {
        #[cfg(feature = "s3")]
        if let Some(payload) = &self.payload {
            if payload.carrier == crate::payload::pointer::Carrier::Sqs {
                return &payload.body;
            }
        }
        self.lease.message().body().unwrap_or_default()
    }

    /// Where the payload came from, for a message whose body an Extended Client library stored
    /// in S3: its bucket, key and declared size; `None` for an ordinary message. Feature `s3`.
    ///
    /// ```no_run
    /// # async fn example(delivery: sqs_consumer::Delivery) {
    /// if let Some(location) = delivery.payload_location() {
    ///     tracing::info!(bucket = location.bucket(), key = location.key(), "large message");
    /// }
    /// # }
    /// ```
    #[cfg(feature = "s3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
    pub fn payload_location(&self) -> Option<&crate::payload::pointer::PayloadLocation> {
        self.lease.payload_location()
    }

    /// Keeps the payload read from `location` as this delivery's.
    #[cfg(feature = "s3")]
    pub(crate) fn set_payload(
        &mut self,
        location: crate::payload::pointer::PayloadLocation,
        payload: crate::payload::pointer::Payload,
    ) {
        self.lease.set_payload_location(location);
        self.payload = Some(Box::new(payload));
    }

    /// The payload of an SNS notification whose `Message` was a pointer to S3, once read.
    #[cfg(feature = "json")]
    pub(crate) fn sns_payload(&self) -> Option<&str> {
        #[cfg(feature = "s3")]
        if let Some(payload) = &self.payload {
            if payload.carrier == crate::payload::pointer::Carrier::Sns {
                return Some(&payload.body);
            }
        }
        None
    }

    /// The message as the SDK returned it, with its system and message attributes, but
    /// without its receipt handle: the delivery holds that, and settles the message with it.
    pub fn message(&self) -> &Message {
        self.lease.message()
    }

    /// The FIFO message group, if the message has one (`MessageGroupId`).
    pub fn message_group_id(&self) -> Option<&str> {
        self.lease
            .message()
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
            .map(String::as_str)
    }

    /// When the message was sent: SQS's `SentTimestamp` (milliseconds since the Unix epoch,
    /// by SQS's clock), which the consumer always asks for. `None` only if the server sent
    /// none.
    pub fn sent_at(&self) -> Option<SystemTime> {
        sent_at(self.message())
    }

    /// How long ago the message was sent: now (the system clock) minus
    /// [`sent_at`](Delivery::sent_at); zero if the clocks disagree the other way. The lag an
    /// alert or an autoscaler watches; with feature `metrics` the consumer records it at each
    /// receive (`sqs_consumer_message_age_seconds`), and the `delivery` span carries it
    /// (`age_ms`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// # use sqs_consumer::{Consumer, MemoryQueue};
    /// # let queue = MemoryQueue::new();
    /// # queue.send("hello")?;
    /// # let consumer = Consumer::in_memory(&queue).build()?;
    /// # let mut stream = consumer.stream();
    /// # let delivery = futures::StreamExt::next(&mut stream).await.unwrap()?;
    /// use std::time::Duration;
    ///
    /// if delivery.age() > Some(Duration::from_secs(300)) {
    ///     tracing::warn!(message_id = delivery.message_id(), "five minutes behind");
    /// }
    /// # assert!(delivery.sent_at().is_some());
    /// # assert!(delivery.age() < Some(Duration::from_secs(60)));
    /// # Ok(()) }
    /// ```
    pub fn age(&self) -> Option<Duration> {
        self.sent_at().map(age_since)
    }

    /// How many times SQS has handed this message out, this receive included
    /// (`ApproximateReceiveCount`).
    pub fn receive_count(&self) -> u32 {
        self.lease.receive_count()
    }

    /// When the message was received: the instant taken just before the `ReceiveMessage`
    /// request was sent, on tokio's clock, kept to the millisecond (rounded down, so never
    /// later).
    pub fn received_at(&self) -> Instant {
        self.lease.received_at()
    }

    /// When the message's current visibility timeout ends, as far as this consumer knows, to
    /// the millisecond (rounded down, so never later).
    ///
    /// It starts as the visibility timeout counted from when the receive's answer left SQS
    /// (SQS starts the timeout when it hands the message out): the answer's arrival, less
    /// the time the consumer allows for any call's way (a quarter of the timeout, at most
    /// 1 s, and never before the request). The keeper moves it forward with every
    /// extension. After it passes without an extension, the delivery is lost. With a
    /// visibility timeout of 0 there is no deadline to keep.
    pub fn deadline(&self) -> Instant {
        self.lease.deadline()
    }

    /// The visibility timeout the receive applied (the builder's, the queue's own, or the
    /// estimate of [`adaptive_visibility`](crate::ConsumerBuilder::adaptive_visibility)):
    /// each extension hides the message this long again.
    pub fn visibility_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.lease.timeout()))
    }

    /// The receive plus 12 hours: SQS's limit on how long this message can stay hidden.
    pub fn hard_deadline(&self) -> Instant {
        self.received_at() + HARD_LIMIT
    }

    /// `true` once the delivery is lost: another consumer may get (or have) the message.
    pub fn is_lost(&self) -> bool {
        self.lease.lost_reason().is_some()
    }

    /// Completes when the delivery is lost, with the reason; never completes otherwise.
    ///
    /// The future does not borrow the delivery, so it can race the handler's work:
    ///
    /// ```no_run
    /// # async fn work(_: &str) {}
    /// # async fn example(delivery: sqs_consumer::Delivery) -> Result<(), sqs_consumer::Error> {
    /// let lost = delivery.lost();
    /// tokio::select! {
    ///     _ = work(delivery.body()) => delivery.ack().await?,
    ///     reason = lost => tracing::warn!(%reason, "gave up: the message is no longer ours"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.lease.lost()
    }

    /// Completes when the delivery has ended (acked or dropped), with how.
    pub(crate) fn ended(&self) -> impl Future<Output = End> + Send + 'static {
        self.lease.ended()
    }

    /// The `delivery` span the consumer handles this delivery in: its handler, its
    /// extensions and its settling log there. Its fields follow OpenTelemetry's messaging
    /// conventions (see the guide's integrations page). Set its parent from
    /// [`trace_parent`](Delivery::trace_parent) to join the producer's trace with a
    /// `tracing-opentelemetry` version other than the one feature `opentelemetry` uses.
    pub fn span(&self) -> &Span {
        self.lease.span()
    }

    /// The trace the message's producer was in, when the message carries one well formed:
    /// its W3C `traceparent` message attribute (with `tracestate`), else the X-Ray header
    /// SQS keeps as its `AWSTraceHeader` system attribute (which needs its `Parent`). The
    /// consumer always asks for `AWSTraceHeader`; with feature `opentelemetry` it asks for
    /// `traceparent` and `tracestate` too, and makes this the `delivery` span's parent.
    pub fn trace_parent(&self) -> Option<TraceParent> {
        read_trace_parent(self.message(), |_, _| {})
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        self.lease.context()
    }

    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// Cancelled when the run (or stream) that received this delivery shuts down.
    pub(crate) fn shutdown_token(&self) -> &CancellationToken {
        self.run.shutdown()
    }

    /// Deletes the message (`DeleteMessage`): it will not be delivered again.
    ///
    /// Transient failures are retried for up to 20 s; the keeper keeps the message hidden
    /// meanwhile. The delete goes out in a batch with others: once asked for, it is sent even
    /// if the caller stops waiting (a cancelled handler), and a graceful shutdown waits for
    /// it.
    ///
    /// If the delivery was already lost, the delete is still attempted (SQS may still accept
    /// it), but the result is [`Error::Lost`]: the message may have been handed to another
    /// consumer, so your work may be repeated. The consumer remembers such a message and, if
    /// it comes back to it, deletes it without calling the handler again.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lease was lost (`is_lost()` on the error); a retryable error
    /// when transient failures went on for 20 s; a fatal one (access denied, ...) at once.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// # use sqs_consumer::{Consumer, MemoryQueue};
    /// # let queue = MemoryQueue::new();
    /// # queue.send("hello")?;
    /// # let consumer = Consumer::in_memory(&queue).build()?;
    /// # let mut stream = consumer.stream();
    /// # let delivery = futures::StreamExt::next(&mut stream).await.unwrap()?;
    /// match delivery.ack().await {
    ///     Ok(()) => {}
    ///     Err(err) if err.is_lost() => eprintln!("another consumer may redo this: {err}"),
    ///     Err(err) => return Err(err),
    /// }
    /// # assert!(queue.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn ack(self) -> Result<(), Error> {
        self.settle(Settle::Ack).await
    }

    /// Settles this delivery as `how` says.
    async fn settle(mut self, how: Settle) -> Result<(), Error> {
        self.hand_over_slot(how);
        let leases = [self.lease.clone()];
        let results = settle(&leases, how, Some(self.run.keeper())).await;
        results.into_iter().next().unwrap_or(Ok(()))
    }

    /// It is about to be settled as `how` says. An ack: it no longer counts as held, and its
    /// slot comes free, if the consumer's settle calls under way leave room (see
    /// `Slot::hand_over`). A release keeps its slot until it is answered: its message is
    /// visible again at once, and a receive started on its slot would split it from the
    /// others released with it.
    fn hand_over_slot(&mut self, how: Settle) {
        if how == Settle::Ack && self.slot.hand_over() {
            self.lease.context().delivery_ended();
        }
    }

    /// What the delivery shares with the rest of its run.
    pub(crate) fn run_ties(&self) -> &Arc<RunTies> {
        &self.run
    }

    /// Makes the message visible to every consumer at once (`ChangeMessageVisibility` to 0).
    ///
    /// Transient failures are retried, 4 tries in all; if they all fail the message still
    /// returns, when its current visibility timeout lapses.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lease was lost; otherwise the last try's error (the message
    /// then returns when its current timeout lapses).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// # use sqs_consumer::{Consumer, MemoryQueue};
    /// # let queue = MemoryQueue::new();
    /// # queue.send("not for me")?;
    /// # let consumer = Consumer::in_memory(&queue).build()?;
    /// # let mut stream = consumer.stream();
    /// # let delivery = futures::StreamExt::next(&mut stream).await.unwrap()?;
    /// delivery.release().await?; // visible to every consumer again, at once
    /// # assert_eq!(queue.requests().visibility_changes(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<(), Error> {
        self.settle(Settle::Release(0)).await
    }

    /// Makes the message visible again after `delay` (rounded up to whole seconds), for a
    /// retry later.
    ///
    /// SQS refuses a visibility that ends more than 12 hours after the receive; such a delay
    /// is refused here with [`Error::PastHardDeadline`] before anything is sent, and the
    /// delivery is then dropped (the retry policy applies).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a delay over 43,200 s and [`Error::PastHardDeadline`] for
    /// one that ends past the 12-hour limit, both before anything is sent; otherwise as
    /// [`release`](Delivery::release).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// # use sqs_consumer::{Consumer, MemoryQueue};
    /// use std::time::Duration;
    /// # let queue = MemoryQueue::new();
    /// # queue.send("try later")?;
    /// # let consumer = Consumer::in_memory(&queue).build()?;
    /// # let mut stream = consumer.stream();
    /// # let delivery = futures::StreamExt::next(&mut stream).await.unwrap()?;
    /// // Back off: this message returns in 5 minutes, for this consumer or another.
    /// delivery.release_after(Duration::from_secs(300)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release_after(self, delay: Duration) -> Result<(), Error> {
        let secs = match u32::try_from(secs_rounded_up(delay)) {
            Ok(s) if s <= MAX_VISIBILITY_SECS => s,
            _ => {
                return Err(Error::invalid(
                    "release_after",
                    delay,
                    "a delay of at most 43200 s (12 hours)",
                ))
            }
        };
        let room = self.lease.room();
        if Duration::from_secs(u64::from(secs)) > room {
            return Err(Error::PastHardDeadline {
                message_id: self.message_id().to_owned(),
                requested: delay,
                allowed: Duration::from_secs(room.as_secs()),
            });
        }
        self.settle(Settle::Release(secs)).await
    }

    /// Gives up on this delivery as if its handler had failed with `error`, now, whatever
    /// the [`AckMode`](crate::AckMode): the error is logged at `warn` with the message id and
    /// counted in [`Stats::handler_errors`](crate::Stats::handler_errors), and the message
    /// meets the consumer's [`RetryPolicy`](crate::RetryPolicy) (released at once during a
    /// shutdown), or, once its receive count has reached the
    /// [`dead_letter`](crate::ConsumerBuilder::dead_letter) step's, moves to the dead-letter
    /// queue with `error` as its reason. So the queue's redrive policy counts the attempt,
    /// and no `Ok` of the handler acks it afterwards.
    ///
    /// In a [`Batch`](crate::Batch), fail the deliveries that failed and let the ack mode (or
    /// [`Batch::ack_all`](crate::Batch::ack_all)) settle the rest, as Lambda's
    /// `ReportBatchItemFailures` does:
    ///
    /// ```no_run
    /// # async fn example(consumer: sqs_consumer::Consumer) -> Result<(), sqs_consumer::Error> {
    /// # async fn store(_: &str) -> Result<(), std::io::Error> { Ok(()) }
    /// use sqs_consumer::{Batch, BoxError};
    ///
    /// // Built with .ack_mode(AckMode::OnSuccess): what the handler leaves is acked on Ok.
    /// consumer
    ///     .run_batch(|batch: Batch| async move {
    ///         for delivery in batch {
    ///             if let Err(err) = store(delivery.body()).await {
    ///                 delivery.fail(err).await?; // this one is retried later
    ///             }
    ///             // the others are dropped here: acked together when the handler returns Ok
    ///         }
    ///         Ok::<(), BoxError>(())
    ///     })
    ///     .await
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The release's error, when the retry policy releases the message and that fails (the
    /// message then returns when its visibility lapses); [`Error::Lost`] when the delivery
    /// was lost already (nothing is sent); a move's errors as
    /// [`dead_letter`](Delivery::dead_letter) says.
    pub async fn fail(self, error: impl Into<BoxError>) -> Result<(), Error> {
        let error = error.into();
        self.lease.context().count(Counter::HandlerErrors);
        let chain = crate::error::chain(&*error).to_string();
        let message_id = self.message_id();
        if self.dead_letter_due() {
            tracing::warn!(parent: self.span(), %message_id, error = %chain, "delivery failed; it moves to the dead-letter queue");
        } else {
            tracing::warn!(parent: self.span(), %message_id, error = %chain, "delivery failed; it gets the retry policy");
        }
        self.give_up(chain).await
    }

    /// Whether a failure now moves the message to the dead-letter queue (its receive count
    /// has reached the step's) rather than giving it the retry policy.
    pub(crate) fn dead_letter_due(&self) -> bool {
        let ctx = self.lease.context();
        ctx.dead_letter()
            .is_some_and(|dead_letter| dead_letter.is_due(self.lease.receive_count()))
    }

    /// The failure step, for a failure described by `chain`: the move to the dead-letter
    /// queue once it is due, the retry policy otherwise. Logs nothing of its own but a
    /// move's trouble: the caller says why it failed.
    pub(crate) async fn give_up(self, chain: String) -> Result<(), Error> {
        let ctx = self.lease.context().clone();
        match ctx.dead_letter() {
            Some(dead_letter) if dead_letter.is_due(self.lease.receive_count()) => {
                self.move_to(dead_letter, Failure::Error(chain)).await
            }
            _ => self.meet_retry_policy().await,
        }
    }

    /// Moves the message to the consumer's dead-letter queue now, whatever its receive count,
    /// with `reason` as the `error` of the copy's `sqs-consumer.failure` attribute: a copy is
    /// sent (the original body and message attributes, plus that attribute), then the
    /// original is deleted, as the [`dead_letter`](crate::ConsumerBuilder::dead_letter) step
    /// does for a failure. Counted in [`Stats::dead_lettered`](crate::Stats::dead_lettered).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// use sqs_consumer::{Consumer, MemoryQueue};
    ///
    /// let (queue, failed) = (MemoryQueue::new(), MemoryQueue::new());
    /// queue.send("{not json")?;
    /// let consumer = Consumer::in_memory(&queue).dead_letter(&failed, 5).build()?;
    /// # let mut stream = consumer.stream();
    /// # let delivery = futures::StreamExt::next(&mut stream).await.unwrap()?;
    /// // A message no retry can help: moved at once, with the reason.
    /// delivery.dead_letter("the body is not JSON").await?;
    /// assert_eq!((queue.len(), failed.len()), (0, 1));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming `dead_letter` when the consumer has no dead-letter
    /// queue (nothing is sent, and the delivery meets the retry policy); [`Error::Lost`] when
    /// the delivery was lost (no copy is sent if it was lost before); the send's error when
    /// the copy could not be sent, transient failures retried for 20 s (the message stays in
    /// its queue and meets the retry policy); the delete's error when the copy is sent but
    /// the original could not be deleted (if it comes back to this consumer it is deleted
    /// without its handler and without another copy).
    pub async fn dead_letter(self, reason: impl Into<String>) -> Result<(), Error> {
        let ctx = self.lease.context().clone();
        let Some(dead_letter) = ctx.dead_letter() else {
            return Err(Error::invalid(
                "dead_letter",
                "a consumer without a dead-letter queue",
                "a dead-letter queue, set with ConsumerBuilder::dead_letter",
            ));
        };
        let reason = reason.into();
        tracing::warn!(parent: self.span(), message_id = %self.message_id(), %reason, "moving the delivery to the dead-letter queue");
        self.move_to(dead_letter, Failure::Reason(reason)).await
    }

    /// Moves the message to `dead_letter` for `failure`; if no copy could be sent, the
    /// retry policy applies.
    async fn move_to(self, dead_letter: &DeadLetter, failure: Failure) -> Result<(), Error> {
        let (lease, keeper) = (&self.lease, Some(self.run.keeper()));
        match move_to_dead_letter(lease, dead_letter, &failure, keeper).await {
            Moved::Done => Ok(()),
            Moved::NotSent(err) if err.is_lost() => Err(err),
            Moved::NotSent(err) => {
                if let Err(release) = self.meet_retry_policy().await {
                    tracing::warn!(error = %release.chain(), "releasing the delivery failed; it returns when its visibility lapses");
                }
                Err(err)
            }
            Moved::CopyOnly(err) => Err(err),
        }
    }

    /// What a failure does: the retry policy (released at once during a shutdown).
    pub(crate) async fn meet_retry_policy(self) -> Result<(), Error> {
        let lease = &self.lease;
        if let Some(reason) = lease.lost_reason() {
            return Err(Error::Lost {
                message_id: self.message_id().to_owned(),
                reason,
                source: None,
            });
        }
        match lease.visibility_on_drop(self.run.shutdown().is_cancelled()) {
            Some(secs) => self.settle(Settle::Release(secs)).await,
            // Left to come back when its visibility lapses: settled as it is.
            None => self.settle(Settle::Leave).await,
        }
    }

    /// Tells the keeper to let go (once).
    fn let_go(&self) {
        self.run.keeper().let_go(&self.lease);
    }
}

/// Acks `deliveries` together (their deletes share requests, each retried as
/// [`Delivery::ack`] retries): each one's result, in order.
pub(crate) async fn ack_all(deliveries: Vec<Delivery>) -> Vec<Result<(), Error>> {
    settle_all(deliveries, Settle::Ack).await
}

/// Makes `deliveries` visible again at once, together (each retried as
/// [`Delivery::release`] retries): each one's result, in order.
pub(crate) async fn release_all(deliveries: Vec<Delivery>) -> Vec<Result<(), Error>> {
    settle_all(deliveries, Settle::Release(0)).await
}

/// Settles `deliveries` together, as `how` says (deliveries of one run share its keeper).
async fn settle_all(deliveries: Vec<Delivery>, how: Settle) -> Vec<Result<(), Error>> {
    let Some(first) = deliveries.first() else {
        return Vec::new();
    };
    let keeper = first.run.keeper().clone();
    let leases: Vec<_> = deliveries.iter().map(|d| d.lease.clone()).collect();
    let mut deliveries = deliveries;
    deliveries.iter_mut().for_each(|d| d.hand_over_slot(how));
    settle(&leases, how, Some(&keeper)).await
}

/// `SentTimestamp`, if the message carries a valid one.
fn sent_at(message: &Message) -> Option<SystemTime> {
    let millis: u64 = message
        .attributes()?
        .get(&MessageSystemAttributeName::SentTimestamp)?
        .parse()
        .ok()?;
    UNIX_EPOCH.checked_add(Duration::from_millis(millis))
}

/// How long ago `sent` was by the system clock; zero if it is in the future.
fn age_since(sent: SystemTime) -> Duration {
    SystemTime::now()
        .duration_since(sent)
        .unwrap_or(Duration::ZERO)
}

impl Drop for Delivery {
    fn drop(&mut self) {
        // Only signals: tell the keeper to let go, hand a release to its own task. A delivery
        // dropped in its handler stays kept until the handler's outcome settles it.
        let dropped = self.lease.drop_delivery();
        if dropped != Dropped::Deferred {
            self.let_go();
        }
        if dropped == Dropped::Unsettled {
            let span = self.lease.span().clone();
            let runtime = self.lease.context().calls().runtime(self.run.runtime());
            match runtime {
                Some(runtime) => {
                    let shutting_down = self.run.shutdown().is_cancelled();
                    let releases = self.run.background();
                    release_unsettled(&self.lease, shutting_down, &runtime, &span, releases);
                }
                // No runtime to release it on: it returns when its visibility lapses.
                None => self.lease.mark_ended(),
            }
        }
        if !self.slot.is_handed_over() {
            self.lease.context().delivery_ended();
        }
        self.run.delivery_dropped();
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("message_id", &self.message_id())
            .field("receipt_handle", &ShortHandle(self.lease.receipt()))
            .field("receive_count", &self.receive_count())
            .field("received_at", &self.received_at())
            .field("deadline", &self.deadline())
            .field("lost", &self.lease.lost_reason())
            .finish_non_exhaustive()
    }
}

/// Shows only the start of a receipt handle: enough to tell two apart in a log, not enough
/// to act on the message.
struct ShortHandle<'a>(&'a str);

impl fmt::Debug for ShortHandle<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix: String = self.0.chars().take(8).collect();
        write!(f, "\"{prefix}…\"")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The guard and its keeper driven through a real `Delivery` on a `MemoryQueue`, on
    //! the paused clock: `sleep` here only moves virtual time forward.
    use tokio::time::{sleep, sleep_until};

    use super::*;
    use crate::keeper::schedule::COALESCE_WINDOW;
    use crate::keeper::Keeper;
    use crate::keeper_thread::KeeperRuntime;
    use crate::limits::CAP_MARGIN;
    use crate::memory::counts::Action;
    use crate::memory::MemoryQueue;
    use crate::queue::Queue;
    use crate::retry_policy::RetryPolicy;
    use crate::settle_calls::request_batch::RequestsAtOnce;
    use crate::settle_calls::SettleHooks;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn queue(visibility: u64) -> MemoryQueue {
        MemoryQueue::builder()
            .visibility_timeout(secs(visibility))
            .build()
            .expect("valid queue")
    }

    /// Receives the queue's first message the way the consumer does, with `visibility`
    /// (or the queue's own timeout) and no in-flight slot.
    pub(crate) async fn hold(queue: &MemoryQueue, visibility: Option<u32>) -> Delivery {
        let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
        hold_in(queue, visibility, run).await
    }

    /// As [`hold`], kept by `run`'s keeper (shared by the deliveries of one run).
    async fn hold_in(queue: &MemoryQueue, visibility: Option<u32>, run: Arc<RunTies>) -> Delivery {
        let received_at = Instant::now();
        let mut messages = queue
            .receive_with_visibility(1, Duration::ZERO, visibility.map(|v| secs(u64::from(v))))
            .await
            .expect("receive");
        let message = messages.pop().expect("a message to receive");
        assert!(message.receipt_handle().is_some(), "a receipt handle");
        let timeout = visibility.unwrap_or(queue.visibility_timeout().as_secs() as u32);
        let ctx = Context::new(
            &Queue::new(queue.clone()),
            RetryPolicy::Leave,
            KeeperRuntime::Caller,
            RequestsAtOnce::default(),
        );
        let received = Received {
            received_at,
            returned_at: Instant::now(),
            timeout,
            slot: None,
            run,
            cohort: None,
            holder: None,
        };
        Delivery::start(std::sync::Arc::new(ctx), message, received)
    }

    fn extensions(queue: &MemoryQueue) -> u64 {
        queue.requests().visibility_changes()
    }

    #[tokio::test(start_paused = true)]
    async fn extends_at_half_the_timeout_by_the_timeout_again_and_again() {
        let q = queue(30);
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        let r = d.received_at();
        assert_eq!(d.deadline(), r + secs(30));
        for round in 1..=10u64 {
            // Just before and just after each half-way point.
            sleep_until(r + secs(15 * round) - Duration::from_millis(100)).await;
            assert_eq!(
                extensions(&q),
                round - 1,
                "no early extension in round {round}"
            );
            sleep_until(r + secs(15 * round) + Duration::from_millis(100)).await;
            assert_eq!(extensions(&q), round, "one extension per half timeout");
            assert_eq!(d.deadline(), r + secs(15 * round + 30));
        }
        // Still hidden after 5 timeouts.
        assert_eq!(q.in_flight_len(), 1);
        assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
        assert!(!d.is_lost());
        let stats = d.context().stats(0);
        assert_eq!((stats.extended, stats.capped), (10, 0), "none cut short");
    }

    #[tokio::test(start_paused = true)]
    async fn holding_and_settling_wake_the_keeper_only_when_it_must() {
        let q = queue(30);
        for i in 0..20 {
            q.send(format!("m{i}")).unwrap();
        }
        let keeper = Keeper::new(KeeperRuntime::Caller);
        let run = RunTies::new(Default::default(), keeper.clone());
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(hold_in(&q, None, run.clone()).await);
            tokio::task::yield_now().await;
        }
        // The first started the keeper; the others are due with its first timer (15 s).
        assert_eq!(keeper.rings(), 1);
        for d in held.drain(..10) {
            d.ack().await.unwrap();
        }
        for d in held.drain(..5) {
            d.release().await.unwrap();
        }
        drop(held.drain(..));
        // The releases (visibility changes to 0) are done; the drops sent nothing.
        sleep(Duration::from_millis(100)).await;
        assert_eq!(extensions(&q), 5);
        assert_eq!(
            keeper.rings(),
            1,
            "settling and dropping do not wake the keeper"
        );
        // One due before the keeper's first timer (at 2 s) rings it, and is extended then.
        q.send("short").unwrap();
        let short = hold_in(&q, Some(4), run.clone()).await;
        assert_eq!(keeper.rings(), 2);
        sleep(Duration::from_millis(2_100)).await;
        assert_eq!(extensions(&q), 6);
        short.ack().await.unwrap();
        // At 15 s the keeper wakes for the leases it was told to let go of without being woken:
        // nothing is sent for them.
        let before = extensions(&q);
        sleep(secs(20)).await;
        assert_eq!(extensions(&q), before);
        assert_eq!(keeper.rings(), 2);
    }

    /// A settled or dropped delivery's lease (and with it its `delivery` span, which ends
    /// when the last handle goes) leaves the keeper within `LET_GO_WITHIN`, though the
    /// keeper's next timer is a whole half timeout away and letting go does not ring it.
    #[tokio::test(start_paused = true)]
    async fn a_settled_lease_leaves_the_keeper_within_a_second() {
        use crate::keeper::LET_GO_WITHIN;
        let q = queue(30);
        for i in 0..3 {
            q.send(format!("m{i}")).unwrap();
        }
        let keeper = Keeper::new(KeeperRuntime::Caller);
        let run = RunTies::new(Default::default(), keeper.clone());
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(hold_in(&q, None, run.clone()).await);
        }
        sleep(secs(2)).await;
        let leases: Vec<Arc<Lease>> = held.iter().map(|d| d.lease().clone()).collect();
        let mut held = held.into_iter();
        held.next().unwrap().ack().await.unwrap();
        held.next().unwrap().release().await.unwrap();
        drop(held);
        let settled = Instant::now();
        while leases.iter().any(|l| Arc::strong_count(l) > 1) {
            assert!(settled.elapsed() <= LET_GO_WITHIN, "still kept");
            sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(keeper.rings(), 1, "letting go did not ring the keeper");
    }

    /// Whoever settles or drops a delivery lets go of its lease, often more than one of
    /// them: the first tells the keeper, the others add nothing to its inbox (a full inbox
    /// rings the keeper).
    #[tokio::test(start_paused = true)]
    async fn a_lease_let_go_of_again_and_again_is_forgotten_once() {
        let q = queue(30);
        q.send("a").unwrap();
        let keeper = Keeper::new(KeeperRuntime::Caller);
        let run = RunTies::new(Default::default(), keeper.clone());
        let d = hold_in(&q, None, run.clone()).await;
        sleep(secs(1)).await;
        assert_eq!(keeper.rings(), 1);
        let lease = d.lease().clone();
        for _ in 0..2_000 {
            keeper.let_go(&lease);
        }
        assert_eq!(
            keeper.rings(),
            1,
            "one command for the keeper, not one per call"
        );
        let let_go_at = Instant::now();
        while Arc::strong_count(&lease) > 2 {
            assert!(let_go_at.elapsed() <= secs(2), "still kept");
            sleep(Duration::from_millis(10)).await;
        }
        drop(d);
        sleep(secs(20)).await;
        assert_eq!(extensions(&q), 0, "a lease let go of is not extended");
    }

    #[test]
    fn a_keeper_gone_with_its_runtime_is_started_again_by_the_next_delivery() {
        let paused = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap()
        };
        let q = queue(30);
        q.send("a").unwrap();
        q.send("b").unwrap();
        let keeper = Keeper::new(KeeperRuntime::Caller);
        let run = RunTies::new(Default::default(), keeper.clone());
        let first = paused().block_on(async {
            let d = hold_in(&q, None, run.clone()).await;
            tokio::task::yield_now().await;
            d
        });
        // That runtime is gone, and the keeper's task with it.
        assert_eq!(keeper.rings(), 1);
        paused().block_on(async {
            // Due after the gone keeper's first timer: it rings all the same, and is kept.
            let second = hold_in(&q, None, run.clone()).await;
            assert_eq!(keeper.rings(), 2);
            sleep(secs(15) + Duration::from_millis(100)).await;
            assert_eq!(extensions(&q), 1);
            assert!(!second.is_lost());
            second.ack().await.unwrap();
        });
        drop(first);
    }

    /// An extension answered after its delivery was acked extends nothing: it is not
    /// counted, and nothing more is sent for it.
    #[tokio::test(start_paused = true)]
    async fn an_extension_answered_after_the_ack_is_not_counted() {
        // Extensions are answered 300 ms late; the one due at 5 s is under way when the
        // handler acks at 5.1 s.
        let q = MemoryQueue::builder()
            .visibility_timeout(secs(10))
            .faults(
                crate::memory::Faults::new(1)
                    .held_answer(1.0, Duration::from_millis(300))
                    .actions([Action::ChangeMessageVisibilityBatch]),
            )
            .build()
            .expect("valid queue");
        q.send("job").unwrap();
        // The keeper outlives the delivery, as a consumer's does.
        let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
        let d = hold_in(&q, None, run.clone()).await;
        let r = d.received_at();
        let ctx = d.context().clone();
        sleep_until(r + Duration::from_millis(5_100)).await;
        assert_eq!(extensions(&q), 1, "under way");
        d.ack().await.expect("ack");
        sleep(secs(30)).await;
        let stats = ctx.stats(0);
        assert_eq!((stats.acked, stats.extended), (1, 0));
        assert_eq!(extensions(&q), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_extension_is_counted() {
        let q = queue(10);
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        let late = || d.context().stats(0).late_extensions;
        // Due at 5 s. Done 1 s late: not counted (only later than min(T/4, 1 s) counts).
        tokio::time::advance(Duration::from_millis(6_000)).await;
        sleep(Duration::from_millis(1)).await;
        assert_eq!((extensions(&q), late()), (1, 0));
        // Next due at 6 + 5 = 11 s; jump the clock to about 13 s at once, as a runtime
        // whose threads were blocked for two seconds would see it.
        tokio::time::advance(secs(7)).await;
        sleep(Duration::from_millis(1)).await;
        assert_eq!((extensions(&q), late()), (2, 1));
        assert!(!d.is_lost());
    }

    #[tokio::test(start_paused = true)]
    async fn an_extension_held_up_until_the_deadline_nears_is_not_sent() {
        // T = 10 s, due at 5 s, deadline at 10 s; no call may leave later than 1 s before it
        // (SQS answers a change that arrives after the deadline with success, doing nothing).
        let q = queue(10);
        q.send("on time").unwrap();
        q.send("too late").unwrap();
        let on_time = hold(&q, None).await;
        // The runtime is held up until 8.9 s: still time to send.
        tokio::time::advance(Duration::from_millis(8_900)).await;
        sleep(Duration::from_millis(1)).await;
        assert_eq!(extensions(&q), 1);
        assert!(!on_time.is_lost());
        assert_eq!(
            on_time.deadline(),
            on_time.received_at() + Duration::from_millis(18_900)
        );

        let too_late = hold(&q, None).await;
        let r = too_late.received_at();
        // Held up until 9.1 s: lost, and nothing sent.
        tokio::time::advance(Duration::from_millis(9_100)).await;
        assert_eq!(too_late.lost().await, LostReason::ExtensionFailed);
        assert_eq!(Instant::now(), r + Duration::from_millis(9_100));
        assert_eq!(extensions(&q), 1, "no extension for the late one");
        let stats = too_late.context().stats(0);
        assert_eq!(stats.late_extensions, 1, "{stats:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_short_timeout_the_send_margin_and_the_late_threshold_are_a_quarter_of_it() {
        // T = 2 s, due at 1 s, deadline at 2 s: a quarter of T (0.5 s), not 1 s, is both the
        // margin before the deadline and how late an extension may be before it counts late.
        let q = queue(2);
        q.send("on time").unwrap();
        q.send("too late").unwrap();
        let on_time = hold(&q, None).await;
        // Held up until 1.45 s: 0.45 s late (not counted), 0.55 s left: sent.
        tokio::time::advance(Duration::from_millis(1_450)).await;
        sleep(Duration::from_millis(1)).await;
        assert_eq!(extensions(&q), 1);
        assert!(!on_time.is_lost());
        assert_eq!(on_time.context().stats(0).late_extensions, 0);
        on_time.ack().await.unwrap();

        let too_late = hold(&q, None).await;
        // Held up until 1.55 s: 0.55 s late (counted), 0.45 s left: lost, nothing sent.
        tokio::time::advance(Duration::from_millis(1_550)).await;
        assert_eq!(too_late.lost().await, LostReason::ExtensionFailed);
        assert_eq!(extensions(&q), 1, "no extension for the late one");
        assert_eq!(too_late.context().stats(0).late_extensions, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_timeout_sends_no_extension() {
        let q = queue(30);
        q.send("job").unwrap();
        let d = hold(&q, Some(0)).await;
        sleep(secs(600)).await;
        assert_eq!(extensions(&q), 0);
        assert!(!d.is_lost());
        assert_eq!(d.deadline(), d.received_at());
    }

    #[tokio::test(start_paused = true)]
    async fn ack_release_and_drop_each_let_the_keeper_go() {
        let q = queue(10);
        for _ in 0..3 {
            q.send("job").unwrap();
        }
        // One keeper for the three, alive to the end (as a consumer's is): a keeper of its
        // own would end with its delivery, and so would the keeper, whatever settling did.
        let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
        let acked = hold_in(&q, None, run.clone()).await;
        let released = hold_in(&q, None, run.clone()).await;
        let dropped = hold_in(&q, None, run.clone()).await;
        sleep(secs(6)).await;
        assert_eq!(extensions(&q), 3, "each extended once at 5 s");

        acked.ack().await.expect("ack");
        released.release().await.expect("release");
        drop(dropped);
        let after_settling = extensions(&q);
        assert_eq!(after_settling, 4, "the release itself is one call");
        sleep(secs(120)).await;
        assert_eq!(
            extensions(&q),
            after_settling,
            "no extension after settling"
        );
        assert_eq!(q.requests().deletes(), 1);
        // The acked one is gone; the other two are back.
        assert_eq!(q.len(), 2);
        assert_eq!(q.receive(10, Duration::ZERO).await.unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_delivery_returns_when_its_timeout_lapses() {
        let q = queue(10);
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        let r = d.received_at();
        sleep_until(r + secs(6)).await; // extended at 5 s: hidden until 15 s
        drop(d);
        sleep_until(r + secs(14)).await;
        assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
        sleep_until(r + secs(15)).await;
        let again = q.receive(10, Duration::ZERO).await.unwrap();
        assert_eq!(again.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn holding_13_hours_caps_the_last_extension_warns_once_then_loses_it() {
        let q = queue(30);
        q.send("long job").unwrap();
        let d = hold(&q, None).await;
        let r = d.received_at();
        let limit = r + HARD_LIMIT - CAP_MARGIN;
        assert_eq!(d.hard_deadline(), r + HARD_LIMIT);

        sleep_until(limit - secs(1)).await;
        assert_eq!(
            d.deadline(),
            limit,
            "the last extension ends exactly at the margin"
        );
        assert_eq!(q.in_flight_len(), 1, "still hidden just before the limit");
        assert!(!d.is_lost());
        // Counted where the warning is logged, once per delivery.
        let capped = || d.context().stats(0).capped;
        assert_eq!(capped(), 1);

        // Hold on to 13 hours: the message goes to another receiver at the limit.
        let lost = d.lost();
        sleep_until(r + secs(13 * 3600)).await;
        assert_eq!(lost.await, LostReason::HardDeadline);
        assert!(d.is_lost());
        assert_eq!(capped(), 1, "warned once only");
        let other = q.receive(10, Duration::ZERO).await.unwrap();
        assert_eq!(other.len(), 1, "another receiver gets it");
        // One every 15 s from 15 s to 43,170 s, the last one cut to 25 s; none refused
        // (the queue refuses any that would end past the 12 hours).
        assert_eq!(extensions(&q), 43_170 / 15);
        match d.ack().await {
            Err(Error::Lost { reason, .. }) => assert_eq!(reason, LostReason::HardDeadline),
            other => panic!("ack of a lost delivery must report it, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn late_retries_near_the_limit_stop_extending_instead_of_spinning() {
        // T = 30: the capped extensions are due at 43,170 s and 43,180 s. Failures make
        // the first land late (0.3..0.6 s) and the second less late (0.1..0.2 s), so the
        // second can no longer gain anything: the keeper must let go, not retry at once
        // forever.
        let q = queue(30);
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        let r = d.received_at();
        sleep_until(r + secs(43_169)).await;
        q.fail_next(Action::ChangeMessageVisibility, "AccessDenied", 2);
        sleep_until(r + secs(43_175)).await;
        let first_late = d.deadline() - (r + secs(43_194));
        assert!(
            first_late >= Duration::from_millis(300) && first_late < secs(1),
            "{first_late:?}"
        );
        q.fail_next(Action::ChangeMessageVisibility, "AccessDenied", 1);
        let before = extensions(&q);
        assert_eq!(d.lost().await, LostReason::HardDeadline);
        assert_eq!(
            Instant::now(),
            r + secs(43_194) + first_late,
            "lost at its deadline"
        );
        assert_eq!(
            extensions(&q) - before,
            1,
            "one failed call, then nothing more"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_ack_racing_an_extension_is_not_reported_lost() {
        // The extension due at 5 s is throttled; the keeper would retry it 100..200 ms
        // later, but the ack goes out at 5.01 s and stops it: no extension races the delete,
        // and the successful ack is not turned into a "lost" one. (An extension already
        // under way when the ack starts is covered in `lease/mod.rs`.)
        let q = queue(10);
        q.send("m").unwrap();
        let d = hold(&q, None).await;
        let r = d.received_at();
        sleep_until(r + secs(4)).await;
        q.fail_next(Action::ChangeMessageVisibility, "RequestThrottled", 1);
        sleep_until(r + secs(5) + Duration::from_millis(10)).await;
        let ctx = d.context().clone();
        d.ack().await.expect("the delete succeeded");
        assert!(q.is_empty());
        sleep(secs(1)).await;
        assert_eq!(
            extensions(&q),
            1,
            "the throttled try, and no retry after the ack"
        );
        assert_eq!(ctx.stats(0).lost, 0, "not counted as lost either");
    }

    /// A queue of timeout `t` seconds whose deletes take effect at once and are answered
    /// `hold` later.
    fn holding_delete_answers(t: u64, hold: Duration) -> MemoryQueue {
        MemoryQueue::builder()
            .visibility_timeout(secs(t))
            .faults(
                crate::memory::Faults::new(1)
                    .held_answer(1.0, hold)
                    .actions([Action::DeleteMessageBatch]),
            )
            .build()
            .expect("valid queue")
    }

    /// Waits for `lost`: a lapse before an answer, at `deadline` and before `by`.
    async fn lost_at_its_deadline(
        lost: impl std::future::Future<Output = LostReason>,
        deadline: Instant,
        by: Instant,
    ) {
        let reason = tokio::time::timeout_at(by, lost)
            .await
            .expect("lost at its deadline");
        assert_eq!(reason, LostReason::LapsedBeforeAnswer);
        assert!(
            Instant::now() >= deadline,
            "lost {:?} before its deadline",
            deadline - Instant::now()
        );
    }

    /// A release under way is not extended (an extension landing after it would hide the
    /// message again). Its release lets go of the lease at once, but on another thread the
    /// keeper may come to its timer first: it sends nothing then, and looks at it again
    /// until its let-go comes or its deadline passes; lost then, not when it fell due.
    #[tokio::test(start_paused = true)]
    async fn a_kept_lease_whose_release_is_under_way_is_lost_at_its_deadline_not_before() {
        // What a release does before it lets go of the lease.
        kept_while_released(|lease| _ = lease.begin_release()).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_trying_again_is_not_extended_while_its_try_is_under_way() {
        // What a release whose first try failed does before its second.
        kept_while_released(|lease| {
            lease.begin_release();
            lease.waiting_to_retry();
            lease.retrying();
        })
        .await;
    }

    /// Holds a message (T = 4 s) and at 1 s does to its lease what a release under way does
    /// (`release`), its keeper still keeping it: lost at its deadline, never extended.
    async fn kept_while_released(release: impl FnOnce(&Lease)) {
        let q = queue(4);
        q.send("m").unwrap();
        let d = hold(&q, None).await;
        let (r, deadline) = (d.received_at(), d.deadline());
        let lost = d.lost();
        sleep_until(r + secs(1)).await;
        release(d.lease());
        lost_at_its_deadline(lost, deadline, deadline + secs(1)).await;
        assert_eq!(extensions(&q), 0, "no extension while it is released");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ack_unanswered_at_its_deadline_is_lost_there_and_reported_lost() {
        // The delete takes effect, but its answer comes 6 s late: after the 4 s deadline,
        // which nothing extends while the delete is under way.
        let q = holding_delete_answers(4, secs(6));
        q.send("m").unwrap();
        let d = hold(&q, None).await;
        let (r, deadline) = (d.received_at(), d.deadline());
        let lost = d.lost();
        let ctx = d.context().clone();
        let ack = tokio::spawn(d.ack());
        // Not when the answer came.
        lost_at_its_deadline(lost, deadline, r + secs(5)).await;
        let err = ack.await.unwrap().expect_err("answered after the deadline");
        assert!(err.is_lost(), "{err}");
        assert!(Instant::now() >= r + secs(6), "the answer was awaited");
        let stats = ctx.stats(0);
        assert_eq!((stats.acked, stats.lost_acks, stats.lost), (0, 1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_still_under_way_at_the_last_safe_moment_is_extended_then() {
        // T = 10 s; the delete's answer comes 9.5 s after it was sent. The keeper holds back
        // the extension due at 5 s while the delete is under way, and sends it only at the
        // last moment one can reach SQS before the deadline (1 s before it).
        let q = holding_delete_answers(10, Duration::from_millis(9_500));
        q.send("m").unwrap();
        let d = hold(&q, None).await;
        let deadline = d.deadline();
        let ack = tokio::spawn(d.ack());
        sleep_until(deadline - Duration::from_millis(1_020)).await;
        assert_eq!(
            extensions(&q),
            0,
            "held back while the delete may still be answered"
        );
        sleep_until(deadline - secs(1)).await;
        assert_eq!(extensions(&q), 1, "sent at the last safe moment");
        ack.await.unwrap().expect("answered before the deadline");
        assert_eq!(extensions(&q), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_ack_waiting_to_try_its_delete_again_is_extended_on_time() {
        // T = 10 s; deletes fail from 4 s to 7 s, so at 5 s the ack waits between tries. Only
        // a try under way puts the extension off to the last moment (9 s): between tries it
        // goes when due, leaving room to retry it.
        let q = queue(10);
        q.send("m").unwrap();
        let d = hold(&q, None).await;
        let r = d.received_at();
        sleep_until(r + secs(4)).await;
        q.fail_for(Action::DeleteMessage, "InternalError", secs(3));
        let ack = tokio::spawn(d.ack());
        sleep_until(r + secs(6)).await;
        assert_eq!(
            extensions(&q),
            1,
            "extended when due, between the delete's tries"
        );
        ack.await.unwrap().expect("acked once deletes work again");
        assert!(q.requests().deletes() > 1, "the delete was tried again");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ack_answered_just_before_its_deadline_is_an_ack() {
        let q = holding_delete_answers(4, Duration::from_millis(3_900));
        q.send("m").unwrap();
        let d = hold(&q, None).await;
        let ctx = d.context().clone();
        d.ack().await.expect("answered in time");
        let stats = ctx.stats(0);
        assert_eq!((stats.acked, stats.lost_acks, stats.lost), (1, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn message_not_in_flight_loses_the_delivery() {
        let q = queue(10);
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        // AWS rarely if ever answers this (a lapsed handle gets 200), but if it does, the
        // delivery is gone.
        q.fail_next(Action::ChangeMessageVisibility, "MessageNotInflight", 1);
        let lost = d.lost();
        assert_eq!(lost.await, LostReason::NotInFlight);
        assert!(d.is_lost());
        assert!(matches!(
            d.ack().await,
            Err(Error::Lost {
                reason: LostReason::NotInFlight,
                ..
            })
        ));
    }

    /// A release whose call fails once the delivery is lost (here through an outage of
    /// visibility changes) is `Error::Lost`, the failure its source: not the bare 500.
    #[tokio::test(start_paused = true)]
    async fn a_release_failing_once_lost_is_reported_lost_with_the_failure_as_source() {
        let q = queue(10);
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        for action in [
            Action::ChangeMessageVisibility,
            Action::ChangeMessageVisibilityBatch,
        ] {
            q.fail_for(action, "InternalError", secs(600));
        }
        assert_eq!(d.lost().await, LostReason::ExtensionFailed);
        match d.release().await {
            Err(Error::Lost {
                reason: LostReason::ExtensionFailed,
                source: Some(source),
                ..
            }) => assert!(source.to_string().contains("InternalError"), "{source}"),
            other => panic!("expected Error::Lost with the 500 as source, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_invalid_receipt_handle_loses_the_delivery() {
        let q = queue(10);
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        q.change_visibility(&receipt_of(&d), Duration::ZERO)
            .unwrap();
        // Another receiver takes it: our handle is now stale.
        assert_eq!(q.receive(1, Duration::ZERO).await.unwrap().len(), 1);
        assert_eq!(d.lost().await, LostReason::ReceiptHandleInvalid);
        let deletes = q.requests().deletes();
        let err = d.ack().await.expect_err("ack with a stale handle fails");
        assert!(err.is_lost(), "{err}");
        // The delete is still sent: a lease lost to a lapsed timeout alone still has the
        // latest handle, and AWS deletes the message then; with a stale handle it answers
        // success and deletes nothing. Either way the ack says the delivery was lost.
        assert_eq!(q.requests().deletes(), deletes + 1, "the delete is sent");
        assert_eq!(q.in_flight_len(), 1, "the other receiver's delivery stays");
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_extension_error_is_retried_and_the_delivery_survives() {
        let q = queue(10);
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        q.fail_next(Action::ChangeMessageVisibility, "RequestThrottled", 2);
        sleep(secs(60)).await;
        assert!(!d.is_lost());
        assert_eq!(q.in_flight_len(), 1);
        assert!(
            extensions(&q) >= 2 + 11,
            "two failures, then one success per 5 s"
        );
        d.ack().await.expect("ack after retried extensions");
        assert!(q.is_empty());
    }

    /// A delivery held on a queue of T = 10 s whose extensions all fail transiently.
    async fn held_with_failing_extensions() -> (MemoryQueue, Delivery) {
        let q = queue(10);
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        q.fail_next(Action::ChangeMessageVisibility, "InternalError", 10_000);
        (q, d)
    }

    #[tokio::test(start_paused = true)]
    async fn extensions_failing_until_the_deadline_lose_the_delivery() {
        let (q, d) = held_with_failing_extensions().await;
        let r = d.received_at();
        let lost = d.lost();
        assert_eq!(lost.await, LostReason::ExtensionFailed);
        assert_eq!(Instant::now(), r + secs(10), "lost exactly at the deadline");
        let tries = extensions(&q);
        assert!(
            (3..=30).contains(&tries),
            "bounded retries in the half window, got {tries}"
        );
    }

    /// A keeper held up past a deadline with no extension left to try (a starved runtime,
    /// here a clock moved on at once) finds the delivery lost when it runs again.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_passed_while_the_keeper_was_held_up_loses_the_delivery() {
        let (q, d) = held_with_failing_extensions().await;
        let r = d.received_at();
        // The tries end a call margin (1 s) before the deadline; then the keeper waits for it.
        sleep_until(r + Duration::from_millis(9_500)).await;
        let tries = extensions(&q);
        assert!(!d.is_lost());
        tokio::time::advance(secs(3)).await;
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(d.lease().lost_reason(), Some(LostReason::ExtensionFailed));
        assert_eq!(extensions(&q), tries, "no try after the last one");
    }

    /// The last try of a failed extension may go exactly a call margin before the deadline.
    #[tokio::test(start_paused = true)]
    async fn an_extension_retried_exactly_at_its_last_moment_is_sent() {
        // T = 1 s: a call margin of 250 ms. Calls take 150 ms: the extension due halfway
        // fails 350 ms before the deadline and is tried again 100 ms later (its shortest
        // wait), exactly at the last moment a call can still reach SQS in time.
        let ms = Duration::from_millis;
        let q = MemoryQueue::builder()
            .visibility_timeout(secs(1))
            .latency(ms(150))
            .build()
            .expect("valid queue");
        q.send("job").unwrap();
        let d = hold(&q, None).await;
        let deadline = d.deadline();
        q.fail_next(Action::ChangeMessageVisibility, "RequestThrottled", 1);
        sleep_until(deadline + ms(500)).await;
        assert_eq!(extensions(&q), 2, "the failed try and the last one");
        assert!(!d.is_lost());
        assert_eq!(d.deadline(), deadline - ms(250) + secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_tries_four_times_on_transient_errors_and_once_on_others() {
        for (code, tries) in [
            ("InternalError", 4),
            ("AccessDenied", 1),
            ("ReceiptHandleIsInvalid", 1),
            ("MessageNotInflight", 1),
        ] {
            let q = queue(30);
            q.send("job").unwrap();
            let d = hold(&q, None).await;
            let before = extensions(&q);
            q.fail_next(Action::ChangeMessageVisibility, code, 10);
            let err = d.release().await.expect_err(code);
            assert_eq!(extensions(&q) - before, tries, "{code}: tries");
            match code {
                "InternalError" => assert!(err.is_retryable(), "{err}"),
                "AccessDenied" => assert!(err.is_fatal(), "{err}"),
                // An answer that the delivery is gone is `Error::Lost`, with its reason.
                _ => {
                    let expected = match code {
                        "MessageNotInflight" => LostReason::NotInFlight,
                        _ => LostReason::ReceiptHandleInvalid,
                    };
                    assert!(
                        matches!(err, Error::Lost { reason, .. } if reason == expected),
                        "{code}: {err:?}"
                    );
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn release_after_hides_for_the_delay_and_refuses_past_the_limit() {
        let q = queue(10);
        q.send("a").unwrap();
        q.send("b").unwrap();
        q.send("d").unwrap();
        let a = hold(&q, None).await;
        let b = hold(&q, None).await;
        let d = hold(&q, None).await;
        let start = Instant::now();
        a.release_after(secs(120)).await.expect("release_after");
        sleep_until(start + secs(119)).await;
        assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
        sleep_until(start + secs(120)).await;
        assert_eq!(
            q.receive(1, Duration::ZERO).await.unwrap()[0].body(),
            Some("a")
        );

        // Refused before anything is sent: no visibility change reaches the queue.
        let sent = extensions(&q);
        // 120 s after the receive, the limit (12 hours less a 5 s margin) is 43,075 s away.
        let allowed = match b.release_after(secs(43_076)).await {
            Err(Error::PastHardDeadline { allowed, .. }) => allowed,
            other => panic!("expected PastHardDeadline, got {other:?}"),
        };
        assert_eq!(allowed, secs(43_075));
        assert_eq!(
            extensions(&q),
            sent,
            "nothing sent for a refused release_after"
        );
        // What the error allows is taken.
        d.release_after(allowed).await.expect("the allowed delay");
        assert_eq!(extensions(&q), sent + 1);
        q.send("c").unwrap();
        let c = hold(&q, None).await;
        let sent = extensions(&q);
        let err = c.release_after(secs(43_201)).await.expect_err("over 12 h");
        assert_eq!(
            extensions(&q),
            sent,
            "nothing sent for a refused release_after"
        );
        assert!(
            matches!(
                err,
                Error::InvalidConfig {
                    field: "release_after",
                    ..
                }
            ),
            "{err}"
        );
    }

    /// `n` deliveries of a queue of timeout `t` seconds, received `gap` apart and kept by
    /// one keeper.
    async fn held_apart(t: u64, n: usize, gap: Duration) -> (MemoryQueue, Vec<Delivery>) {
        let q = queue(t);
        for _ in 0..n {
            q.send("job").unwrap();
        }
        let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
        let mut held = Vec::new();
        for _ in 0..n {
            held.push(hold_in(&q, None, run.clone()).await);
            sleep(gap).await;
        }
        (q, held)
    }

    #[tokio::test(start_paused = true)]
    async fn extensions_due_close_together_share_requests_early_within_the_window_never_late() {
        // 20 deliveries received 37 ms apart (0.7 s in all) at T = 10 s, kept by one keeper.
        let (q, held) = held_apart(10, 20, Duration::from_millis(37)).await;
        let first = held[0].received_at();
        let t = secs(10);
        // Every extension is seen as a change of its deadline (sent + T, on this queue without
        // latency): the clock moves 10 ms at a time, and extensions of one delivery are about
        // half a timeout apart.
        let mut deadlines: Vec<Vec<Instant>> = held.iter().map(|d| vec![d.deadline()]).collect();
        while Instant::now() < first + secs(16) {
            sleep(Duration::from_millis(10)).await;
            for (d, seen) in held.iter().zip(&mut deadlines) {
                if seen.last() != Some(&d.deadline()) {
                    seen.push(d.deadline());
                }
            }
        }
        let window = COALESCE_WINDOW.min(t / 8);
        let mut extensions = 0;
        for (i, seen) in deadlines.iter().enumerate() {
            assert!(seen.len() >= 3, "delivery {i}: {} deadlines", seen.len());
            // The first is due halfway through the first timeout; each next one half a
            // timeout after the previous was due or answered (here: sent), whichever is later,
            // but no more than the window past halfway through the new timeout.
            let mut due = seen[0] - t / 2;
            for pair in seen.windows(2) {
                let (old, new) = (pair[0], pair[1]);
                let sent = new - t;
                assert!(sent <= due, "delivery {i}: sent {:?} late", sent - due);
                assert!(
                    due - sent <= window,
                    "delivery {i}: sent {:?} early",
                    due - sent
                );
                assert!(due <= old - t / 2 + window, "delivery {i}: due too late");
                // Each one gains more than a third of a timeout: none is wasted.
                assert!(new - old >= t / 2 - window, "delivery {i}");
                due = (due.max(sent) + t / 2).clamp(sent + t / 2, sent + t / 2 + window);
                extensions += 1;
            }
        }
        let requests = q.requests().requests(Action::ChangeMessageVisibilityBatch);
        assert_eq!(q.requests().visibility_changes(), extensions);
        // Alone, each would be a request of its own; 250 ms windows over 0.7 s make 3 or 4
        // rounds per half timeout.
        assert!(
            requests * 4 <= extensions,
            "{requests} requests for {extensions} extensions"
        );
        assert_eq!(q.in_flight_len(), 20);
        assert!(held.iter().all(|d| !d.is_lost()));
    }

    #[tokio::test(start_paused = true)]
    async fn extensions_go_early_only_with_one_that_is_due() {
        // Two deliveries received 200 ms apart (T = 10 s): due at 5 s and 5.2 s.
        let q = queue(10);
        for _ in 0..4 {
            q.send("job").unwrap();
        }
        let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
        let first = hold_in(&q, None, run.clone()).await;
        sleep(Duration::from_millis(200)).await;
        let second = hold_in(&q, None, run.clone()).await;
        let r = first.received_at();
        // Both held: the second goes early, with the first, in one request.
        sleep_until(r + secs(5) + Duration::from_millis(1)).await;
        assert_eq!(extensions(&q), 2);
        assert_eq!(
            q.requests().requests(Action::ChangeMessageVisibilityBatch),
            1
        );
        assert_eq!(second.deadline(), r + secs(15));
        drop((first, second));

        // The first one's ack is under way when it falls due (calls take 200 ms): nothing
        // goes then; the second, due 200 ms later, goes at its own time (its handler might
        // have acked it by then too).
        let q = MemoryQueue::builder()
            .visibility_timeout(secs(10))
            .latency(Duration::from_millis(200))
            .build()
            .expect("valid queue");
        q.send("first").unwrap();
        q.send("second").unwrap();
        let first = hold_in(&q, None, run.clone()).await;
        let second = hold_in(&q, None, run).await;
        let due = first.deadline() - secs(5);
        assert_eq!(
            second.deadline() - secs(5),
            due + Duration::from_millis(200)
        );
        sleep_until(due - Duration::from_millis(50)).await;
        let ack = tokio::spawn(first.ack());
        sleep_until(due + Duration::from_millis(190)).await;
        assert_eq!(extensions(&q), 0, "none sent early alone");
        ack.await.expect("joined").expect("ack");
        sleep_until(due + secs(1)).await;
        assert_eq!(extensions(&q), 1);
        // Sent at its own due time: the deadline counts from the call.
        assert_eq!(second.deadline(), due + Duration::from_millis(10_200));
    }

    #[tokio::test(start_paused = true)]
    async fn at_a_one_second_timeout_extensions_go_early_by_an_eighth_of_it_at_most() {
        // Three deliveries received 100 ms apart (T = 1 s): due at 0.5, 0.6 and 0.7 s. The
        // window is 125 ms: the second goes with the first, the third at its own time.
        let ms = Duration::from_millis;
        let (q, held) = held_apart(1, 3, ms(100)).await;
        let r = held[0].received_at();
        sleep_until(r + ms(501)).await;
        assert_eq!(extensions(&q), 2, "the first and the second, early");
        assert_eq!(held[1].deadline(), r + ms(1_500));
        assert_eq!(held[2].deadline(), r + ms(1_200));
        sleep_until(r + ms(701)).await;
        assert_eq!(extensions(&q), 3);
        assert_eq!(held[2].deadline(), r + ms(1_700));
        assert_eq!(
            q.requests().requests(Action::ChangeMessageVisibilityBatch),
            2
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_ack_or_release_under_way_holds_back_a_due_extension() {
        // Every call takes 600 ms; the extensions are due 5 s after the receive's answer.
        // The ack and the release start 300 ms before that and are still under way when the
        // extensions fall due: none is sent.
        let q = MemoryQueue::builder()
            .visibility_timeout(secs(10))
            .latency(Duration::from_millis(600))
            .build()
            .expect("valid queue");
        q.send("acked").unwrap();
        q.send("released").unwrap();
        let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
        let (acked, released) =
            tokio::join!(hold_in(&q, None, run.clone()), hold_in(&q, None, run));
        let due = acked.deadline() - secs(5);
        assert_eq!(released.deadline() - secs(5), due);
        sleep_until(due - Duration::from_millis(300)).await;
        let (ack, release) = tokio::join!(acked.ack(), released.release());
        ack.expect("ack");
        release.expect("release");
        sleep(secs(30)).await;
        assert_eq!(
            q.requests().visibility_changes(),
            1,
            "the release's own change"
        );
        assert_eq!(q.requests().deletes(), 1);
        assert_eq!(q.len(), 1);
    }

    fn receipt_of(d: &Delivery) -> String {
        d.lease.receipt().to_owned()
    }

    #[tokio::test(start_paused = true)]
    async fn debug_output_hides_the_receipt_handle() {
        let q = queue(10);
        q.send("secret body").unwrap();
        let d = hold(&q, None).await;
        let text = format!("{d:?}");
        assert!(text.contains(d.message_id()));
        assert!(!text.contains(&receipt_of(&d)));
        assert!(!text.contains("secret body"));
        // Only the handle's first 8 characters: enough to tell two apart.
        let start: String = receipt_of(&d).chars().take(8).collect();
        assert!(
            text.contains(&format!("receipt_handle: \"{start}…\"")),
            "{text}"
        );
    }
}
#[cfg(test)]
mod size {
    //! A held delivery's footprint.
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Delivery, Received, RunTies};
    use crate::keeper::Keeper;
    use crate::keeper_thread::KeeperRuntime;
    use crate::lease::context::Context;
    use crate::memory::MemoryQueue;
    use crate::queue::Queue;
    use crate::retry_policy::RetryPolicy;
    use crate::settle_calls::request_batch::RequestsAtOnce;

    /// 120,000 deliveries may be held at once: the guard and its lease must stay small.
    #[tokio::test]
    async fn a_held_delivery_stays_small() {
        let q = MemoryQueue::new();
        let ctx = Arc::new(Context::new(
            &Queue::new(q.clone()),
            RetryPolicy::Leave,
            KeeperRuntime::Caller,
            RequestsAtOnce::default(),
        ));
        q.send("x").unwrap();
        let m = q.receive(1, Duration::ZERO).await.unwrap().pop().unwrap();
        let received = Received {
            received_at: Instant::now(),
            returned_at: Instant::now(),
            timeout: 30,
            slot: None,
            run: RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller)),
            cohort: None,
            holder: None,
        };
        let d = Delivery::start(ctx, m, received);
        let (lease, delivery) = (std::mem::size_of_val(&*d.lease), std::mem::size_of_val(&d));
        // 120,000 may be held at once (B3 in benches/throughput.rs): a byte more on a lease
        // can take the allocator to its next size. S3's payload location adds its place.
        let most = if cfg!(feature = "s3") { 360 } else { 344 };
        assert!(lease <= most, "Lease: {lease} bytes");
        assert!(delivery <= 48, "Delivery: {delivery} bytes");
    }
}
