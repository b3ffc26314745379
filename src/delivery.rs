//! The `Delivery` guard: one received message, kept hidden while you hold it.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use tokio::runtime::Handle;
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio::task::AbortHandle;
use tokio::time::{sleep, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use crate::backoff::Backoff;
use crate::context::Context;
use crate::error::{Error, ErrorKind, LostReason};
use crate::heartbeat::{self, HARD_LIMIT, MAX_VISIBILITY_SECS};
use crate::stats::bump;

/// How long `ack` keeps retrying a transient `DeleteMessage` failure (the heartbeat keeps the
/// message hidden meanwhile) before it gives up and reports the error.
const ACK_RETRY_WINDOW: Duration = Duration::from_secs(20);

/// What the delivery and its heartbeat task share.
pub(crate) struct Shared {
    pub(crate) ctx: Arc<Context>,
    pub(crate) receipt: String,
    status: watch::Sender<Status>,
    /// Set when `ack` or a release starts: from then on the outcome of that call decides,
    /// not a heartbeat result racing it (an extension that reaches SQS just after the delete
    /// fails, but the message was not lost).
    settling: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct Status {
    deadline: Instant,
    lost: Option<LostReason>,
    end: Option<End>,
}

/// How a delivery ended, for FIFO sequencing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Acked,
    NotAcked,
}

impl Shared {
    pub(crate) fn deadline(&self) -> Instant {
        self.status.borrow().deadline
    }

    pub(crate) fn set_deadline(&self, deadline: Instant) {
        self.status.send_modify(|s| s.deadline = deadline);
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.status.borrow().lost
    }

    /// Marks the delivery lost, as the heartbeat found it, unless a settle call has started.
    pub(crate) fn heartbeat_lost(&self, reason: LostReason) -> bool {
        if self.settling.load(Ordering::Acquire) {
            return false;
        }
        self.mark_lost(reason);
        true
    }

    /// Marks the delivery lost; the first reason wins.
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        let first = self.status.send_if_modified(|s| {
            if s.lost.is_none() {
                s.lost = Some(reason);
                true
            } else {
                false
            }
        });
        if first {
            bump(&self.ctx.counters.lost);
        }
    }

    fn set_end(&self, end: End) {
        self.status.send_modify(|s| {
            s.end.get_or_insert(end);
        });
    }
}

/// One received SQS message, hidden from other consumers while you hold it.
///
/// From the moment it is received, a background heartbeat calls `ChangeMessageVisibility`
/// halfway through each visibility timeout, so the message stays hidden however long your
/// handler takes (up to SQS's limit of 12 hours after the receive).
///
/// Settle it with [`ack`](Delivery::ack) (delete), [`release`](Delivery::release) (visible
/// again at once) or [`release_after`](Delivery::release_after) (visible again later). Each
/// consumes the delivery, so a message cannot be settled twice. Dropping a delivery without
/// settling it stops the heartbeat and applies the consumer's
/// [`RetryPolicy`](crate::RetryPolicy) (by default the message becomes visible again when its
/// current visibility timeout lapses); once the consumer is shutting down, it releases the
/// message at once.
///
/// While held, a delivery counts against the consumer's
/// [`max_in_flight`](crate::ConsumerBuilder::max_in_flight), wherever you move it.
pub struct Delivery {
    message: Message,
    shared: Arc<Shared>,
    receive_count: u32,
    received_at: Instant,
    timeout: u32,
    heartbeat: Option<AbortHandle>,
    /// Cancelled when the run (or stream) that received this delivery shuts down.
    shutdown: CancellationToken,
    runtime: Handle,
    span: Span,
    /// `ack`, `release` or `release_after` has started: `Drop` leaves the message alone.
    settling: bool,
    acked: bool,
    _permit: Option<OwnedSemaphorePermit>,
}

/// What `Delivery::start` needs besides the message.
pub(crate) struct Received {
    pub(crate) receipt: String,
    /// The instant taken just before the `ReceiveMessage` request was sent; the 12-hour limit
    /// counts from it.
    pub(crate) received_at: Instant,
    /// The instant the answer arrived; the first visibility timeout counts from it (a long
    /// poll may hand the message out long after the request was sent).
    pub(crate) returned_at: Instant,
    /// The visibility timeout the receive applied, in seconds.
    pub(crate) timeout: u32,
    pub(crate) permit: Option<OwnedSemaphorePermit>,
    pub(crate) shutdown: CancellationToken,
}

