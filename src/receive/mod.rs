//! The receive loop: long polls `ReceiveMessage` while `max_in_flight` slots are free, takes
//! one slot per message a receive may return, runs more receives at once while the queue is
//! busy, and backs off on errors and on empty short polls. What it receives goes to its
//! caller, with the slots the messages take.
//!
//! Beside it: a receive request that outlives whoever awaits it (`detached.rs`).

pub(crate) mod detached;
mod slots;

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::sync::{watch, OnceCell, Semaphore};
use tokio::time::{sleep, Instant};
use tokio_util::sync::CancellationToken;

use crate::call_retries::{self, Backoff};
use crate::error::Error;
use crate::flow::in_flight_limit::InFlightLimit;
use crate::flow::rate_limit::{RateLimits, Tokens};
use crate::flow::slot::Slot;
use crate::lease::adaptive_visibility::AdaptiveVisibility;
use crate::lease::Holder;
use crate::limits::VisibilityTimeout;
use crate::queue::backlog::Backlog;
use crate::queue::Queue;
use crate::readable::{Count, Secs};
use crate::receive::detached::ReceiveRequest;
use crate::settle_calls::ReleasesAtOnce;
use crate::stats::{Failing, ReceiveHealth};

/// While the queue is busy, how long a receive waits for a whole receive batch of free slots before
/// it asks for fewer messages.
const GATHER_SLOTS: Duration = Duration::from_millis(20);

/// The receive loop's settings, validated by the builder.
#[derive(Debug, Clone)]
pub(crate) struct ReceiveSettings {
    /// Visibility timeout to ask for on each receive; `None`: the queue's own.
    pub(crate) visibility_timeout: Option<VisibilityTimeout>,
    pub(crate) wait_time: Duration,
    pub(crate) receive_batch_size: u32,
    pub(crate) max_in_flight: usize,
    pub(crate) max_concurrent_receives: usize,
    /// `MessageAttributeNames`: `All`, names, or `prefix.*`.
    pub(crate) message_attribute_names: Vec<String>,
    /// `MessageSystemAttributeNames`, the ones the consumer needs included.
    pub(crate) system_attribute_names: Vec<MessageSystemAttributeName>,
    /// A budget shared with other consumers, if any.
    pub(crate) shared_in_flight_limit: Option<InFlightLimit>,
    /// Messages per second: this consumer's own, a budget shared with others, both or none.
    pub(crate) rate_limits: RateLimits,
    /// With `adaptive_visibility`: the estimate each receive's visibility timeout comes from.
    pub(crate) adaptive: Option<Arc<AdaptiveVisibility>>,
    /// Receives failing this long with no answer between end the loop with the last error.
    pub(crate) give_up_after: Duration,
}

/// One receive's worth of messages, with the slots they take.
pub(crate) struct ReceivedBatch {
    pub(crate) messages: Vec<Message>,
    pub(crate) slots: Vec<Slot>,
    /// Just before the request was sent: SQS's 12-hour limit counts from the request.
    pub(crate) received_at: Instant,
    /// When the answer arrived: SQS starts each message's visibility timeout when it hands
    /// the message out, which in a long poll can be long after the request.
    pub(crate) returned_at: Instant,
    /// The visibility timeout the receive applied.
    pub(crate) visibility_timeout: VisibilityTimeout,
    /// Who holds the deliveries, if it ends before the 12-hour limit (a Lambda invocation).
    pub(crate) holder: Option<Holder>,
}

/// What one receive came back with.
enum ReceiveOutcome {
    /// Messages, and how many releases at once had started when the receive was sent.
    Received(ReceivedBatch, u64),
    /// An empty answer.
    Empty,
    /// A transient failure (already waited out).
    Nothing,
}

/// Whether a consumer receives: see `Consumer::pause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Receiving {
    Active,
    Paused,
}

/// How a refill of the receives under way ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refill {
    /// As many as wanted are under way, or a pause or a stop came, or the handler is not
    /// ready for more.
    Done,
    /// Fewer are under way than wanted, for want of a whole receive batch of free slots: one more
    /// starts once a receive batch of slots is free, without waiting for an answer first.
    ShortOfSlots,
    /// The slots are gone (the consumer is being dropped), and no receive is under way.
    SlotsGone,
}

/// Which receive the slots are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Demand {
    /// The only one: it waits for its slots.
    First,
    /// One more beside those under way: only on slots free now.
    More,
}

/// How busy the queue looked at the last receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// The last receive came back with fewer messages than it asked for.
    Quiet,
    /// The last receive came back full.
    Busy,
}

