//! `ConsumerBuilder`: how a [`Consumer`](crate::Consumer) is made. Every setting with its
//! default, here; the entry points (`Consumer::builder`, `from_env`, `in_memory`) in
//! `constructors.rs`, the validation in `build` in `validation.rs`, and where the queue and
//! the keeper's client come from in `queues.rs`.

mod constructors;
pub(crate) mod dead_letter_queue;
mod queues;
mod validation;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;

use crate::builder::dead_letter_queue::DeadLetterQueue;
use crate::delivery::Delivery;
use crate::engine::claiming::KeyFn;
use crate::error::BoxError;
use crate::flow::in_flight_limit::InFlightLimit;
use crate::flow::rate_limit::RateLimit;
use crate::handler::handling::{AckMode, OnLost};
use crate::idempotency::Store;
use crate::queue::DEFAULT_REQUEST_TIMEOUT;
use crate::retry_policy::RetryPolicy;
use crate::trace::parent::{SpanHook, TraceParent};

use crate::builder::queues::{KeeperPlacement, Source};

/// Defaults, as documented on the setters.
const DEFAULT_WAIT_TIME: Duration = Duration::from_secs(20);
const DEFAULT_RECEIVE_BATCH_SIZE: u32 = 10;
// A multiple of the receive batch size: receives of 10 fill the slots exactly, and so do the
// extension and delete batches of the deliveries they bring.
const DEFAULT_MAX_IN_FLIGHT: usize = 40;
// With the final flush's few seconds (`engine::FINAL_FLUSH`), a stop fits in 28 s: inside
// the 30 s grace period Kubernetes, ECS and systemd give by default before SIGKILL.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);
// Long enough to ride out SQS's brief failures and a credentials provider's restart; short
// enough that a worker whose credentials or network are broken for good stops, and its
// supervisor restarts it (with the credentials chain read anew) and shows the failure.
const DEFAULT_GIVE_UP_AFTER: Duration = Duration::from_secs(300);
const DEFAULT_MAX_CONCURRENT_RECEIVES: usize = 64;
/// How long a done idempotency key is kept (see `idempotency_keep_done`).
const DEFAULT_KEEP_DONE: Duration = Duration::from_secs(24 * 3600);
/// The longest a done idempotency key may be kept.
const MAX_KEEP_DONE: Duration = Duration::from_secs(365 * 24 * 3600);
/// The most deliveries in one batch of a batch handler (Lambda's limit for SQS).
const MAX_BATCH_DELIVERIES: usize = 10_000;
/// The longest a handler batch may fill (Lambda's batching window).
const MAX_BATCH_WINDOW: Duration = Duration::from_secs(300);
/// Messages per second a rate limit may be set to.
const RECEIVE_RATES: std::ops::RangeInclusive<f64> = 0.001..=100_000.0;
const RECEIVE_RATES_ALLOWED: &str = "a finite number of messages per second, 0.001..=100000";
/// The range a `request_timeout` must fall in.
const REQUEST_TIMEOUTS: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(300);

/// Builds a [`Consumer`](crate::Consumer); start with
/// [`Consumer::builder`](crate::Consumer::builder) or
/// [`Consumer::in_memory`](crate::Consumer::in_memory).
///
/// Every setter is optional. [`build`](ConsumerBuilder::build) checks the settings and
/// returns [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming the first one out of
/// range; it never panics.
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ConsumerBuilder {
    source: Source,
    visibility_timeout: Option<Duration>,
    wait_time: Duration,
    receive_batch_size: u32,
    max_in_flight: usize,
    shutdown_timeout: Duration,
    give_up_after: Duration,
    retry_policy: RetryPolicy,
    max_concurrent_receives: usize,
    request_timeout: Duration,
    handler_timeout: Option<Duration>,
    ack_mode: AckMode,
    on_lost: OnLost,
    /// `None`: one receive's worth (see `Batching::default`).
    max_batch: Option<usize>,
    batch_window: Duration,
    message_attribute_names: Vec<String>,
    system_attribute_names: Vec<MessageSystemAttributeName>,
    shared_in_flight_limit: Option<InFlightLimit>,
    max_receive_rate: Option<f64>,
    shared_rate_limit: Option<RateLimit>,
    dead_letter: Option<(DeadLetterQueue, u32)>,
    adaptive_visibility: Option<(Duration, Duration)>,
    keeper: KeeperPlacement,
    keeper_client: Option<aws_sdk_sqs::Client>,
    span_hook: Option<SpanHook>,
    idempotency: Option<Arc<dyn Store>>,
    idempotency_key: Option<KeyFn>,
    idempotency_keep_done: Duration,
    #[cfg(feature = "s3")]
    payloads: PayloadSettings,
    /// Deletes recorded here, not sent (in Lambda, which deletes what its function reports
    /// done).
    #[cfg(feature = "lambda")]
    deferred_deletes: Option<crate::queue::deferred_deletes::DeferredDeletes>,
}

