//! What every delivery of one consumer shares: the counters, the retry policy, the
//! dead-letter queue, the memory of unfinished deletes, and the settle calls (deletes and
//! visibility changes), each batched and each retried here on its own terms.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::{sleep, Instant};
use tokio_util::task::TaskTracker;
use tracing::instrument::WithSubscriber;
use tracing::{Instrument, Span};

use crate::adaptive_visibility::AdaptiveVisibility;
use crate::call_retries::{self, ACK_RETRY_WINDOW, RELEASE_ATTEMPTS};
use crate::dead_letter::DeadLetter;
use crate::error::Error;
use crate::keeper::thread::KeeperRuntime;
use crate::millis::Epoch;
use crate::queue::Queue;
use crate::readable::Secs;
use crate::request_batch::{Batcher, Call, Cohort};
use crate::retry_policy::RetryPolicy;
use crate::stats::{Counter, Counters, Measure, Stats};
use crate::trace_parent::SpanHook;
use crate::unfinished_deletes::{Unfinished, UnfinishedDeletes};

/// A call that settles a message.
#[derive(Debug, Clone, Copy)]
enum SettleCall {
    Delete,
    /// A visibility change to this many seconds.
    ChangeVisibility(u32),
}

impl SettleCall {
    /// The visibility a batch entry of this call carries (ignored by a delete).
    fn visibility(self) -> u32 {
        match self {
            SettleCall::Delete => 0,
            SettleCall::ChangeVisibility(secs) => secs,
        }
    }

    fn operation(self) -> &'static str {
        match self {
            SettleCall::Delete => "DeleteMessage",
            SettleCall::ChangeVisibility(_) => "ChangeMessageVisibility",
        }
    }
}

/// What a settle call needs to know of its delivery while it retries.
pub(crate) trait SettleHooks: Send + Sync + 'static {
    /// `false` once the delivery is lost: trying again cannot help it.
    fn still_ours(&self) -> bool;
    /// A try failed and the next one waits.
    fn waiting_to_retry(&self);
    /// The next try is about to go.
    fn retrying(&self);
    /// The deliveries received with this one, whose settle calls its first try may wait for.
    fn cohort(&self) -> Option<Arc<Cohort>> {
        None
    }
}

/// A delivery that needs no telling: always ours.
struct Nobody;

impl SettleHooks for Nobody {
    fn still_ours(&self) -> bool {
        true
    }

    fn waiting_to_retry(&self) {}

    fn retrying(&self) {}
}

/// Counts the releases that make messages visible again at once (a visibility of 0), as they
/// start: the receive loop reads it to know when the queue has them back.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReleasesAtOnce(Arc<AtomicU64>);