/// The receive loop's own state.
struct LoopState {
    /// How many receives it keeps under way.
    target: usize,
    /// Whether the last receive came back full.
    load: Load,
    /// A fatal error: no receive starts; the loop ends with it once the others are in.
    fatal: Option<Error>,
    /// "receiving paused" was logged, and "resumed" not yet.
    paused_logged: bool,
    /// When the last receive started: a stop waits for it until its wait time is out.
    latest_start: Option<Instant>,
    /// What a stop waits for was logged.
    stop_logged: bool,
}

/// The back-off states shared by the receives under way.
struct Backoffs {
    failures: Backoff,
    idle: Backoff,
}

/// Receives from one queue, within `max_in_flight` slots.
#[derive(Debug)]
pub(crate) struct Receiver {
    queue: Queue,
    settings: ReceiveSettings,
    permits: Arc<Semaphore>,
    /// Settle calls under way whose deliveries gave their slots back (see `Slot::free_early`):
    /// at most twice `max_in_flight`, so that near the limit a round trip sets (a slot's
    /// receive, then its delete, each one round trip) they do not hold receives back, while
    /// deletes left unanswered still do.
    settles: Arc<Semaphore>,
    /// The visibility timeout in force: the builder's, or the queue's read once.
    visibility_timeout: OnceCell<VisibilityTimeout>,
    /// `true` while receiving is paused.
    paused: watch::Sender<bool>,
    /// Releases at once started by this consumer's deliveries.
    releases_at_once: ReleasesAtOnce,
    /// Where each answer and failure is recorded, for `Stats`.
    health: ReceiveHealth,
}

impl Receiver {
    pub(crate) fn new(
        queue: Queue,
        settings: ReceiveSettings,
        releases_at_once: ReleasesAtOnce,
        health: ReceiveHealth,
    ) -> Self {
        Self {
            queue,
            permits: Arc::new(Semaphore::new(settings.max_in_flight)),
            settles: Arc::new(Semaphore::new(settings.max_in_flight.saturating_mul(2))),
            settings,
            visibility_timeout: OnceCell::new(),
            paused: watch::Sender::new(false),
            releases_at_once,
            health,
        }
    }

    pub(crate) fn settings(&self) -> &ReceiveSettings {
        &self.settings
    }

    /// The queue's URL, resolved once (one `GetQueueUrl`, for a queue given by name or ARN).
    pub(crate) async fn queue_url(&self) -> Result<String, Error> {
        self.queue.resolve().await
    }

    /// The queue's approximate counts: one `GetQueueAttributes` (after the URL is resolved).
    pub(crate) async fn backlog(&self) -> Result<Backlog, Error> {
        self.queue.resolve().await?;
        self.queue.backlog().await
    }

    /// Slots taken right now: deliveries held, and receives under way.
    pub(crate) fn slots_taken(&self) -> usize {
        self.settings.max_in_flight - self.permits.available_permits()
    }

    /// Pauses receiving (`Receiving::Paused`): no receive starts until it resumes; the ones
    /// under way are awaited, and what they bring is handed on as usual.
    pub(crate) fn set(&self, receiving: Receiving) {
        let paused = receiving == Receiving::Paused;
        self.paused
            .send_if_modified(|p| std::mem::replace(p, paused) != paused);
    }

