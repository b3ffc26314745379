//! `Stats`: what the consumer has done so far, as cheap atomic counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::limits::VisibilityTimeout;

/// A snapshot of a consumer's counters, from [`Consumer::stats`](crate::Consumer::stats).
///
/// Counters only grow (except `in_flight` and `reserved`), from the moment the consumer was built, across
/// every `run`, `run_until` and `stream` of it. Reading them costs a few atomic loads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Messages received and handed out as deliveries.
    pub received: u64,
    /// Deliveries acked (`DeleteMessage` succeeded and the delivery was not lost).
    pub acked: u64,
    /// Deliveries released: by `release`, `release_after`, the retry policy, FIFO ordering
    /// (the rest of a group after a delivery ended without an ack), or shutdown.
    pub released: u64,
    /// Successful visibility extensions.
    pub extended: u64,
    /// Failed visibility extension attempts (each retry counts).
    pub extension_failures: u64,
    /// The longest an extension took after it was due (halfway through the timeout) until it
    /// succeeded or gave up: timer and scheduling delay, batching, the request itself and
    /// its retries. Half a visibility timeout of it loses the message; a large figure means
    /// a starved runtime or an overloaded network.
    pub worst_extension_delay: Duration,
    /// Extensions done late: more than a quarter of the timeout (or 1 s, if less) after they
    /// were due. Handlers that block the runtime's threads (CPU-bound or blocking code in
    /// async) cause this, as does a slow SQS; a warning is logged at counts 1, 2, 4, 8, ...
    /// so the log is not flooded.
    pub late_extensions: u64,
    /// Deliveries lost: the message may have gone to another consumer.
    pub lost: u64,
    /// Deliveries held until SQS's 12-hour limit: their last extension was cut short (and a
    /// warning logged).
    pub capped: u64,
    /// Handlers that returned an error.
    pub handler_errors: u64,
    /// Handlers that panicked.
    pub handler_panics: u64,
    /// Handlers (or batch handlers) stopped by the consumer's `handler_timeout`.
    pub handler_timeouts: u64,
    /// Deliveries whose handler returned `Ok` without settling them, in `AckMode::Manual`:
    /// they get the retry policy, and by default come back when their visibility lapses.
    pub unsettled: u64,
    /// Deliveries held right now (handlers running, FIFO deliveries waiting their turn, and
    /// deliveries moved elsewhere and not yet settled or dropped); a delivery whose ack is
    /// sent no longer counts once its `max_in_flight` slot comes free (see
    /// [`max_in_flight`](crate::ConsumerBuilder::max_in_flight)).
    pub in_flight: u64,
    /// `max_in_flight` slots taken right now by receives under way, for the messages they
    /// may bring.
    pub reserved: u64,
    /// Redeliveries of messages whose ack had failed because their delivery was lost: deleted
    /// on arrival without calling the handler again.
    pub skipped_redeliveries: u64,
    /// Acks of deliveries already lost, by [`Delivery::ack`](crate::Delivery::ack),
    /// [`Batch::ack_all`](crate::Batch::ack_all) or [`AckMode::OnSuccess`](crate::AckMode):
    /// never counted in `acked` (the message may be with another consumer, and SQS answers a
    /// delete with an old receipt handle with success), each logged at `warn` with its message
    /// id. The work may be done again.
    pub lost_acks: u64,
    /// Messages whose payload in S3 (an Extended Client pointer, feature `s3`) could not be
    /// read: a missing object, access denied, a malformed pointer, a size over the limit or
    /// not as declared, or transient failures past their retries. Each is logged once at
    /// `error` with its message id, bucket and key; its handler is not called, and the
    /// delivery meets the retry policy.
    pub payload_failures: u64,
    /// Payload objects that could not be deleted after their message's ack (with
    /// `delete_payload_on_ack`), each logged at `warn`: the object stays in S3.
    pub payload_delete_failures: u64,
    /// Handlers dropped because their delivery was lost, with
    /// [`cancel_on_lost`](crate::ConsumerBuilder::cancel_on_lost) (a batch handler: once
    /// every delivery of its handler batch is lost), each logged at `warn` with the message id.
    pub cancelled_on_lost: u64,
    /// Messages moved to the dead-letter queue by the consumer's dead-letter step
    /// ([`dead_letter`](crate::ConsumerBuilder::dead_letter) and
    /// [`Delivery::dead_letter`](crate::Delivery::dead_letter)): counted once the copy is sent
    /// and the original deleted.
    pub dead_lettered: u64,
    /// Deliveries acked without running the handler: the
    /// [`idempotency`](crate::ConsumerBuilder::idempotency) store had their key done.
    pub duplicates_skipped: u64,
    /// Deliveries not run because another message held their key in the idempotency store
    /// under a live lease: released to come back when that record ends.
    pub duplicates_delayed: u64,
    /// Deliveries the idempotency store failed for (its `begin` or `complete` kept failing
    /// while the lease allowed): they met the failure step, never counted as done.
    pub idempotency_failures: u64,
    /// The visibility timeout the last receive that brought messages applied (zero before
    /// one did): the builder's, the queue's own, or with
    /// [`adaptive_visibility`](crate::ConsumerBuilder::adaptive_visibility) the estimate
    /// it chose. Exported as the gauge `sqs_consumer_visibility_timeout_seconds` with
    /// feature `metrics`.
    pub visibility_timeout: Duration,
    /// Failed `ReceiveMessage` attempts (each retry counts), and failed calls of the start
    /// that precedes the first receive (resolving a queue given by name, reading its
    /// visibility timeout). Each is retried with back-off, up to
    /// [`give_up_after`](crate::ConsumerBuilder::give_up_after). Exported as
    /// `sqs_consumer_receive_failures_total` with feature `metrics`.
    pub receive_failures: u64,
    /// Receive failures since the last receive SQS answered (0 while receives succeed): how
    /// long the current run of failures is. Exported as the gauge
    /// `sqs_consumer_consecutive_receive_failures` with feature `metrics`.
    pub consecutive_receive_failures: u64,
    /// Time since the last receive SQS answered, with messages or empty; `None` before the
    /// first. A long poll is answered at least every `wait_time` (20 s by default) while
    /// the consumer receives, so a figure well past it means receives are failing, paused,
    /// or held back by full `max_in_flight` slots. Exported as the gauge
    /// `sqs_consumer_last_receive_timestamp_seconds` (Unix time) with feature `metrics`.
    pub since_last_receive: Option<Duration>,
}

