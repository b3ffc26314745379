//! The extension schedule (a pure function) and the keeper: one task per consumer that keeps
//! every held delivery hidden.
//!
//! SQS has no lease: a received message is hidden for its visibility timeout `T` and then
//! handed to the next receiver. While a delivery is held, the keeper calls
//! `ChangeMessageVisibility(T)` halfway through each timeout, leaving the other half for the
//! call (and its retries) to reach the queue. SQS refuses any visibility that would end more
//! than 12 hours after the receive, so the last extension is cut to end just before that.

pub(crate) mod schedule;
mod timers;

use crate::keeper::timers::{Kept, Next, Slab, Timers};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use crate::call_retries::{self, EXTENSION_MIN_WAIT};
use crate::error::{Error, ErrorKind, LostReason};
use crate::keeper_thread::{KeeperRuntime, Mailbox};
use crate::lease::{Lease, Limit};
use crate::limits::{call_margin, VisibilityTimeout};
use crate::readable::Secs;
use crate::stats::Counter;

use crate::keeper::schedule::{next_due, next_extension, Previous, COALESCE_WINDOW};

/// An extension done later than this (or a quarter of the timeout, if less) after it was
/// due is late: a starved runtime, or a slow SQS.
const LATE_EXTENSION: Duration = Duration::from_secs(1);

/// Counts a late extension and warns at counts 1, 2, 4, 8, ...: a starved runtime makes
/// thousands of them late at once.
fn warn_late(lease: &Lease, late: Duration, timeout: Duration) {
    let n = lease.context().count(Counter::LateExtensions);
    if n.is_power_of_two() {
        tracing::warn!(
            late_by = %Secs(late),
            visibility_timeout = %Secs(timeout),
            late_extensions = n,
            "a visibility extension was done late: something may be blocking the runtime's \
             threads (CPU-bound or blocking code in an async handler: move it to \
             tokio::task::spawn_blocking), or SQS answers slowly; at half a timeout late, \
             the message goes to another consumer"
        );
    }
}

/// Keeps the deliveries of one consumer hidden: a timer queue of held deliveries keyed by
/// their next extension, which sends each round's due extensions together (one request for
/// up to 10). A delivery registers when it is received ([`keep`](Keeper::keep)) and leaves
/// when it is settled, being settled, or dropped ([`let_go`](Keeper::let_go)); a delivery
/// whose ack or release has started is never extended. The keeper's task starts on first use
/// (on `runtime` if given, else on the caller's) and ends once every handle is gone.
///
/// Registering does not wake the keeper unless it must: commands wait in an inbox that the
/// keeper reads whenever it wakes, and a command rings it only when the keeper would
/// otherwise wake too late for it (a lease due before the keeper's next timer, or a keeper
/// with nothing to wake for), or when the inbox is full. On a thread of its own, every
/// wake-up costs a thread switch: a delivery acked before its first extension then costs the
/// keeper no wake-up at all.
#[derive(Clone)]
pub(crate) struct Keeper {
    /// Rings the keeper's task awake, starting it first if there is none (or its runtime is
    /// gone); the task runs where the keeper runtime says.
    bell: Arc<Mailbox<()>>,
    inbox: Arc<Mutex<Inbox>>,
    /// Times the keeper was rung.
    #[cfg(test)]
    rings: Arc<std::sync::atomic::AtomicUsize>,
}

enum Command {
    Keep(Arc<Lease>),
    LetGo(Arc<Lease>),
}

/// Commands waiting for the keeper, and whether a new one must wake it.
#[derive(Default)]
struct Inbox {
    commands: Vec<Command>,
    wake: Wake,
}

/// When the keeper next looks at its inbox by itself.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// Only when rung: it has no timer, or its task has not started (or is gone).
    #[default]
    WhenRung,
    /// At its first timer (or sooner, when an extension is answered).
    At(Instant),
    /// It has been rung and is about to.
    Rung,
}

/// Commands that may wait in the inbox: the next one wakes the keeper to take them, which
/// bounds the memory held by leases let go of at a high rate of acks.
const INBOX_LIMIT: usize = 1024;

impl Keeper {
    pub(crate) fn new(keeper_runtime: KeeperRuntime) -> Self {
        Self {
            bell: Arc::new(Mailbox::new(keeper_runtime)),
            inbox: Arc::default(),
            #[cfg(test)]
            rings: Arc::default(),
        }
    }