    pub(crate) fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Receives until `stop` is cancelled or a fatal error, handing each non-empty answer to
    /// `on_received`.
    ///
    /// Several receives may be under way at once: one to start with, one more each time a
    /// receive comes back full while slots are still free (up to
    /// `max_concurrent_receives`), one fewer each time one comes back short, and back to one
    /// when a receive comes back empty, or when releases at once started while it was under
    /// way. Each receive holds the slots for the messages it asks for.
    ///
    /// No receive is abandoned while the server may still answer it (a long poll whose
    /// client went away still takes the next message, hidden for a whole visibility
    /// timeout): on `stop`, on a pause and on a fatal error, no receive starts, and the ones
    /// under way are awaited (each ends within its wait time, or its request timeout after
    /// that), what they bring handed to `on_received`; their back-off waits are cut short.
    ///
    /// A receive with none under way waits for `ready` (the handler can take more) before its
    /// slots, as a pause or a stop cuts short; one more beside those under way starts only if
    /// `ready` completes at once, so their answers never wait for the handler.
    pub(crate) async fn run<R: Future<Output = ()>>(
        &self,
        stop: &CancellationToken,
        ready: impl Fn() -> R,
        mut on_received: impl FnMut(ReceivedBatch),
    ) -> Result<(), Error> {
        let Some(in_force) = self.start(stop).await? else {
            return Ok(()); // stopped before the first receive
        };
        let backoffs = Mutex::new(Backoffs {
            failures: call_retries::RECEIVE.backoff(),
            idle: call_retries::EMPTY_SHORT_POLL.backoff(),
        });
        let mut state = LoopState {
            target: 1,
            load: Load::Quiet,
            fatal: None,
            paused_logged: false,
            latest_start: None,
            stop_logged: false,
        };
        let mut receives = FuturesUnordered::new();
        let mut paused = self.paused.subscribe();
        loop {
            let halted = stop.is_cancelled() || state.fatal.is_some();
            let pausing = *paused.borrow_and_update();
            let mut refill = Refill::Done;
            if !halted && !pausing {
                self.on_resume(&mut state);
                let start_one =
                    |(slots, tokens)| self.receive_once(slots, tokens, in_force, &backoffs, stop);
                refill = self
                    .refill(
                        &mut receives,
                        &mut state,
                        (&mut paused, stop),
                        &ready,
                        start_one,
                    )
                    .await;
                if refill == Refill::SlotsGone {
                    return Ok(()); // the consumer is being dropped
                }
            }
            if receives.is_empty() {
                if let Some(end) = self.when_idle(&mut state, &mut paused, stop).await {
                    return end;
                }
                continue;
            }
            if stop.is_cancelled() {
                self.log_stop_wait(&mut state, receives.len());
            }
            // While receiving goes on, a stop or a pause ends this wait (to start no more
            // receives), and so do slots freed for one more; once halted, only an answer
            // does.
            let short_of_slots = refill == Refill::ShortOfSlots;
            let outcome = tokio::select! {
                outcome = receives.next() => outcome,
                _ = paused.wait_for(|p| *p), if !halted && !pausing => continue,
                () = stop.cancelled(), if !halted => continue,
                () = self.batch_freed(), if short_of_slots && !halted && !pausing => continue,
            };
            match outcome {
                Some(Ok(answer)) => self.take(answer, &mut state, &mut on_received),
                // The first fatal error ends the loop, once the other receives are in.
                Some(Err(err)) => _ = state.fatal.get_or_insert(err),
                None => {}
            }
        }
    }

    /// The visibility timeout the receives ask for (`None`: stopped before it was known),
    /// the queue's URL resolved (given by name or ARN), and the start logged.
    async fn start(&self, stop: &CancellationToken) -> Result<Option<VisibilityTimeout>, Error> {
        let ready = async {
            self.retrying("resolving the queue's URL", || self.queue.resolve())
                .await?;
            self.visibility_timeout().await
        };
        let in_force = tokio::select! {
            ready = ready => ready,
            () = stop.cancelled() => return Ok(None),
        };
        let in_force = match in_force {
            Ok(in_force) => in_force,
            Err(err) => {
                tracing::error!(queue = %self.queue.name(), error = %err.chain(), "cannot start receiving; stopping");
                return Err(err);
            }
        };
        tracing::info!(
            queue = %self.queue.name(),
            visibility_timeout = in_force.secs(),
            max_in_flight = self.settings.max_in_flight,
            fifo = self.queue.is_fifo(),
            "consumer started"
        );
        Ok(Some(in_force))
    }

    /// Starts receives (`start_one` with each one's slots, once `ready`) until
    /// `state.target` are under way, or a pause or a stop comes.
    async fn refill<F: Future, R: Future<Output = ()>>(
        &self,
        receives: &mut FuturesUnordered<F>,
        state: &mut LoopState,
        (paused, stop): (&mut watch::Receiver<bool>, &CancellationToken),
        ready: impl Fn() -> R,
        mut start_one: impl FnMut((Vec<Slot>, Tokens)) -> F,
    ) -> Refill {
        while receives.len() < state.target {
            let first = if receives.is_empty() {
                Demand::First
            } else {
                Demand::More
            };
            let acquire = async {
                match first {
                    // Nothing under way: wait for the handler.
                    Demand::First => ready().await,
                    // One more beside those under way only if the handler is ready now: the
                    // answers of those under way must not wait for it.
                    Demand::More => ready().now_or_never()?,
                }
                self.acquire(first, state.load).await
            };
            let grant = tokio::select! {
                grant = acquire => grant,
                _ = paused.wait_for(|p| *p) => break,
                () = stop.cancelled() => break,
            };
            match grant {
                Some(grant) => {
                    receives.push(start_one(grant));
                    state.latest_start = Some(Instant::now());
                }
                None if receives.is_empty() => return Refill::SlotsGone,
                None if self.permits.available_permits() < self.batch_slots() => {
                    return Refill::ShortOfSlots
                }
                None => break,
            }
        }
        Refill::Done
    }