/// The events [`Stats`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    Received,
    Acked,
    Released,
    Extended,
    ExtensionFailures,
    LateExtensions,
    Lost,
    Capped,
    HandlerErrors,
    HandlerPanics,
    HandlerTimeouts,
    Unsettled,
    SkippedRedeliveries,
    LostAcks,
    PayloadFailures,
    PayloadDeleteFailures,
    CancelledOnLost,
    DeadLettered,
    DuplicatesSkipped,
    DuplicatesDelayed,
    IdempotencyFailures,
}

/// How many counters there are: one per [`Counter`].
const COUNTERS: usize = Counter::IdempotencyFailures as usize + 1;

/// The names the counters are exported under with feature `metrics`, in [`Counter`] order.
#[cfg(feature = "metrics")]
const COUNTER_NAMES: [&str; COUNTERS] = [
    "sqs_consumer_received_total",
    "sqs_consumer_acked_total",
    "sqs_consumer_released_total",
    "sqs_consumer_extended_total",
    "sqs_consumer_extension_failures_total",
    "sqs_consumer_late_extensions_total",
    "sqs_consumer_lost_total",
    "sqs_consumer_capped_total",
    "sqs_consumer_handler_errors_total",
    "sqs_consumer_handler_panics_total",
    "sqs_consumer_handler_timeouts_total",
    "sqs_consumer_unsettled_total",
    "sqs_consumer_skipped_redeliveries_total",
    "sqs_consumer_lost_acks_total",
    "sqs_consumer_payload_failures_total",
    "sqs_consumer_payload_delete_failures_total",
    "sqs_consumer_cancelled_on_lost_total",
    "sqs_consumer_dead_lettered_total",
    "sqs_consumer_duplicates_skipped_total",
    "sqs_consumer_duplicates_delayed_total",
    "sqs_consumer_idempotency_failures_total",
];

/// What is measured per event, for the histograms of feature `metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Measure {
    /// How long a handler (or a batch handler) ran, seconds.
    HandlerDuration,
    /// How long after it was due an extension was done, seconds.
    ExtensionLateness,
    /// How many messages a non-empty receive brought.
    ReceiveBatchSize,
    /// How long ago a message was sent when it was received, seconds.
    MessageAge,
}

/// The live counters behind [`Stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    counts: [AtomicU64; COUNTERS],
    /// Nanoseconds.
    worst_extension_delay: AtomicU64,
    /// Deliveries alive right now.
    held: AtomicU64,
    /// The visibility timeout the last receive with messages applied, seconds.
    visibility_timeout: AtomicU64,
    /// How receives fare, shared with the receive loop.
    receives: ReceiveHealth,
    #[cfg(feature = "metrics")]
    exported: Option<Exported>,
}

