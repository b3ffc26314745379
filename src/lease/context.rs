//! What every delivery of one consumer shares: the counters, the retry policy, the
//! dead-letter queue, the memory of unfinished deletes, how deliveries' spans start, and its
//! settle calls (`settle_calls/mod.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
#[cfg(feature = "s3")]
use {
    tokio::runtime::Handle,
    tracing::{Instrument, Span},
};

use crate::dead_letter::DeadLetter;
use crate::idempotency::Recording;
use crate::keeper_thread::KeeperRuntime;
use crate::lease::adaptive_visibility::AdaptiveVisibility;
use crate::limits::VisibilityTimeout;
use crate::millis::Epoch;
use crate::queue::Queue;
use crate::retry_policy::RetryPolicy;
use crate::settle_calls::request_batch::RequestsAtOnce;
use crate::settle_calls::unfinished_deletes::{Unfinished, UnfinishedDeletes};
use crate::settle_calls::SettleCalls;
use crate::stats::{Counter, Counters, Measure, Stats};
use crate::trace::parent::SpanHook;

#[derive(Debug)]
pub(crate) struct Context {
    /// What its leases count their instants from: when the context was made.
    epoch: Epoch,
    /// The queue: its URL or name, for logs and metrics.
    queue: Queue,
    retry: RetryPolicy,
    counters: Counters,
    /// Messages to delete, not handle, should they come back.
    unfinished_deletes: UnfinishedDeletes,
    /// Where failed messages are moved, if the consumer moves them.
    dead_letter: Option<DeadLetter>,
    /// With `adaptive_visibility`: the estimate that learns how long deliveries are held.
    adaptive: Option<Arc<AdaptiveVisibility>>,
    /// `on_delivery_span`: called with each `delivery` span before it is entered.
    span_hook: Option<SpanHook>,
    /// Its deletes and visibility changes, batched and retried.
    calls: Arc<SettleCalls>,
    /// Where the work of each message is recorded as in progress and done, if anywhere.
    idempotency: Option<Recording>,
    /// Where payloads are read from and deleted (feature `s3`), if the consumer reads them.
    #[cfg(feature = "s3")]
    payloads: Option<crate::payload::store::PayloadStore>,
}

impl Context {
    /// A context whose settle calls go to `queue`, run by `keeper_runtime`, up to `at_once`
    /// requests of each kind under way.
    pub(crate) fn new(
        queue: &Queue,
        retry: RetryPolicy,
        keeper_runtime: KeeperRuntime,
        at_once: RequestsAtOnce,
    ) -> Self {
        Self {
            epoch: Epoch::now(),
            queue: queue.clone(),
            calls: Arc::new(SettleCalls::new(queue, keeper_runtime, at_once)),
            retry,
            counters: Counters::new(queue.short_name()),
            unfinished_deletes: UnfinishedDeletes::default(),
            dead_letter: None,
            adaptive: None,
            span_hook: None,
            idempotency: None,
            #[cfg(feature = "s3")]
            payloads: None,
        }
    }

    /// The same context, recording each message's work in `recording`'s store.
    pub(crate) fn with_idempotency(mut self, recording: Option<Recording>) -> Self {
        self.idempotency = recording;
        self
    }

    /// Where each message's work is recorded, if anywhere.
    pub(crate) fn idempotency(&self) -> Option<&Recording> {
        self.idempotency.as_ref()
    }

    /// The same context, reading payloads from `store`.
    #[cfg(feature = "s3")]
    pub(crate) fn with_payloads(
        mut self,
        store: Option<crate::payload::store::PayloadStore>,
    ) -> Self {
        self.payloads = store;
        self
    }

    /// Its settle calls: deletes and visibility changes, batched and retried.
    pub(crate) fn calls(&self) -> &Arc<SettleCalls> {
        &self.calls
    }

    /// What its leases count their instants from.
    pub(crate) fn epoch(&self) -> &Epoch {
        &self.epoch
    }

    /// The same context, moving failed messages to `dead_letter`.
    pub(crate) fn with_dead_letter(mut self, dead_letter: Option<DeadLetter>) -> Self {
        self.dead_letter = dead_letter;
        self
    }

    /// The same context, telling `adaptive` how long each delivery was held.
    pub(crate) fn with_adaptive_visibility(
        mut self,
        adaptive: Option<Arc<AdaptiveVisibility>>,
    ) -> Self {
        self.adaptive = adaptive;
        self
    }

    /// The same context, calling `hook` with each `delivery` span.
    pub(crate) fn with_span_hook(mut self, hook: Option<SpanHook>) -> Self {
        self.span_hook = hook;
        self
    }