    /// Times the keeper was rung.
    #[cfg(test)]
    pub(crate) fn rings(&self) -> usize {
        self.rings.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts keeping `lease` hidden; `false` for a visibility timeout of 0: there is
    /// nothing to keep.
    pub(crate) fn keep(&self, lease: Arc<Lease>) -> bool {
        if lease.visibility_timeout().is_zero() {
            return false;
        }
        let (_, due) = first_timer(&lease);
        self.post(Command::Keep(lease), Some(due));
        true
    }

    /// Stops keeping `lease`, the first time only (whoever settles or drops it may ask).
    pub(crate) fn let_go(&self, lease: &Arc<Lease>) {
        if !lease.visibility_timeout().is_zero() && lease.first_let_go() {
            self.post(Command::LetGo(lease.clone()), None);
        }
    }

    /// Queues `command` (whose lease is first due at `due`, for a `Keep`), ringing the keeper
    /// if it would not take it in time by itself.
    fn post(&self, command: Command, due: Option<Instant>) {
        let ring = {
            let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
            inbox.commands.push(command);
            let full = inbox.commands.len() >= INBOX_LIMIT;
            let ring = match inbox.wake {
                Wake::Rung => false,
                Wake::WhenRung => due.is_some() || full,
                Wake::At(at) => due.is_some_and(|due| due < at) || full,
            };
            if ring {
                inbox.wake = Wake::Rung;
            }
            ring
        };
        if ring {
            self.ring();
        }
    }

    /// Wakes the keeper's task, starting it (again, if its runtime is gone).
    fn ring(&self) {
        #[cfg(test)]
        self.rings.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // The timers count from the task's start, before the first lease's extension is due:
        // the task may first run later (a held-up runtime), and a timer due before its epoch
        // would lose its lateness.
        let inbox = &self.inbox;
        if self
            .bell
            .send((), |bell| keeper_task(bell, inbox.clone(), Instant::now()))
            .is_err()
        {
            inbox.lock().unwrap_or_else(PoisonError::into_inner).wake = Wake::WhenRung;
            // No runtime to run the keeper on: the deliveries are not extended, and lapse
            // (the consumer's receive loop cannot run without one either).
            tracing::warn!("no runtime to keep the deliveries hidden on");
        }
    }
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper").finish_non_exhaustive()
    }
}

/// A lease's first timer: its first extension, or its deadline when none is possible.
fn first_timer(lease: &Lease) -> (Next, Instant) {
    let (limit, _) = lease.extension_limit();
    match next_extension(lease.deadline(), lease.visibility_timeout(), limit) {
        Some(ext) => (Next::Extend, ext.at),
        None => (Next::Expire(LostReason::HardDeadline), lease.deadline()),
    }
}

/// Says that `lease`'s extension to `visibility_timeout` is its last, cut short by `by`.
fn last_extension(lease: &Lease, by: Limit, visibility_timeout: VisibilityTimeout, now: Instant) {
    let held_for = Secs(now.saturating_duration_since(lease.received_at()));
    let visibility = visibility_timeout.secs();
    match by {
        Limit::TwelveHours => {
            lease.context().count(Counter::Capped);
            tracing::warn!(
                parent: lease.span(),
                %held_for,
                visibility,
                "last visibility extension: SQS keeps a message hidden for at most 12 hours \
                 after the receive; it goes to another consumer when this one lapses"
            );
        }
        // Expected: the holder releases what it still holds before its own end.
        Limit::Holder => tracing::debug!(
            parent: lease.span(),
            %held_for,
            visibility,
            "last visibility extension: it ends at the function's deadline"
        ),
    }
}

/// What a due timer asks of the round it fires in.
enum Step {
    /// End the round here: the timers after this one wait for their own time.
    EndRound,
    /// Nothing to send for this one (scheduled again, or forgotten).
    Skip,
    /// Send this extension with the round.
    Send(DueExtension),
}

/// One extension in a round.
struct DueExtension {
    /// The lease's slot.
    id: u64,
    /// Whose: the slot may hold another lease by the time the answer comes.
    lease: Arc<Lease>,
    /// How far it extends.
    visibility_timeout: VisibilityTimeout,
    /// When it was due (for a retry, when it was sent).
    due: Instant,
}

/// One extension's answer.
struct ExtensionAnswer {
    extension: DueExtension,
    /// When it was sent: the new deadline counts from it.
    sent_at: Instant,
    result: Result<(), Error>,
}