impl ReleasesAtOnce {
    fn note(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// How many have started so far.
    pub(crate) fn count(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Debug)]
pub(crate) struct Context {
    /// What its leases count their instants from: when the context was made.
    epoch: Epoch,
    /// The queue the settle calls go to; its URL or name, for logs.
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
    /// Deletes and visibility changes under way on behalf of deliveries (batch entries, and
    /// the releases of dropped deliveries): neither a cancelled caller nor a `Drop` cuts them
    /// short, and shutdown waits for them.
    settles: TaskTracker,
    /// Every delete goes through this, in batches.
    deletes: Batcher,
    /// Every visibility change (extensions and releases) goes through this, in batches.
    visibility: Batcher,
    /// Where the batchers and the settle retries run.
    keeper_runtime: KeeperRuntime,
    releases_at_once: ReleasesAtOnce,
    /// Where payloads are read from and deleted (feature `s3`), if the consumer reads them.
    #[cfg(feature = "s3")]
    payloads: Option<crate::payload::store::PayloadStore>,
}

impl Context {
    /// A context whose settle calls go to `queue`, run by `keeper_runtime`.
    pub(crate) fn new(queue: &Queue, retry: RetryPolicy, keeper_runtime: KeeperRuntime) -> Self {
        let settles = TaskTracker::new();
        let batcher =
            |call| Batcher::new(queue.clone(), call, settles.clone(), keeper_runtime.clone());
        Self {
            epoch: Epoch::now(),
            queue: queue.clone(),
            deletes: batcher(Call::Delete),
            visibility: batcher(Call::ChangeVisibility),
            keeper_runtime,
            releases_at_once: ReleasesAtOnce::default(),
            retry,
            counters: Counters::new(queue.short_name()),
            unfinished_deletes: UnfinishedDeletes::default(),
            dead_letter: None,
            adaptive: None,
            span_hook: None,
            settles,
            #[cfg(feature = "s3")]
            payloads: None,
        }
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

    /// A receive applied this visibility timeout (seconds), for `Stats`.
    pub(crate) fn visibility_applied(&self, timeout: u32) {
        self.counters.visibility_applied(timeout);
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
        self.spawn_settle(delete.instrument(span.clone()), &runtime);
    }

    /// `true` when the keeper and the settle calls run on a thread of their own.
    pub(crate) fn is_isolated(&self) -> bool {
        self.keeper_runtime.is_isolated()
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

    /// One try of each extension of a keeper's round (visibility changes, sent together):
    /// each one's result. The keeper retries them, each until its delivery's deadline.
    pub(crate) async fn extend_all(&self, entries: &[(&str, u32)]) -> Vec<Result<(), Error>> {
        self.visibility.submit_many(entries).await
    }

    /// Deletes a message, retrying transient failures for up to [`ACK_RETRY_WINDOW`] while
    /// its delivery is still ours (`hooks`; none: always).
    pub(crate) async fn delete(
        self: &Arc<Self>,
        receipt: &str,
        hooks: Option<Arc<dyn SettleHooks>>,
    ) -> Result<(), Error> {
        let hooks = hooks.unwrap_or_else(|| Arc::new(Nobody));
        self.settle(SettleCall::Delete, receipt, hooks).await
    }

    /// Gives a message back: a visibility change to `secs` (0: visible at once), retrying
    /// transient failures up to [`RELEASE_ATTEMPTS`] tries in all. Counts it when it succeeds.
    pub(crate) async fn release(
        self: &Arc<Self>,
        receipt: &str,
        secs: u32,
        hooks: Option<Arc<dyn SettleHooks>>,
    ) -> Result<(), Error> {
        let hooks = hooks.unwrap_or_else(|| Arc::new(Nobody));
        self.note_release(secs);
        self.settle(SettleCall::ChangeVisibility(secs), receipt, hooks)
            .await?;
        self.count(Counter::Released);
        tracing::debug!(visibility = secs, "released");
        Ok(())
    }

    fn note_release(&self, secs: u32) {
        if secs == 0 {
            self.releases_at_once.note();
        }
    }

    /// How the consumer's receives fare, shared with its receive loop.
    pub(crate) fn receive_health(&self) -> crate::stats::ReceiveHealth {
        self.counters.receive_health()
    }

    /// The count of releases at once that have started, shared.
    pub(crate) fn releases_at_once(&self) -> ReleasesAtOnce {
        self.releases_at_once.clone()
    }

    /// Deletes several messages, their first tries together (one request for up to 10),
    /// each retried as [`delete`](Context::delete) retries. Each one's result, in order.
    pub(crate) async fn delete_all(
        self: &Arc<Self>,
        items: Vec<(String, Option<Arc<dyn SettleHooks>>)>,
    ) -> Vec<Result<(), Error>> {
        self.settle_all(SettleCall::Delete, items).await
    }

    /// Releases several messages (a visibility change to `secs`), their first tries together,
    /// each retried as [`release`](Context::release) retries. Each one's result, in order.
    pub(crate) async fn release_all(
        self: &Arc<Self>,
        items: Vec<(String, Option<Arc<dyn SettleHooks>>)>,
        secs: u32,
    ) -> Vec<Result<(), Error>> {
        self.note_release(secs);
        let results = self
            .settle_all(SettleCall::ChangeVisibility(secs), items)
            .await;
        for _ in results.iter().filter(|r| r.is_ok()) {
            self.count(Counter::Released);
        }
        results
    }

    /// The first try goes out from the caller, with no task of its own (the batch entry
    /// keeps shutdown waiting for it). Retries, if any, go on in a task of their own, which
    /// shutdown waits for too, so a handler cancelled meanwhile does not cut them short.
    async fn settle(
        self: &Arc<Self>,
        call: SettleCall,
        receipt: &str,
        hooks: Arc<dyn SettleHooks>,
    ) -> Result<(), Error> {
        let started = Instant::now();
        match self.send(call, receipt, hooks.cohort()).await {
            Err(err) if err.is_retryable() && hooks.still_ours() => {
                let retries = self.retry_in_task(call, receipt.to_owned(), err, started, hooks);
                retries
                    .await
                    .unwrap_or_else(|_| Err(Error::runtime_gone(call.operation())))
            }
            other => other,
        }
    }

    /// [`settle`](Context::settle) for several messages, their first tries together.
    async fn settle_all(
        self: &Arc<Self>,
        call: SettleCall,
        items: Vec<(String, Option<Arc<dyn SettleHooks>>)>,
    ) -> Vec<Result<(), Error>> {
        let started = Instant::now();
        let entries: Vec<(&str, u32)> = items
            .iter()
            .map(|(receipt, _)| (receipt.as_str(), call.visibility()))
            .collect();
        let first = match call {
            SettleCall::Delete => self.deletes.submit_many(&entries).await,
            SettleCall::ChangeVisibility(_) => self.visibility.submit_many(&entries).await,
        };
        let mut outcomes = Vec::with_capacity(items.len());
        for ((receipt, hooks), result) in items.into_iter().zip(first) {
            let hooks: Arc<dyn SettleHooks> = hooks.unwrap_or_else(|| Arc::new(Nobody));
            outcomes.push(match result {
                Err(err) if err.is_retryable() && hooks.still_ours() => {
                    Err(self.retry_in_task(call, receipt, err, started, hooks))
                }
                done => Ok(done),
            });
        }
        let mut results = Vec::with_capacity(outcomes.len());
        for outcome in outcomes {
            results.push(match outcome {
                Ok(done) => done,
                Err(retries) => retries
                    .await
                    .unwrap_or_else(|_| Err(Error::runtime_gone(call.operation()))),
            });
        }
        results
    }

    /// Retries a settle call that failed with `err`, in a tracked task of its own; its result
    /// comes back on the returned channel.
    fn retry_in_task(
        self: &Arc<Self>,
        call: SettleCall,
        receipt: String,
        err: Error,
        started: Instant,
        hooks: Arc<dyn SettleHooks>,
    ) -> oneshot::Receiver<Result<(), Error>> {
        let (tx, rx) = oneshot::channel();
        let ctx = self.clone();
        let retries = async move {
            let result = ctx.retry(call, &receipt, err, started, &*hooks).await;
            let _ = tx.send(result);
        };
        // Without a runtime, the channel closes unanswered: "runtime gone".
        if let Some(runtime) = self.keeper_runtime.runtime(None) {
            self.settles.spawn_on(
                retries
                    .instrument(Span::current())
                    .with_current_subscriber(),
                &runtime,
            );
        }
        rx
    }

    async fn retry(
        &self,
        call: SettleCall,
        receipt: &str,
        mut err: Error,
        started: Instant,
        hooks: &dyn SettleHooks,
    ) -> Result<(), Error> {
        let mut backoff = call_retries::SETTLE.backoff();
        let mut attempts = 1;
        loop {
            let more = match call {
                SettleCall::Delete => Instant::now() < started + ACK_RETRY_WINDOW,
                SettleCall::ChangeVisibility(_) => attempts < RELEASE_ATTEMPTS,
            };
            if !(err.is_retryable() && more && hooks.still_ours()) {
                return Err(err);
            }
            let wait = backoff.next_delay();
            tracing::warn!(operation = call.operation(), error = %err.chain(), retry_in = %Secs(wait), "settle call failed; retrying");
            // The keeper extends the delivery while the next try waits.
            hooks.waiting_to_retry();
            sleep(wait).await;
            hooks.retrying();
            attempts += 1;
            match self.send(call, receipt, None).await {
                Ok(()) => return Ok(()),
                Err(next) => err = next,
            }
        }
    }

    /// One try of a settle call, as an entry of a batch (which may wait a little for the
    /// rest of `cohort`).
    async fn send(
        &self,
        call: SettleCall,
        receipt: &str,
        cohort: Option<Arc<Cohort>>,
    ) -> Result<(), Error> {
        match call {
            SettleCall::Delete => self.deletes.submit(receipt, 0, cohort).await,
            SettleCall::ChangeVisibility(secs) => {
                self.visibility.submit(receipt, secs, cohort).await
            }
        }
    }

    /// The runtime settle calls run on: the keeper thread's, else `caller` (the runtime the
    /// delivery was received on), else the current one; `None` outside any runtime.
    pub(crate) fn settle_runtime(&self, caller: Option<&Handle>) -> Option<Handle> {
        self.keeper_runtime.runtime(caller)
    }

    /// Runs a settle call to its end on `runtime` (see
    /// [`settle_runtime`](Context::settle_runtime)), even if nobody waits for it; shutdown
    /// waits for it.
    pub(crate) fn spawn_settle<F>(&self, settle: F, runtime: &Handle)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.settles
            .spawn_on(settle.with_current_subscriber(), runtime);
    }

    /// Waits until every settle call sent so far has finished, or until `end`: how many are
    /// still under way then (they go on while their runtime does).
    pub(crate) async fn flush_settles(&self, end: Instant) -> usize {
        self.settles.close();
        let _ = tokio::time::timeout_at(end, self.settles.wait()).await;
        self.settles.reopen();
        self.settles.len()
    }
}

#[cfg(test)]
mod tests {
    use futures::executor::block_on;