    /// Once a whole receive batch of slots is free, in both budgets; none is kept (the receive that
    /// takes them starts from the loop). Only this loop takes this consumer's slots, so once
    /// they are free they stay free: after a refill short of slots this does not complete at
    /// once, and the loop does not spin.
    async fn batch_freed(&self) {
        let n = u32::try_from(self.batch_slots()).unwrap_or(1);
        let own = self.permits.acquire_many(n).await;
        let freed = match (own, self.shared()) {
            (Ok(own), Some(shared)) => {
                drop(own);
                shared.acquire_many(n).await.is_ok()
            }
            (own, None) => own.is_ok(),
            (Err(_), Some(_)) => false,
        };
        if !freed {
            std::future::pending::<()>().await; // the consumer is being dropped
        }
    }

    /// With no receive under way: the loop's end (its fatal error, or a stop), or a wait
    /// while paused.
    async fn when_idle(
        &self,
        state: &mut LoopState,
        paused: &mut watch::Receiver<bool>,
        stop: &CancellationToken,
    ) -> Option<Result<(), Error>> {
        if let Some(err) = state.fatal.take() {
            return Some(Err(err));
        }
        if stop.is_cancelled() {
            return Some(Ok(()));
        }
        if *paused.borrow_and_update() {
            self.on_pause(state);
            tokio::select! {
                changed = paused.wait_for(|p| !*p) => if changed.is_err() { return Some(Ok(())) },
                () = stop.cancelled() => {}
            }
        }
        None
    }

    /// What one receive came back with: its receive batch goes on; the number of receives follows
    /// how busy the queue is.
    fn take(
        &self,
        answer: ReceiveOutcome,
        state: &mut LoopState,
        on_received: &mut impl FnMut(ReceivedBatch),
    ) {
        match answer {
            ReceiveOutcome::Received(received, at_send) => {
                state.load = if self.is_full(&received) {
                    Load::Busy
                } else {
                    Load::Quiet
                };
                if self.releases_at_once.count() != at_send {
                    // Messages released at once meanwhile are visible again already: several
                    // receives under way would split them into short answers, mixed with
                    // messages not yet seen (and their acks and releases into more
                    // requests), so one receive takes them.
                    state.target = 1;
                } else {
                    self.follow_load(state);
                }
                on_received(received);
            }
            ReceiveOutcome::Empty => {
                state.target = 1;
                state.load = Load::Quiet;
            }
            ReceiveOutcome::Nothing => {}
        }
    }

    /// Full: as many messages as asked for (a whole receive batch, without a shared budget or a rate
    /// limit).
    fn is_full(&self, received: &ReceivedBatch) -> bool {
        let settings = &self.settings;
        if settings.shared_in_flight_limit.is_some() || !settings.rate_limits.is_empty() {
            received.messages.len() >= received.slots.len()
        } else {
            received.messages.len() == settings.receive_batch_size as usize
        }
    }

    /// One receive more after a full answer, one fewer after a short one. A receive beside
    /// those under way starts only on a whole receive batch of free slots, so a target the slots
    /// cannot meet yet costs nothing.
    fn follow_load(&self, state: &mut LoopState) {
        match state.load {
            Load::Busy if state.target < self.most_receives() => state.target += 1,
            // Fewer visible messages than the receives under way ask for: one receive fewer,
            // or they split what there is into ever shorter answers.
            Load::Quiet => state.target = state.target.saturating_sub(1).max(1),
            Load::Busy => {}
        }
    }

    /// The most receives under way at once.
    fn most_receives(&self) -> usize {
        let settings = &self.settings;
        settings
            .max_concurrent_receives
            .min(
                settings
                    .max_in_flight
                    .div_ceil(settings.receive_batch_size as usize),
            )
            .max(1)
    }

    /// Once per pause: says so, and forgets the load, so that a resume starts again from one
    /// receive, as at the start (the queue may have changed meanwhile).
    fn on_pause(&self, state: &mut LoopState) {
        if !state.paused_logged {
            state.paused_logged = true;
            (state.target, state.load) = (1, Load::Quiet);
            tracing::info!(queue = %self.queue.name(), "receiving paused");
        }
    }