impl Delivery {
    /// Wraps a received message and starts its heartbeat at once.
    pub(crate) fn start(ctx: Arc<Context>, message: Message, received: Received) -> Self {
        let receive_count = message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let span = tracing::info_span!(
            "delivery",
            message_id = message.message_id().unwrap_or_default(),
            receive_count,
            queue = %ctx.queue_name
        );
        bump(&ctx.counters.received);
        let (status, _) = watch::channel(Status {
            deadline: received.returned_at + Duration::from_secs(u64::from(received.timeout)),
            lost: None,
            end: None,
        });
        let shared = Arc::new(Shared {
            ctx,
            receipt: received.receipt,
            status,
            settling: AtomicBool::new(false),
        });
        let heartbeat = (received.timeout > 0).then(|| {
            // Boxed: the task then moves a pointer around, not the whole state machine.
            tokio::spawn(
                Box::pin(heartbeat::run(
                    shared.clone(),
                    received.timeout,
                    received.received_at,
                ))
                .instrument(span.clone()),
            )
            .abort_handle()
        });
        Self {
            message,
            shared,
            receive_count,
            received_at: received.received_at,
            timeout: received.timeout,
            heartbeat,
            shutdown: received.shutdown,
            runtime: Handle::current(),
            span,
            settling: false,
            acked: false,
            _permit: received.permit,
        }
    }

    /// The SQS message id.
    pub fn message_id(&self) -> &str {
        self.message.message_id().unwrap_or_default()
    }

    /// The message body (empty if SQS sent none).
    pub fn body(&self) -> &str {
        self.message.body().unwrap_or_default()
    }

    /// The message as the SDK returned it, with its system and message attributes, but
    /// without its receipt handle: the delivery holds that, and settles the message with it.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// The FIFO message group, if the message has one (`MessageGroupId`).
    pub fn message_group_id(&self) -> Option<&str> {
        self.message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
            .map(String::as_str)
    }

    /// How many times SQS has handed this message out, this receive included
    /// (`ApproximateReceiveCount`).
    pub fn receive_count(&self) -> u32 {
        self.receive_count
    }

    /// When the message was received: the instant taken just before the `ReceiveMessage`
    /// request was sent, on tokio's clock.
    pub fn received_at(&self) -> Instant {
        self.received_at
    }

    /// When the message's current visibility timeout ends, as far as this consumer knows.
    ///
    /// It starts as the visibility timeout counted from when the receive's answer arrived;
    /// the heartbeat moves it forward with every extension. After it passes without an
    /// extension, the delivery is lost. With a visibility timeout of 0 there is no deadline to
    /// keep and it stays at that arrival.
    pub fn deadline(&self) -> Instant {
        self.shared.deadline()
    }

    /// The receive plus 12 hours: SQS's limit on how long this message can stay hidden.
    pub fn hard_deadline(&self) -> Instant {
        self.received_at + HARD_LIMIT
    }