    use super::*;
    use crate::memory::counts::Action;
    use crate::MemoryQueue;

    fn context(q: &MemoryQueue) -> Arc<Context> {
        Arc::new(Context::new(
            &Queue::new(q.clone()),
            RetryPolicy::Leave,
            KeeperRuntime::Caller,
        ))
    }

    /// A delivery lost meanwhile: no retry can help it.
    struct Lost;

    impl SettleHooks for Lost {
        fn still_ours(&self) -> bool {
            false
        }

        fn waiting_to_retry(&self) {}

        fn retrying(&self) {}
    }

    fn lost() -> Option<Arc<dyn SettleHooks>> {
        Some(Arc::new(Lost))
    }

    /// A delete on behalf of no delivery (a redelivered message whose ack had failed) is
    /// retried as an ack's is.
    #[tokio::test(start_paused = true)]
    async fn a_delete_for_no_delivery_is_retried_after_a_transient_failure() {
        let q = MemoryQueue::new();
        let ctx = context(&q);
        q.send("x").expect("send");
        let message = q
            .receive(1, Duration::ZERO)
            .await
            .expect("receive")
            .remove(0);
        let receipt = message.receipt_handle().expect("a receipt handle");
        q.fail_next(Action::DeleteMessageBatch, "InternalError", 1);
        ctx.delete(receipt, None)
            .await
            .expect("deleted on the second try");
        assert!(q.is_empty());
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 2);
    }

