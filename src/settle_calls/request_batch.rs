//! Client-side batching of `DeleteMessage` and `ChangeMessageVisibility`.
//!
//! SQS bills per request, and a batch request of up to 10 entries costs one. The rule for
//! when a partial batch goes (Nagle's, plus the wait for a receive's other acks, each bounded
//! by one round trip, no fixed linger) is the guide's, on its cost page ("Batched settles"),
//! and the tests below hold it. Full batches go out at once, up to [`RequestsAtOnce`]
//! requests at a time. Deliveries received together reach their
//! keeper together, so their extensions share requests too.
//!
//! The batcher sends each entry once and hands each caller its own entry's result (or the
//! whole request's error): retrying is the caller's business, on the caller's terms (an
//! extension until its deadline, an ack for a while), so no call path retries twice.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio::time::{sleep_until, Instant};
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;
use tracing::instrument::WithSubscriber;

use crate::error::Error;
use crate::keeper_thread::{KeeperRuntime, Mailbox};
use crate::limits::{VisibilityTimeout, MAX_BATCH};
use crate::queue::{BatchEntry, Queue, ENTRY_IDS};

/// How many batch requests of one kind may be under way at once.
///
/// Enough for every delivery the consumer may hold to be settled in one go: each slot's
/// delete (or extension) is then sent as soon as its batch is whole, instead of waiting for
/// an earlier request's answer. At a round trip of tens of milliseconds that wait, not the
/// requests, would bound the messages a second (the benchmarks' W5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestsAtOnce(usize);

impl RequestsAtOnce {
    /// The fewest: what a consumer of up to 40 slots needs.
    const FEWEST: usize = 4;
    /// The most, however many slots: as many as `max_concurrent_receives` allows receives.
    const MOST: usize = 64;

    /// For a consumer of `max_in_flight` slots: a request for every 10 of them, at least 4,
    /// at most 64.
    pub(crate) fn for_slots(max_in_flight: usize) -> Self {
        Self(
            max_in_flight
                .div_ceil(MAX_BATCH)
                .clamp(Self::FEWEST, Self::MOST),
        )
    }

    /// Entries pulled off the inbox at a time: enough to fill every request.
    fn lookahead(self) -> usize {
        MAX_BATCH * self.0
    }
}

impl Default for RequestsAtOnce {
    fn default() -> Self {
        Self(Self::FEWEST)
    }
}

/// Which call a batcher makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Delete,
    ChangeVisibility,
}

/// The deliveries of one receive that may still be acked or released on their own: their
/// handlers run side by side and usually settle within microseconds of each other, so with no
/// request under way a partial batch holding one of them waits for the others, at most one
/// round trip (the queue's moving average, `Queue::round_trip`), instead of leaving
/// without them.
#[derive(Debug, Default)]
pub(crate) struct Cohort {
    unsettled: AtomicUsize,
}

impl Cohort {
    /// One more delivery of the receive.
    pub(crate) fn join(&self) {
        self.unsettled.fetch_add(1, Ordering::AcqRel);
    }

    /// One of them started its ack or release, or ended: once for each.
    pub(crate) fn leave(&self) {
        let _ = self
            .unsettled
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    fn has_unsettled(&self) -> bool {
        self.unsettled.load(Ordering::Acquire) > 0
    }
}

/// Lets the batching task sleep through submissions that cannot end its wait for cohorts:
/// while it waits, it does not read its inbox (a read would wake it for each ack of the
/// cohort, and on a thread of its own every wake-up costs a thread switch), and only a
/// submission that may end the wait rings it.
#[derive(Debug, Default)]
struct BatcherBell {
    /// Set while the task waits for cohorts.
    waiting_for_cohorts: AtomicBool,
    /// Entries submitted and not yet sent: ten of them fill a batch.
    unsent: AtomicUsize,
    ring: Notify,
    /// Times the task woke while it waited for cohorts.
    #[cfg(test)]
    wakes: AtomicUsize,
}

impl BatcherBell {
    /// After `added` entries were submitted: rings the task if it is waiting for cohorts
    /// and these may end the wait (they complete a batch, or the cohort of the last one has
    /// no delivery left to settle, or it has none).
    fn submitted(&self, added: usize, cohort: Option<&Cohort>) {
        let unsent = self.unsent.fetch_add(added, Ordering::SeqCst) + added;
        // Pairs with the task's fence: either the flag is seen here, or the entries there.
        fence(Ordering::SeqCst);
        if !self.waiting_for_cohorts.load(Ordering::SeqCst) {
            return; // it reads its inbox, or will before it waits
        }
        if unsent >= MAX_BATCH || cohort.is_none_or(|c| !c.has_unsettled()) {
            self.ring.notify_one();
        }
    }

