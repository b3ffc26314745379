//! Settle calls: the deletes and visibility changes that settle messages, each an entry of a
//! request batch and each retried on its own terms (an ack's delete for up to 20 s, a
//! release's change 4 tries in all), in tasks that neither a cancelled caller nor a `Drop`
//! cuts short and that shutdown waits for. The keeper's extensions share their batcher.
//!
//! Beside it: the request batches they go out in (`request_batch.rs`), and the messages whose
//! delete did not go through, to delete should they come back (`unfinished_deletes.rs`).

pub(crate) mod request_batch;
pub(crate) mod unfinished_deletes;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::{sleep, Instant};
use tokio_util::task::TaskTracker;
use tracing::instrument::WithSubscriber;
use tracing::{Instrument, Span};

use crate::call_retries::{self, ACK_RETRY_WINDOW, RELEASE_ATTEMPTS};
use crate::error::Error;
use crate::keeper_thread::KeeperRuntime;
use crate::limits::VisibilityTimeout;
use crate::queue::Queue;
use crate::readable::Secs;
use crate::settle_calls::request_batch::{Batcher, Call, Cohort, OnAnswer, RequestsAtOnce};

/// A call that settles a message.
#[derive(Debug, Clone, Copy)]
enum SettleCall {
    Delete,
    /// A visibility change to this visibility timeout.
    ChangeVisibility(VisibilityTimeout),
}

impl SettleCall {
    /// The visibility a batch entry of this call carries (ignored by a delete).
    fn visibility_timeout(self) -> VisibilityTimeout {
        match self {
            SettleCall::Delete => VisibilityTimeout::ZERO,
            SettleCall::ChangeVisibility(visibility_timeout) => visibility_timeout,
        }
    }

    fn operation(self) -> &'static str {
        match self {
            SettleCall::Delete => "DeleteMessage",
            SettleCall::ChangeVisibility(_) => "ChangeMessageVisibility",
        }
    }
}

/// What a settle call needs to know of its delivery while it retries. Each try's answer is
/// told to it where the answer arrives ([`OnAnswer`]).
pub(crate) trait SettleHooks: OnAnswer + 'static {
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

impl OnAnswer for Nobody {
    fn answered(&self, _: &Result<(), Error>) {}
}

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

/// One consumer's settle calls: its two batchers and the tasks that retry.
#[derive(Debug)]
pub(crate) struct SettleCalls {
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
}

impl SettleCalls {
    /// Settle calls to `queue`, run by `keeper_runtime`, up to `at_once` requests of each
    /// kind under way.
    pub(crate) fn new(
        queue: &Queue,
        keeper_runtime: KeeperRuntime,
        at_once: RequestsAtOnce,
    ) -> Self {
        let settles = TaskTracker::new();
        let batcher = |call| {
            let runtime = keeper_runtime.clone();
            Batcher::new(queue.clone(), call, settles.clone(), runtime, at_once)
        };
        Self {
            deletes: batcher(Call::Delete),
            visibility: batcher(Call::ChangeVisibility),
            keeper_runtime,
            releases_at_once: ReleasesAtOnce::default(),
            settles,
        }
    }

    /// `true` when the keeper and the settle calls run on a thread of their own.
    pub(crate) fn is_isolated(&self) -> bool {
        self.keeper_runtime.is_isolated()
    }

