//! `ConsumerBuilder::build`: every setting checked against its range (the first one out of
//! range named in [`Error::InvalidConfig`]), and the consumer's settings made from them.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;

use crate::builder::queues::{check_region, queues, Source};
use crate::builder::{
    ConsumerBuilder, MAX_BATCH_DELIVERIES, MAX_BATCH_WINDOW, MAX_KEEP_DONE, RECEIVE_RATES,
    RECEIVE_RATES_ALLOWED, REQUEST_TIMEOUTS,
};
#[cfg(feature = "s3")]
use crate::builder::{PayloadBuckets, PayloadSettings};
use crate::consumer::Consumer;
use crate::dead_letter::DeadLetter;
use crate::engine::claiming::KeyFn;
use crate::engine::{ConsumerSettings, Leases};
use crate::error::Error;
use crate::flow::rate_limit::{RateLimit, RateLimits};
use crate::handler::batch_window::Batching;
use crate::handler::handling::HandlerSettings;
use crate::idempotency::Recording;
use crate::keeper_thread::KeeperRuntime;
use crate::lease::adaptive_visibility::AdaptiveVisibility;
use crate::limits::{
    self, VisibilityTimeout, HARD_LIMIT, MAX_BATCH, MAX_IN_FLIGHT, RECEIVE_COUNTS,
};
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
        let idempotency = self.idempotency_settings()?;
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
                idempotency,
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
            .map(|t| VisibilityTimeout::of_consumer("visibility_timeout", t))
            .transpose()?;
        let wait_time = limits::wait_time("wait_time", self.wait_time)?;
        let max_batch = u32::try_from(MAX_BATCH).unwrap_or(10);
        let receive_batch_size = limits::in_range(
            "receive_batch_size",
            self.receive_batch_size,
            1..=max_batch,
            "1..=10",
        )?;
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
        // A FIFO message's default idempotency key.
        let dedup = MessageSystemAttributeName::MessageDeduplicationId;
        let all = MessageSystemAttributeName::All;
        if self.idempotency.is_some()
            && !self.system_attribute_names.contains(&all)
            && !self.system_attribute_names.contains(&dedup)
        {
            self.system_attribute_names.push(dedup);
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
        if let Some(limit) = &self.shared_in_flight_limit {
            limits::in_range(
                "shared_in_flight_limit",
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
        if let Some(limit) = &self.shared_rate_limit {
            let per_second = limit.per_second();
            limits::in_range(
                "shared_rate_limit",
                per_second,
                RECEIVE_RATES,
                RECEIVE_RATES_ALLOWED,
            )?;
        }
        let rate_limits = RateLimits::new(own_rate, self.shared_rate_limit.take());
        let adaptive = self.visibility_estimate()?;
        Ok(ReceiveSettings {
            visibility_timeout,
            wait_time,
            receive_batch_size,
            max_in_flight,
            max_concurrent_receives,
            message_attribute_names: std::mem::take(&mut self.message_attribute_names),
            system_attribute_names: with_needed(std::mem::take(&mut self.system_attribute_names)),
            shared_in_flight_limit: self.shared_in_flight_limit.take(),
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
            VisibilityTimeout::of_consumer(field, min)?,
            VisibilityTimeout::of_consumer(field, max)?,
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

    /// The idempotency setting, checked: a key function or a keep time needs a store, and
    /// the keep time is in range.
    fn idempotency_settings(&mut self) -> Result<Option<(Recording, Option<KeyFn>)>, Error> {
        let keep_done = limits::in_range(
            "idempotency_keep_done",
            self.idempotency_keep_done,
            Duration::from_secs(1)..=MAX_KEEP_DONE,
            "1 s..=365 days",
        )?;
        let key_fn = self.idempotency_key.take();
        let Some(store) = self.idempotency.take() else {
            if key_fn.is_some() {
                return Err(Error::invalid(
                    "idempotency_key",
                    "a key function without a store",
                    "a key function with a store, set with ConsumerBuilder::idempotency",
                ));
            }
            return Ok(None);
        };
        Ok(Some((Recording::new(store, keep_done), key_fn)))
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
                "at most max_in_flight (raise max_in_flight to hold a whole handler batch)",
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
/// group's order: a handler batch split or collected across receives could run two of a group at
/// once. (Lambda refuses a batching window on FIFO queues too.)
fn fifo_batching(batching: Batching) -> Result<(), Error> {
    const ALLOWED: &str =
        "the default on a FIFO queue (a handler batch is one receive's deliveries, \
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
mod tests;