    fn sent(&self, n: usize) {
        let _ = self
            .unsent
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                Some(u.saturating_sub(n))
            });
    }
}

/// Whoever an entry's answer concerns beside its caller, told where the answer arrives: the
/// caller may see it much later (its task on a starved runtime), and what the answer proves
/// depends on when it came.
pub(crate) trait OnAnswer: Send + Sync {
    /// The entry's answer has just arrived.
    fn answered(&self, result: &Result<(), Error>);
}

/// Who is told an entry's answer where it arrives, if anyone.
pub(crate) type Told = Option<Arc<dyn OnAnswer>>;

/// One caller's request, waiting for its batch.
struct Entry {
    receipt: String,
    /// For `ChangeVisibility`.
    visibility_timeout: VisibilityTimeout,
    /// The receive its delivery came with, if its others may follow.
    cohort: Option<Arc<Cohort>>,
    /// When it was submitted: it waits for its cohort at most one round trip from here.
    submitted: Instant,
    reply: oneshot::Sender<Result<(), Error>>,
    /// Told the answer before the caller.
    told: Told,
    /// Keeps the consumer's tracker of settle calls busy until this entry is answered, so a
    /// shutdown waits for it even if its caller gave up.
    _pending: TaskTrackerToken,
}

/// What a caller hands the batching task: one entry, or several that go out together.
enum Submission {
    One(Entry),
    Many(Vec<Entry>),
}

/// Sends one kind of call in batches; see the module docs.
#[derive(Debug)]
pub(crate) struct Batcher {
    queue: Queue,
    call: Call,
    settles: TaskTracker,
    /// The batching task's inbox; the task runs where the keeper runtime says (on the caller's
    /// runtime: inside the one that first uses it).
    inbox: Mailbox<Submission>,
    bell: Arc<BatcherBell>,
    at_once: RequestsAtOnce,
}

impl Batcher {
    pub(crate) fn new(
        queue: Queue,
        call: Call,
        settles: TaskTracker,
        keeper_runtime: KeeperRuntime,
        at_once: RequestsAtOnce,
    ) -> Self {
        Self {
            queue,
            call,
            settles,
            inbox: Mailbox::new(keeper_runtime),
            bell: Arc::default(),
            at_once,
        }
    }

    /// Deletes (or changes the visibility of) one message as part of a batch, and returns
    /// that entry's own result: one attempt, never retried here.
    #[cfg(test)]
    pub(crate) async fn submit(
        &self,
        receipt: &str,
        visibility_timeout: VisibilityTimeout,
        cohort: Option<Arc<Cohort>>,
    ) -> Result<(), Error> {
        self.submit_told(receipt, visibility_timeout, cohort, None)
            .await
    }

    /// [`submit`](Batcher::submit), `told` told the answer where it arrives.
    pub(crate) async fn submit_told(
        &self,
        receipt: &str,
        visibility_timeout: VisibilityTimeout,
        cohort: Option<Arc<Cohort>>,
        told: Told,
    ) -> Result<(), Error> {
        let (mut entry, answer) = self.entry(receipt, visibility_timeout, told);
        entry.cohort = cohort.clone();
        match self.send(Submission::One(entry)) {
            Ok(()) => {
                self.bell.submitted(1, cohort.as_deref());
                answer
                    .await
                    .unwrap_or_else(|_| Err(Error::runtime_gone(self.call.name())))
            }
            Err(()) => Err(Error::runtime_gone(self.call.name())),
        }
    }

    /// Several entries, handed to the batching task at once, so that they go out together
    /// (in one request if there are at most 10 and nothing else is waiting); each entry's own
    /// result, in order.
    pub(crate) async fn submit_many(
        &self,
        entries: &[(&str, VisibilityTimeout)],
    ) -> Vec<Result<(), Error>> {
        self.submit_many_told(entries, Vec::new()).await
    }

    /// [`submit_many`](Batcher::submit_many), each entry's `told` (in order; missing ones:
    /// nobody) told its answer where it arrives.
    pub(crate) async fn submit_many_told(
        &self,
        entries: &[(&str, VisibilityTimeout)],
        told: Vec<Told>,
    ) -> Vec<Result<(), Error>> {
        let told = told.into_iter().chain(std::iter::repeat_with(|| None));
        let (entries, answers): (Vec<Entry>, Vec<_>) = entries
            .iter()
            .zip(told)
            .map(|((receipt, visibility_timeout), told)| {
                self.entry(receipt, *visibility_timeout, told)
            })
            .unzip();
        let count = entries.len();
        let sent = self.send(Submission::Many(entries)).is_ok();
        if sent {
            self.bell.submitted(count, None);
        }
        let mut results = Vec::with_capacity(answers.len());
        for answer in answers {
            let gone = || Err(Error::runtime_gone(self.call.name()));
            results.push(if sent {
                answer.await.unwrap_or_else(|_| gone())
            } else {
                gone()
            });
        }
        results
    }

