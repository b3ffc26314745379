//! `ConsumerBuilder`: how a [`Consumer`] is made. The entry points (`Consumer::builder`,
//! `Consumer::in_memory`), every setting with its default, and the validation in `build`.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;

use crate::adaptive_visibility::AdaptiveVisibility;
use crate::batch_window::Batching;
use crate::consumer::Consumer;
use crate::dead_letter::queue::DeadLetterQueue;
use crate::dead_letter::DeadLetter;
use crate::engine::{ConsumerSettings, Leases};
use crate::error::Error;
use crate::handling::{AckMode, HandlerSettings, OnLost};
use crate::in_flight_limit::InFlightLimit;
use crate::keeper::thread::KeeperRuntime;
use crate::limits::{self, HARD_LIMIT, MAX_BATCH, MAX_IN_FLIGHT, RECEIVE_COUNTS};
use crate::memory::MemoryQueue;
use crate::queue::sdk::SdkQueue;
use crate::queue::{Queue, DEFAULT_REQUEST_TIMEOUT};
use crate::queue_ref::QueueRef;
use crate::rate_limit::{RateLimit, RateLimits};
use crate::receiver::ReceiveSettings;
use crate::retry_policy::RetryPolicy;
use crate::trace_parent::{SpanHook, TraceParent};

/// Defaults, as documented on the setters.
const DEFAULT_WAIT_TIME: Duration = Duration::from_secs(20);
const DEFAULT_BATCH_SIZE: u32 = 10;
// A multiple of the batch size: receives of 10 fill the slots exactly, and so do the
// extension and delete batches of the deliveries they bring.
const DEFAULT_MAX_IN_FLIGHT: usize = 40;
// With the final flush's few seconds (`engine::FINAL_FLUSH`), a stop fits in 28 s: inside
// the 30 s grace period Kubernetes, ECS and systemd give by default before SIGKILL.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);
// Long enough to ride out SQS's brief failures and a credentials provider's restart; short
// enough that a worker whose credentials or network are broken for good stops, and its
// supervisor restarts it (with the credentials chain read anew) and shows the failure.
const DEFAULT_GIVE_UP_AFTER: Duration = Duration::from_secs(300);
const DEFAULT_MAX_CONCURRENT_RECEIVES: usize = 8;
/// The most deliveries in one batch of a batch handler (Lambda's limit for SQS).
const MAX_BATCH_DELIVERIES: usize = 10_000;
/// The longest a batch may fill (Lambda's batching window).
const MAX_BATCH_WINDOW: Duration = Duration::from_secs(300);
/// Messages per second a rate limit may be set to.
const RECEIVE_RATES: std::ops::RangeInclusive<f64> = 0.001..=100_000.0;
const RECEIVE_RATES_ALLOWED: &str = "a finite number of messages per second, 0.001..=100000";
/// The range a `request_timeout` must fall in.
const REQUEST_TIMEOUTS: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(300);

/// Where a consumer's messages come from.
#[derive(Debug)]
enum Source {
    /// A queue given by URL, name or ARN (checked by `build`), through a client.
    Sqs {
        client: aws_sdk_sqs::Client,
        queue: String,
    },
    Memory(MemoryQueue),
}

impl Consumer {
    /// A consumer of `queue`, through `client`.
    ///
    /// `queue` is the queue's URL (as `CreateQueue` and `GetQueueUrl` return it), its name
    /// (`orders`, `orders.fifo`: in the client's account and region), or its ARN
    /// (`arn:aws:sqs:us-east-1:123456789012:orders`: a queue of that account, which may be
    /// another one's if its policy lets you in; the ARN's region must be the client's). A
    /// name or an ARN costs one `GetQueueUrl` when the consumer starts (or at the first
    /// [`queue_url`](Consumer::queue_url) or [`backlog`](Consumer::backlog)); from then on
    /// logs and `Debug` show the URL. [`build`](ConsumerBuilder::build) refuses a malformed
    /// one, naming the rule; a queue that does not exist ends `run` with an error naming it,
    /// after that one request.
    ///
    /// The consumer's calls make one attempt each (the client's own retry setting is
    /// overridden for them; nothing else of the client changes): the consumer retries each
    /// call on its own terms, and bounds each with its
    /// [`request_timeout`](ConsumerBuilder::request_timeout).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use sqs_consumer::{Consumer, Delivery};
    ///
    /// let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    /// let client = aws_sdk_sqs::Client::new(&config);
    /// let consumer = Consumer::builder(client, "jobs") // or its URL, or its ARN
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
    pub fn builder(client: aws_sdk_sqs::Client, queue: impl Into<String>) -> ConsumerBuilder {
        ConsumerBuilder::new(Source::Sqs {
            client,
            queue: queue.into(),
        })
    }

    /// A builder for a consumer of `queue` (a URL, a name or an ARN, as for
    /// [`builder`](Consumer::builder)), through a client configured the
    /// standard AWS way: credentials, region and endpoint from the environment, the shared
    /// config and credentials files, and the instance or container role
    /// (`aws_config::defaults`), `AWS_ENDPOINT_URL_SQS` included (so a local server needs no
    /// code change). The client's behavior version is pinned by this crate
    /// (`BehaviorVersion::v2026_01_12`); build your own client and use
    /// [`builder`](Consumer::builder) to choose another.
    ///
    /// With the default feature `from-env`. Credential sources that need an optional
    /// `aws-config` feature (SSO, `credential_process`) work once you enable that feature of
    /// `aws-config` in your own `Cargo.toml`.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), sqs_consumer::Error> {
    /// use sqs_consumer::{Consumer, Delivery};
    ///
    /// let consumer = Consumer::from_env("jobs")
    ///     .await
    ///     .max_in_flight(64)
    ///     .build()?;
    /// consumer.run(|delivery: Delivery| delivery.ack()).await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "from-env")]
    #[cfg_attr(docsrs, doc(cfg(feature = "from-env")))]
    pub async fn from_env(queue: impl Into<String>) -> ConsumerBuilder {
        let config = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
            .load()
            .await;
        Consumer::builder(aws_sdk_sqs::Client::new(&config), queue)
    }