/// The `metrics` handles the counters are mirrored to, labelled with the queue.
#[cfg(feature = "metrics")]
struct Exported {
    counters: [metrics::Counter; COUNTERS],
    handler_duration: metrics::Histogram,
    extension_lateness: metrics::Histogram,
    receive_batch_size: metrics::Histogram,
    message_age: metrics::Histogram,
    visibility_timeout: metrics::Gauge,
}

#[cfg(feature = "metrics")]
impl std::fmt::Debug for Exported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exported")
    }
}

impl Counters {
    /// Counters for the consumer of the queue named `queue` (its name, never its URL, which
    /// carries the account id); with feature `metrics`, also exported through the `metrics`
    /// recorder installed now, labelled `queue = <queue>`.
    pub(crate) fn new(queue: &str) -> Self {
        #[cfg(feature = "metrics")]
        {
            let label = [("queue", queue.to_owned())];
            Self {
                exported: Some(Exported {
                    counters: COUNTER_NAMES.map(|name| metrics::counter!(name, &label)),
                    handler_duration: metrics::histogram!(
                        "sqs_consumer_handler_duration_seconds",
                        &label
                    ),
                    extension_lateness: metrics::histogram!(
                        "sqs_consumer_extension_lateness_seconds",
                        &label
                    ),
                    receive_batch_size: metrics::histogram!(
                        "sqs_consumer_receive_batch_size",
                        &label
                    ),
                    message_age: metrics::histogram!("sqs_consumer_message_age_seconds", &label),
                    visibility_timeout: metrics::gauge!(
                        "sqs_consumer_visibility_timeout_seconds",
                        &label
                    ),
                }),
                receives: ReceiveHealth::exported(&label),
                ..Self::default()
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = queue;
            Self::default()
        }
    }

    /// Adds one to `counter`; returns its new value. Relaxed: the counters are statistics,
    /// not synchronisation.
    pub(crate) fn bump(&self, counter: Counter) -> u64 {
        #[cfg(feature = "metrics")]
        if let Some(exported) = &self.exported {
            exported.counters[counter as usize].increment(1);
        }
        self.counts[counter as usize].fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records one event's measure (feature `metrics`; nothing otherwise).
    pub(crate) fn observe(&self, measure: Measure, value: f64) {
        #[cfg(feature = "metrics")]
        if let Some(exported) = &self.exported {
            let histogram = match measure {
                Measure::HandlerDuration => &exported.handler_duration,
                Measure::ExtensionLateness => &exported.extension_lateness,
                Measure::ReceiveBatchSize => &exported.receive_batch_size,
                Measure::MessageAge => &exported.message_age,
            };
            histogram.record(value);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (measure, value);
    }

    /// A receive with messages applied `visibility_timeout`.
    pub(crate) fn visibility_applied(&self, visibility_timeout: VisibilityTimeout) {
        let secs = visibility_timeout.secs();
        #[cfg(feature = "metrics")]
        if let Some(exported) = &self.exported {
            exported.visibility_timeout.set(f64::from(secs));
        }
        self.visibility_timeout
            .store(u64::from(secs), Ordering::Relaxed);
    }

    /// A delivery starts.
    pub(crate) fn delivery_started(&self) {
        self.held.fetch_add(1, Ordering::Relaxed);
    }

    /// A delivery is dropped.
    pub(crate) fn delivery_ended(&self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
    }

    /// Deliveries alive right now.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Records how long after it was due an extension was done (or gave up).
    pub(crate) fn extension_delay(&self, delay: Duration) {
        self.observe(Measure::ExtensionLateness, delay.as_secs_f64());
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.worst_extension_delay
            .fetch_max(nanos, Ordering::Relaxed);
    }

    /// How receives fare: the receive loop records each answer and failure there.
    pub(crate) fn receive_health(&self) -> ReceiveHealth {
        self.receives.clone()
    }

    /// A snapshot; `slots` is how many `max_in_flight` slots are taken (held deliveries and
    /// receives under way).
    pub(crate) fn snapshot(&self, slots: u64) -> Stats {
        let in_flight = self.held();
        let get = |c: Counter| self.counts[c as usize].load(Ordering::Relaxed);
        Stats {
            received: get(Counter::Received),
            acked: get(Counter::Acked),
            released: get(Counter::Released),
            extended: get(Counter::Extended),
            extension_failures: get(Counter::ExtensionFailures),
            worst_extension_delay: Duration::from_nanos(
                self.worst_extension_delay.load(Ordering::Relaxed),
            ),
            late_extensions: get(Counter::LateExtensions),
            lost: get(Counter::Lost),
            capped: get(Counter::Capped),
            handler_errors: get(Counter::HandlerErrors),
            handler_panics: get(Counter::HandlerPanics),
            handler_timeouts: get(Counter::HandlerTimeouts),
            unsettled: get(Counter::Unsettled),
            in_flight,
            reserved: slots.saturating_sub(in_flight),
            skipped_redeliveries: get(Counter::SkippedRedeliveries),
            lost_acks: get(Counter::LostAcks),
            payload_failures: get(Counter::PayloadFailures),
            payload_delete_failures: get(Counter::PayloadDeleteFailures),
            cancelled_on_lost: get(Counter::CancelledOnLost),
            dead_lettered: get(Counter::DeadLettered),
            duplicates_skipped: get(Counter::DuplicatesSkipped),
            duplicates_delayed: get(Counter::DuplicatesDelayed),
            idempotency_failures: get(Counter::IdempotencyFailures),
            visibility_timeout: Duration::from_secs(
                self.visibility_timeout.load(Ordering::Relaxed),
            ),
            receive_failures: self.receives.0.failures.load(Ordering::Acquire),
            consecutive_receive_failures: self.receives.0.consecutive.load(Ordering::Relaxed),
            since_last_receive: self.receives.times().last_answer.map(|at| at.elapsed()),
        }
    }
}

/// How a consumer's receives fare, for health checks: failures, the current run of them,
/// and when SQS last answered one. Shared by the receive loop (which records) and the
/// counters (which read).
#[derive(Debug, Clone, Default)]
pub(crate) struct ReceiveHealth(Arc<Health>);

#[derive(Debug, Default)]
struct Health {
    failures: AtomicU64,
    consecutive: AtomicU64,
    times: Mutex<HealthTimes>,
    #[cfg(feature = "metrics")]
    exported: Option<ExportedHealth>,
}

#[derive(Debug, Clone, Copy, Default)]
struct HealthTimes {
    /// When SQS last answered a receive.
    last_answer: Option<Instant>,
    /// When the current run of failures began (`None`: the last call succeeded).
    failing_since: Option<Instant>,
}

/// A run of receive failures, as it stands after one more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failing {
    /// Failures in the run, this one included.
    pub(crate) consecutive: u64,
    /// Since the run's first failure.
    pub(crate) lasted: Duration,
}

#[cfg(feature = "metrics")]
struct ExportedHealth {
    failures: metrics::Counter,
    consecutive: metrics::Gauge,
    last_answer: metrics::Gauge,
}

#[cfg(feature = "metrics")]
impl std::fmt::Debug for ExportedHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExportedHealth")
    }
}

