//! `ConsumerBuilder::build`: every setting checked against its range (the first one out of
//! range named in [`Error::InvalidConfig`]), and the consumer's settings made from them.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;

use crate::builder::queues::{check_region, queues, Source};
use crate::builder::{
    ConsumerBuilder, MAX_BATCH_DELIVERIES, MAX_BATCH_WINDOW, RECEIVE_RATES, RECEIVE_RATES_ALLOWED,
    REQUEST_TIMEOUTS,
};
#[cfg(feature = "s3")]
use crate::builder::{PayloadBuckets, PayloadSettings};
use crate::consumer::Consumer;
use crate::dead_letter::DeadLetter;
use crate::engine::{ConsumerSettings, Leases};
use crate::error::Error;
use crate::flow::rate_limit::{RateLimit, RateLimits};
use crate::handler::batch_window::Batching;
use crate::handler::handling::HandlerSettings;
use crate::keeper_thread::KeeperRuntime;
use crate::lease::adaptive_visibility::AdaptiveVisibility;
use crate::limits::{self, HARD_LIMIT, MAX_BATCH, MAX_IN_FLIGHT, RECEIVE_COUNTS};
use crate::queue::sdk::SdkQueue;
use crate::queue::Queue;
use crate::queue_ref::QueueRef;
use crate::receive::ReceiveSettings;

impl ConsumerBuilder {
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
        #[cfg(feature = "lambda")]
        let leases = match self.deferred_deletes.take() {
            Some(deletes) => Leases {
                queue: crate::queue::deferred_deletes::deferring(leases.queue, deletes),
                ..leases
            },
            None => leases,
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
    use crate::builder::queues::KeeperPlacement;
    use crate::flow::in_flight_limit::InFlightLimit;
    use crate::memory::MemoryQueue;
    use crate::retry_policy::RetryPolicy;

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
        for max in [1, 2 << 30] {
            builder()
                .s3_payloads(s3())
                .payload_buckets(["payloads"])
                .max_payload_bytes(max)
                .delete_payload_on_ack(true)
                .build()
                .expect("bounds are valid");
        }
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