/// What the builder was told about payloads in S3 (feature `s3`).
#[cfg(feature = "s3")]
#[derive(Debug)]
struct PayloadSettings {
    client: Option<aws_sdk_s3::Client>,
    max_bytes: u64,
    delete_on_ack: bool,
    buckets: PayloadBuckets,
}

/// Which buckets pointers may name, as the builder was told (feature `s3`).
#[cfg(feature = "s3")]
#[derive(Debug)]
enum PayloadBuckets {
    /// Not said: `build()` refuses `s3_payloads`.
    Unset,
    /// These, and no other.
    Only(Vec<String>),
    /// Every bucket the client can read (`any_payload_bucket`).
    Any,
}

impl ConsumerBuilder {
    fn new(source: Source) -> Self {
        Self {
            source,
            visibility_timeout: None,
            wait_time: DEFAULT_WAIT_TIME,
            receive_batch_size: DEFAULT_RECEIVE_BATCH_SIZE,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            give_up_after: DEFAULT_GIVE_UP_AFTER,
            retry_policy: RetryPolicy::Leave,
            max_concurrent_receives: DEFAULT_MAX_CONCURRENT_RECEIVES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            handler_timeout: None,
            ack_mode: AckMode::Manual,
            on_lost: OnLost::RunOn,
            max_batch: None,
            batch_window: Duration::ZERO,
            message_attribute_names: vec!["All".to_owned()],
            system_attribute_names: vec![MessageSystemAttributeName::All],
            shared_in_flight_limit: None,
            max_receive_rate: None,
            shared_rate_limit: None,
            dead_letter: None,
            adaptive_visibility: None,
            keeper: KeeperPlacement::Default,
            keeper_client: None,
            span_hook: None,
            idempotency: None,
            idempotency_key: None,
            idempotency_keep_done: DEFAULT_KEEP_DONE,
            #[cfg(feature = "s3")]
            payloads: PayloadSettings {
                client: None,
                max_bytes: crate::payload::store::DEFAULT_MAX_PAYLOAD_BYTES,
                delete_on_ack: false,
                buckets: PayloadBuckets::Unset,
            },
            #[cfg(feature = "lambda")]
            deferred_deletes: None,
        }
    }