    /// A consumer of an in-memory queue, for tests and examples.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// use std::time::Duration;
    /// use sqs_consumer::{Consumer, MemoryQueue};
    ///
    /// let queue = MemoryQueue::new();
    /// queue.send("hello")?;
    /// let consumer = Consumer::in_memory(&queue)
    ///     .wait_time(Duration::from_secs(1))
    ///     .build()?;
    /// assert!(!consumer.has_isolated_keeper()); // all on your runtime, paused clock included
    /// # Ok(()) }
    /// ```
    pub fn in_memory(queue: &MemoryQueue) -> ConsumerBuilder {
        ConsumerBuilder::new(Source::Memory(queue.clone()))
    }
}

/// Builds a [`Consumer`]; start with [`Consumer::builder`] or [`Consumer::in_memory`].
///
/// Every setter is optional. [`build`](ConsumerBuilder::build) checks the settings and
/// returns [`Error::InvalidConfig`] naming the first one out of range; it never panics.
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ConsumerBuilder {
    source: Source,
    visibility_timeout: Option<Duration>,
    wait_time: Duration,
    batch_size: u32,
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
    in_flight_limit: Option<InFlightLimit>,
    max_receive_rate: Option<f64>,
    rate_limit: Option<RateLimit>,
    dead_letter: Option<(DeadLetterQueue, u32)>,
    adaptive_visibility: Option<(Duration, Duration)>,
    keeper: KeeperPlacement,
    keeper_client: Option<aws_sdk_sqs::Client>,
    span_hook: Option<SpanHook>,
    #[cfg(feature = "s3")]
    payloads: PayloadSettings,
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
            batch_size: DEFAULT_BATCH_SIZE,
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
            in_flight_limit: None,
            max_receive_rate: None,
            rate_limit: None,
            dead_letter: None,
            adaptive_visibility: None,
            keeper: KeeperPlacement::Default,
            keeper_client: None,
            span_hook: None,
            #[cfg(feature = "s3")]
            payloads: PayloadSettings {
                client: None,
                max_bytes: crate::payload::store::DEFAULT_MAX_PAYLOAD_BYTES,
                delete_on_ack: false,
                buckets: PayloadBuckets::Unset,
            },
        }
    }

    /// The visibility timeout each receive asks for, and so the keeper's period (it
    /// extends halfway through each timeout). Whole seconds in 1..=43200 (12 hours): with 0 a
    /// received message would be visible to every other receive at once, and no delivery
    /// could be kept.
    ///
    /// Defaults to the queue's own `VisibilityTimeout`, read once when the consumer starts; a
    /// queue whose own timeout is 0 makes `run` fail at once with
    /// [`Error::InvalidConfig`] naming `visibility_timeout` (set one here, or on the queue).
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
    pub fn batch_size(mut self, size: u32) -> Self {
        self.batch_size = size;
        self
    }

    /// The most deliveries held at once (running handlers, and deliveries you moved
    /// elsewhere and still hold), 1..=120000. The consumer receives only while a slot is
    /// free, so no message waits in memory while its timeout runs. Defaults to 40 (a multiple of
    /// the batch size, 10, so that receives, extensions and deletes go in whole batches).
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.max_in_flight = max;
        self
    }

    /// How long a graceful stop ([`Consumer::run_until`], [`ConsumerHandle::shutdown`](crate::ConsumerHandle::shutdown))
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
    /// than `max_in_flight / batch_size` (rounded up). Defaults to 8.
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
    pub fn in_flight_limit(mut self, limit: &InFlightLimit) -> Self {
        self.in_flight_limit = Some(limit.clone());
        self
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
    /// [`max_in_flight`](ConsumerBuilder::max_in_flight) (a batch is held whole while it
    /// fills). Without a [`batch_window`](ConsumerBuilder::batch_window) each receive's
    /// deliveries are handed over as they come, in batches of at most this many. Not on a FIFO
    /// queue, whose batches keep each group's order (refused by `build()`). Defaults to 10.
    pub fn max_batch(mut self, max: usize) -> Self {
        self.max_batch = Some(max);
        self
    }

    /// How long a batch of [`run_batch`](crate::Consumer::run_batch) may fill from its first
    /// delivery, across receives: it is handed over when it holds
    /// [`max_batch`](ConsumerBuilder::max_batch) deliveries or when its window has passed,
    /// whichever comes first. Every delivery in a filling batch keeps its lease (the keeper
    /// extends it), so a window longer than the visibility timeout loses nothing. 0..=300 s.
    /// On a shutdown a filling batch is handed over once the receives under way are in (with
    /// what they brought), not at its window. Not on a FIFO queue (refused by `build()`, as
    /// Lambda refuses it). Defaults to 0: each receive's deliveries are handed over as they
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
    /// every delivery of its batch is lost), counted in
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

    /// A budget of messages per second shared with other consumers (see [`RateLimit`]): the
    /// messages received by all of them together stay within it. A
    /// [`max_receive_rate`](ConsumerBuilder::max_receive_rate) of this consumer's own applies
    /// too. Defaults to none.
    pub fn rate_limit(mut self, limit: &RateLimit) -> Self {
        self.rate_limit = Some(limit.clone());
        self
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
    /// [`MemoryQueue`] consumer (whose clock is the caller's: a test on tokio's paused clock
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

    /// Checks the settings and creates the consumer. Nothing is sent to SQS yet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the first setting out of its range (`field`), the value
    /// given (`got`) and what is allowed (`allowed`); the guide's
    /// [settings](crate::guide::settings) page lists every range.
    pub fn build(mut self) -> Result<Consumer, Error> {
        let receive = self.receive_settings()?;
        let request_timeout = limits::in_range(
            "request_timeout",
            self.request_timeout,
            REQUEST_TIMEOUTS,
            "100 ms..=300 s",
        )?;
        self.retry_policy.validate()?;
        let handling = self.handler_settings(receive.max_in_flight)?;
        #[cfg(feature = "s3")]
        let payloads = self.payloads.build(request_timeout)?;
        let dead_letter = self.dead_letter_queue(request_timeout)?;
        let (queue, keeper_queue) = queues(self.source, self.keeper_client, self.keeper)?;
        if queue.is_fifo() {
            fifo_batching(handling.batching)?;
        }
        if let Some(dead_letter) = &dead_letter {
            same_kind(&queue, dead_letter)?;
        }
        let leases = match keeper_queue {
            Some(keeper_queue) => Leases {
                queue: keeper_queue.with_request_timeout(request_timeout),
                keeper_runtime: KeeperRuntime::thread()
                    .map_err(|source| Error::KeeperThread { source })?,
            },
            None => Leases {
                queue: queue.clone().with_request_timeout(request_timeout),
                keeper_runtime: KeeperRuntime::Caller,
            },
        };
        Ok(Consumer::new(
            queue.with_request_timeout(request_timeout),
            ConsumerSettings {
                receive,
                shutdown_timeout: self.shutdown_timeout,
                retry_policy: self.retry_policy,
                dead_letter,
                span_hook: self.span_hook,
                handling,
                leases,
                #[cfg(feature = "s3")]
                payloads,
            },
        ))
    }

    /// Checks what each receive asks for and how many are held, and takes it out of the
    /// builder.
    fn receive_settings(&mut self) -> Result<ReceiveSettings, Error> {
        let visibility_timeout = self
            .visibility_timeout
            .map(|t| limits::consumer_visibility_secs("visibility_timeout", t))
            .transpose()?;
        let wait_time = limits::wait_time("wait_time", self.wait_time)?;
        let max_batch = u32::try_from(MAX_BATCH).unwrap_or(10);
        let batch_size = limits::in_range("batch_size", self.batch_size, 1..=max_batch, "1..=10")?;
        let max_in_flight = limits::in_range(
            "max_in_flight",
            self.max_in_flight,
            1..=MAX_IN_FLIGHT,
            "1..=120000",
        )?;
        let max_concurrent_receives = limits::in_range(
            "max_concurrent_receives",
            self.max_concurrent_receives,
            1..=64,
            "1..=64",
        )?;
        for name in &self.message_attribute_names {
            limits::message_attribute_name("message_attribute_names", name)?;
        }
        if self.dead_letter.is_some() {
            // The dead-letter copy keeps every attribute, and says when the message was first
            // received.
            self.message_attribute_names = vec!["All".to_owned()];
            let first = MessageSystemAttributeName::ApproximateFirstReceiveTimestamp;
            if !self.system_attribute_names.contains(&first) {
                self.system_attribute_names.push(first);
            }
        }
        #[cfg(feature = "s3")]
        if self.payloads.client.is_some() {
            asking_for(
                &mut self.message_attribute_names,
                &crate::payload::pointer::SIZE_ATTRIBUTES,
            );
        }
        // The producer's trace context, which the `delivery` span joins (an empty list, which
        // asks for none, then asks for these alone).
        #[cfg(feature = "opentelemetry")]
        asking_for(
            &mut self.message_attribute_names,
            &["traceparent", "tracestate"],
        );
        let known = MessageSystemAttributeName::values();
        if let Some(unknown) = self
            .system_attribute_names
            .iter()
            .find(|n| !known.contains(&n.as_str()))
        {
            return Err(Error::invalid(
                "message_system_attribute_names",
                unknown.as_str(),
                "names SQS knows (MessageSystemAttributeName::values())",
            ));
        }
        if let Some(limit) = &self.in_flight_limit {
            limits::in_range(
                "in_flight_limit",
                limit.max(),
                1..=MAX_IN_FLIGHT,
                "1..=120000",
            )?;
        }
        let own_rate = self
            .max_receive_rate
            .map(|per_second| {
                limits::in_range(
                    "max_receive_rate",
                    per_second,
                    RECEIVE_RATES,
                    RECEIVE_RATES_ALLOWED,
                )
            })
            .transpose()?
            .map(RateLimit::new);
        if let Some(limit) = &self.rate_limit {
            let per_second = limit.per_second();
            limits::in_range(
                "rate_limit",
                per_second,
                RECEIVE_RATES,
                RECEIVE_RATES_ALLOWED,
            )?;
        }
        let rate_limits = RateLimits::new(own_rate, self.rate_limit.take());
        let adaptive = self.visibility_estimate()?;
        Ok(ReceiveSettings {
            visibility_timeout,
            wait_time,
            batch_size,
            max_in_flight,
            max_concurrent_receives,
            message_attribute_names: std::mem::take(&mut self.message_attribute_names),
            system_attribute_names: with_needed(std::mem::take(&mut self.system_attribute_names)),
            in_flight_limit: self.in_flight_limit.take(),
            rate_limits,
            adaptive,
            give_up_after: limits::in_range(
                "give_up_after",
                self.give_up_after,
                Duration::from_secs(1)..=Duration::MAX,
                "at least 1 s (Duration::MAX: never)",
            )?,
        })
    }

    /// The adaptive visibility estimate, if asked for: each bound a visibility timeout,
    /// `min <= max`.
    fn visibility_estimate(&self) -> Result<Option<Arc<AdaptiveVisibility>>, Error> {
        let Some((min, max)) = self.adaptive_visibility else {
            return Ok(None);
        };
        let field = "adaptive_visibility";
        let (min_secs, max_secs) = (
            limits::consumer_visibility_secs(field, min)?,
            limits::consumer_visibility_secs(field, max)?,
        );
        if min_secs > max_secs {
            return Err(Error::invalid(
                field,
                (min, max),
                "min <= max, each whole seconds in 1..=43200 (12 hours)",
            ));
        }
        Ok(Some(Arc::new(AdaptiveVisibility::new(min_secs, max_secs))))
    }

    /// The dead-letter step's queue, checked: `after_receives` in range, a queue of the
    /// consumer's kind (a name, URL or ARN for SQS, a `MemoryQueue` for one), not the
    /// consumer's own queue.
    fn dead_letter_queue(&self, request_timeout: Duration) -> Result<Option<DeadLetter>, Error> {
        let Some((given, after_receives)) = &self.dead_letter else {
            return Ok(None);
        };
        let after_receives = limits::in_range(
            "dead_letter",
            *after_receives,
            RECEIVE_COUNTS,
            "after_receives in 1..=1000 (a redrive policy's maxReceiveCount range)",
        )?;
        let (queue, own) = match (&self.source, given.sqs(), given.memory()) {
            (Source::Sqs { client, queue }, Some(name), _) => {
                let parsed = QueueRef::parse_setting("dead_letter", name)?;
                let dlq = SdkQueue::new(client.clone(), parsed);
                check_region("dead_letter", &dlq)?;
                (Queue::new(dlq), name == queue)
            }
            (Source::Memory(own), _, Some(memory)) => {
                (Queue::new(memory.clone()), memory.name() == own.name())
            }
            _ => {
                return Err(Error::invalid(
                    "dead_letter",
                    given.describe(),
                    "a queue URL, name or ARN for a consumer of SQS, a MemoryQueue for a \
                     MemoryQueue consumer",
                ))
            }
        };
        if own {
            return Err(Error::invalid(
                "dead_letter",
                given.describe(),
                "a queue other than the consumer's own",
            ));
        }
        let queue = queue.with_request_timeout(request_timeout);
        Ok(Some(DeadLetter::new(queue, after_receives)))
    }

    /// Checks the batch settings against `max_in_flight`: a batch bigger than what may be
    /// held at once could never fill.
    fn batching(&self, max_in_flight: usize) -> Result<Batching, Error> {
        let window = limits::in_range(
            "batch_window",
            self.batch_window,
            Duration::ZERO..=MAX_BATCH_WINDOW,
            "0..=300 s",
        )?;
        let Some(max) = self.max_batch else {
            return Ok(Batching {
                window,
                ..Batching::default()
            });
        };
        limits::in_range("max_batch", max, 1..=MAX_BATCH_DELIVERIES, "1..=10000")?;
        if max > max_in_flight {
            return Err(Error::invalid(
                "max_batch",
                max,
                "at most max_in_flight (raise max_in_flight to hold a whole batch)",
            ));
        }
        Ok(Batching { max, window })
    }

    fn handler_settings(&self, max_in_flight: usize) -> Result<HandlerSettings, Error> {
        if let Some(t) = self.handler_timeout {
            if t.is_zero() || t > HARD_LIMIT {
                return Err(Error::invalid(
                    "handler_timeout",
                    t,
                    "more than 0 and at most 43200 s (12 hours)",
                ));
            }
        }
        Ok(HandlerSettings {
            ack_mode: self.ack_mode,
            timeout: self.handler_timeout,
            on_lost: self.on_lost,
            batching: self.batching(max_in_flight)?,
        })
    }
}

#[cfg(feature = "s3")]
impl PayloadSettings {
    /// Checks the payload settings; the store to read payloads from, if any.
    fn build(
        &mut self,
        request_timeout: std::time::Duration,
    ) -> Result<Option<crate::payload::store::PayloadStore>, Error> {
        let max_bytes = limits::in_range(
            "max_payload_bytes",
            self.max_bytes,
            1..=(2 << 30),
            "1..=2147483648 (2 GiB)",
        )?;
        let Some(client) = self.client.take() else {
            if self.delete_on_ack {
                return Err(Error::invalid(
                    "delete_payload_on_ack",
                    true,
                    "true only with s3_payloads (there is nothing to delete without it)",
                ));
            }
            if !matches!(self.buckets, PayloadBuckets::Unset) {
                return Err(Error::invalid(
                    "payload_buckets",
                    &self.buckets,
                    "a bucket list only with s3_payloads (no payload is read without it)",
                ));
            }
            return Ok(None);
        };
        let buckets = self.allowed_buckets()?;
        Ok(Some(crate::payload::store::PayloadStore::new(
            client,
            max_bytes,
            self.delete_on_ack,
            buckets,
            request_timeout,
        )))
    }

    /// The buckets pointers may name (`None`: any), checked.
    fn allowed_buckets(&mut self) -> Result<Option<Vec<String>>, Error> {
        const ALLOWED: &str = "with s3_payloads, payload_buckets naming at least one bucket \
                               (3 to 63 of a-z 0-9 . -, starting and ending with a letter or \
                               digit), or any_payload_bucket() to read from any bucket";
        match std::mem::replace(&mut self.buckets, PayloadBuckets::Unset) {
            PayloadBuckets::Any => Ok(None),
            PayloadBuckets::Unset => Err(Error::invalid("payload_buckets", "none", ALLOWED)),
            PayloadBuckets::Only(buckets) if buckets.is_empty() => {
                Err(Error::invalid("payload_buckets", "[]", ALLOWED))
            }
            PayloadBuckets::Only(buckets) => match buckets.iter().find(|b| !is_bucket_name(b)) {
                Some(bad) => Err(Error::invalid("payload_buckets", bad, ALLOWED)),
                None => Ok(Some(buckets)),
            },
        }
    }
}

/// Whether S3 would take `name` as a bucket's: 3 to 63 lowercase letters, digits, dots and
/// hyphens, starting and ending with a letter or a digit.
#[cfg(feature = "s3")]
fn is_bucket_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && edge(name.chars().next())
        && edge(name.chars().last())
}

