//! `ConsumerBuilder`: the consumer's settings, their defaults, and their validation.

use std::time::Duration;

use crate::consumer::Consumer;
use crate::error::Error;
use crate::heartbeat::MAX_VISIBILITY_SECS;
use crate::queue::Queue;
use crate::retry::RetryPolicy;

/// Defaults, as documented on the setters.
const DEFAULT_WAIT_TIME: Duration = Duration::from_secs(20);
const DEFAULT_BATCH_SIZE: u32 = 10;
const DEFAULT_MAX_IN_FLIGHT: usize = 32;
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_MAX_CONCURRENT_RECEIVES: usize = 8;
/// SQS's approximate in-flight quota for a standard queue; more permits cannot be used.
const MAX_IN_FLIGHT_LIMIT: usize = 120_000;

/// The validated settings a [`Consumer`] runs with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Visibility timeout to ask for on each receive, seconds; `None`: the queue's own.
    pub(crate) visibility_timeout: Option<u32>,
    pub(crate) wait_time: Duration,
    pub(crate) batch_size: u32,
    pub(crate) max_in_flight: usize,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) retry_policy: RetryPolicy,
    pub(crate) max_concurrent_receives: usize,
}

/// Builds a [`Consumer`]; start with [`Consumer::builder`] or [`Consumer::in_memory`].
///
/// Every setter is optional. [`build`](ConsumerBuilder::build) checks the settings and
/// returns [`Error::InvalidConfig`] naming the first one out of range; it never panics.
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ConsumerBuilder {
    queue: Queue,
    visibility_timeout: Option<Duration>,
    wait_time: Duration,
    batch_size: u32,
    max_in_flight: usize,
    shutdown_timeout: Duration,
    retry_policy: RetryPolicy,
    max_concurrent_receives: usize,
}

impl ConsumerBuilder {
    pub(crate) fn new(queue: Queue) -> Self {
        Self {
            queue,
            visibility_timeout: None,
            wait_time: DEFAULT_WAIT_TIME,
            batch_size: DEFAULT_BATCH_SIZE,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            retry_policy: RetryPolicy::Leave,
            max_concurrent_receives: DEFAULT_MAX_CONCURRENT_RECEIVES,
        }
    }

    /// The visibility timeout each receive asks for, and so the heartbeat's period (it
    /// extends halfway through each timeout). Whole seconds in 0..=43200; 0 means no
    /// heartbeat at all.
    ///
    /// Defaults to the queue's own `VisibilityTimeout`, read once when the consumer starts.
    /// A short timeout brings a message back sooner after a crash, at the cost of more
    /// `ChangeMessageVisibility` calls while it is held.
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = Some(timeout);
        self
    }

    /// How long a `ReceiveMessage` waits for messages (long polling), whole seconds in
    /// 0..=20. Defaults to 20 s, which costs the fewest requests on a quiet queue.
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
    /// free, so no message waits in memory while its timeout runs. Defaults to 32.
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.max_in_flight = max;
        self
    }

    /// How long a graceful shutdown ([`Consumer::run_until`]) lets running handlers finish
    /// before it releases their messages and cancels them. Defaults to 30 s.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
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
    /// queue keeps `max_in_flight` filled; an empty answer brings it back to one, so a quiet
    /// queue costs one long poll at a time. Never more than `max_in_flight / batch_size`
    /// (rounded up). Defaults to 8.
    pub fn max_concurrent_receives(mut self, max: usize) -> Self {
        self.max_concurrent_receives = max;
        self
    }

    /// Checks the settings and creates the consumer. Nothing is sent to SQS yet.
    pub fn build(self) -> Result<Consumer, Error> {
        let visibility_timeout = self
            .visibility_timeout
            .map(|t| visibility_secs("visibility_timeout", t))
            .transpose()?;
        if whole_secs(self.wait_time).is_none_or(|s| s > 20) {
            return Err(Error::invalid(
                "wait_time",
                self.wait_time,
                "whole seconds in 0..=20",
            ));
        }
        if !(1..=10).contains(&self.batch_size) {
            return Err(Error::invalid("batch_size", self.batch_size, "1..=10"));
        }
        if !(1..=MAX_IN_FLIGHT_LIMIT).contains(&self.max_in_flight) {
            return Err(Error::invalid(
                "max_in_flight",
                self.max_in_flight,
                "1..=120000",
            ));
        }
        if !(1..=64).contains(&self.max_concurrent_receives) {
            return Err(Error::invalid(
                "max_concurrent_receives",
                self.max_concurrent_receives,
                "1..=64",
            ));
        }
        self.retry_policy.validate()?;
        if let Queue::Sqs { url, .. } = &self.queue {
            let ok = (url.starts_with("https://") || url.starts_with("http://"))
                && url.len() > "https://".len();
            if !ok {
                return Err(Error::invalid(
                    "queue_url",
                    url.as_ref(),
                    "an http(s) queue URL, as returned by CreateQueue or GetQueueUrl",
                ));
            }
        }
        Ok(Consumer::new(
            self.queue,
            Settings {
                visibility_timeout,
                wait_time: self.wait_time,
                batch_size: self.batch_size,
                max_in_flight: self.max_in_flight,
                shutdown_timeout: self.shutdown_timeout,
                retry_policy: self.retry_policy,
                max_concurrent_receives: self.max_concurrent_receives,
            },
        ))
    }
}