    /// Once per stop: how many receives it waits for, and how long at most (their wait
    /// time; a silent server's answer may take the request timeout on top).
    fn log_stop_wait(&self, state: &mut LoopState, under_way: usize) {
        if std::mem::replace(&mut state.stop_logged, true) {
            return;
        }
        let end = state
            .latest_start
            .map_or(Instant::now(), |start| start + self.settings.wait_time);
        let left = end.saturating_duration_since(Instant::now());
        tracing::info!(
            queue = %self.queue.name(),
            "waiting for {} under way, up to {} (a long poll is not abandoned: SQS would \
             still hand it messages)",
            Count(under_way, "receive", "receives"),
            Secs(left)
        );
    }

    /// Once per resume: says so.
    fn on_resume(&self, state: &mut LoopState) {
        if std::mem::take(&mut state.paused_logged) {
            tracing::info!(queue = %self.queue.name(), "receiving resumed");
        }
    }

    /// One receive with the slots it holds; on an empty answer or a transient failure, it
    /// also waits out the back-off before it completes (cut short by `stop` or a pause: no
    /// request is under way then). An error only when it is fatal.
    async fn receive_once(
        &self,
        slots: Vec<Slot>,
        tokens: Tokens,
        in_force: VisibilityTimeout,
        backoffs: &Mutex<Backoffs>,
        stop: &CancellationToken,
    ) -> Result<ReceiveOutcome, Error> {
        let settings = &self.settings;
        // `in_force` is the builder's or the queue's own; with adaptive visibility, where the
        // estimate starts. `asked`: what the request says, `None` for the queue's own.
        let (asked, visibility_timeout) = match &settings.adaptive {
            Some(adaptive) => {
                let estimate = adaptive.visibility_timeout(in_force);
                (Some(estimate), estimate)
            }
            None => (settings.visibility_timeout, in_force),
        };
        let received_at = Instant::now();
        let releases_at_send = self.releases_at_once.count();
        let request = ReceiveRequest {
            max_messages: u32::try_from(slots.len()).unwrap_or(settings.receive_batch_size),
            wait: settings.wait_time,
            visibility_timeout: asked,
            message_attribute_names: settings.message_attribute_names.clone(),
            system_attribute_names: settings.system_attribute_names.clone(),
        };
        // Not abandoned if this future is: what it brings then is released at once.
        let result = detached::receive(&self.queue, request).await;
        let backoffs = || backoffs.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(messages) if messages.is_empty() => {
                drop(tokens);
                self.answered();
                // Short polling (or a server that answers early): do not spin.
                let early =
                    settings.wait_time.is_zero() || received_at.elapsed() < settings.wait_time / 2;
                let wait = {
                    let mut b = backoffs();
                    b.failures.reset();
                    early.then(|| b.idle.next_delay())
                };
                if let Some(wait) = wait {
                    self.back_off(wait, stop).await;
                }
                Ok(ReceiveOutcome::Empty)
            }
            Ok(messages) => {
                tokens.spend(messages.len());
                self.answered();
                {
                    let mut b = backoffs();
                    b.failures.reset();
                    b.idle.reset();
                }
                tracing::debug!(count = messages.len(), "received");
                Ok(ReceiveOutcome::Received(
                    ReceivedBatch {
                        messages,
                        slots,
                        received_at,
                        returned_at: Instant::now(),
                        visibility_timeout,
                        holder: None,
                    },
                    releases_at_send,
                ))
            }
            Err(err) if err.is_fatal() => {
                tracing::error!(queue = %self.queue.name(), error = %err.chain(), "receive failed; stopping");
                Err(err)
            }
            Err(err) => {
                drop((slots, tokens));
                let wait = backoffs().failures.next_delay();
                self.failed("receive", err, wait)?;
                self.back_off(wait, stop).await;
                Ok(ReceiveOutcome::Nothing)
            }
        }
    }

    /// Waits `wait`, or less if receiving stops or pauses meanwhile.
    async fn back_off(&self, wait: Duration, stop: &CancellationToken) {
        let mut paused = self.paused.subscribe();
        tokio::select! {
            () = sleep(wait) => {}
            () = stop.cancelled() => {}
            _ = paused.wait_for(|p| *p) => {}
        }
    }

    /// The builder's visibility timeout, or the queue's own, read once (retrying transient
    /// failures with back-off; each read bounded by the request timeout); 0 is refused.
    async fn visibility_timeout(&self) -> Result<VisibilityTimeout, Error> {
        if let Some(t) = self.settings.visibility_timeout {
            return Ok(t);
        }
        let read = self.visibility_timeout.get_or_try_init(|| async {
            let what = "reading the queue's visibility timeout";
            nonzero_visibility(
                self.retrying(what, || self.queue.visibility_timeout())
                    .await?,
            )
        });
        read.await.copied()
    }

    /// The queue's own visibility timeout, read once for the consumer's life (its URL
    /// resolved first, for a queue given by name or ARN), in one try per call until it is
    /// known; 0 is refused.
    #[cfg(feature = "lambda")]
    pub(crate) async fn queue_visibility_timeout(&self) -> Result<VisibilityTimeout, Error> {
        let read = self.visibility_timeout.get_or_try_init(|| async {
            self.queue.resolve().await?;
            nonzero_visibility(self.queue.visibility_timeout().await?)
        });
        read.await.copied()
    }

    /// `call`'s answer, retrying transient failures with back-off (each call is bounded by
    /// the request timeout); a fatal error at once.
    async fn retrying<T, F>(&self, what: &str, call: impl Fn() -> F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        let mut backoff = call_retries::RECEIVE.backoff();
        loop {
            match call().await {
                // Not an answered receive: the run of failures goes on until one is.
                Ok(answer) => return Ok(answer),
                Err(err) if !err.is_retryable() => return Err(err),
                Err(err) => {
                    let wait = backoff.next_delay();
                    self.failed(what, err, wait)?;
                    sleep(wait).await;
                }
            }
        }
    }

    /// SQS answered a receive: the health record says so, and a run of failures it ends is
    /// logged.
    fn answered(&self) {
        if let Some(run) = self.health.answered() {
            tracing::info!(
                queue = %self.queue.name(),
                failures = run.consecutive,
                failing_for = %Secs(run.lasted),
                "receives answered again"
            );
        }
    }

    /// A transient failure of `what` (a receive, or a call before the first): recorded, and
    /// logged at `warn` on one line at the 1st, 2nd, 4th, 8th, ... failure in a row (at
    /// `debug` otherwise), so an outage does not flood the log. `Err(err)` once failures have
    /// gone on for `give_up_after`: the loop ends with it.
    fn failed(&self, what: &str, err: Error, retry_in: Duration) -> Result<(), Error> {
        let run = self.health.failed();
        let give_up_after = self.settings.give_up_after;
        if run.lasted >= give_up_after {
            tracing::error!(
                queue = %self.queue.name(),
                error = %err.chain(),
                failures = run.consecutive,
                failing_for = %Secs(run.lasted),
                "{what} failed for longer than give_up_after ({}) with no success; stopping",
                Secs(give_up_after)
            );
            return Err(err);
        }
        log_retry(what, &self.queue, &err, run, retry_in, give_up_after);
        Ok(())
    }
}