/// A FIFO queue's batches are one receive's deliveries, handed out in rounds that keep each
/// group's order: a batch split or collected across receives could run two of a group at
/// once. (Lambda refuses a batching window on FIFO queues too.)
fn fifo_batching(batching: Batching) -> Result<(), Error> {
    const ALLOWED: &str = "the default on a FIFO queue (a batch is one receive's deliveries, \
                           in rounds that keep each message group's order)";
    if !batching.window.is_zero() {
        return Err(Error::invalid("batch_window", batching.window, ALLOWED));
    }
    if batching.max != Batching::default().max {
        return Err(Error::invalid("max_batch", batching.max, ALLOWED));
    }
    Ok(())
}

/// A FIFO queue's messages move to a FIFO dead-letter queue, a standard queue's to a standard
/// one (as SQS's redrive requires).
fn same_kind(queue: &Queue, dead_letter: &DeadLetter) -> Result<(), Error> {
    if queue.is_fifo() == dead_letter.is_fifo() {
        return Ok(());
    }
    Err(Error::invalid(
        "dead_letter",
        dead_letter.name(),
        "a queue of the consumer's kind: FIFO (`.fifo`) for a FIFO queue, standard for a \
         standard one",
    ))
}

/// Adds the `needed` message attributes to `names`, unless it asks for every attribute
/// already: the size attributes an Extended Client pointer is known by, the attributes of a
/// trace context.
#[cfg(any(feature = "s3", feature = "opentelemetry"))]
fn asking_for(names: &mut Vec<String>, needed: &[&str]) {
    if names.iter().any(|n| n == "All" || n == ".*") {
        return;
    }
    for &needed in needed {
        if !names.iter().any(|n| n == needed) {
            names.push(needed.to_owned());
        }
    }
}