    /// The hook `on_delivery_span` set, if any.
    pub(crate) fn span_hook(&self) -> Option<&SpanHook> {
        self.span_hook.as_ref()
    }

    /// A delivery handed out at `handed_out` is no longer held (its settle started, or it was
    /// dropped): the adaptive visibility estimate learns how long it was, if there is one.
    pub(crate) fn held_since(&self, handed_out: Instant) {
        if let Some(adaptive) = &self.adaptive {
            adaptive.held_for(handed_out.elapsed());
        }
    }

    /// A receive applied this visibility timeout, for `Stats`.
    pub(crate) fn visibility_applied(&self, visibility_timeout: VisibilityTimeout) {
        self.counters.visibility_applied(visibility_timeout);
    }

    /// Where failed messages are moved, if the consumer moves them.
    pub(crate) fn dead_letter(&self) -> Option<&DeadLetter> {
        self.dead_letter.as_ref()
    }

    /// Where payloads are read from, if the consumer reads them.
    #[cfg(feature = "s3")]
    pub(crate) fn payloads(&self) -> Option<&crate::payload::store::PayloadStore> {
        self.payloads.as_ref()
    }

    /// After an ack, deletes the payload object at `location` if the consumer was asked to:
    /// in a task of its own that shutdown waits for, a few tries at most; a failure is
    /// logged and counted, and the object stays.
    #[cfg(feature = "s3")]
    pub(crate) fn delete_payload(
        self: &Arc<Self>,
        location: &crate::payload::pointer::PayloadLocation,
        span: &Span,
    ) {
        let Some(store) = self.payloads.clone().filter(|s| s.deletes_on_ack()) else {
            return;
        };
        // On the caller's runtime: the S3 client's connections belong to it.
        let Ok(runtime) = Handle::try_current() else {
            return;
        };
        let (ctx, location) = (self.clone(), location.clone());
        let delete = async move {
            match store.delete_retrying(&location).await {
                Ok(()) => tracing::debug!(
                    bucket = location.bucket(),
                    key = location.key(),
                    "payload deleted"
                ),
                Err(err) => {
                    ctx.count(Counter::PayloadDeleteFailures);
                    tracing::warn!(
                        bucket = location.bucket(),
                        key = location.key(),
                        error = %err.reason,
                        "deleting the payload after the ack failed; the object stays in S3"
                    );
                }
            }
        };
        self.calls.spawn(delete.instrument(span.clone()), &runtime);
    }

    pub(crate) fn queue_name(&self) -> &str {
        self.queue.name()
    }

    /// The queue's name without its account: spans and metrics name it so.
    pub(crate) fn short_queue_name(&self) -> &str {
        self.queue.short_name()
    }

    pub(crate) fn is_fifo(&self) -> bool {
        self.queue.is_fifo()
    }

    pub(crate) fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Counts one `counter` event; returns the new count.
    pub(crate) fn count(&self, counter: Counter) -> u64 {
        self.counters.bump(counter)
    }

    /// Records one event's measure (exported with feature `metrics`).
    pub(crate) fn observe(&self, measure: Measure, value: f64) {
        self.counters.observe(measure, value);
    }

    /// Records how long after it was due an extension was done (or gave up).
    pub(crate) fn extension_delay(&self, delay: Duration) {
        self.counters.extension_delay(delay);
    }

    /// A snapshot of the counters; `slots` is how many `max_in_flight` slots are taken.
    pub(crate) fn stats(&self, slots: u64) -> Stats {
        self.counters.snapshot(slots)
    }

    /// A delivery starts.
    pub(crate) fn delivery_started(&self) {
        self.counters.delivery_started();
    }

    /// A delivery is dropped.
    pub(crate) fn delivery_ended(&self) {
        self.counters.delivery_ended();
    }

    /// Deliveries alive right now.
    pub(crate) fn held(&self) -> u64 {
        self.counters.held()
    }

    /// Remembers a message to delete instead of handle, should it come back.
    pub(crate) fn remember_unfinished(&self, message_id: &str, unfinished: Unfinished) {
        self.unfinished_deletes.remember(message_id, unfinished);
    }

    /// What was left unfinished for `message_id`, if anything (and forgets it).
    pub(crate) fn take_unfinished(&self, message_id: &str) -> Option<Unfinished> {
        self.unfinished_deletes.take(message_id)
    }

    /// How the consumer's receives fare, shared with its receive loop.
    pub(crate) fn receive_health(&self) -> crate::stats::ReceiveHealth {
        self.counters.receive_health()
    }
}