/// The keeper's task.
async fn keeper_task(bell: mpsc::UnboundedReceiver<()>, inbox: Arc<Mutex<Inbox>>, epoch: Instant) {
    let mut bell = KeeperBell {
        rx: bell,
        inbox: inbox.clone(),
    };
    let mut keeper = KeeperTask::new(epoch);
    loop {
        keeper.take(&inbox);
        let next = keeper.timers.first();
        // While it keeps leases, it also looks at its inbox every `LET_GO_WITHIN`, without
        // being rung: the leases it was told to let go of (settled, dropped) go then, and with
        // them their `delivery` spans, which end (and are exported) when the last handle on
        // them goes.
        let wake = next.map(|at| at.min(Instant::now() + LET_GO_WITHIN));
        tokio::select! {
            biased;
            rung = bell.rung() => if !rung {
                return; // every delivery (and the consumer) is gone
            },
            Some(answers) = keeper.rounds.next(), if !keeper.rounds.is_empty() => {
                keeper.answered(answers);
            }
            () = sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {
                // Let the tasks woken at the same instant (a handler about to ack) go first:
                // an extension of a delivery being settled is never sent.
                tokio::task::yield_now().await;
                keeper.take(&inbox);
                let now = Instant::now();
                if next.is_some_and(|at| at <= now) {
                    keeper.round(now);
                }
            }
        }
    }
}

/// How long a lease the keeper was told to let go of may stay with it: the keeper looks at its
/// inbox at least this often while it keeps leases (a let-go does not wake it: acks come by
/// the thousand).
pub(crate) const LET_GO_WITHIN: Duration = Duration::from_secs(1);

/// The keeper task's end of its bell. Whatever ends the task (its handles gone, or its
/// runtime), the bell is closed first and the inbox then set to ring: the next command
/// rings, and that ring starts a new task.
struct KeeperBell {
    rx: mpsc::UnboundedReceiver<()>,
    inbox: Arc<Mutex<Inbox>>,
}

impl KeeperBell {
    /// Waits to be rung (the rings so far count as one); `false` once every handle is gone.
    async fn rung(&mut self) -> bool {
        if self.rx.recv().await.is_none() {
            return false;
        }
        while self.rx.try_recv().is_ok() {}
        true
    }
}

impl Drop for KeeperBell {
    fn drop(&mut self) {
        self.rx.close();
        self.inbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .wake = Wake::WhenRung;
    }
}

struct KeeperTask {
    kept: Slab,
    timers: Timers,
    rounds: FuturesUnordered<BoxFuture<'static, Vec<ExtensionAnswer>>>,
    /// An empty command list with capacity, swapped with the inbox's when taking it.
    spare: Vec<Command>,
}

impl KeeperTask {
    fn new(epoch: Instant) -> Self {
        Self {
            kept: Slab::default(),
            timers: Timers::new(epoch),
            rounds: FuturesUnordered::new(),
            spare: Vec::new(),
        }
    }
}

impl KeeperTask {
    /// Carries out the commands in `inbox`, then notes in it when the keeper wakes next by
    /// itself (under the inbox's lock: a command queued after this sees it, and rings if it
    /// must).
    fn take(&mut self, inbox: &Mutex<Inbox>) {
        loop {
            let mut commands = {
                let mut inbox = inbox.lock().unwrap_or_else(PoisonError::into_inner);
                if inbox.commands.is_empty() {
                    inbox.wake = match self.timers.first() {
                        Some(at) => Wake::At(at),
                        None => Wake::WhenRung,
                    };
                    return;
                }
                // The emptied spare goes back, so the inbox keeps its capacity.
                std::mem::replace(&mut inbox.commands, std::mem::take(&mut self.spare))
            };
            for command in commands.drain(..) {
                match command {
                    Command::Keep(lease) => self.keep(lease),
                    Command::LetGo(lease) => self.let_go(&lease),
                }
            }
            self.spare = commands;
        }
    }

    fn keep(&mut self, lease: Arc<Lease>) {
        let (next, at) = first_timer(&lease);
        let kept = Kept {
            lease: lease.clone(),
            timer: 0,
            next,
            attempt: 0,
            capped: false,
        };
        let id = self.kept.insert(kept);
        lease.set_keeper_slot(id);
        let timer = self.timers.insert(at, id, next);
        if let Some(kept) = self.kept.get_mut(&id) {
            kept.timer = timer;
        }
    }