/// One line for a retried failure (see `Receiver::failed`), at `$level`.
macro_rules! retry_line {
    ($level:ident, $what:expr, $queue:expr, $err:expr, $run:expr, $retry_in:expr, $give_up_in:expr) => {
        tracing::$level!(
            queue = %$queue.name(),
            error = %$err.chain(),
            failures = $run.consecutive,
            retry_in = %Secs($retry_in),
            give_up_in = %$give_up_in,
            "{} failed; retrying",
            $what
        )
    };
}

/// A retried failure, at `warn` for the 1st, 2nd, 4th, 8th, ... in a row, else at `debug`.
fn log_retry(
    what: &str,
    queue: &Queue,
    err: &Error,
    run: Failing,
    retry_in: Duration,
    give_up_after: Duration,
) {
    let give_up_in = Secs(give_up_after.saturating_sub(run.lasted));
    if run.consecutive.is_power_of_two() {
        retry_line!(warn, what, queue, err, run, retry_in, give_up_in);
    } else {
        retry_line!(debug, what, queue, err, run, retry_in, give_up_in);
    }
}

/// The queue's own visibility timeout `t`, unless it is 0: a consumer that keeps nothing
/// hidden cannot work.
fn nonzero_visibility(t: VisibilityTimeout) -> Result<VisibilityTimeout, Error> {
    match t {
        t if t.is_zero() => Err(Error::InvalidConfig {
            field: "visibility_timeout",
            got: "none, and the queue's own VisibilityTimeout is 0".into(),
            allowed: "1..=43200 s: set the consumer's visibility_timeout, \
                      or the queue's VisibilityTimeout",
        }),
        t => Ok(t),
    }
}