impl ReceiveHealth {
    #[cfg(feature = "metrics")]
    fn exported(label: &[(&'static str, String); 1]) -> Self {
        Self(Arc::new(Health {
            exported: Some(ExportedHealth {
                failures: metrics::counter!("sqs_consumer_receive_failures_total", label),
                consecutive: metrics::gauge!("sqs_consumer_consecutive_receive_failures", label),
                last_answer: metrics::gauge!("sqs_consumer_last_receive_timestamp_seconds", label),
            }),
            ..Health::default()
        }))
    }

    fn times(&self) -> std::sync::MutexGuard<'_, HealthTimes> {
        self.0.times.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// SQS answered a receive (with messages or empty). Returns the run of failures this
    /// ends, if there was one.
    pub(crate) fn answered(&self) -> Option<Failing> {
        let now = Instant::now();
        let failing_since = {
            let mut times = self.times();
            times.last_answer = Some(now);
            times.failing_since.take()
        };
        let consecutive = self.0.consecutive.swap(0, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        if let Some(exported) = &self.0.exported {
            exported.consecutive.set(0.0);
            let unix = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            exported.last_answer.set(unix.as_secs_f64());
        }
        failing_since.map(|since| Failing {
            consecutive,
            lasted: now.saturating_duration_since(since),
        })
    }

    /// A receive (or a call of the start before the first) failed: the run it extends.
    pub(crate) fn failed(&self) -> Failing {
        let now = Instant::now();
        let since = *self.times().failing_since.get_or_insert(now);
        let consecutive = self.0.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
        // Counted after the run it extends: whoever sees this failure in `receive_failures`
        // (read first, with `Acquire`) sees it in `consecutive_receive_failures` too, unless
        // an answer ended the run since; never a failure with no run under way.
        self.0.failures.fetch_add(1, Ordering::Release);
        #[cfg(feature = "metrics")]
        if let Some(exported) = &self.0.exported {
            exported.failures.increment(1);
            exported.consecutive.set(consecutive as f64);
        }
        Failing {
            consecutive,
            lasted: now.saturating_duration_since(since),
        }
    }
}

#[cfg(test)]
mod tests;