/// Where the keeper (and the batchers of acks and releases) runs, as the builder was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeeperPlacement {
    /// On a thread of its own when a client of its own can be had, else on the caller's
    /// runtime; always on the caller's for a `MemoryQueue`.
    Default,
    /// On a thread of its own (`isolated_keeper(true)`).
    OwnThread,
    /// On the caller's runtime (`isolated_keeper(false)`).
    CallersRuntime,
}

/// The consumer's queue, and the keeper's own when it gets a thread of its own.
fn queues(
    source: Source,
    keeper_client: Option<aws_sdk_sqs::Client>,
    placement: KeeperPlacement,
) -> Result<(Queue, Option<Queue>), Error> {
    match source {
        Source::Sqs { client, queue } => {
            let sqs = SdkQueue::new(client, QueueRef::parse(&queue)?);
            check_region("queue", &sqs)?;
            let own = match keeper_client {
                Some(client) => Some(sqs.with_client(client)),
                None => sqs.with_own_connections(),
            };
            let queue = Queue::new(sqs);
            let keeper_queue = match (placement, own) {
                (KeeperPlacement::CallersRuntime, _) | (KeeperPlacement::Default, None) => None,
                (_, Some(own)) => Some(queue.through(own)),
                (KeeperPlacement::OwnThread, None) => {
                    return Err(Error::invalid(
                        "isolated_keeper",
                        true,
                        "only with a client of the keeper's own: the consumer's client names \
                         its HTTP client, so give one with `keeper_client`",
                    ))
                }
            };
            Ok((queue, keeper_queue))
        }
        Source::Memory(memory) => {
            if keeper_client.is_some() {
                return Err(Error::invalid(
                    "keeper_client",
                    "a client",
                    "none for a MemoryQueue consumer (its keeper calls the queue directly)",
                ));
            }
            let queue = Queue::new(memory);
            let keeper_queue = (placement == KeeperPlacement::OwnThread).then(|| queue.clone());
            Ok((queue, keeper_queue))
        }
    }
}