    /// `true` once the delivery is lost: another consumer may get (or have) the message.
    pub fn is_lost(&self) -> bool {
        self.shared.lost_reason().is_some()
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
        let shared = self.shared.clone();
        async move {
            let mut rx = shared.status.subscribe();
            loop {
                if let Some(reason) = rx.borrow_and_update().lost {
                    return reason;
                }
                if rx.changed().await.is_err() {
                    // Unreachable while `shared` (and so the sender) is alive; stay pending.
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Completes when the delivery has ended (settled or dropped), with how.
    pub(crate) fn ended(&self) -> impl Future<Output = End> + Send + 'static {
        let mut rx = self.shared.status.subscribe();
        async move {
            loop {
                if let Some(end) = rx.borrow_and_update().end {
                    return end;
                }
                if rx.changed().await.is_err() {
                    return End::NotAcked;
                }
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn shared_for_tests(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.shared.ctx
    }

    /// Deletes the message (`DeleteMessage`): it will not be delivered again.
    ///
    /// Transient failures are retried for a while; the heartbeat keeps the message hidden
    /// meanwhile. The delete goes out in a batch with others: once asked for, it is sent even
    /// if the caller stops waiting (a cancelled handler), and a graceful shutdown waits for
    /// it.
    ///
    /// If the delivery was already lost, the delete is still attempted (SQS may still accept
    /// it), but the result is [`Error::Lost`]: the message may have been handed to another
    /// consumer, so your work may be repeated. The consumer remembers such a message and, if
    /// it comes back to it, deletes it without calling the handler again.
    pub async fn ack(mut self) -> Result<(), Error> {
        self.settling = true;
        self.shared.settling.store(true, Ordering::Release);
        let lost_before = self.shared.lost_reason();
        let result = delete_with_retries(self.shared.clone())
            .instrument(self.span.clone())
            .await;
        self.stop_heartbeat();
        let ctx = &self.shared.ctx;
        let outcome = match (result, lost_before) {
            (Err(err), _) if err.is_lost() => Err(self.lost_error(err.kind())),
            (Err(err), _) => Err(err),
            (Ok(()), Some(reason)) => Err(Error::Lost {
                message_id: self.message_id().to_owned(),
                reason,
            }),
            (Ok(()), None) => {
                self.acked = true;
                bump(&ctx.counters.acked);
                tracing::debug!(parent: &self.span, "acked");
                Ok(())
            }
        };
        if outcome.as_ref().is_err_and(Error::is_lost) {
            ctx.lost_acks.remember(self.message_id());
            tracing::warn!(parent: &self.span, "ack failed: the delivery was lost; the message may be handled again");
        }
        outcome
    }

    /// Makes the message visible to every consumer at once (`ChangeMessageVisibility` to 0).
    pub async fn release(self) -> Result<(), Error> {
        self.change_and_settle(0).await
    }

    /// Makes the message visible again after `delay` (rounded up to whole seconds), for a
    /// retry later.
    ///
    /// SQS refuses a visibility that ends more than 12 hours after the receive; such a delay
    /// is refused here with [`Error::PastHardDeadline`] before anything is sent, and the
    /// delivery is then dropped (the retry policy applies).
    pub async fn release_after(self, delay: Duration) -> Result<(), Error> {
        let secs = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
        let secs = match u32::try_from(secs) {
            Ok(s) if s <= MAX_VISIBILITY_SECS => s,
            _ => {
                return Err(Error::invalid(
                    "release_after",
                    delay,
                    "a delay of at most 43200 s (12 hours)",
                ))
            }
        };
        let room = self.room();
        if Duration::from_secs(u64::from(secs)) > room {
            return Err(Error::PastHardDeadline {
                message_id: self.message_id().to_owned(),
                requested: delay,
                allowed: Duration::from_secs(room.as_secs()),
            });
        }
        self.change_and_settle(secs).await
    }

    /// How long the message may still stay hidden: until receive + 12 h - margin.
    fn room(&self) -> Duration {
        heartbeat::extension_limit(self.received_at).saturating_duration_since(Instant::now())
    }

    async fn change_and_settle(mut self, visibility: u32) -> Result<(), Error> {
        self.settling = true;
        self.shared.settling.store(true, Ordering::Release);
        // Stop the heartbeat first, so that no extension lands after the change.
        self.stop_heartbeat();
        match change_visibility(self.shared.clone(), visibility)
            .instrument(self.span.clone())
            .await
        {
            Ok(()) => Ok(()),
            Err(err) if err.is_lost() => Err(self.lost_error(err.kind())),
            Err(err) => Err(err),
        }
    }

    fn lost_error(&self, kind: Option<ErrorKind>) -> Error {
        let reason = match kind {
            Some(ErrorKind::Lost(reason)) => reason,
            _ => LostReason::ReceiptHandleInvalid,
        };
        self.shared.mark_lost(reason);
        Error::Lost {
            message_id: self.message_id().to_owned(),
            reason: self.shared.lost_reason().unwrap_or(reason),
        }
    }

    fn stop_heartbeat(&self) {
        if let Some(heartbeat) = &self.heartbeat {
            heartbeat.abort();
        }
    }
}

/// `DeleteMessage`, retrying transient failures for a while unless the delivery is lost.
async fn delete_with_retries(shared: Arc<Shared>) -> Result<(), Error> {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let give_up = Instant::now() + ACK_RETRY_WINDOW;
    loop {
        match shared.ctx.deletes.submit(&shared.receipt, 0).await {
            Err(err)
                if err.is_retryable()
                    && Instant::now() < give_up
                    && shared.lost_reason().is_none() =>
            {
                let wait = backoff.next_delay();
                tracing::warn!(error = %err, retry_in = ?wait, "ack failed; retrying");
                sleep(wait).await;
            }
            other => return other,
        }
    }
}

/// `ChangeMessageVisibility` for a release; counts it when it succeeds.
async fn change_visibility(shared: Arc<Shared>, visibility: u32) -> Result<(), Error> {
    shared
        .ctx
        .visibility
        .submit(&shared.receipt, visibility)
        .await?;
    bump(&shared.ctx.counters.released);
    tracing::debug!(visibility, "released");
    Ok(())
}

impl Drop for Delivery {
    fn drop(&mut self) {
        // Only signals: abort the heartbeat, hand a release to its own task.
        self.stop_heartbeat();
        if !self.settling && self.timeout > 0 && !self.is_lost() {
            let visibility = if self.shutdown.is_cancelled() {
                Some(0)
            } else {
                let room = self.room();
                self.shared
                    .ctx
                    .retry
                    .visibility_on_drop(self.receive_count, room)
            };
            if let Some(visibility) = visibility {
                let shared = self.shared.clone();
                let span = self.span.clone();
                self.shared.ctx.settles.spawn_on(
                    async move {
                        if let Err(err) = change_visibility(shared, visibility).await {
                            tracing::warn!(error = %err, visibility, "releasing a dropped delivery failed; it returns when its visibility lapses");
                        }
                    }
                    .instrument(span),
                    &self.runtime,
                );
            }
        }
        self.shared.set_end(if self.acked {
            End::Acked
        } else {
            End::NotAcked
        });
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("message_id", &self.message_id())
            .field("receipt_handle", &ShortHandle(&self.shared.receipt))
            .field("receive_count", &self.receive_count)
            .field("received_at", &self.received_at)
            .field("deadline", &self.deadline())
            .field("lost", &self.shared.lost_reason())
            .finish_non_exhaustive()
    }
}

/// Shows only the start of a receipt handle: enough to tell two apart in a log, not enough
/// to act on the message.
pub(crate) struct ShortHandle<'a>(pub(crate) &'a str);

impl fmt::Debug for ShortHandle<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix: String = self.0.chars().take(8).collect();
        write!(f, "\"{prefix}…\"")
    }
}