    /// The visibility timeout each receive asks for, and so the keeper's period (it
    /// extends halfway through each timeout). Whole seconds in 1..=43200 (12 hours): with 0 a
    /// received message would be visible to every other receive at once, and no delivery
    /// could be kept.
    ///
    /// Defaults to the queue's own `VisibilityTimeout`, read once when the consumer starts; a
    /// queue whose own timeout is 0 makes `run` fail at once with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming `visibility_timeout` (set one
    /// here, or on the queue).
    /// A short timeout brings a message back sooner after a crash, at the cost of more
    /// `ChangeMessageVisibility` calls while it is held.
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = Some(timeout);
        self
    }

    /// Lets each receive choose its visibility timeout, within `[min, max]`, from how long
    /// this consumer's deliveries were held lately (from the receive's answer until their
    /// ack, release or move started, or they were dropped). Whole seconds in 1..=43200 each,
    /// `min <= max`. Defaults to off: every receive asks for the
    /// [`visibility_timeout`](ConsumerBuilder::visibility_timeout).
    ///
    /// The estimate is twice the 90th percentile of the last 100 holds, newer ones weighing
    /// more (each counts 0.97 of the next newer), plus half a second, rounded up to whole
    /// seconds and clamped to `[min, max]`: the keeper extends halfway through the
    /// timeout, so a delivery held no longer than that percentile settles before its first
    /// extension. Until a delivery has been held, receives ask for the consumer's visibility
    /// timeout (the builder's, or the queue's own) clamped to `[min, max]`. A few slow holds
    /// raise it at once (four in a row after a long run of fast ones); fast ones bring it down
    /// slowly (about 64). Lost deliveries are not counted.
    ///
    /// The estimate only saves requests: the keeper still extends every delivery held longer
    /// than its timeout, as with a fixed one. What it costs: a consumer that dies leaves its
    /// messages hidden for up to the timeout its receive chose, at most `max`; pick `max` as
    /// long as a message may wait after a crash. [`Stats::visibility_timeout`](crate::Stats)
    /// shows the timeout the last receive chose.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use sqs_consumer::{Consumer, memory::MemoryQueue};
    /// let queue = MemoryQueue::new();
    /// let consumer = Consumer::in_memory(&queue)
    ///     .adaptive_visibility(Duration::from_secs(10), Duration::from_secs(120))
    ///     .build()?;
    /// # Ok::<(), sqs_consumer::Error>(())
    /// ```
    pub fn adaptive_visibility(mut self, min: Duration, max: Duration) -> Self {
        self.adaptive_visibility = Some((min, max));
        self
    }

    /// How long a `ReceiveMessage` waits for messages (long polling), whole seconds in
    /// 0..=20. Defaults to 20 s, which costs the fewest requests on a quiet queue. An empty
    /// answer before half the wait time (a short poll, or a server that answers early) is
    /// followed by a back-off from 50 ms doubling to 2 s, so the consumer never spins.
    pub fn wait_time(mut self, wait: Duration) -> Self {
        self.wait_time = wait;
        self
    }

    /// The most messages one `ReceiveMessage` asks for (`MaxNumberOfMessages`), 1..=10.
    /// Defaults to 10. A receive never asks for more than the free
    /// [`max_in_flight`](ConsumerBuilder::max_in_flight) slots.
    pub fn receive_batch_size(mut self, size: u32) -> Self {
        self.receive_batch_size = size;
        self
    }

    /// The former name of [`receive_batch_size`](ConsumerBuilder::receive_batch_size).
    #[deprecated(since = "0.1.0", note = "renamed `receive_batch_size`")]
    pub fn batch_size(self, size: u32) -> Self {
        self.receive_batch_size(size)
    }

    /// The most deliveries held at once (running handlers, and deliveries you moved
    /// elsewhere and still hold), 1..=120000. The consumer receives only while a slot is
    /// free, so no message waits in memory while its timeout runs. A delivery's slot comes
    /// free once its ack is sent, without waiting a round trip for the answer (while the
    /// acks awaiting answers number at most twice this; past that, and for a release, when
    /// it is answered), so at a round trip to SQS 40 slots serve up to 40 messages per
    /// round trip (see [Messages a second at a round
    /// trip](crate::guide::flow_control#messages-a-second-at-a-round-trip)). Defaults to 40 (a
    /// multiple of the receive batch size, 10, so that receives, extensions and deletes go in whole
    /// batches).
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.max_in_flight = max;
        self
    }

    /// How long a graceful stop ([`Consumer::run_until`](crate::Consumer::run_until),
    /// [`Consumer::shutdown`](crate::Consumer::shutdown))
    /// lets running handlers finish, counted from the signal, before it cancels them and
    /// releases their messages. The receives under way at the signal end meanwhile (within
    /// their [`wait_time`](ConsumerBuilder::wait_time)). After it, the releases and the acks
    /// still under way get at most 3 s more, so a stop takes at most this plus 3 s.
    ///
    /// Defaults to 25 s: a stop then ends within 28 s, inside the 30 s that Kubernetes, ECS
    /// and systemd wait after SIGTERM before they kill the process. With a longer grace period
    /// (`terminationGracePeriodSeconds`, ECS's `stopTimeout`, systemd's `TimeoutStopSec`),
    /// set this to that period less 5 s. See the guide's
    /// [shutdown](crate::guide::shutdown#running-in-kubernetes-ecs-and-systemd) page.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// How long receives may keep failing, with no receive answered between, before `run`
    /// (or a stream) ends with the last error, at least 1 s; [`Duration::MAX`] retries for
    /// ever. Every transient failure counts: SQS unavailable or throttling, the network, and
    /// credentials of every kind (none found, a provider failing, an expired token). Failures
    /// that retrying cannot mend (a missing queue, access denied) end `run` at once, as
    /// before. Each failure is retried with back-off (up to 20 s between tries), so `run`
    /// ends within this plus one back-off and one request.
    ///
    /// Defaults to 5 minutes: long enough to ride out SQS's brief failures and a credentials
    /// provider's restart, short enough that a worker whose credentials or network are broken
    /// for good stops, and its supervisor restarts it (reading the credentials chain anew)
    /// and shows the failure. [`Stats::consecutive_receive_failures`](crate::Stats) and
    /// [`Stats::since_last_receive`](crate::Stats) tell a health check the same earlier.
    pub fn give_up_after(mut self, after: Duration) -> Self {
        self.give_up_after = after;
        self
    }

    /// What happens to a delivery dropped without being settled (its handler failed,
    /// panicked, or forgot it). Defaults to [`RetryPolicy::Leave`]: the message returns when
    /// its visibility timeout lapses.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry_policy = policy;
        self
    }

    /// The most `ReceiveMessage` calls under way at once, 1..=64. The consumer starts with one
    /// and adds another each time a receive comes back full while slots are free, so a busy
    /// queue keeps `max_in_flight` filled; a short answer takes one away, so a thinning queue
    /// is not split into ever shorter answers; an empty answer brings it back to one, so a
    /// quiet queue costs one long poll at a time. So does an answer that comes while
    /// deliveries are released at once (visibility 0: [`RetryPolicy::ReleaseNow`], or
    /// [`Delivery::release`](crate::Delivery::release)): those messages are visible again
    /// at once, and several receives waiting would split them into short answers. Never more
    /// than `max_in_flight / receive_batch_size` (rounded up). Defaults to 64: as many as the slots
    /// can fill (4 with the default 40 slots), which a busy queue needs at a round trip of
    /// tens of milliseconds; a lower cap trades messages a second for fewer empty answers
    /// when a burst ends (one for each receive then under way, beyond the first).
    pub fn max_concurrent_receives(mut self, max: usize) -> Self {
        self.max_concurrent_receives = max;
        self
    }

    /// How long any SQS call may go unanswered before it counts as a transient failure (and
    /// is retried by whoever owns its retries: see [the guide](crate::guide::errors#who-retries-who-times-out)), 100 ms..=300 s. A receive
    /// may take its [`wait_time`](ConsumerBuilder::wait_time) on top. An extension is cut
    /// short at its delivery's deadline anyway. Defaults to 10 s.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The longest a handler (or a batch handler, for its whole batch) may run, more than 0
    /// and at most 12 hours. When it runs out, the handler's future is dropped, with it every
    /// delivery it still held: each gets the [`retry_policy`](ConsumerBuilder::retry_policy)
    /// (released at once during a shutdown), and on a FIFO queue the rest of its group from
    /// that receive is released, as after a failure. Counted in
    /// [`Stats::handler_timeouts`](crate::Stats::handler_timeouts) and logged at `warn`.
    ///
    /// Defaults to none: the keeper keeps a message hidden for as long as its handler
    /// holds it, up to SQS's 12 hours.
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.handler_timeout = Some(timeout);
        self
    }

    /// What a handler's `Ok` means for the deliveries it leaves unsettled: see [`AckMode`].
    /// Defaults to [`AckMode::Manual`]: you settle each delivery yourself, and one left
    /// unsettled is counted and warned about.
    pub fn ack_mode(mut self, mode: AckMode) -> Self {
        self.ack_mode = mode;
        self
    }

    /// The message attributes each receive asks for (`MessageAttributeNames`): names,
    /// `prefix.*` for every attribute whose name starts with `prefix.`, or `All` / `.*`; an
    /// empty list asks for none. Each entry is checked as SQS would (1 to 256 letters,
    /// digits, `_`, `-` and `.`; see [`build`](ConsumerBuilder::build)). Defaults to `All`.
    pub fn message_attribute_names<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.message_attribute_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Called with each delivery's `delivery` span as soon as it is made, before anything
    /// runs in it (not for a span that no subscriber records), and the producer's trace
    /// context the message carries, if any (see
    /// [`Delivery::trace_parent`](crate::Delivery::trace_parent)). The place to set the
    /// span's parent with a `tracing-opentelemetry` version other than the one feature
    /// `opentelemetry` uses (once a span has been entered, `tracing-opentelemetry` no longer
    /// takes a parent), or to record fields of your own. Keep it quick: it runs in the receive
    /// loop, once per message. Defaults to none.
    ///
    /// ```no_run
    /// use std::collections::HashMap;
    /// use opentelemetry::propagation::TextMapPropagator;
    /// use opentelemetry_sdk::propagation::TraceContextPropagator;
    /// use tracing_opentelemetry::OpenTelemetrySpanExt;
    ///
    /// # fn example(builder: sqs_consumer::ConsumerBuilder) -> Result<(), sqs_consumer::Error> {
    /// let consumer = builder
    ///     .on_delivery_span(|span, parent| {
    ///         if let Some(parent) = parent {
    ///             let carrier = HashMap::from([("traceparent".to_owned(), parent.traceparent())]);
    ///             let _ = span.set_parent(TraceContextPropagator::new().extract(&carrier));
    ///         }
    ///     })
    ///     .build()?;
    /// # let _ = consumer; Ok(()) }
    /// ```
    pub fn on_delivery_span(
        mut self,
        hook: impl Fn(&tracing::Span, Option<&TraceParent>) + Send + Sync + 'static,
    ) -> Self {
        self.span_hook = Some(SpanHook::new(hook));
        self
    }

    /// The system attributes each receive asks for (`MessageSystemAttributeNames`). The
    /// consumer always adds the ones it needs itself: `ApproximateReceiveCount` (for
    /// [`Delivery::receive_count`](crate::Delivery::receive_count) and the retry policy),
    /// `MessageGroupId` (for FIFO order), `AWSTraceHeader` (for the `delivery` span) and
    /// `SentTimestamp` (for [`Delivery::age`](crate::Delivery::age)). Defaults to `All`.
    pub fn message_system_attribute_names<I>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = MessageSystemAttributeName>,
    {
        self.system_attribute_names = names.into_iter().collect();
        self
    }

    /// A budget of held deliveries shared with other consumers (see [`InFlightLimit`]): the
    /// deliveries held by all of them together never exceed it. This consumer's own
    /// [`max_in_flight`](ConsumerBuilder::max_in_flight) applies too. Defaults to none.
    pub fn shared_in_flight_limit(mut self, limit: &InFlightLimit) -> Self {
        self.shared_in_flight_limit = Some(limit.clone());
        self
    }

    /// The former name of [`shared_in_flight_limit`](ConsumerBuilder::shared_in_flight_limit).
    #[deprecated(since = "0.1.0", note = "renamed `shared_in_flight_limit`")]
    pub fn in_flight_limit(self, limit: &InFlightLimit) -> Self {
        self.shared_in_flight_limit(limit)
    }

    /// At most `per_second` messages received a second by this consumer, a [`RateLimit`] of
    /// its own: each receive waits for tokens before its request and asks for no more
    /// messages than it holds, so no message waits for the rate while its visibility timeout
    /// runs. A finite number from 0.001 to 100000. Defaults to none (as fast as the handlers
    /// free slots).
    ///
    /// ```
    /// # fn example(builder: sqs_consumer::ConsumerBuilder) -> Result<(), sqs_consumer::Error> {
    /// // A downstream API that takes 50 calls a second: receives of 10, five a second.
    /// let consumer = builder.max_receive_rate(50.0).build()?;
    /// # let _ = consumer; Ok(()) }
    /// ```
    pub fn max_receive_rate(mut self, per_second: f64) -> Self {
        self.max_receive_rate = Some(per_second);
        self
    }

    /// The most deliveries in one [`Batch`](crate::Batch) of
    /// [`run_batch`](crate::Consumer::run_batch): 1..=10000, and at most
    /// [`max_in_flight`](ConsumerBuilder::max_in_flight) (a handler batch is held whole while it
    /// fills). Without a [`batch_window`](ConsumerBuilder::batch_window) each receive's
    /// deliveries are handed out as they come, in batches of at most this many. Not on a FIFO
    /// queue, whose batches keep each group's order (refused by `build()`). Defaults to 10.
    pub fn max_batch(mut self, max: usize) -> Self {
        self.max_batch = Some(max);
        self
    }

    /// How long a batch of [`run_batch`](crate::Consumer::run_batch) may fill from its first
    /// delivery, across receives: it is handed out when it holds
    /// [`max_batch`](ConsumerBuilder::max_batch) deliveries or when its window has passed,
    /// whichever comes first. Every delivery in a filling batch keeps its lease (the keeper
    /// extends it), so a window longer than the visibility timeout loses nothing. 0..=300 s.
    /// On a shutdown a filling batch is handed out once the receives under way are in (with
    /// what they brought), not at its window. Not on a FIFO queue (refused by `build()`, as
    /// Lambda refuses it). Defaults to 0: each receive's deliveries are handed out as they
    /// come.
    ///
    /// ```
    /// # fn example(builder: sqs_consumer::ConsumerBuilder) -> Result<(), sqs_consumer::Error> {
    /// use std::time::Duration;
    /// // Bulk inserts of up to 1,000 rows, at least every 30 s.
    /// let consumer = builder
    ///     .max_in_flight(1_000)
    ///     .max_batch(1_000)
    ///     .batch_window(Duration::from_secs(30))
    ///     .build()?;
    /// # let _ = consumer; Ok(()) }
    /// ```
    pub fn batch_window(mut self, window: Duration) -> Self {
        self.batch_window = window;
        self
    }

    /// Drops a handler's future as soon as its delivery is lost (a batch handler's: once
    /// every delivery of its handler batch is lost), counted in
    /// [`Stats::cancelled_on_lost`](crate::Stats::cancelled_on_lost) and logged at `warn`
    /// with the message id. A lost delivery's message may already be with another consumer:
    /// for work that must not run twice at once (a payment, a job holding a lock), stopping
    /// is safer than finishing. The handler stops at the `.await` it is waiting on, as with
    /// [`handler_timeout`](ConsumerBuilder::handler_timeout): code between two `.await`s
    /// always runs to the next one, and what the handler does at an `.await` (a write half
    /// sent, a transaction open) is cut there, so keep side effects that must finish behind
    /// one `.await`, or use [`Delivery::lost`](crate::Delivery::lost) yourself to stop at
    /// points you choose. Defaults to `false`: the handler runs on, and its ack reports the
    /// loss.
    ///
    /// ```
    /// # fn example(builder: sqs_consumer::ConsumerBuilder) -> Result<(), sqs_consumer::Error> {
    /// let consumer = builder.cancel_on_lost(true).build()?;
    /// # let _ = consumer; Ok(()) }
    /// ```
    pub fn cancel_on_lost(mut self, cancel: bool) -> Self {
        self.on_lost = if cancel {
            OnLost::Cancel
        } else {
            OnLost::RunOn
        };
        self
    }

    /// Moves a message its handler keeps failing on to the dead-letter queue `queue`, saying
    /// why: when a handler fails (returns an error, panics or times out, or calls
    /// [`Delivery::fail`](crate::Delivery::fail)) on a delivery received `after_receives`
    /// times or more (1..=1000), the consumer sends a copy (the original body and message
    /// attributes, plus the attribute `sqs-consumer.failure` with the failure as JSON) and
    /// then deletes the original, whatever the [`AckMode`]. Set `after_receives` below the
    /// queue's own redrive `maxReceiveCount`, if it has one, or SQS moves the message first,
    /// without the reason. [`Delivery::dead_letter`](crate::Delivery::dead_letter) moves one
    /// on demand. With it, every receive asks for all message attributes (so that the copy
    /// keeps them) and for `ApproximateFirstReceiveTimestamp`. The guide's
    /// [flow control](crate::guide::flow_control) page says what the copy holds and what a
    /// crash between the send and the delete leaves. Defaults to none: failures meet the
    /// [`RetryPolicy`] only.
    ///
    /// ```
    /// # fn example(builder: sqs_consumer::ConsumerBuilder) -> Result<(), sqs_consumer::Error> {
    /// // The third failure moves the message, with its reason, to `orders-failed`.
    /// let consumer = builder.dead_letter("orders-failed", 3).build()?;
    /// # let _ = consumer; Ok(()) }
    /// ```
    pub fn dead_letter(mut self, queue: impl Into<DeadLetterQueue>, after_receives: u32) -> Self {
        self.dead_letter = Some((queue.into(), after_receives));
        self
    }

    /// Runs each message's work once in effect: before a handler runs, the consumer claims the
    /// message's key in `store` for as long as the delivery's lease lasts; an ack marks it done
    /// before the delete; a message whose key is done is acked without running the handler
    /// (counted in [`Stats::duplicates_skipped`](crate::Stats::duplicates_skipped)), and one
    /// whose key another message holds under a live lease comes back when that hold ends.
    /// Applies to every handler kind, streams and `lambda::Function` alike. The key is the
    /// message id (a FIFO message's deduplication id), or what
    /// [`idempotency_key`](ConsumerBuilder::idempotency_key) gives. The guide's page
    /// [`idempotency`](crate::guide::idempotency) has the table of outcomes and what this
    /// cannot promise. Defaults to none: SQS's at-least-once, as it is.
    ///
    /// ```
    /// # fn example(builder: sqs_consumer::ConsumerBuilder) -> Result<(), sqs_consumer::Error> {
    /// use sqs_consumer::idempotency::MemoryStore;
    ///
    /// let consumer = builder.idempotency(MemoryStore::new()).build()?;
    /// # let _ = consumer; Ok(()) }
    /// ```
    pub fn idempotency(mut self, store: impl Store) -> Self {
        self.idempotency = Some(Arc::new(store));
        self
    }

    /// The key a message's work is recorded under, in place of its message id: for example
    /// an order id read from the body, which catches a producer's duplicates (each sent with
    /// a message id of its own). A key of any length is stored hashed (see
    /// [`idempotency::Key`](crate::idempotency::Key)). A function that fails (or panics)
    /// sends the delivery through the failure step with its error, as a failing handler's
    /// does. Needs [`idempotency`](ConsumerBuilder::idempotency). Defaults to the message id,
    /// or on a FIFO queue the message's `MessageDeduplicationId`.
    ///
    /// ```
    /// # fn example(builder: sqs_consumer::ConsumerBuilder) -> Result<(), sqs_consumer::Error> {
    /// use sqs_consumer::{idempotency::MemoryStore, BoxError, Delivery};
    ///
    /// // Bodies look like `order-42:...`: the order id is the key.
    /// let consumer = builder
    ///     .idempotency(MemoryStore::new())
    ///     .idempotency_key(|d: &Delivery| -> Result<String, BoxError> {
    ///         let (order, _) = d.body().split_once(':').ok_or("no order id")?;
    ///         Ok(order.to_owned())
    ///     })
    ///     .build()?;
    /// # let _ = consumer; Ok(()) }
    /// ```
    pub fn idempotency_key<F>(mut self, key: F) -> Self
    where
        F: Fn(&Delivery) -> Result<String, BoxError> + Send + Sync + 'static,
    {
        self.idempotency_key = Some(KeyFn(Arc::new(key)));
        self
    }

    /// How long a done key is kept: a message that comes back within it (its delete was lost,
    /// or a producer sent it again under the same key) is acked without its handler. 1 s to
    /// 365 days. Defaults to 24 hours: longer than any redelivery while consumers run (a
    /// message whose delete was lost comes back when its visibility lapses, at most 12 hours
    /// later) and than a FIFO queue's 5-minute deduplication window; a message that waits
    /// out an outage longer than it can run again, so set it to the queue's retention period
    /// (up to 14 days) to cover those too.
    pub fn idempotency_keep_done(mut self, keep: Duration) -> Self {
        self.idempotency_keep_done = keep;
        self
    }

    /// A budget of messages per second shared with other consumers (see [`RateLimit`]): the
    /// messages received by all of them together stay within it. A
    /// [`max_receive_rate`](ConsumerBuilder::max_receive_rate) of this consumer's own applies
    /// too. Defaults to none.
    pub fn shared_rate_limit(mut self, limit: &RateLimit) -> Self {
        self.shared_rate_limit = Some(limit.clone());
        self
    }

    /// The former name of [`shared_rate_limit`](ConsumerBuilder::shared_rate_limit).
    #[deprecated(since = "0.1.0", note = "renamed `shared_rate_limit`")]
    pub fn rate_limit(self, limit: &RateLimit) -> Self {
        self.shared_rate_limit(limit)
    }

    /// Runs the consumer's keeper (the visibility extensions) and its settle calls (acks and
    /// releases) on a thread of their own, with a small runtime and an SQS client whose
    /// connections are its own: handlers that block every worker thread of your runtime
    /// (CPU-bound or blocking code in an async handler) then delay only the handlers, not the
    /// extensions that keep their messages hidden. The thread ends once the consumer and
    /// every delivery it handed out are gone.
    ///
    /// Defaults to `true` for a consumer built on a client with the SDK's default HTTP client
    /// (its configuration names none: the keeper's client is built from the same
    /// configuration and gets a new one, with a pool of its own) or given a
    /// [`keeper_client`](ConsumerBuilder::keeper_client); otherwise `false`: a client with
    /// an HTTP client of your choosing (a proxy, a private CA, a mock in tests), and a
    /// [`MemoryQueue`](crate::MemoryQueue) consumer (whose clock is the caller's: a test on
    /// tokio's paused clock
    /// needs everything on its own runtime). Turning it on for such a client without a
    /// `keeper_client` is refused by [`build`](ConsumerBuilder::build).
    pub fn isolated_keeper(mut self, isolated: bool) -> Self {
        self.keeper = if isolated {
            KeeperPlacement::OwnThread
        } else {
            KeeperPlacement::CallersRuntime
        };
        self
    }

    /// The client the isolated keeper makes its calls with (see
    /// [`isolated_keeper`](ConsumerBuilder::isolated_keeper), which it turns on unless that
    /// says otherwise): for a client with an HTTP client of your choosing, give one built
    /// the same way but with an HTTP client (a connection pool) of its own, so that no
    /// connection is driven by your runtime. Calls made with it make one attempt each, as
    /// the consumer's others do. Defaults to one built from the consumer's client's
    /// configuration, when that names no HTTP client.
    pub fn keeper_client(mut self, client: aws_sdk_sqs::Client) -> Self {
        self.keeper_client = Some(client);
        self
    }

    /// Reads the payloads that Amazon's Extended Client libraries (Java, Python, .NET, and
    /// the SNS extended client) store in S3, through `client`: a message whose body is such a
    /// library's pointer (it carries the reserved `ExtendedPayloadSize` or
    /// `SQSLargePayloadSize` attribute, which the consumer then always asks for) is handed to
    /// its handler with the payload as [`Delivery::body`](crate::Delivery::body), and
    /// [`Delivery::payload_location`](crate::Delivery::payload_location) says where it came
    /// from. The same for batch handlers and streams, and for SNS notifications whose
    /// `Message` is a pointer (`sns()`, feature `json`).
    ///
    /// The object is read before the handler runs, while the delivery is held: it takes its
    /// `max_in_flight` slot and the keeper keeps it hidden however long the download takes
    /// (the download is not counted in `handler_timeout`). Each request waits at most
    /// [`request_timeout`](ConsumerBuilder::request_timeout) for an answer, and a download
    /// as long for each next piece. Transient S3 failures are tried 4 times in all. A payload
    /// that cannot be read (no such object or bucket, access denied, a malformed pointer, a
    /// bucket not in [`payload_buckets`](ConsumerBuilder::payload_buckets), a size over
    /// [`max_payload_bytes`](ConsumerBuilder::max_payload_bytes) or not the one declared, S3
    /// failing 4 times) reaches no handler: it is counted in
    /// [`Stats::payload_failures`](crate::Stats::payload_failures), logged once at `error`
    /// with the message id, bucket and key, and the delivery meets the failure step of a
    /// failing handler's: the [`dead_letter`](ConsumerBuilder::dead_letter) step once its
    /// receive count is due (the payload's error as the failure), the
    /// [`retry_policy`](ConsumerBuilder::retry_policy) with its back-off before that (and a
    /// queue's redrive policy after its receives). Nothing is acked that no handler saw. Feature `s3`; defaults to none (pointers are delivered as they are).
    ///
    /// Needs [`payload_buckets`](ConsumerBuilder::payload_buckets) (or, knowingly,
    /// [`any_payload_bucket`](ConsumerBuilder::any_payload_bucket)): `build()` refuses it
    /// alone, since without a list any producer allowed to send to the queue could make the
    /// consumer read any object its role can read.
    ///
    /// ```no_run
    /// # async fn example(sqs: aws_sdk_sqs::Client, s3: aws_sdk_s3::Client) -> Result<(), sqs_consumer::Error> {
    /// use sqs_consumer::{Consumer, Delivery};
    ///
    /// let consumer = Consumer::builder(sqs, "orders")
    ///     .s3_payloads(s3)
    ///     .payload_buckets(["orders-payloads"])
    ///     .max_payload_bytes(16 * 1024 * 1024)
    ///     .build()?;
    /// consumer
    ///     .run(|delivery: Delivery| async move {
    ///         println!("{} bytes", delivery.body().len()); // the payload, read from S3
    ///         delivery.ack().await
    ///     })
    ///     .await
    /// # }
    /// ```
    #[cfg(feature = "s3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
    pub fn s3_payloads(mut self, client: aws_sdk_s3::Client) -> Self {
        self.payloads.client = Some(client);
        self
    }

    /// The buckets payload pointers may name (feature `s3`): a pointer to any other bucket is
    /// refused, never read, and meets the failure step as an unreadable payload does (see
    /// [`s3_payloads`](ConsumerBuilder::s3_payloads)): counted in
    /// [`Stats::payload_failures`](crate::Stats::payload_failures), the retry policy, and
    /// the [`dead_letter`](ConsumerBuilder::dead_letter) step once due. Bucket names as S3
    /// takes them: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending
    /// with a letter or digit; at least one. Required with `s3_payloads`, unless
    /// [`any_payload_bucket`](ConsumerBuilder::any_payload_bucket); a second call replaces
    /// the first list.
    ///
    /// Why: a pointer is only a message body. Without this list, anyone allowed to send to
    /// the queue could point the consumer at any object its role can read (another tenant's
    /// data, say), and its handler would treat that object as the message.
    #[cfg(feature = "s3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
    pub fn payload_buckets<I>(mut self, buckets: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.payloads.buckets = PayloadBuckets::Only(buckets.into_iter().map(Into::into).collect());
        self
    }

    /// Reads payloads from whatever bucket a pointer names (feature `s3`), instead of a
    /// [`payload_buckets`](ConsumerBuilder::payload_buckets) list: for a queue whose every
    /// producer is trusted with every bucket this consumer's role can read. Replaces a list
    /// given before.
    #[cfg(feature = "s3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
    pub fn any_payload_bucket(mut self) -> Self {
        self.payloads.buckets = PayloadBuckets::Any;
        self
    }

    /// The largest payload read from S3, in bytes, 1..=2147483648 (2 GiB): a message that
    /// declares more, or an object that turns out larger, is refused without reading it (or
    /// as soon as more arrives) and meets the failure step, as an unreadable payload does
    /// (see [`s3_payloads`](ConsumerBuilder::s3_payloads)). Each payload held is in memory
    /// whole, as a `String`, while its delivery is held, so the consumer may hold up to
    /// `max_in_flight` times this at once. Defaults to 64 MiB: with the default
    /// `max_in_flight` of 40, at most 2.5 GiB of payloads, whatever the producers declare.
    /// Raise it for larger payloads, and lower `max_in_flight` with it. Feature `s3`.
    #[cfg(feature = "s3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
    pub fn max_payload_bytes(mut self, max: u64) -> Self {
        self.payloads.max_bytes = max;
        self
    }

    /// Deletes a payload's object from S3 once its message is acked: only after the SQS
    /// delete succeeded (never before: a failed ack leaves the message to be handled again,
    /// and it needs its payload), in the background (a graceful shutdown waits for it). A
    /// failed object delete is tried 4 times at most, then logged at `warn` and counted in
    /// [`Stats::payload_delete_failures`](crate::Stats::payload_delete_failures); the object
    /// stays. Defaults to `false`: with SNS fan-out several queues carry pointers to one
    /// object, and the first consumer to delete it would take it from the others (let an S3
    /// lifecycle rule expire them instead). Needs
    /// [`s3_payloads`](ConsumerBuilder::s3_payloads). Feature `s3`.
    #[cfg(feature = "s3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
    pub fn delete_payload_on_ack(mut self, delete: bool) -> Self {
        self.payloads.delete_on_ack = delete;
        self
    }
}