/// The whole seconds in `d`, or `None` if it has a fraction of a second.
pub(crate) fn whole_secs(d: Duration) -> Option<u64> {
    (d.subsec_nanos() == 0).then_some(d.as_secs())
}

/// A visibility timeout in SQS's terms: whole seconds in 0..=43200.
pub(crate) fn visibility_secs(field: &'static str, d: Duration) -> Result<u32, Error> {
    whole_secs(d)
        .and_then(|s| u32::try_from(s).ok())
        .filter(|s| *s <= MAX_VISIBILITY_SECS)
        .ok_or_else(|| Error::invalid(field, d, "whole seconds in 0..=43200 (12 hours)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryQueue;

    fn builder() -> ConsumerBuilder {
        Consumer::in_memory(&MemoryQueue::new())
    }

    fn refused(b: ConsumerBuilder, field: &str, allowed: &str) {
        match b.build() {
            Err(Error::InvalidConfig {
                field: f,
                allowed: a,
                ..
            }) => {
                assert_eq!(f, field);
                assert!(a.contains(allowed), "{a:?} should mention {allowed:?}");
            }
            other => panic!("expected InvalidConfig for {field}, got {other:?}"),
        }
    }

    #[test]
    fn defaults_build() {
        let c = builder().build().expect("defaults are valid");
        let s = c.settings();
        assert_eq!(s.visibility_timeout, None);
        assert_eq!(s.wait_time, Duration::from_secs(20));
        assert_eq!(s.batch_size, 10);
        assert_eq!(s.max_in_flight, 32);
    }

    #[test]
    fn bounds_are_accepted() {
        for (v, w, b, m) in [(0, 0, 1, 1), (43_200, 20, 10, 120_000)] {
            let c = builder()
                .visibility_timeout(Duration::from_secs(v))
                .wait_time(Duration::from_secs(w))
                .batch_size(b)
                .max_in_flight(m)
                .build()
                .expect("bounds are valid");
            assert_eq!(c.settings().visibility_timeout, Some(v as u32));
        }
    }

    #[test]
    fn out_of_range_settings_are_refused() {
        let vis = "0..=43200";
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

    #[tokio::test]
    async fn a_malformed_queue_url_is_refused() {
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .build();
        let client = aws_sdk_sqs::Client::from_conf(conf);
        refused(
            Consumer::builder(client.clone(), "my-queue"),
            "queue_url",
            "http",
        );
        refused(Consumer::builder(client, ""), "queue_url", "http");
    }
}