    /// Stops keeping `lease`, if it is still the one in its slot.
    fn let_go(&mut self, lease: &Arc<Lease>) {
        let id = lease.keeper_slot();
        if self
            .kept
            .get(&id)
            .is_some_and(|kept| Arc::ptr_eq(&kept.lease, lease))
        {
            self.remove(id);
        }
    }

    /// Stops keeping the lease in slot `id`.
    fn remove(&mut self, id: u64) {
        if let Some(kept) = self.kept.remove(&id) {
            self.timers.remove(kept.timer);
        }
    }

    fn schedule(&mut self, id: u64, next: Next, at: Instant) {
        if let Some(kept) = self.kept.get_mut(&id) {
            self.timers.remove(kept.timer);
            kept.timer = self.timers.insert(at, id, next);
            kept.next = next;
        }
    }

    /// Everything due at `now`, and the extensions due a little later that can go with it.
    fn round(&mut self, now: Instant) {
        let mut extensions = Vec::new();
        for key in self.timers.due(now + COALESCE_WINDOW) {
            match self.step(key, now, extensions.is_empty()) {
                Step::EndRound => break,
                Step::Skip => {}
                Step::Send(extension) => extensions.push(extension),
            }
        }
        if let Some(first) = extensions.first() {
            let ctx = first.lease.context().clone();
            self.rounds.push(Box::pin(extend_all(ctx, extensions, now)));
        }
    }

    /// What the timer `key`, due by the round at `now`, asks of the round (`first`: the round
    /// sends nothing yet). Whatever it does not send, it schedules or lets go of.
    fn step(&mut self, key: u64, now: Instant, first: bool) -> Step {
        let (at, id) = (self.timers.at(key), Timers::slot(key));
        let Some(kept) = self.kept.get(&id).filter(|kept| kept.timer == key) else {
            self.timers.remove(key);
            return Step::Skip;
        };
        let (lease, next) = (kept.lease.clone(), kept.next);
        let t = lease.visibility_timeout().duration();
        if at > now {
            match next {
                // Early ones only join a round that sends something on time (the timers come
                // in time order): one whose due deliveries were all acked meanwhile sends
                // nothing, and those due a little later wait for their own time, when their
                // handlers may have acked them too.
                Next::Extend if first => return Step::EndRound,
                // Only extensions come early, and only within an eighth of their timeout.
                Next::Extend if at <= now + (t / 8).min(COALESCE_WINDOW) => {}
                _ => return Step::Skip,
            }
        }
        if lease.is_settling() {
            if now >= lease.deadline() {
                // Unanswered at its deadline: the delete may reach SQS after the message went
                // to another consumer.
                self.lapse(id, &lease, LostReason::LapsedBeforeAnswer);
                return Step::Skip;
            }
            // An ack or release is queued or under way: no extension now; look again
            // shortly, in case it fails and waits to try again, and at the deadline.
            // Never at or before now: a timer already due would fire again at once.
            let again = lease
                .deadline()
                .clamp(now + Duration::from_millis(1), now + EXTENSION_MIN_WAIT);
            self.schedule(id, Next::Retry, again);
            return Step::Skip;
        }
        if !lease.is_extendable() {
            // Settled or lost: its let-go is on its way.
            self.remove(id);
            return Step::Skip;
        }
        match next {
            Next::Expire(reason) => self.at_deadline(id, &lease, next, reason, now),
            Next::AwaitingAnswer => {
                self.at_deadline(id, &lease, next, LostReason::ExtensionFailed, now)
            }
            Next::Extend | Next::Retry => {
                if let Some(later) = self.put_off_for_delete(&lease, now) {
                    self.schedule(id, Next::Retry, later);
                    return Step::Skip;
                }
                let due = if next == Next::Extend {
                    note_lateness(&lease, now.saturating_duration_since(at));
                    at
                } else {
                    now
                };
                return self.plan_extension(id, lease, due, now);
            }
        }
        Step::Skip
    }