    fn entry(
        &self,
        receipt: &str,
        visibility_timeout: VisibilityTimeout,
        told: Told,
    ) -> (Entry, oneshot::Receiver<Result<(), Error>>) {
        let (reply, answer) = oneshot::channel();
        let entry = Entry {
            receipt: receipt.to_owned(),
            visibility_timeout,
            cohort: None,
            submitted: Instant::now(),
            reply,
            told,
            _pending: self.settles.token(),
        };
        (entry, answer)
    }

    /// Hands `submission` to the batching task; `Err` without a runtime to run it on.
    fn send(&self, submission: Submission) -> Result<(), ()> {
        let (queue, call, bell, at_once) = (&self.queue, self.call, &self.bell, self.at_once);
        self.inbox
            .send(submission, |rx| {
                batcher_task(queue.clone(), call, bell.clone(), at_once, rx)
            })
            .map_err(drop)
    }
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Call::Delete => "DeleteMessageBatch",
            Call::ChangeVisibility => "ChangeMessageVisibilityBatch",
        }
    }
}

/// The batching loop: takes what is queued whenever a request slot is free.
async fn batcher_task(
    queue: Queue,
    call: Call,
    bell: Arc<BatcherBell>,
    at_once: RequestsAtOnce,
    mut rx: mpsc::UnboundedReceiver<Submission>,
) {
    let slots = Arc::new(Semaphore::new(at_once.0));
    // Signalled whenever a request comes back (after its slot is free).
    let answered = Arc::new(Notify::new());
    let mut waiting: VecDeque<Entry> = VecDeque::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        if waiting.is_empty() {
            match rx.recv().await {
                Some(submission) => take(&mut waiting, submission),
                None => return,
            }
            // Let the tasks woken with this one add theirs (the handlers of deliveries received
            // together ack together; on a thread of its own the batcher is woken by the first
            // of them while the others are still on their way): yield while each pass brings
            // more. Microseconds, not a linger: at most MAX_BATCH passes.
            let (mut before, mut queued) = (None, rx.len());
            for _ in 0..MAX_BATCH {
                if !one_more_pass(before, queued, waiting.len()) {
                    break;
                }
                tokio::task::yield_now().await;
                (before, queued) = (Some(queued), rx.len());
            }
        }
        loop {
            take_queued(&mut rx, &mut waiting, at_once);
            // Registered before the check below, so an answer arriving after it wakes us.
            let answer = answered.notified();
            tokio::pin!(answer);
            answer.as_mut().enable();
            // This loop holds one slot; any other taken slot is a request under way.
            let under_way = slots.available_permits() + 1 < at_once.0;
            if waiting.len() >= MAX_BATCH {
                break;
            }
            let hold = match cohort_wait(&waiting, queue.round_trip()) {
                CohortWait::Until(until) => Some(until),
                CohortWait::Over => break,
                // Nagle's rule: wait for an answer while a request is under way.
                CohortWait::NoCohort if under_way => None,
                CohortWait::NoCohort => break,
            };
            match hold {
                Some(until) => {
                    wait_for_cohorts(&bell, (&mut rx, at_once), &mut waiting, until).await
                }
                None => tokio::select! {
                    biased;
                    () = answer => break,
                    submission = rx.recv() => match submission {
                        Some(submission) => take(&mut waiting, submission),
                        None => break,
                    },
                },
            }
        }
        let request = take_request(&mut waiting);
        bell.sent(request.len());
        let (queue, answered) = (queue.clone(), answered.clone());
        let request = async move {
            send(&queue, call, request).await;
            drop(slot);
            answered.notify_waiters();
        };
        tokio::spawn(request.with_current_subscriber());
    }
}

/// Whether the batcher, woken by a first submission, lets one more scheduler pass go by
/// before it goes on: `queued` submissions are in the inbox now, `before` were at the pass
/// before (`None` before the first), and `taken` entries are out of it already. Not once
/// they make a full batch; not once a pass brought nothing after others had come (alone,
/// the first waits for company).
fn one_more_pass(before: Option<usize>, queued: usize, taken: usize) -> bool {
    let full = queued + taken >= MAX_BATCH;
    let quiet = before == Some(queued) && queued > 0;
    !full && !quiet
}

/// Takes what is queued in the inbox, up to what `at_once` requests can send; how many came.
fn take_queued(
    rx: &mut mpsc::UnboundedReceiver<Submission>,
    waiting: &mut VecDeque<Entry>,
    at_once: RequestsAtOnce,
) -> usize {
    let before = waiting.len();
    while waiting.len() < at_once.lookahead() {
        match rx.try_recv() {
            Ok(submission) => take(waiting, submission),
            Err(_) => break,
        }
    }
    waiting.len() - before
}