    /// Without a runtime no batch request can go, and the first try fails (retryably). A
    /// settle still ours goes on to retry, which nothing can run: it fails naming its own
    /// call. One for a lost delivery does not retry: it keeps the first try's error.
    #[test]
    fn without_a_runtime_only_a_settle_still_ours_goes_on_to_retry() {
        let ctx = context(&MemoryQueue::new());
        let items = || vec![("r".to_owned(), None), ("s".to_owned(), lost())];
        let mut results = vec![
            block_on(ctx.delete("r", None)),
            block_on(ctx.delete("r", lost())),
        ];
        results.extend(block_on(ctx.delete_all(items())));
        results.push(block_on(ctx.release("r", 5, None)));
        results.push(block_on(ctx.release("r", 5, lost())));
        results.extend(block_on(ctx.release_all(items(), 0)));
        let messages: Vec<String> = results
            .into_iter()
            .map(|r| r.expect_err("no runtime").to_string())
            .collect();
        let starts: Vec<&str> = messages
            .iter()
            .map(|m| m.split(" failed").next().unwrap_or_default())
            .collect();
        let (delete, delete_batch) = ("SQS DeleteMessage", "SQS DeleteMessageBatch");
        let (change, change_batch) = (
            "SQS ChangeMessageVisibility",
            "SQS ChangeMessageVisibilityBatch",
        );
        assert_eq!(
            starts,
            [
                delete,
                delete_batch,
                delete,
                delete_batch,
                change,
                change_batch,
                change,
                change_batch
            ],
            "{messages:#?}"
        );
    }
}
