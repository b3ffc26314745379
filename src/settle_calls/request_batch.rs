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
use crate::limits::MAX_BATCH;
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
    /// Entries handed over and not yet sent: ten of them fill a batch.
    unsent: AtomicUsize,
    ring: Notify,
    /// Times the task woke while it waited for cohorts.
    #[cfg(test)]
    wakes: AtomicUsize,
}

impl BatcherBell {
    /// After `added` entries were handed over: rings the task if it is waiting for cohorts
    /// and these may end the wait (they complete a batch, or the cohort of the last one has
    /// no delivery left to settle, or it has none).
    fn handed_over(&self, added: usize, cohort: Option<&Cohort>) {
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
    /// Whole seconds, for `ChangeVisibility`.
    visibility: u32,
    /// The receive its delivery came with, if its others may follow.
    cohort: Option<Arc<Cohort>>,
    /// When it was handed over: it waits for its cohort at most one round trip from here.
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
        visibility: u32,
        cohort: Option<Arc<Cohort>>,
    ) -> Result<(), Error> {
        self.submit_told(receipt, visibility, cohort, None).await
    }

    /// [`submit`](Batcher::submit), `told` told the answer where it arrives.
    pub(crate) async fn submit_told(
        &self,
        receipt: &str,
        visibility: u32,
        cohort: Option<Arc<Cohort>>,
        told: Told,
    ) -> Result<(), Error> {
        let (mut entry, answer) = self.entry(receipt, visibility, told);
        entry.cohort = cohort.clone();
        match self.send(Submission::One(entry)) {
            Ok(()) => {
                self.bell.handed_over(1, cohort.as_deref());
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
    pub(crate) async fn submit_many(&self, entries: &[(&str, u32)]) -> Vec<Result<(), Error>> {
        self.submit_many_told(entries, Vec::new()).await
    }

    /// [`submit_many`](Batcher::submit_many), each entry's `told` (in order; missing ones:
    /// nobody) told its answer where it arrives.
    pub(crate) async fn submit_many_told(
        &self,
        entries: &[(&str, u32)],
        told: Vec<Told>,
    ) -> Vec<Result<(), Error>> {
        let told = told.into_iter().chain(std::iter::repeat_with(|| None));
        let (entries, answers): (Vec<Entry>, Vec<_>) = entries
            .iter()
            .zip(told)
            .map(|((receipt, visibility), told)| self.entry(receipt, *visibility, told))
            .unzip();
        let count = entries.len();
        let sent = self.send(Submission::Many(entries)).is_ok();
        if sent {
            self.bell.handed_over(count, None);
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
        visibility: u32,
        told: Told,
    ) -> (Entry, oneshot::Receiver<Result<(), Error>>) {
        let (reply, answer) = oneshot::channel();
        let entry = Entry {
            receipt: receipt.to_owned(),
            visibility,
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
        let batch = take_batch(&mut waiting);
        bell.sent(batch.len());
        let (queue, answered) = (queue.clone(), answered.clone());
        let request = async move {
            send(&queue, call, batch).await;
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
    // Pairs with the submitters' fence: an entry handed over from here on rings if it may end
    // the wait, and one handed over before is in the inbox now.
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
/// entry for a handle already in the batch waits (in its place) for the next one.
fn take_batch(waiting: &mut VecDeque<Entry>) -> Vec<Entry> {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut handles = HashSet::new();
    let mut later = VecDeque::new();
    while let Some(entry) = waiting.pop_front() {
        if batch.len() == MAX_BATCH {
            later.push_back(entry);
            break;
        }
        if handles.insert(entry.receipt.clone()) {
            batch.push(entry);
        } else {
            later.push_back(entry);
        }
    }
    later.append(waiting);
    *waiting = later;
    batch
}

/// Sends one batch and answers every caller with its own entry's result.
async fn send(queue: &Queue, call: Call, batch: Vec<Entry>) {
    let entries: Vec<BatchEntry<'_>> = batch
        .iter()
        .zip(ENTRY_IDS)
        .map(|(e, id)| BatchEntry {
            id,
            receipt: &e.receipt,
            visibility: e.visibility,
        })
        .collect();
    let answer = match call {
        Call::Delete => queue.delete_batch(&entries).await,
        Call::ChangeVisibility => queue.change_visibility_batch(&entries).await,
    };
    drop(entries);
    match answer {
        Ok(results) => {
            for (entry, result) in batch.into_iter().zip(results) {
                if let Some(told) = &entry.told {
                    told.answered(&result);
                }
                let _ = entry.reply.send(result);
            }
        }
        Err(err) => {
            if err.is_retryable() {
                tracing::debug!(operation = call.name(), error = %err.chain(), entries = batch.len(), "batch request failed");
            } else {
                tracing::warn!(operation = call.name(), error = %err.chain(), entries = batch.len(), "batch request failed");
            }
            let err = Arc::new(err);
            for entry in batch {
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
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::memory::counts::Action;
    use crate::MemoryQueue;

    fn queue() -> MemoryQueue {
        MemoryQueue::builder()
            .visibility_timeout(Duration::from_secs(60))
            .build()
            .unwrap()
    }

    /// A batcher of `call`s on `q`.
    fn batcher(q: &MemoryQueue, call: Call) -> Arc<Batcher> {
        Arc::new(Batcher::new(
            Queue::new(q.clone()),
            call,
            TaskTracker::new(),
            KeeperRuntime::Caller,
            RequestsAtOnce::default(),
        ))
    }

    /// Sends `n` messages and receives them all; returns their receipt handles.
    async fn held(q: &MemoryQueue, n: usize) -> Vec<String> {
        for i in 0..n {
            q.send(format!("m{i}")).unwrap();
        }
        let mut handles = Vec::new();
        while handles.len() < n {
            for m in q.receive(10, Duration::ZERO).await.unwrap() {
                handles.push(m.receipt_handle().unwrap().to_owned());
            }
        }
        handles
    }

    /// Submits every handle at once, each from its own task; returns each result.
    async fn submit_all(
        batcher: Arc<Batcher>,
        handles: Vec<String>,
        visibility: u32,
    ) -> Vec<Result<(), Error>> {
        let tasks: Vec<_> = handles
            .into_iter()
            .map(|h| {
                let b = batcher.clone();
                tokio::spawn(async move { b.submit(&h, visibility, None).await })
            })
            .collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap());
        }
        results
    }

    fn entry(receipt: &str) -> Entry {
        Entry {
            receipt: receipt.to_owned(),
            visibility: 0,
            cohort: None,
            submitted: Instant::now(),
            reply: oneshot::channel().0,
            told: None,
            _pending: TaskTracker::new().token(),
        }
    }

    #[test]
    fn a_batch_takes_ten_in_order_and_never_one_handle_twice() {
        let mut waiting: VecDeque<Entry> =
            ["a", "b", "a", "c", "d", "e", "f", "g", "h", "i", "j", "k"]
                .into_iter()
                .map(entry)
                .collect();
        let first: Vec<String> = take_batch(&mut waiting)
            .into_iter()
            .map(|e| e.receipt)
            .collect();
        assert_eq!(first, ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]);
        let rest: Vec<&str> = waiting.iter().map(|e| e.receipt.as_str()).collect();
        assert_eq!(rest, ["a", "k"], "the second \"a\" waits, in its place");
    }

    /// The batcher reads no further ahead than its request slots can send at once: what is
    /// past that stays in the inbox, where submissions keep their order.
    #[test]
    fn the_batcher_takes_off_the_inbox_what_its_request_slots_can_send() {
        for (at_once, slots) in [(RequestsAtOnce::default(), 40), (RequestsAtOnce(20), 200)] {
            let (tx, mut rx) = mpsc::unbounded_channel();
            for i in 0..slots + 5 {
                assert!(tx.send(Submission::One(entry(&format!("r{i}")))).is_ok());
            }
            let mut waiting = VecDeque::new();
            assert_eq!(take_queued(&mut rx, &mut waiting, at_once), slots);
            assert_eq!((waiting.len(), rx.len()), (slots, 5));
            let more = take_queued(&mut rx, &mut waiting, at_once);
            assert_eq!(more, 0, "full: nothing more");
        }
    }

    /// A request for every 10 slots, so every slot's delete can be under way at once; at
    /// least 4, at most 64.
    #[test]
    fn the_requests_under_way_at_once_follow_the_slots() {
        let at_once = |slots| RequestsAtOnce::for_slots(slots).0;
        assert_eq!(at_once(1), 4);
        assert_eq!(at_once(40), 4);
        assert_eq!(at_once(41), 5);
        assert_eq!(at_once(200), 20);
        assert_eq!(at_once(640), 64);
        assert_eq!(at_once(120_000), 64);
        assert_eq!(RequestsAtOnce::default(), RequestsAtOnce::for_slots(40));
    }

    /// With no runtime to run the batching task on, every entry fails, and its error names
    /// the batch request it would have gone in.
    #[test]
    fn without_a_runtime_each_entry_fails_naming_its_batch_request() {
        let q = queue();
        for (call, request) in [
            (Call::Delete, "SQS DeleteMessageBatch failed"),
            (
                Call::ChangeVisibility,
                "SQS ChangeMessageVisibilityBatch failed",
            ),
        ] {
            let b = batcher(&q, call);
            let one = futures::executor::block_on(b.submit("r", 0, None));
            let many = futures::executor::block_on(b.submit_many(&[("r", 0), ("s", 0)]));
            for result in std::iter::once(one).chain(many) {
                let err = result.expect_err("no runtime, no batch request");
                assert!(err.is_retryable(), "{err}");
                assert!(err.to_string().starts_with(request), "{err}");
            }
        }
    }

    #[test]
    fn the_batcher_lets_passes_go_by_while_each_brings_more_up_to_a_full_batch() {
        // Each pass brought one more: on, until they make a full batch with those taken.
        assert!(one_more_pass(None, 0, 1));
        assert!(one_more_pass(Some(0), 1, 1));
        assert!(one_more_pass(Some(7), 8, 1));
        assert!(!one_more_pass(Some(8), 9, 1));
        assert!(!one_more_pass(None, 9, 1));
        // Those taken count: two taken and seven queued are not a full batch, eight are.
        assert!(one_more_pass(Some(6), 7, 2));
        assert!(!one_more_pass(Some(7), 8, 2));
        assert!(!one_more_pass(None, 0, 10));
    }

    #[test]
    fn a_pass_that_brings_nothing_ends_the_wait_once_others_came() {
        assert!(!one_more_pass(Some(1), 1, 1));
        assert!(!one_more_pass(Some(3), 3, 1));
        // Alone so far, the first waits for company.
        assert!(one_more_pass(Some(0), 0, 1));
        // A pass that brings more is not quiet, nor is one that finds fewer queued.
        assert!(one_more_pass(Some(1), 2, 1));
        assert!(one_more_pass(Some(2), 1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_entry_goes_out_at_once() {
        let q = queue();
        let h = held(&q, 1).await;
        let batcher = Batcher::new(
            Queue::new(q.clone()),
            Call::Delete,
            TaskTracker::new(),
            KeeperRuntime::Caller,
            RequestsAtOnce::default(),
        );
        let start = Instant::now();
        batcher.submit(&h[0], 0, None).await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 1);
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn entries_arriving_while_a_request_is_under_way_wait_for_it_together() {
        let q = queue_with_50_ms_requests();
        let h = held(&q, 6).await;
        let base = q.requests().requests(Action::DeleteMessageBatch);
        let batcher = batcher(&q, Call::Delete);
        let start = Instant::now();
        // One entry first (it goes at once), then five more, 5 ms apart, while it is out.
        let mut tasks = Vec::new();
        for handle in h {
            let b = batcher.clone();
            tasks.push(tokio::spawn(async move {
                b.submit(&handle, 0, None).await.unwrap();
                start.elapsed()
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut done = Vec::new();
        for t in tasks {
            done.push(t.await.unwrap());
        }
        // The first answered after one round trip; the rest left together when it came
        // back, so none waited more than one round trip for a slot.
        assert_eq!(done[0], Duration::from_millis(50));
        assert!(
            done[1..].iter().all(|d| *d == Duration::from_millis(100)),
            "{done:?}"
        );
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch) - base, 2);
        assert!(q.is_empty());
    }

    /// Submits `handle`'s delete as one of `cohort`, which it leaves first (as an ack does);
    /// returns when it was answered.
    fn ack_in(
        batcher: &Arc<Batcher>,
        cohort: &Arc<Cohort>,
        handle: String,
        start: Instant,
    ) -> tokio::task::JoinHandle<Duration> {
        let (b, c) = (batcher.clone(), cohort.clone());
        tokio::spawn(async move {
            c.leave();
            b.submit(&handle, 0, Some(c)).await.unwrap();
            start.elapsed()
        })
    }

    /// Acks `handles` one a millisecond, each in the next of `cohorts` by turns; when each
    /// was answered, from the first.
    async fn acks_a_millisecond_apart(
        batcher: &Arc<Batcher>,
        handles: Vec<String>,
        cohorts: &[Arc<Cohort>],
    ) -> Vec<Duration> {
        let start = Instant::now();
        let mut tasks = Vec::new();
        for (handle, cohort) in handles.into_iter().zip(cohorts.iter().cycle()) {
            tasks.push(ack_in(batcher, cohort, handle, start));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut answered = Vec::new();
        for t in tasks {
            answered.push(t.await.unwrap());
        }
        answered
    }

    /// Messages stay held a minute; every request takes 50 ms.
    fn queue_with_50_ms_requests() -> MemoryQueue {
        MemoryQueue::builder()
            .visibility_timeout(Duration::from_secs(60))
            .latency(Duration::from_millis(50))
            .build()
            .unwrap()
    }

    /// A delete batcher that has learned the round trip from one request (deleting `handle`),
    /// and the delete requests made so far.
    async fn taught_the_round_trip(q: &MemoryQueue, handle: String) -> (Arc<Batcher>, u64) {
        let batcher = batcher(q, Call::Delete);
        batcher.submit(&handle, 0, None).await.unwrap();
        (batcher, q.requests().requests(Action::DeleteMessageBatch))
    }

    #[tokio::test(start_paused = true)]
    async fn the_acks_of_one_receive_wait_for_each_other_with_no_request_under_way() {
        let q = queue_with_50_ms_requests();
        let mut h = held(&q, 11).await;
        let (batcher, base) = taught_the_round_trip(&q, h.pop().unwrap()).await;
        let cohort = Arc::new(Cohort::default());
        (0..10).for_each(|_| cohort.join());
        let start = Instant::now();
        // Three acks now, seven 2 ms later: one request for the ten.
        let mut tasks: Vec<_> = h
            .drain(..3)
            .map(|handle| ack_in(&batcher, &cohort, handle, start))
            .collect();
        tokio::time::sleep(Duration::from_millis(2)).await;
        tasks.extend(
            h.drain(..)
                .map(|handle| ack_in(&batcher, &cohort, handle, start)),
        );
        for t in tasks {
            assert_eq!(t.await.unwrap(), Duration::from_millis(52));
        }
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch) - base, 1);
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn acks_that_cannot_end_the_wait_for_their_cohort_do_not_wake_the_batcher() {
        let q = queue_with_50_ms_requests();
        let mut h = held(&q, 6).await;
        let (batcher, base) = taught_the_round_trip(&q, h.pop().unwrap()).await;
        // A receive of five (a partial batch): one ack a millisecond, the first four leaving
        // others of the cohort still to come.
        five_acks_rung_by_the_fifth(&batcher, h).await;
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch) - base, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn entries_already_sent_do_not_count_towards_a_full_batch_that_rings() {
        let q = queue_with_50_ms_requests();
        let mut h = held(&q, 16).await;
        let (batcher, base) = taught_the_round_trip(&q, h.pop().unwrap()).await;
        // Ten acks of no cohort: a full batch, sent.
        let sent = h.split_off(5);
        for result in submit_all(batcher.clone(), sent, 0).await {
            result.unwrap();
        }
        // Then a receive of five, as above: only the fifth ends the wait.
        five_acks_rung_by_the_fifth(&batcher, h).await;
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch) - base, 2);
    }

    /// Acks the five `handles` of one receive a millisecond apart; asserts that each was
    /// answered when the fifth rang the batcher, which woke once while it waited.
    async fn five_acks_rung_by_the_fifth(batcher: &Arc<Batcher>, handles: Vec<String>) {
        let cohort = Arc::new(Cohort::default());
        (0..5).for_each(|_| cohort.join());
        for done in acks_a_millisecond_apart(batcher, handles, &[cohort]).await {
            assert_eq!(done, Duration::from_millis(54), "rung by the fifth");
        }
        let wakes = batcher.bell.wakes.load(Ordering::SeqCst);
        assert_eq!(wakes, 1, "the batcher woke {wakes} times while it waited");
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_acks_wait_for_their_cohort_on_the_round_trip_of_the_queues_other_calls() {
        let q = queue_with_50_ms_requests();
        let h = held(&q, 5).await;
        // The consumer's first call: the read of the queue's visibility timeout.
        let queue = Queue::new(q.clone());
        queue.visibility_timeout().await.unwrap();
        let batcher = Arc::new(Batcher::new(
            queue,
            Call::Delete,
            TaskTracker::new(),
            KeeperRuntime::Caller,
            RequestsAtOnce::default(),
        ));
        // The batcher's first request: a receive of five, acked one a millisecond.
        let cohort = Arc::new(Cohort::default());
        (0..5).for_each(|_| cohort.join());
        for done in acks_a_millisecond_apart(&batcher, h, &[cohort]).await {
            assert_eq!(done, Duration::from_millis(54), "sent with the fifth");
        }
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 1);
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_filled_while_its_cohorts_are_awaited_goes_at_once() {
        let q = queue_with_50_ms_requests();
        let mut h = held(&q, 11).await;
        let (batcher, base) = taught_the_round_trip(&q, h.pop().unwrap()).await;
        // Five acks each of two receives of ten, one a millisecond.
        let cohorts = [Arc::new(Cohort::default()), Arc::new(Cohort::default())];
        for c in &cohorts {
            (0..10).for_each(|_| c.join());
        }
        for done in acks_a_millisecond_apart(&batcher, h, &cohorts).await {
            assert_eq!(done, Duration::from_millis(59), "sent with the tenth");
        }
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch) - base, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_does_not_send_a_batch_whose_receives_others_are_still_coming() {
        let q = queue_with_50_ms_requests();
        let mut h = held(&q, 12).await;
        let (batcher, base) = taught_the_round_trip(&q, h.pop().unwrap()).await;
        let start = Instant::now();
        // A request under way from 0 to 50 ms.
        let under_way = {
            let (b, handle) = (batcher.clone(), h.pop().unwrap());
            tokio::spawn(async move { b.submit(&handle, 0, None).await })
        };
        let cohort = Arc::new(Cohort::default());
        (0..10).for_each(|_| cohort.join());
        // Three acks at 10 ms, seven at 55 ms: after the answer, within one round trip of
        // the first three.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let mut tasks: Vec<_> = h
            .drain(..3)
            .map(|handle| ack_in(&batcher, &cohort, handle, start))
            .collect();
        tokio::time::sleep(Duration::from_millis(45)).await;
        tasks.extend(
            h.drain(..)
                .map(|handle| ack_in(&batcher, &cohort, handle, start)),
        );
        under_way.await.unwrap().unwrap();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Duration::from_millis(105));
        }
        assert_eq!(
            q.requests().requests(Action::DeleteMessageBatch) - base,
            2,
            "the one under way, then the ten together"
        );
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_ack_waits_for_its_cohort_at_most_one_round_trip() {
        let q = queue_with_50_ms_requests();
        let mut h = held(&q, 2).await;
        let batcher = batcher(&q, Call::Delete);
        // Before any request the round trip is unknown: nothing waits.
        let cohort = Arc::new(Cohort::default());
        (0..3).for_each(|_| cohort.join());
        let start = Instant::now();
        let first = ack_in(&batcher, &cohort, h.pop().unwrap(), start);
        assert_eq!(first.await.unwrap(), Duration::from_millis(50));
        // Now known: an ack whose cohort never follows leaves one round trip later.
        let start = Instant::now();
        let second = ack_in(&batcher, &cohort, h.pop().unwrap(), start);
        assert_eq!(second.await.unwrap(), Duration::from_millis(100));
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn eleven_entries_take_two_requests() {
        let q = queue();
        let h = held(&q, 11).await;
        let batcher = batcher(&q, Call::Delete);
        let results = submit_all(batcher, h, 0).await;
        assert!(results.iter().all(Result::is_ok));
        let r = q.requests();
        assert_eq!(
            (r.requests(Action::DeleteMessageBatch), r.deletes()),
            (2, 11)
        );
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_handle_twice_goes_in_two_requests() {
        let q = queue();
        let h = held(&q, 1).await;
        let batcher = batcher(&q, Call::ChangeVisibility);
        let results = submit_all(batcher, vec![h[0].clone(), h[0].clone()], 30).await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(
            q.requests().requests(Action::ChangeMessageVisibilityBatch),
            2
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_entry_goes_back_to_its_own_caller() {
        let q = queue();
        let h = held(&q, 3).await;
        // The second entry carries no valid receipt handle; the others are fine.
        let batcher = batcher(&q, Call::Delete);
        let bad = "not-a-handle".to_owned();
        let results = submit_all(batcher, vec![h[0].clone(), bad, h[2].clone()], 0).await;
        assert!(results[0].is_ok() && results[2].is_ok());
        let err = results[1].as_ref().unwrap_err();
        assert!(err.is_lost(), "{err}");
        assert_eq!(
            q.requests().requests(Action::DeleteMessageBatch),
            1,
            "one request for all three"
        );
        assert_eq!(q.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_go_back_to_their_callers_untried_again() {
        let q = queue();
        let h = held(&q, 3).await;
        let batcher = batcher(&q, Call::Delete);
        // Two entries fail transiently: their callers hear it, the batcher does not retry.
        q.fail_next(Action::DeleteMessage, "InternalError", 2);
        let results = submit_all(batcher.clone(), h.clone(), 0).await;
        let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        assert_eq!(failed.len(), 2);
        assert!(failed.iter().all(|e| e.is_retryable()), "{failed:?}");
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 1);
        assert_eq!(q.len(), 2);
        // A whole request refused: every caller gets the error, once.
        q.fail_next(Action::DeleteMessageBatch, "AccessDenied", 1);
        let results = submit_all(batcher.clone(), h.clone(), 0).await;
        for r in &results {
            let err = r.as_ref().unwrap_err();
            assert!(
                err.is_fatal() && err.code() == Some("AccessDenied"),
                "{err}"
            );
        }
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 2);
        // Callers that try again get through.
        let results = submit_all(batcher, h, 0).await;
        assert!(results.iter().all(Result::is_ok));
        assert!(q.is_empty());
    }

    #[test]
    fn a_batcher_outlives_the_runtime_that_started_it() {
        let q = queue();
        let batcher = batcher(&q, Call::Delete);
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap()
        };
        for _ in 0..2 {
            // Each runtime is gone before the next starts: the second one's submit finds the
            // first batching task gone and starts its own.
            runtime().block_on(async {
                let h = held(&q, 1).await;
                batcher.submit(&h[0], 0, None).await.unwrap();
            });
        }
        assert!(q.is_empty());
        assert_eq!(q.requests().deletes(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn entries_submitted_together_share_requests() {
        let q = queue();
        let h = held(&q, 30).await;
        let batcher = batcher(&q, Call::ChangeVisibility);
        let results = submit_all(batcher, h, 30).await;
        assert!(results.iter().all(Result::is_ok));
        let r = q.requests();
        assert_eq!(r.visibility_changes(), 30);
        assert_eq!(r.requests(Action::ChangeMessageVisibilityBatch), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn entries_submitted_together_go_in_one_request() {
        let q = MemoryQueue::builder()
            .visibility_timeout(Duration::from_secs(60))
            .latency(Duration::from_millis(5))
            .build()
            .unwrap();
        let h = held(&q, 10).await;
        let batcher = batcher(&q, Call::Delete);
        let entries: Vec<(&str, u32)> = h.iter().map(|r| (r.as_str(), 0)).collect();
        let results = batcher.submit_many(&entries).await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 1);
        assert!(q.is_empty());
    }
}