/// Waits for the cohorts of a partial batch until `until`, without reading the inbox: only a
/// submission that may end the wait rings the bell. Returns at once if something was handed
/// over since the inbox was last read (its caller looks again).
async fn wait_for_cohorts(
    bell: &BatcherBell,
    (rx, at_once): (&mut mpsc::UnboundedReceiver<Submission>, RequestsAtOnce),
    waiting: &mut VecDeque<Entry>,
    until: Instant,
) {
    bell.waiting_for_cohorts.store(true, Ordering::SeqCst);
    // Pairs with the submitters' fence: an entry submitted from here on rings if it may end
    // the wait, and one submitted before is in the inbox now.
    fence(Ordering::SeqCst);
    let rung = bell.ring.notified();
    tokio::pin!(rung);
    rung.as_mut().enable();
    if take_queued(rx, waiting, at_once) == 0 {
        tokio::select! {
            () = rung => {}
            () = sleep_until(until) => {}
        }
        #[cfg(test)]
        bell.wakes.fetch_add(1, Ordering::SeqCst);
    }
    bell.waiting_for_cohorts.store(false, Ordering::SeqCst);
}

/// Whether a partial batch waits for the rest of its entries' cohorts.
enum CohortWait {
    /// No cohort to wait for (or the round trip is not known yet): Nagle's rule decides.
    NoCohort,
    /// Until then, one round trip after its oldest entry came, whatever comes back meanwhile.
    Until(Instant),
    /// Its oldest entry has waited one round trip: it goes now.
    Over,
}

/// A partial batch waits for the rest of its entries' cohorts (deliveries received with
/// them, whose handlers are still running), even past an answer to a request under way, but
/// no entry waits longer than one round trip from when it came.
fn cohort_wait(waiting: &VecDeque<Entry>, round_trip: Duration) -> CohortWait {
    let expecting = waiting
        .iter()
        .any(|e| e.cohort.as_ref().is_some_and(|c| c.has_unsettled()));
    let oldest = waiting.iter().map(|e| e.submitted).min();
    match oldest {
        Some(oldest) if expecting && !round_trip.is_zero() => {
            let until = oldest + round_trip;
            if Instant::now() < until {
                CohortWait::Until(until)
            } else {
                CohortWait::Over
            }
        }
        _ => CohortWait::NoCohort,
    }
}

fn take(waiting: &mut VecDeque<Entry>, submission: Submission) {
    match submission {
        Submission::One(entry) => waiting.push_back(entry),
        Submission::Many(entries) => waiting.extend(entries),
    }
}

/// Up to 10 entries from the front, in order, never the same receipt handle twice: a second
/// entry for a handle already in the request waits (in its place) for the next one.
fn take_request(waiting: &mut VecDeque<Entry>) -> Vec<Entry> {
    let mut request = Vec::with_capacity(MAX_BATCH);
    let mut handles = HashSet::new();
    let mut later = VecDeque::new();
    while let Some(entry) = waiting.pop_front() {
        if request.len() == MAX_BATCH {
            later.push_back(entry);
            break;
        }
        if handles.insert(entry.receipt.clone()) {
            request.push(entry);
        } else {
            later.push_back(entry);
        }
    }
    later.append(waiting);
    *waiting = later;
    request
}

/// Sends one request and answers every caller with its own entry's result.
async fn send(queue: &Queue, call: Call, request: Vec<Entry>) {
    let entries: Vec<BatchEntry<'_>> = request
        .iter()
        .zip(ENTRY_IDS)
        .map(|(e, id)| BatchEntry {
            id,
            receipt: &e.receipt,
            visibility_timeout: e.visibility_timeout,
        })
        .collect();
    let answer = match call {
        Call::Delete => queue.delete_batch(&entries).await,
        Call::ChangeVisibility => queue.change_visibility_batch(&entries).await,
    };
    drop(entries);
    match answer {
        Ok(results) => {
            for (entry, result) in request.into_iter().zip(results) {
                if let Some(told) = &entry.told {
                    told.answered(&result);
                }
                let _ = entry.reply.send(result);
            }
        }
        Err(err) => {
            if err.is_retryable() {
                tracing::debug!(operation = call.name(), error = %err.chain(), entries = request.len(), "batch request failed");
            } else {
                tracing::warn!(operation = call.name(), error = %err.chain(), entries = request.len(), "batch request failed");
            }
            let err = Arc::new(err);
            for entry in request {
                let result = Err(Error::replicate(&err));
                if let Some(told) = &entry.told {
                    told.answered(&result);
                }
                let _ = entry.reply.send(result);
            }
        }
    }
}

#[cfg(test)]
mod tests;