    /// One try of each extension of a keeper's round (visibility changes, sent together):
    /// each one's result. The keeper retries them, each until its delivery's deadline.
    pub(crate) async fn extend_all(
        &self,
        entries: &[(&str, VisibilityTimeout)],
    ) -> Vec<Result<(), Error>> {
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

    /// Gives a message back: a visibility change to `visibility_timeout` (0: visible at once), retrying
    /// transient failures up to [`RELEASE_ATTEMPTS`] tries in all.
    pub(crate) async fn release(
        self: &Arc<Self>,
        receipt: &str,
        visibility_timeout: VisibilityTimeout,
        hooks: Option<Arc<dyn SettleHooks>>,
    ) -> Result<(), Error> {
        let hooks = hooks.unwrap_or_else(|| Arc::new(Nobody));
        self.note_release(visibility_timeout);
        self.settle(
            SettleCall::ChangeVisibility(visibility_timeout),
            receipt,
            hooks,
        )
        .await
    }

    fn note_release(&self, visibility_timeout: VisibilityTimeout) {
        if visibility_timeout.is_zero() {
            self.releases_at_once.note();
        }
    }

    /// The count of releases at once that have started, shared.
    pub(crate) fn releases_at_once(&self) -> ReleasesAtOnce {
        self.releases_at_once.clone()
    }

    /// Deletes several messages, their first tries together (one request for up to 10),
    /// each retried as [`delete`](SettleCalls::delete) retries. Each one's result, in order.
    pub(crate) async fn delete_all(
        self: &Arc<Self>,
        items: Vec<(String, Option<Arc<dyn SettleHooks>>)>,
    ) -> Vec<Result<(), Error>> {
        self.settle_all(SettleCall::Delete, items).await
    }

    /// Releases several messages (a visibility change to `visibility_timeout`), their first
    /// tries together,
    /// each retried as [`release`](SettleCalls::release) retries. Each one's result, in order.
    pub(crate) async fn release_all(
        self: &Arc<Self>,
        items: Vec<(String, Option<Arc<dyn SettleHooks>>)>,
        visibility_timeout: VisibilityTimeout,
    ) -> Vec<Result<(), Error>> {
        self.note_release(visibility_timeout);
        self.settle_all(SettleCall::ChangeVisibility(visibility_timeout), items)
            .await
    }

    /// Makes the visibility of several messages `visibility_timeout` from now (their leases true from the
    /// first try's request on), their first tries together, each retried as a release is:
    /// each one's result, in order. For messages received by someone else (a Lambda
    /// invocation's), whose visibility deadline is not known.
    #[cfg(feature = "lambda")]
    pub(crate) async fn renew_all(
        self: &Arc<Self>,
        receipts: &[&str],
        visibility_timeout: VisibilityTimeout,
    ) -> Vec<Result<(), Error>> {
        let items = receipts.iter().map(|r| ((*r).to_owned(), None)).collect();
        self.settle_all(SettleCall::ChangeVisibility(visibility_timeout), items)
            .await
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
        match self.send(call, receipt, &hooks, hooks.cohort()).await {
            Err(err) if err.is_retryable() && hooks.still_ours() => {
                let retries = self.retry_in_task(call, receipt.to_owned(), err, started, hooks);
                retries
                    .await
                    .unwrap_or_else(|_| Err(Error::runtime_gone(call.operation())))
            }
            other => other,
        }
    }

    /// [`settle`](SettleCalls::settle) for several messages, their first tries together.
    async fn settle_all(
        self: &Arc<Self>,
        call: SettleCall,
        items: Vec<(String, Option<Arc<dyn SettleHooks>>)>,
    ) -> Vec<Result<(), Error>> {
        let started = Instant::now();
        let items: Vec<(String, Arc<dyn SettleHooks>)> = items
            .into_iter()
            .map(|(receipt, hooks)| (receipt, hooks.unwrap_or_else(|| Arc::new(Nobody))))
            .collect();
        let entries: Vec<(&str, VisibilityTimeout)> = items
            .iter()
            .map(|(receipt, _)| (receipt.as_str(), call.visibility_timeout()))
            .collect();
        let told = items
            .iter()
            .map(|(_, hooks)| Some(hooks.clone() as Arc<dyn OnAnswer>))
            .collect();
        let batcher = match call {
            SettleCall::Delete => &self.deletes,
            SettleCall::ChangeVisibility(_) => &self.visibility,
        };
        let first = batcher.submit_many_told(&entries, told).await;
        drop(entries);
        let mut outcomes = Vec::with_capacity(items.len());
        for ((receipt, hooks), result) in items.into_iter().zip(first) {
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
        let calls = self.clone();
        let retries = async move {
            let result = calls.retry(call, &receipt, err, started, &hooks).await;
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
        hooks: &Arc<dyn SettleHooks>,
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
            match self.send(call, receipt, hooks, None).await {
                Ok(()) => return Ok(()),
                Err(next) => err = next,
            }
        }
    }

    /// One try of a settle call, as an entry of a request batch (which may wait a little for the
    /// rest of `cohort`); `hooks` are told its answer where it arrives.
    async fn send(
        &self,
        call: SettleCall,
        receipt: &str,
        hooks: &Arc<dyn SettleHooks>,
        cohort: Option<Arc<Cohort>>,
    ) -> Result<(), Error> {
        let told: Arc<dyn OnAnswer> = hooks.clone();
        match call {
            SettleCall::Delete => {
                let submit =
                    self.deletes
                        .submit_told(receipt, VisibilityTimeout::ZERO, cohort, Some(told));
                submit.await
            }
            SettleCall::ChangeVisibility(visibility_timeout) => {
                let submit =
                    self.visibility
                        .submit_told(receipt, visibility_timeout, cohort, Some(told));
                submit.await
            }
        }
    }

    /// The runtime settle calls run on: the keeper thread's, else `caller` (the runtime the
    /// delivery was received on), else the current one; `None` outside any runtime.
    pub(crate) fn runtime(&self, caller: Option<&Handle>) -> Option<Handle> {
        self.keeper_runtime.runtime(caller)
    }

    /// Runs a settle call to its end on `runtime` (see
    /// [`settle_runtime`](SettleCalls::runtime)), even if nobody waits for it; shutdown
    /// waits for it.
    pub(crate) fn spawn<F>(&self, settle: F, runtime: &Handle)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.settles
            .spawn_on(settle.with_current_subscriber(), runtime);
    }

    /// Waits until every settle call sent so far has finished, or until `end`: how many are
    /// still under way then (they go on while their runtime does).
    pub(crate) async fn flush(&self, end: Instant) -> usize {
        self.settles.close();
        let _ = tokio::time::timeout_at(end, self.settles.wait()).await;
        self.settles.reopen();
        self.settles.len()
    }
}

#[cfg(test)]
mod tests;
