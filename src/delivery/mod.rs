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
use crate::idempotency::{Key, Owner};
use crate::lease::context::Context;
use crate::lease::{receive_count, Dropped, End, Holder, Lease};
use crate::limits::{secs_rounded_up, VisibilityTimeout, HARD_LIMIT, MAX_VISIBILITY_SECS};
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
    /// The visibility timeout the receive applied.
    pub(crate) visibility_timeout: VisibilityTimeout,
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
                received.visibility_timeout,
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
        self.lease.visibility_timeout().duration()
    }

    /// The receive plus 12 hours: SQS's limit on how long this message can stay hidden.
    pub fn hard_deadline(&self) -> Instant {
        self.received_at() + HARD_LIMIT
    }

    /// The key this delivery holds in the consumer's idempotency store (see
    /// [`ConsumerBuilder::idempotency`](crate::ConsumerBuilder::idempotency)), once claimed
    /// and until the delivery ends; `None` without a store. Write it in the same transaction
    /// as your handler's effect (the guide's [inbox pattern](crate::guide::idempotency)) to
    /// make that effect once even when the process dies between the effect and the ack.
    pub fn idempotency_key(&self) -> Option<Key> {
        let recording = self.lease.context().idempotency()?;
        recording.key_held_by(&Owner::new(self.message_id(), self.lease.receipt()))
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
    /// meanwhile. The delete goes out in a request batch with others: once asked for, it is sent even
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
        self.free_slot_early(how);
        let leases = [self.lease.clone()];
        let results = settle(&leases, how, Some(self.run.keeper())).await;
        results.into_iter().next().unwrap_or(Ok(()))
    }

    /// It is about to be settled as `how` says. An ack: it no longer counts as held, and its
    /// slot comes free, if the consumer's settle calls under way leave room (see
    /// `Slot::free_early`). A release keeps its slot until it is answered: its message is
    /// visible again at once, and a receive started on its slot would split it from the
    /// others released with it.
    fn free_slot_early(&mut self, how: Settle) {
        if how == Settle::Ack && self.slot.free_early() {
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
        self.settle(Settle::Release(VisibilityTimeout::ZERO)).await
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
        let visibility_timeout = match secs_rounded_up(delay) {
            s if s <= u64::from(MAX_VISIBILITY_SECS) => VisibilityTimeout::at_most_max(s),
            _ => {
                return Err(Error::invalid(
                    "release_after",
                    delay,
                    "a delay of at most 43200 s (12 hours)",
                ))
            }
        };
        let room = self.lease.room();
        if visibility_timeout.duration() > room {
            return Err(Error::PastHardDeadline {
                message_id: self.message_id().to_owned(),
                requested: delay,
                allowed: Duration::from_secs(room.as_secs()),
            });
        }
        self.settle(Settle::Release(visibility_timeout)).await
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
            Some(visibility_timeout) => self.settle(Settle::Release(visibility_timeout)).await,
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
    settle_all(deliveries, Settle::Release(VisibilityTimeout::ZERO)).await
}

/// Settles `deliveries` together, as `how` says (deliveries of one run share its keeper).
async fn settle_all(deliveries: Vec<Delivery>, how: Settle) -> Vec<Result<(), Error>> {
    let Some(first) = deliveries.first() else {
        return Vec::new();
    };
    let keeper = first.run.keeper().clone();
    let leases: Vec<_> = deliveries.iter().map(|d| d.lease.clone()).collect();
    let mut deliveries = deliveries;
    deliveries.iter_mut().for_each(|d| d.free_slot_early(how));
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
        if !self.slot.is_freed_early() {
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
pub(crate) mod tests;