    /// When a lease whose ack's delete is under way should be looked at again instead of
    /// extended now: the last moment an extension can still reach SQS before the deadline.
    /// The delete is usually answered long before, and then no extension is needed; one
    /// still unanswered then is extended, so the lease holds until its answer. `None`: extend
    /// now as usual.
    fn put_off_for_delete(&self, lease: &Lease, now: Instant) -> Option<Instant> {
        if !lease.is_deleting() {
            return None;
        }
        let t = lease.visibility_timeout().duration();
        // A little before the last send, which the timer's rounding up must not pass.
        let last = lease
            .deadline()
            .checked_sub(call_margin(t) + Duration::from_millis(10))?;
        (last > now).then_some(last)
    }

    /// A lease whose deadline timer fired (no extension possible, or its answer missing):
    /// lost for `reason` if the deadline has passed; otherwise (an answer moved it on)
    /// looked at again then.
    fn at_deadline(
        &mut self,
        id: u64,
        lease: &Lease,
        next: Next,
        reason: LostReason,
        now: Instant,
    ) {
        if lease.deadline() > now {
            self.schedule(id, next, lease.deadline());
            return;
        }
        self.lapse(id, lease, reason);
    }

    /// A lease whose deadline passed unextended: lost, an ack or release under way
    /// included, and no longer kept.
    fn lapse(&mut self, id: u64, lease: &Lease, reason: LostReason) {
        if lease.lapsed(reason) {
            tracing::warn!(parent: lease.span(), %reason, "delivery lost");
        }
        self.remove(id);
    }

    /// The extension of a lease due at `due`, to send now; or, when none can be sent any
    /// more, its loss or its last timer.
    fn plan_extension(&mut self, id: u64, lease: Arc<Lease>, due: Instant, now: Instant) -> Step {
        let t = lease.visibility_timeout().duration();
        if now + call_margin(t) > lease.deadline() {
            // Too late to send (the runtime was held up): the call could reach SQS after the
            // deadline, which it answers with success and nothing done. The message may be
            // another consumer's already.
            if lease.lapsed(LostReason::ExtensionFailed) {
                tracing::warn!(
                    parent: lease.span(),
                    reason = %LostReason::ExtensionFailed,
                    late_by = %Secs(now.saturating_duration_since(due)),
                    "delivery lost: its extension was due when the visibility timeout was all \
                     but over"
                );
            }
            self.remove(id);
            return Step::Skip;
        }
        let (limit, _) = lease.extension_limit();
        let room = VisibilityTimeout::at_most_max(limit.saturating_duration_since(now).as_secs());
        let visibility_timeout = lease.visibility_timeout().min(room);
        if now + visibility_timeout.duration() <= lease.deadline() {
            // Near the 12-hour limit nothing can be gained any more.
            self.schedule(id, Next::Expire(LostReason::HardDeadline), lease.deadline());
            return Step::Skip;
        }
        self.schedule(id, Next::AwaitingAnswer, lease.deadline());
        Step::Send(DueExtension {
            id,
            lease,
            visibility_timeout,
            due,
        })
    }

    fn answered(&mut self, answers: Vec<ExtensionAnswer>) {
        let now = Instant::now();
        for answer in answers {
            let id = answer.extension.id;
            let current = self
                .kept
                .get(&id)
                .is_some_and(|kept| Arc::ptr_eq(&kept.lease, &answer.extension.lease));
            if !current {
                continue; // forgotten meanwhile
            }
            let lease = &answer.extension.lease;
            if !lease.is_extendable() && !lease.is_settling() {
                self.remove(id);
                continue;
            }
            match &answer.result {
                Ok(()) => self.extended(&answer, now),
                Err(err) => self.extension_failed(id, &answer.extension.lease, err, now),
            }
        }
    }

    /// An extension went through: the new deadline, and the next extension's timer.
    fn extended(&mut self, answer: &ExtensionAnswer, now: Instant) {
        let DueExtension {
            id,
            ref lease,
            visibility_timeout,
            due,
        } = answer.extension;
        let deadline = answer.sent_at + visibility_timeout.duration();
        lease.set_deadline(deadline);
        lease.context().count(Counter::Extended);
        let visibility = visibility_timeout.secs();
        tracing::debug!(parent: lease.span(), visibility, "visibility extended");
        let Some(kept) = self.kept.get_mut(&id) else {
            return;
        };
        kept.attempt = 0;
        let (limit, by) = lease.extension_limit();
        if visibility_timeout < lease.visibility_timeout() && !kept.capped {
            kept.capped = true;
            last_extension(lease, by, visibility_timeout, now);
        }
        match next_extension(deadline, lease.visibility_timeout(), limit) {
            Some(ext) => {
                let at = next_due(
                    &ext,
                    lease.visibility_timeout(),
                    Previous {
                        due,
                        sent: answer.sent_at,
                        answered: now,
                    },
                );
                self.schedule(id, Next::Extend, at);
            }
            None => self.schedule(id, Next::Expire(LostReason::HardDeadline), deadline),
        }
    }