/// What a consumer in AWS Lambda needs of the builder (feature `lambda`).
#[cfg(feature = "lambda")]
impl ConsumerBuilder {
    /// The same builder, its deletes recorded in `deletes` and not sent: Lambda deletes what
    /// its function reports done.
    pub(crate) fn defer_deletes(
        mut self,
        deletes: crate::queue::deferred_deletes::DeferredDeletes,
    ) -> Self {
        self.deferred_deletes = Some(deletes);
        self
    }

    /// Refuses the settings that cannot hold in Lambda, whose own receive applied the
    /// queue's visibility timeout.
    pub(crate) fn check_for_lambda(&self) -> Result<(), crate::error::Error> {
        const QUEUES_OWN: &str = "unset in AWS Lambda: Lambda's receive applies the queue's own \
                                  VisibilityTimeout, which the keeper follows";
        if let Some(t) = self.visibility_timeout {
            return Err(crate::error::Error::invalid(
                "visibility_timeout",
                t,
                QUEUES_OWN,
            ));
        }
        if let Some(range) = self.adaptive_visibility {
            return Err(crate::error::Error::invalid(
                "adaptive_visibility",
                range,
                QUEUES_OWN,
            ));
        }
        #[cfg(feature = "s3")]
        if self.payloads.delete_on_ack {
            return Err(crate::error::Error::invalid(
                "delete_payload_on_ack",
                true,
                "false in AWS Lambda: Lambda deletes the message after the invocation, and a \
                 message whose invocation fails to answer would come back without its payload",
            ));
        }
        Ok(())
    }
}