/// An ARN's region must be the client's: the client sends every call to its own region's
/// endpoint.
fn check_region(field: &'static str, sqs: &SdkQueue) -> Result<(), Error> {
    match (sqs.given().region(), sqs.client_region()) {
        (Some(arn), Some(client)) if arn != client => Err(Error::invalid(
            field,
            format!("{} (the client's region is {client})", sqs.given()),
            "an ARN in the client's region: build the client for the queue's region",
        )),
        _ => Ok(()),
    }
}

/// `names`, with the system attributes the consumer needs added (unless `All` is there): the
/// receive count and the FIFO group it works with, the trace header its spans record, and
/// the sent time for the message's age.
fn with_needed(mut names: Vec<MessageSystemAttributeName>) -> Vec<MessageSystemAttributeName> {
    if names.contains(&MessageSystemAttributeName::All) {
        return vec![MessageSystemAttributeName::All];
    }
    for needed in [
        MessageSystemAttributeName::ApproximateReceiveCount,
        MessageSystemAttributeName::MessageGroupId,
        MessageSystemAttributeName::AwsTraceHeader,
        MessageSystemAttributeName::SentTimestamp,
    ] {
        if !names.contains(&needed) {
            names.push(needed);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> ConsumerBuilder {
        Consumer::in_memory(&MemoryQueue::new())
    }

    fn refused(b: ConsumerBuilder, field: &str, allowed: &str) {
        refused_value(b, field, allowed);
    }

    /// As [`refused`], returning the value the error quotes.
    fn refused_value(b: ConsumerBuilder, field: &str, allowed: &str) -> String {
        match b.build() {
            Err(Error::InvalidConfig {
                field: f,
                allowed: a,
                got,
            }) => {
                assert_eq!(f, field);
                assert!(a.contains(allowed), "{a:?} should mention {allowed:?}");
                got
            }
            other => panic!("expected InvalidConfig for {field}, got {other:?}"),
        }
    }

    #[test]
    fn defaults_build() {
        let c = builder().build().expect("defaults are valid");
        let s = c.receive_settings();
        assert_eq!(s.visibility_timeout, None);
        assert_eq!(s.wait_time, Duration::from_secs(20));
        assert_eq!(s.batch_size, 10);
        assert_eq!(s.max_in_flight, 40);
    }

    #[test]
    fn bounds_are_accepted() {
        let lowest = (
            1,
            0,
            1,
            1,
            Duration::from_millis(100),
            Duration::from_nanos(1),
            1,
        );
        let highest = (
            43_200,
            20,
            10,
            120_000,
            Duration::from_secs(300),
            Duration::from_secs(43_200),
            64,
        );
        for (v, w, b, m, request, handler, receives) in [lowest, highest] {
            let c = builder()
                .visibility_timeout(Duration::from_secs(v))
                .wait_time(Duration::from_secs(w))
                .batch_size(b)
                .max_in_flight(m)
                .request_timeout(request)
                .handler_timeout(handler)
                .max_concurrent_receives(receives)
                .in_flight_limit(&InFlightLimit::new(m))
                .build()
                .expect("bounds are valid");
            let settings = c.receive_settings();
            assert_eq!(settings.visibility_timeout, Some(v as u32));
            assert_eq!(settings.max_concurrent_receives, receives);
            assert_eq!(
                settings.in_flight_limit.as_ref().map(InFlightLimit::max),
                Some(m)
            );
        }
    }

    #[test]
    fn adaptive_visibility_bounds_are_visibility_timeouts_in_order() {
        let secs = Duration::from_secs;
        let field = "adaptive_visibility";
        for (min, max) in [
            (Duration::ZERO, secs(10)),
            (secs(1), secs(43_201)),
            (Duration::from_millis(1500), secs(10)),
        ] {
            refused(builder().adaptive_visibility(min, max), field, "1..=43200");
        }
        refused(
            builder().adaptive_visibility(secs(20), secs(10)),
            field,
            "min <= max",
        );
        for (min, max) in [(1, 1), (1, 43_200), (10, 120)] {
            let c = builder()
                .adaptive_visibility(secs(min), secs(max))
                .build()
                .expect("bounds are valid");
            let adaptive = c.receive_settings().adaptive.clone().expect("adaptive");
            assert_eq!(adaptive.timeout(0), min as u32);
            assert_eq!(adaptive.timeout(u32::MAX), max as u32);
        }
        assert!(builder()
            .build()
            .unwrap()
            .receive_settings()
            .adaptive
            .is_none());
    }

    #[test]
    fn out_of_range_settings_are_refused() {
        let vis = "1..=43200";
        refused(
            builder().visibility_timeout(Duration::ZERO),
            "visibility_timeout",
            vis,
        );
        refused(
            builder().visibility_timeout(Duration::from_secs(43_201)),
            "visibility_timeout",
            vis,
        );
        refused(
            builder().visibility_timeout(Duration::from_millis(1500)),
            "visibility_timeout",
            vis,
        );
        refused(
            builder().wait_time(Duration::from_secs(21)),
            "wait_time",
            "0..=20",
        );
        refused(
            builder().wait_time(Duration::from_millis(100)),
            "wait_time",
            "0..=20",
        );
        refused(builder().batch_size(0), "batch_size", "1..=10");
        refused(builder().batch_size(11), "batch_size", "1..=10");
        refused(builder().max_in_flight(0), "max_in_flight", "1..=120000");
        refused(
            builder().max_in_flight(120_001),
            "max_in_flight",
            "1..=120000",
        );
        for t in [Duration::from_millis(99), Duration::from_secs(301)] {
            refused(
                builder().request_timeout(t),
                "request_timeout",
                "100 ms..=300 s",
            );
        }
        for t in [Duration::ZERO, Duration::from_millis(999)] {
            refused(builder().give_up_after(t), "give_up_after", "at least 1 s");
        }
        for t in [Duration::from_secs(1), Duration::MAX] {
            assert!(builder().give_up_after(t).build().is_ok(), "{t:?}");
        }
        for t in [Duration::ZERO, Duration::from_secs(43_201)] {
            refused(
                builder().handler_timeout(t),
                "handler_timeout",
                "more than 0 and at most 43200 s",
            );
        }
        refused(
            builder().message_attribute_names(["tenant", "AWS.secret"]),
            "message_attribute_names",
            "`All`",
        );
        for n in [0, 120_001] {
            refused(
                builder().in_flight_limit(&InFlightLimit::new(n)),
                "in_flight_limit",
                "1..=120000",
            );
        }
        for rate in [0.0, -1.0, 0.0009, 100_000.5, f64::NAN, f64::INFINITY] {
            refused(
                builder().max_receive_rate(rate),
                "max_receive_rate",
                "0.001..=100000",
            );
            refused(
                builder().rate_limit(&RateLimit::new(rate)),
                "rate_limit",
                "0.001..=100000",
            );
        }
        refused(builder().max_batch(0), "max_batch", "1..=10000");
        refused(
            builder().max_in_flight(20_000).max_batch(10_001),
            "max_batch",
            "1..=10000",
        );
        refused(
            builder().max_batch(41),
            "max_batch",
            "at most max_in_flight",
        );
        refused(
            builder().batch_window(Duration::from_millis(300_001)),
            "batch_window",
            "0..=300 s",
        );
        let fifo = || Consumer::in_memory(&MemoryQueue::builder().fifo(true).build().unwrap());
        refused(
            fifo().batch_window(Duration::from_secs(1)),
            "batch_window",
            "FIFO",
        );
        refused(fifo().max_batch(5), "max_batch", "FIFO");
        assert!(fifo().max_batch(10).build().is_ok());
        assert!(builder()
            .max_in_flight(10_000)
            .max_batch(10_000)
            .batch_window(Duration::from_secs(300))
            .build()
            .is_ok());
        for rate in [0.001, 50.0, 100_000.0] {
            let built = builder()
                .max_receive_rate(rate)
                .rate_limit(&RateLimit::new(rate))
                .build();
            assert!(built.is_ok(), "{rate}: {built:?}");
        }
        refused(
            builder().message_attribute_names([""]),
            "message_attribute_names",
            "1 to 256",
        );
        refused(
            builder().message_system_attribute_names([MessageSystemAttributeName::from(
                "NoSuchAttribute",
            )]),
            "message_system_attribute_names",
            "names SQS knows",
        );
        for n in [0, 65] {
            refused(
                builder().max_concurrent_receives(n),
                "max_concurrent_receives",
                "1..=64",
            );
        }
        for (base, max) in [(60_000, 1_000), (500, 60_000), (1_000, 43_201_000)] {
            let policy =
                RetryPolicy::backoff(Duration::from_millis(base), Duration::from_millis(max));
            refused(
                builder().retry_policy(policy),
                "retry_policy",
                "1 s <= base <= max <= 43200 s",
            );
        }
    }

    #[test]
    fn the_consumer_asks_for_the_system_attributes_it_needs() {
        use MessageSystemAttributeName as A;
        let c = builder()
            .message_system_attribute_names([A::SequenceNumber])
            .build()
            .unwrap();
        assert_eq!(
            c.receive_settings().system_attribute_names,
            [
                A::SequenceNumber,
                A::ApproximateReceiveCount,
                A::MessageGroupId,
                A::AwsTraceHeader,
                A::SentTimestamp
            ]
        );
        let c = builder()
            .message_system_attribute_names([A::All, A::SentTimestamp])
            .build()
            .unwrap();
        assert_eq!(c.receive_settings().system_attribute_names, [A::All]);
        let c = builder()
            .message_attribute_names(Vec::<String>::new())
            .build()
            .unwrap();
        assert_eq!(
            c.receive_settings().message_attribute_names,
            TRACE_ATTRIBUTES,
            "an empty list asks for no message attribute (but a trace context's)"
        );
    }

    /// What feature `opentelemetry` adds to a list of message attributes.
    const TRACE_ATTRIBUTES: &[&str] = if cfg!(feature = "opentelemetry") {
        &["traceparent", "tracestate"]
    } else {
        &[]
    };

    /// The message attributes a consumer built by `builder`, given `names`, asks for.
    fn asked_for(builder: ConsumerBuilder, names: &[&str]) -> Vec<String> {
        builder
            .message_attribute_names(names.iter().copied())
            .build()
            .unwrap()
            .receive_settings()
            .message_attribute_names
            .clone()
    }

    #[test]
    fn a_narrowed_list_still_asks_for_the_trace_context_with_opentelemetry() {
        let names = |given: &[&str]| asked_for(builder(), given);
        let mut expected = vec!["tenant"];
        expected.extend(TRACE_ATTRIBUTES);
        assert_eq!(names(&["tenant"]), expected);
        let mut given_one = names(&["tracestate", "tenant"]);
        let asked = given_one.len();
        given_one.sort_unstable();
        given_one.dedup();
        assert_eq!(given_one.len(), asked, "each name asked for once");
        assert_eq!(names(&["All"]), ["All"]);
        assert_eq!(names(&[".*"]), [".*"]);
    }

    /// A client of a real SQS endpoint (us-east-1) that these tests never call.
    fn sqs_client() -> aws_sdk_sqs::Client {
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .build();
        aws_sdk_sqs::Client::from_conf(conf)
    }

    #[cfg(feature = "s3")]
    fn s3() -> aws_sdk_s3::Client {
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .build();
        aws_sdk_s3::Client::from_conf(conf)
    }

    #[cfg(feature = "s3")]
    #[test]
    fn payload_settings_are_checked_and_pointers_are_always_recognisable() {
        for max in [0, (2 << 30) + 1] {
            refused(
                builder().s3_payloads(s3()).max_payload_bytes(max),
                "max_payload_bytes",
                "1..=2147483648 (2 GiB)",
            );
        }
        refused(
            builder().delete_payload_on_ack(true),
            "delete_payload_on_ack",
            "only with s3_payloads",
        );
        refused(
            builder().payload_buckets(["payloads"]),
            "payload_buckets",
            "only with s3_payloads",
        );
        refused(
            builder().s3_payloads(s3()),
            "payload_buckets",
            "any_payload_bucket()",
        );
        let no_buckets: [&str; 0] = [];
        for bad in [
            &no_buckets[..],
            &["ab"],
            &["Payloads"],
            &["-payloads"],
            &["payloads."],
            &["pay_loads"],
            &["ok-bucket", &"x".repeat(64)],
        ] {
            refused(
                builder()
                    .s3_payloads(s3())
                    .payload_buckets(bad.iter().copied()),
                "payload_buckets",
                "3 to 63 of a-z 0-9 . -",
            );
        }
        for good in [&["abc"][..], &["my.payloads-2", &"x".repeat(63)]] {
            builder()
                .s3_payloads(s3())
                .payload_buckets(good.iter().copied())
                .build()
                .expect("valid bucket names");
        }
        builder()
            .s3_payloads(s3())
            .any_payload_bucket()
            .build()
            .expect("any bucket, knowingly");
        builder()
            .s3_payloads(s3())
            .payload_buckets(["payloads"])
            .max_payload_bytes(2 << 30)
            .delete_payload_on_ack(true)
            .build()
            .expect("bounds are valid");
        let names =
            |given: &[&str]| asked_for(builder().s3_payloads(s3()).any_payload_bucket(), given);
        let both = ["ExtendedPayloadSize", "SQSLargePayloadSize"];
        let with_trace = |names: &[&'static str]| -> Vec<&'static str> {
            let mut names = names.to_vec();
            names.extend(TRACE_ATTRIBUTES);
            names
        };
        assert_eq!(names(&[]), with_trace(&both));
        assert_eq!(
            names(&["tenant"]),
            with_trace(&["tenant", both[0], both[1]])
        );
        assert_eq!(names(&["All"]), ["All"]);
        assert_eq!(names(&[".*"]), [".*"]);
        let without = builder()
            .message_attribute_names(["tenant"])
            .build()
            .unwrap();
        assert_eq!(
            without.receive_settings().message_attribute_names,
            with_trace(&["tenant"])
        );
    }

    #[tokio::test]
    async fn a_malformed_queue_or_an_arn_of_another_region_is_refused() {
        let client = sqs_client();
        for bad in [
            "my queue",
            "",
            "https://",
            "arn:aws:sqs:us-east-1:42:orders",
        ] {
            refused(Consumer::builder(client.clone(), bad), "queue", "1 to 80");
        }
        refused(
            Consumer::builder(client.clone(), "arn:aws:sqs:eu-west-1:123456789012:orders"),
            "queue",
            "the client's region",
        );
        for good in [
            "orders",
            "orders.fifo",
            "arn:aws:sqs:us-east-1:123456789012:orders",
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
        ] {
            let consumer = Consumer::builder(client.clone(), good)
                .build()
                .unwrap_or_else(|e| panic!("{good}: {e}"));
            assert!(format!("{consumer:?}").contains(good), "{consumer:?}");
        }
    }

    #[tokio::test]
    async fn the_keepers_own_client_shares_the_queues_round_trip() {
        let client = sqs_client();
        let source = Source::Sqs {
            client,
            queue: "orders".into(),
        };
        let (queue, keeper_queue) = queues(source, None, KeeperPlacement::Default).unwrap();
        let keeper_queue = keeper_queue.expect("the keeper has connections of its own");
        // What the receive loop's calls teach bounds the keeper's batches' waits.
        assert!(keeper_queue.shares_round_trip_with(&queue));
    }

    #[tokio::test]
    async fn a_dead_letter_queue_is_checked_and_asks_for_what_its_copy_needs() {
        let client = sqs_client();
        let sqs = |queue: &str| Consumer::builder(client.clone(), queue);
        let (memory, failed) = (MemoryQueue::new(), MemoryQueue::new());
        for after_receives in [0, 1001] {
            refused(
                sqs("orders").dead_letter("orders-dlq", after_receives),
                "dead_letter",
                "after_receives in 1..=1000",
            );
        }
        refused(
            sqs("orders").dead_letter("bad name", 3),
            "dead_letter",
            "1 to 80",
        );
        refused(
            sqs("orders").dead_letter("arn:aws:sqs:eu-west-1:123456789012:dlq", 3),
            "dead_letter",
            "the client's region",
        );
        // The error quotes the queue as it was given (`Debug`, as every refused value).
        let got = refused_value(
            sqs("orders").dead_letter(&failed, 3),
            "dead_letter",
            "a queue URL",
        );
        assert_eq!(got, format!("{:?}", failed.name()));
        let got = refused_value(
            Consumer::in_memory(&memory).dead_letter("orders-dlq", 3),
            "dead_letter",
            "a MemoryQueue for a MemoryQueue consumer",
        );
        assert_eq!(got, r#""orders-dlq""#);
        let got = refused_value(
            sqs("orders").dead_letter("orders", 3),
            "dead_letter",
            "other than",
        );
        assert_eq!(got, r#""orders""#);
        let got = refused_value(
            Consumer::in_memory(&memory).dead_letter(&memory, 3),
            "dead_letter",
            "other than",
        );
        assert_eq!(got, format!("{:?}", memory.name()));
        refused(
            sqs("orders.fifo").dead_letter("dlq", 3),
            "dead_letter",
            "FIFO",
        );
        refused(
            sqs("orders").dead_letter("dlq.fifo", 3),
            "dead_letter",
            "FIFO",
        );
        for after_receives in [1, 1000] {
            sqs("orders.fifo")
                .dead_letter("dlq.fifo", after_receives)
                .build()
                .expect("in range, same kind");
        }

        use MessageSystemAttributeName as A;
        let c = Consumer::in_memory(&memory)
            .message_attribute_names(["tenant"])
            .message_system_attribute_names([A::SentTimestamp])
            .dead_letter(&failed, 3)
            .build()
            .unwrap();
        let settings = c.receive_settings();
        assert_eq!(
            settings.message_attribute_names,
            ["All"],
            "the copy keeps all"
        );
        assert!(settings
            .system_attribute_names
            .contains(&A::ApproximateFirstReceiveTimestamp));
    }
}