    /// An extension failed: the delivery is lost, stops being extended, or tries again.
    fn extension_failed(&mut self, id: u64, lease: &Lease, err: &Error, now: Instant) {
        lease.context().count(Counter::ExtensionFailures);
        if let ErrorKind::Lost(reason) = err.kind() {
            if lease.extension_lost(reason) {
                tracing::warn!(parent: lease.span(), %reason, error = %err.chain(), "delivery lost");
                self.remove(id);
            } else if lease.is_settling_or_waiting() {
                // Gone, perhaps because the ack's delete (or an earlier try of it) deleted
                // it: proof of nothing either way. Its deadline still binds it.
                let reason = LostReason::LapsedBeforeAnswer;
                self.schedule(id, Next::Expire(reason), lease.deadline());
            } else {
                self.remove(id);
            }
        } else if err.refuses_visibility() {
            // SQS refuses the visibility itself, the one value we vary: past its 12-hour limit
            // by its own clock. Asking again cannot help; the delivery is ours until the
            // current deadline.
            tracing::warn!(
                parent: lease.span(),
                error = %err.chain(),
                "SQS refused the visibility extension (past its 12-hour limit?); no more \
                 extensions: the message goes to another consumer when this timeout lapses"
            );
            self.schedule(id, Next::Expire(LostReason::HardDeadline), lease.deadline());
        } else {
            self.retry_extension(id, lease, err, now);
        }
    }

    /// A transient failure: try again while a try can still reach SQS before the deadline.
    fn retry_extension(&mut self, id: u64, lease: &Lease, err: &Error, now: Instant) {
        let Some(kept) = self.kept.get_mut(&id) else {
            return;
        };
        let deadline = lease.deadline();
        let t = lease.visibility_timeout().duration();
        let last_send = deadline.checked_sub(call_margin(t));
        let remaining = deadline.saturating_duration_since(now);
        // A quarter of what is left, so several tries fit before the deadline, but never less
        // than EXTENSION_MIN_WAIT: close to the deadline a quarter shrinks towards nothing, and
        // the tries would bunch up into a burst.
        let wait = call_retries::EXTENSION
            .wait_after(kept.attempt)
            .min(remaining / 4)
            .max(EXTENSION_MIN_WAIT);
        kept.attempt = kept.attempt.saturating_add(1);
        if last_send.is_some_and(|last| now + wait <= last) {
            tracing::warn!(
                parent: lease.span(),
                error = %err.chain(),
                retry_in = %Secs(wait),
                remaining = %Secs(remaining),
                "visibility extension failed; retrying"
            );
            self.schedule(id, Next::Retry, now + wait);
        } else {
            tracing::warn!(
                parent: lease.span(),
                error = %err.chain(),
                remaining = %Secs(remaining),
                "visibility extension failed, and another try could reach SQS after the \
                 deadline; the delivery is lost then"
            );
            self.schedule(id, Next::Expire(LostReason::ExtensionFailed), deadline);
        }
    }
}

/// Records how late an extension is done, and warns when it is late enough to matter.
fn note_lateness(lease: &Lease, late: Duration) {
    let t = lease.visibility_timeout().duration();
    lease.context().extension_delay(late);
    if late > (t / 4).min(LATE_EXTENSION) {
        warn_late(lease, late, t);
    }
}

/// Sends one round's extensions together; each one's answer.
async fn extend_all(
    ctx: Arc<crate::lease::context::Context>,
    extensions: Vec<DueExtension>,
    sent_at: Instant,
) -> Vec<ExtensionAnswer> {
    let entries: Vec<(&str, VisibilityTimeout)> = extensions
        .iter()
        .map(|e| (e.lease.receipt(), e.visibility_timeout))
        .collect();
    let results = ctx.calls().extend_all(&entries).await;
    drop(entries);
    extensions
        .into_iter()
        .zip(results)
        .map(|(extension, result)| ExtensionAnswer {
            extension,
            sent_at,
            result,
        })
        .collect()
}
