//! A delivery's lease: its receipt handle, its current visibility deadline, what its retry
//! policy needs to know, and the one state that its guard, the keeper, its handler and its
//! watchers (`lost()`, FIFO sequencing) agree on.
//!
//! Beside it: what every delivery of one consumer shares (`context.rs`), the visibility
//! timeout each receive asks for when it adapts (`adaptive_visibility.rs`), and its hold on
//! its key in an idempotency store (`claim.rs`).
//!
//! ```text
//!   Held <--> InHandler --dropped unsettled--> Abandoned --the handler's outcome decides:
//!    |            |                              |         acked (Settling, then Acked), or
//!    |            |                              |         released (Ended)
//!    |            | ack/release starts           | extension: gone/lapsed
//!    +------------+---------> Settling           v
//!    |                        |   ^          AbandonedLost(reason) --the outcome--> Ended
//!    |                        |   | a try failed: SettleWaiting until the next try
//!    | extension: gone/lapsed | the settle call: gone
//!    v                        v
//!   Lost(reason) <------------+                 Settling --delete answered in time--> Acked
//!                  (and Settling, SettleWaiting --deadline passed unextended--> Lost)
//!
//!   Drop: Held -> Ended { lost: None } (the retry policy applies at once); InHandler ->
//!         Abandoned; Settling -> Ended { lost: None }; Lost(r) -> Ended { lost: Some(r) };
//!         Acked stays Acked.
//! ```
//!
//! Who moves it (every move goes through a method of [`Lease`]):
//!
//! | move | method | called by |
//! |---|---|---|
//! | Held -> InHandler -> Held (or what the handler left) | `enter_handler`, `leave_handler` | the handler runner, `handler/handling.rs` |
//! | -> Settling | `begin_ack`, `begin_release` | every ack (a delete: extended while it is under way) and release (not extended), through `delivery/settle.rs` |
//! | Abandoned -> Settling | `begin_ack` | the handler's `OnSuccess` outcome, through `delivery/settle.rs` |
//! | Settling <-> SettleWaiting | `waiting_to_retry`, `retrying` | a settle call between its tries, `lease/context.rs` |
//! | -> Lost, -> AbandonedLost | `extension_lost` | the keeper, on an extension's answer "gone" while held, `keeper/mod.rs` |
//! | -> Lost, -> AbandonedLost | `lapsed` | the keeper, at a deadline passed unextended (settling too); a delete answered after the deadline, `deleted` |
//! | -> Lost | `mark_lost` | a settle call answered "gone" |
//! | Settling -> Acked, or -> Lost | `finish_ack`, `finish_release` | a settle call's result, through `delivery/settle.rs` |
//! | -> Abandoned, -> Ended | `drop_delivery`, `mark_ended` | `Delivery`'s `Drop`, `delivery/mod.rs` |
//!
//! Only a held lease can be lost by an extension's answer: once an ack or release has
//! started, an extension that reaches SQS just after the delete fails, but the message was
//! not lost. Its deadline still binds it: a lease whose deadline passes with no extension
//! covering it is lost (`lapsed`), an ack or release under way or waiting between its tries
//! included, and a delete answered after the deadline is no ack (the message may have gone
//! to another consumer before the delete reached SQS, which then answers with success). An
//! ack says `Ok` only when the lease held until its delete was answered.
//!
//! While its handler runs, a delivery dropped unsettled waits for the handler's outcome
//! (`AckMode::OnSuccess` acks it on `Ok`), and the keeper keeps it hidden meanwhile: a slow
//! handler's `Ok` then acks a message that is still this consumer's, never one handed to
//! someone else. The handler's guard settles it. A delete that succeeds for a
//! delivery already lost is not an ack: it is never counted in `acked`.

pub(crate) mod adaptive_visibility;
pub(crate) mod claim;
pub(crate) mod context;

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Span;

use crate::error::{BoxError, Error, ErrorKind, LostReason};
use crate::lease::context::Context;
use crate::limits::{call_margin, extension_limit, VisibilityTimeout};
use crate::millis::{millis_after, Millis};
use crate::settle_calls::request_batch::{Cohort, OnAnswer};
use crate::settle_calls::unfinished_deletes::Unfinished;
use crate::settle_calls::SettleHooks;
use crate::stats::Counter;

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// The keeper keeps the message hidden; whoever drops the delivery unsettled applies
    /// the retry policy.
    Held,
    /// Held, and handed to a handler whose outcome decides what an unsettled drop means.
    InHandler,
    /// Dropped unsettled while its handler ran; still kept hidden by the keeper until the
    /// handler's outcome settles it.
    Abandoned,
    /// Abandoned, then lost (the message may be with another consumer); the handler's outcome
    /// only ends it.
    AbandonedLost(LostReason),
    /// `ack`, `release` or `release_after` is under way: queued or sent, not answered. The
    /// keeper goes on extending a delete's (see `Lease::is_extendable`), not a release's.
    Settling,
    /// A try of the ack or release failed and the next one waits: the keeper extends it
    /// meanwhile, so the message stays hidden through the retries.
    SettleWaiting,
    /// The message may be with another consumer.
    Lost(LostReason),
    /// Deleted.
    Acked,
    /// Dropped (after a release, a failed settle, or none) without an ack.
    Ended { lost: Option<LostReason> },
}

/// How a delivery ended, for FIFO sequencing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Acked,
    NotAcked,
}

/// What ends a lease's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// SQS's limit: 12 hours after the receive.
    TwelveHours,
    /// Its holder's end, before that (a Lambda function's deadline).
    Holder,
}

/// Who holds a lease when its holder ends before the 12-hour limit: a Lambda invocation,
/// which answers by its function's deadline and whose acks Lambda carries out after the
/// answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    /// When the holder ends: no extension runs past it.
    pub(crate) ends_at: Instant,
    /// What an ack leaves to the keeper.
    pub(crate) after_ack: AfterAck,
}

/// What the keeper does with a lease once it is acked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterAck {
    /// Lets go: the message is deleted.
    #[cfg_attr(not(feature = "lambda"), allow(dead_code))]
    LetGo,
    /// Keeps it hidden until its holder lets go ([`Lease::end_hold`]): an ack whose delete
    /// comes later (Lambda's, after the invocation's answer), so that the message is visible
    /// to nobody meanwhile.
    KeepHidden,
}

/// What a handler's end finds of a delivery it was handed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Left {
    /// Dropped unsettled in the handler: the handler's outcome settles it now.
    Abandoned,
    /// Dropped unsettled in the handler, and lost since: there is nothing left to settle,
    /// and an ack the outcome asks for would be a stale one.
    AbandonedLost(LostReason),
    /// Settled by the handler, or still held elsewhere (it decides for itself).
    NotAbandoned,
}

/// What dropping a delivery leaves to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// It was held and nobody else decides: apply the retry policy.
    Unsettled,
    /// Its handler's outcome decides.
    Deferred,
    /// It was settled, being settled, or lost: nothing.
    Settled,
}

#[derive(Debug, Clone, Copy)]
struct Status {
    /// When the message's visibility ends, as far as this consumer knows: whole milliseconds
    /// after `received` (the receive's request, as the lease keeps it), rounded down, so the
    /// estimate is never late. (Not an `Instant`: 120,000 leases may be held at once.)
    deadline_ms: u32,
    state: State,
}

/// How many times SQS says it has handed `message` out (`ApproximateReceiveCount`), this
/// time included; 1 when it does not say.
pub(crate) fn receive_count(message: &Message) -> u32 {
    message
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Something that happens to a lease once and never unhappens.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
enum Mark {
    /// No settle call of its own may still come (its ack or release started, or it ended):
    /// it left its cohort, and its hold was counted.
    Left = 1,
    /// The keeper was told to let go of it.
    LetGo = 1 << 1,
    /// An ack keeps it hidden until its holder lets go ([`AfterAck::KeepHidden`]).
    KeepsHiddenAfterAck = 1 << 2,
    /// Its holder let go of it: an ack no longer keeps it hidden.
    HoldEnded = 1 << 3,
    /// Its settle call is a delete (an ack, or a move's): the keeper goes on extending it
    /// while a try is under way, since an extension that lands after the delete only fails.
    /// (A release's visibility change it could undo, so a release is not.)
    Deleting = 1 << 4,
    /// Its delete's success arrived before its deadline (set under the status lock, where the
    /// answer arrives): it is an ack however late its caller looks at the answer (a starved
    /// runtime), so the keeper neither extends nor lapses it any more.
    DeletedInTime = 1 << 5,
}

/// A lease's [`Mark`]s, one byte for all: 120,000 leases may be held at once.
#[derive(Debug, Default)]
struct Marks(AtomicU8);

impl Marks {
    /// Sets `mark`; returns whether it was set already.
    fn set(&self, mark: Mark) -> bool {
        self.0.fetch_or(mark as u8, AtomicOrdering::AcqRel) & mark as u8 != 0
    }

    fn has(&self, mark: Mark) -> bool {
        self.0.load(AtomicOrdering::Acquire) & mark as u8 != 0
    }
}

/// What a delivery, the keeper and its handler share.
#[derive(Debug)]
pub(crate) struct Lease {
    ctx: Arc<Context>,
    /// The message, its receipt handle included (always there: a message without one is
    /// never made into a lease). The lease owns it, not the `Delivery`: the keeper needs the
    /// receipt too, and real ones run to hundreds of bytes.
    message: Message,
    status: Mutex<Status>,
    /// Wakes `lost()` and `ended()` when the state reaches one they wait for.
    changed: Notify,
    /// Just before the receive's request: the 12-hour limit counts from it. (Milliseconds
    /// from the context's epoch, rounded down: 120,000 leases may be held at once.)
    received: Millis,
    /// The visibility timeout the receive applied. (Two bytes: 120,000 leases may be held
    /// at once.)
    visibility_timeout: VisibilityTimeout,
    /// The delivery's span: the keeper logs in it.
    span: Span,
    /// The deliveries received with this one (none on a FIFO queue): its ack may wait a
    /// little for theirs, to share a request.
    cohort: Option<Arc<Cohort>>,
    /// How long after `received_at` the receive's answer arrived, in hundredths of a second
    /// (at most a long poll's 20 s plus its request timeout of at most 300 s): the hold counts
    /// from the answer. (Not an `Instant`: 120,000 leases may be held at once.)
    answered_after_cs: u16,
    /// The latest its extensions may end, in milliseconds after `received`: SQS's 12-hour
    /// limit (less its margin), or earlier when the lease's holder ends first (a Lambda
    /// function's deadline). (Not an `Instant`: 120,000 leases may be held at once.)
    limit_ms: u32,
    /// Where the keeper holds it.
    keeper_slot: AtomicU32,
    /// What has happened to it that never unhappens.
    marks: Marks,
    /// Where the payload read from S3 came from (to delete it after the ack, if asked); the
    /// payload itself is the `Delivery`'s, freed with it (the keeper may hold a lease a while
    /// longer). Boxed: a lease of an ordinary message stays small.
    #[cfg(feature = "s3")]
    payload_location: std::sync::OnceLock<Box<crate::payload::pointer::PayloadLocation>>,
}

impl Lease {
    /// A lease on `message`, received with the request sent at `received_at` and handed out
    /// at `handed_out` for `visibility_timeout`.
    pub(crate) fn new(
        ctx: Arc<Context>,
        message: Message,
        received_at: Instant,
        handed_out: Instant,
        visibility_timeout: VisibilityTimeout,
        span: Span,
    ) -> Self {
        let received = ctx.epoch().millis(received_at);
        // SQS started the timeout when the answer left it: its time in flight (up to the
        // margin kept for any call) is taken off, never back before the request.
        let t = visibility_timeout.duration();
        let left_sqs = handed_out
            .checked_sub(call_margin(t))
            .map_or(received_at, |left| left.max(received_at));
        let deadline = left_sqs + t;
        let status = Mutex::new(Status {
            deadline_ms: millis_after(ctx.epoch().instant(received), deadline),
            state: State::Held,
        });
        Self {
            ctx,
            message,
            status,
            changed: Notify::new(),
            received,
            visibility_timeout,
            span,
            cohort: None,
            answered_after_cs: u16::try_from((handed_out - received_at).as_millis() / 10)
                .unwrap_or(u16::MAX),
            limit_ms: millis_after(received_at, extension_limit(received_at)),
            keeper_slot: AtomicU32::new(u32::MAX),
            marks: Marks::default(),
            #[cfg(feature = "s3")]
            payload_location: std::sync::OnceLock::new(),
        }
    }

    /// The same lease, held by `holder` if any: its extensions end by the holder's end at
    /// the latest (if that comes before the 12-hour limit: a holder that ends then has no use
    /// for a longer one, and a message it could not release comes back sooner), and an ack
    /// does what the holder says.
    pub(crate) fn held_by(mut self, holder: Option<Holder>) -> Self {
        if let Some(holder) = holder {
            let received_at = self.received_at();
            self.limit_ms = self.limit_ms.min(millis_after(received_at, holder.ends_at));
            if holder.after_ack == AfterAck::KeepHidden {
                self.marks.set(Mark::KeepsHiddenAfterAck);
            }
        }
        self
    }

    /// The same lease, one of `cohort` (the deliveries of its receive).
    pub(crate) fn in_cohort(mut self, cohort: Option<Arc<Cohort>>) -> Self {
        if let Some(cohort) = &cohort {
            cohort.join();
        }
        self.cohort = cohort;
        self
    }

    /// Once the state says no settle call of its own may still come: leaves the cohort, and
    /// tells the context how long it was held (unless it was lost: that says nothing of how
    /// long its handler takes).
    fn left_unsettled(&self, state: State) {
        if matches!(state, State::Held | State::InHandler | State::Abandoned) {
            return;
        }
        if self.marks.set(Mark::Left) {
            return;
        }
        if let Some(cohort) = &self.cohort {
            cohort.leave();
        }
        if lost_reason(state).is_none() {
            let answered_after = Duration::from_millis(u64::from(self.answered_after_cs) * 10);
            self.ctx.held_since(self.received_at() + answered_after);
        }
    }

    /// Where this message's payload was read from, if it was.
    #[cfg(feature = "s3")]
    pub(crate) fn payload_location(&self) -> Option<&crate::payload::pointer::PayloadLocation> {
        self.payload_location.get().map(|l| &**l)
    }

    /// Remembers where the payload was read from (once: a second is ignored).
    #[cfg(feature = "s3")]
    pub(crate) fn set_payload_location(&self, location: crate::payload::pointer::PayloadLocation) {
        let _ = self.payload_location.set(Box::new(location));
    }

    /// `true` the first time only: whoever gets it tells the keeper to let go. Never while
    /// an ack keeps it hidden for its holder.
    pub(crate) fn first_let_go(&self) -> bool {
        !self.is_hidden_after_ack() && !self.marks.set(Mark::LetGo)
    }

    /// Its holder lets go of it: an ack no longer keeps it hidden (the caller then tells the
    /// keeper to let go).
    #[cfg_attr(not(feature = "lambda"), allow(dead_code))]
    pub(crate) fn end_hold(&self) {
        self.marks.set(Mark::HoldEnded);
    }

    /// Acked, and kept hidden until its holder lets go.
    fn is_hidden_after_ack(&self) -> bool {
        self.marks.has(Mark::KeepsHiddenAfterAck)
            && !self.marks.has(Mark::HoldEnded)
            && self.state() == State::Acked
    }

    /// Where the keeper holds it (set by the keeper only).
    pub(crate) fn keeper_slot(&self) -> u64 {
        u64::from(self.keeper_slot.load(AtomicOrdering::Relaxed))
    }

    pub(crate) fn set_keeper_slot(&self, slot: u64) {
        let slot = u32::try_from(slot).unwrap_or(u32::MAX);
        self.keeper_slot.store(slot, AtomicOrdering::Relaxed);
    }

    /// The visibility timeout the receive applied.
    pub(crate) fn visibility_timeout(&self) -> VisibilityTimeout {
        self.visibility_timeout
    }

    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// `true` while the keeper may extend it: held, between the tries of a settle call, or
    /// while a delete's try is under way (the lease must hold until the delete is answered).
    pub(crate) fn is_extendable(&self) -> bool {
        match self.state() {
            State::Held | State::InHandler | State::Abandoned | State::SettleWaiting => true,
            State::Settling => self.is_deleting(),
            State::Acked => self.is_hidden_after_ack(),
            _ => false,
        }
    }

    /// `true` while a release's request is queued or under way: not extended (an extension
    /// landing after it would hide the message again), not forgotten either (it may fail
    /// and wait to try again).
    pub(crate) fn is_settling(&self) -> bool {
        self.state() == State::Settling && !self.marks.has(Mark::Deleting)
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub(crate) fn receipt(&self) -> &str {
        self.message.receipt_handle().unwrap_or_default()
    }

    pub(crate) fn message(&self) -> &Message {
        &self.message
    }

    pub(crate) fn received_at(&self) -> Instant {
        self.ctx.epoch().instant(self.received)
    }

    /// Read from the message when asked, not kept beside it: 120,000 leases may be held at
    /// once.
    pub(crate) fn receive_count(&self) -> u32 {
        receive_count(&self.message)
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.received_at() + Duration::from_millis(u64::from(self.lock().deadline_ms))
    }

    pub(crate) fn set_deadline(&self, deadline: Instant) {
        self.lock().deadline_ms = millis_after(self.received_at(), deadline);
    }

    pub(crate) fn state(&self) -> State {
        self.lock().state
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        lost_reason(self.state())
    }

    /// The latest instant an extension may end at, and what sets it.
    pub(crate) fn extension_limit(&self) -> (Instant, Limit) {
        let received_at = self.received_at();
        let at = received_at + Duration::from_millis(u64::from(self.limit_ms));
        let by = if at < extension_limit(received_at) {
            Limit::Holder
        } else {
            Limit::TwelveHours
        };
        (at, by)
    }

    /// How long the message may still stay hidden: until receive + 12 h - margin.
    pub(crate) fn room(&self) -> Duration {
        extension_limit(self.received_at()).saturating_duration_since(Instant::now())
    }

    /// Applies `change` to the state if `from` accepts the current one; returns whether it did.
    ///
    /// Watchers (`lost()`, `ended()`) are woken only for the states they wait for: the others
    /// change often (every delivery goes through `InHandler` and `Settling`) and waking costs.
    fn transition(&self, from: impl Fn(State) -> bool, change: impl Fn(State) -> State) -> bool {
        self.transition_then(from, change, || {})
    }

    /// `transition`, with `applied` run after the change and before anyone waiting for it
    /// wakes.
    fn transition_then(
        &self,
        from: impl Fn(State) -> bool,
        change: impl Fn(State) -> State,
        applied: impl FnOnce(),
    ) -> bool {
        let (done, wake, now) = {
            let mut s = self.lock();
            let done = from(s.state);
            if done {
                s.state = change(s.state);
            }
            (done, done && watched(s.state), s.state)
        };
        if done {
            self.left_unsettled(now);
            applied();
        }
        if wake {
            self.changed.notify_waiters();
        }
        done
    }

    fn lock(&self) -> MutexGuard<'_, Status> {
        // Every update is a single assignment: a poisoned lock still holds consistent data.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The delivery goes to a handler, whose outcome decides what an unsettled drop means.
    pub(crate) fn enter_handler(&self) {
        self.transition(|s| s == State::Held, |_| State::InHandler);
    }

    /// The handler has finished: whether it dropped the delivery unsettled (the caller must
    /// then settle it); a delivery still held goes back to deciding for itself.
    pub(crate) fn leave_handler(&self) -> Left {
        self.transition(|s| s == State::InHandler, |_| State::Held);
        match self.state() {
            State::Abandoned => Left::Abandoned,
            State::AbandonedLost(reason) => Left::AbandonedLost(reason),
            _ => Left::NotAbandoned,
        }
    }

    /// A release starts (or a delivery is left to lapse): from now on its outcome decides.
    /// Returns the reason the delivery was lost before, if it was.
    pub(crate) fn begin_release(&self) -> Option<LostReason> {
        self.begin_settle()
    }

    /// An ack (or a move's delete) starts: from now on the delete decides, and the keeper
    /// keeps the lease until it is answered. Returns the reason the delivery was lost
    /// before, if it was.
    pub(crate) fn begin_ack(&self) -> Option<LostReason> {
        self.marks.set(Mark::Deleting);
        self.begin_settle()
    }

    /// From a held delivery, or one its handler dropped and whose outcome settles it.
    fn begin_settle(&self) -> Option<LostReason> {
        match self.transition(|s| held(s) || s == State::Abandoned, |_| State::Settling) {
            true => None,
            false => self.lost_reason(),
        }
    }

    /// An extension found the delivery lost; it counts only while the lease is held.
    /// Returns whether it counted.
    pub(crate) fn extension_lost(&self, reason: LostReason) -> bool {
        self.lose(reason, |s| held(s) || s == State::Abandoned)
    }

    /// The deadline passed with no extension covering it (or none can reach SQS before it):
    /// lost, whatever is under way, an ack or release included. Its delete, if one comes,
    /// may reach SQS after the message went to another consumer, and SQS answers such a
    /// delete with success. A delete whose success arrived before the deadline is done,
    /// whenever its caller sees it: that does not lapse. Returns whether it counted.
    pub(crate) fn lapsed(&self, reason: LostReason) -> bool {
        self.lose(reason, |s| {
            let settling = matches!(s, State::Settling | State::SettleWaiting);
            held(s) || s == State::Abandoned || (settling && !self.was_deleted_in_time())
        })
    }

    /// `true` while a try of an ack's (or a move's) delete is queued or under way, and no
    /// success of it has arrived.
    pub(crate) fn is_deleting(&self) -> bool {
        self.state() == State::Settling
            && self.marks.has(Mark::Deleting)
            && !self.was_deleted_in_time()
    }

    fn was_deleted_in_time(&self) -> bool {
        self.marks.has(Mark::DeletedInTime)
    }

    /// `true` while an ack or release is under way, between its tries included.
    pub(crate) fn is_settling_or_waiting(&self) -> bool {
        matches!(self.state(), State::Settling | State::SettleWaiting)
    }

    /// A settle call found the delivery lost (or knew it already); the first reason wins.
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        self.lose(reason, |s| {
            held(s) || matches!(s, State::Settling | State::SettleWaiting | State::Abandoned)
        });
    }

    fn lose(&self, reason: LostReason, from: impl Fn(State) -> bool) -> bool {
        // Counted before `lost()` wakes: whoever sees the delivery lost finds it in the stats.
        self.transition_then(
            from,
            |s| match s {
                // Nobody holds it: its handler's outcome will end it.
                State::Abandoned => State::AbandonedLost(reason),
                _ => State::Lost(reason),
            },
            || {
                self.ctx.count(Counter::Lost);
            },
        )
    }

    /// The delete succeeded: acked, unless the delivery was lost before (then the message may
    /// be another consumer's, and the success proves nothing). Returns whether it counted;
    /// counted before `ended()` wakes, so whoever sees the delivery end finds its ack in the
    /// stats.
    pub(crate) fn acked(&self) -> bool {
        self.deleted(Counter::Acked)
    }

    /// The delete succeeded: the message is gone, counted in `counter` (an ack, or a move to
    /// the dead-letter queue), as [`acked`](Lease::acked) says.
    ///
    /// A delete answered after the deadline is no ack either: with no extension covering
    /// it, the message may have been handed out again before the delete reached SQS. When
    /// the answer came is taken where it arrived ([`OnAnswer`]), not when its caller looks.
    fn deleted(&self, counter: Counter) -> bool {
        if !self.was_deleted_in_time() && Instant::now() > self.deadline() {
            self.lapsed(LostReason::LapsedBeforeAnswer);
            return false;
        }
        self.transition_then(
            |s| matches!(s, State::Settling | State::SettleWaiting),
            |_| State::Acked,
            || {
                self.ctx.count(counter);
            },
        )
    }

    /// Ends a move to the dead-letter queue, whose copy is sent, with the original's delete
    /// `result` (`lost_before`: the delivery was lost before the delete was sent). Counted in
    /// `dead_lettered` when it is done; otherwise the message is remembered, so that if it
    /// comes back to this consumer it is deleted without its handler and without another
    /// copy. The payload in S3, if any, stays: the copy points to it.
    pub(crate) fn finish_move(
        &self,
        result: Result<(), Error>,
        lost_before: Option<LostReason>,
    ) -> Result<(), Error> {
        let message_id = self.message.message_id().unwrap_or_default();
        let err = match (result, lost_before) {
            (Ok(()), None) if self.deleted(Counter::DeadLettered) => return Ok(()),
            (Err(err), _) if !err.is_lost() => err,
            (result, lost_before) => {
                let reason = match (result.err().map(|e| e.kind()), lost_before) {
                    (Some(ErrorKind::Lost(reason)), _) | (_, Some(reason)) => reason,
                    _ => LostReason::ReceiptHandleInvalid,
                };
                self.mark_lost(reason);
                Error::Lost {
                    message_id: message_id.to_owned(),
                    reason: self.lost_reason().unwrap_or(reason),
                    source: None,
                }
            }
        };
        self.ctx.remember_unfinished(message_id, Unfinished::Move);
        Err(err)
    }

    /// Ends an ack (the caller's, or the one a handler's outcome asks for) with the delete's
    /// `result`. `lost_before`: the delivery was lost before the delete was sent.
    ///
    /// A delete that succeeds for a delivery lost before is no ack: SQS answers a delete with
    /// an old receipt handle with success and may not delete, and the message may be with
    /// another consumer. Such an ack, like one the delete finds gone, is `Error::Lost`:
    /// counted in `lost_acks` (never in `acked`), logged with the message id, and remembered,
    /// so that the message is deleted without its handler if it comes back to this consumer.
    pub(crate) fn finish_ack(
        &self,
        result: Result<(), Error>,
        lost_before: Option<LostReason>,
    ) -> Result<(), Error> {
        let (reason, source) = match (result, lost_before) {
            (Err(err), _) if err.is_lost() => match err.kind() {
                ErrorKind::Lost(reason) => (reason, Some(err)),
                _ => (LostReason::ReceiptHandleInvalid, Some(err)),
            },
            // Any other failure of a delivery lost before the delete or meanwhile (transient
            // failures until the deadline passed, an outage, a refusal): lost, not merely
            // failed, with the failure as the source.
            (Err(err), lost_before) => match self.lost_reason().or(lost_before) {
                Some(reason) => (reason, Some(err)),
                None => return Err(err),
            },
            (Ok(()), Some(reason)) => (reason, None),
            (Ok(()), None) if self.acked() => {
                tracing::debug!(parent: &self.span, "acked");
                // Only now, the SQS delete done: the object is never deleted before it.
                #[cfg(feature = "s3")]
                if let Some(location) = self.payload_location() {
                    self.ctx.delete_payload(location, &self.span);
                }
                return Ok(());
            }
            (Ok(()), None) => (
                self.lost_reason()
                    .unwrap_or(LostReason::ReceiptHandleInvalid),
                None,
            ),
        };
        self.mark_lost(reason);
        let reason = self.lost_reason().unwrap_or(reason);
        let message_id = self.message.message_id().unwrap_or_default();
        self.ctx.count(Counter::LostAcks);
        self.ctx.remember_unfinished(message_id, Unfinished::Ack);
        tracing::warn!(
            parent: &self.span,
            %message_id,
            %reason,
            error = source.as_ref().map(|err| tracing::field::display(err.chain())),
            "ack of a lost delivery: not counted as acked; the message may be handled again"
        );
        Err(Error::Lost {
            message_id: message_id.to_owned(),
            reason,
            source: source.map(|err| Box::new(err) as BoxError),
        })
    }

    /// Ends a release with its `result`: `Error::Lost` (the call's error as its source) when
    /// the call found the delivery lost, or failed once it was.
    pub(crate) fn finish_release(&self, result: Result<(), Error>) -> Result<(), Error> {
        let err = match result {
            Ok(()) => return Ok(()),
            Err(err) if err.is_lost() || self.lost_reason().is_some() => err,
            Err(err) => return Err(err),
        };
        let reason = match err.kind() {
            ErrorKind::Lost(reason) => reason,
            _ => LostReason::ReceiptHandleInvalid,
        };
        self.mark_lost(reason);
        Err(Error::Lost {
            message_id: self.message.message_id().unwrap_or_default().to_owned(),
            reason: self.lost_reason().unwrap_or(reason),
            source: Some(Box::new(err)),
        })
    }

    /// The delivery was dropped: what is left to do.
    pub(crate) fn drop_delivery(&self) -> Dropped {
        let mut dropped = Dropped::Settled;
        let wake = {
            let mut s = self.lock();
            let before = s.state;
            s.state = match s.state {
                State::Held => {
                    dropped = Dropped::Unsettled;
                    State::Ended { lost: None }
                }
                State::InHandler => {
                    dropped = Dropped::Deferred;
                    State::Abandoned
                }
                State::Acked => State::Acked,
                other => State::Ended {
                    lost: lost_reason(other),
                },
            };
            let now = s.state;
            drop(s);
            self.left_unsettled(now);
            now != before && watched(now)
        };
        if wake {
            self.changed.notify_waiters();
        }
        dropped
    }

    /// An abandoned delivery was settled by its handler's outcome (or its release was handed
    /// on): it has ended, unless it was acked.
    pub(crate) fn mark_ended(&self) {
        self.transition(
            |s| !matches!(s, State::Acked | State::Ended { .. }),
            |s| State::Ended {
                lost: lost_reason(s),
            },
        );
    }

    /// What the retry policy asks of a delivery that ended unsettled, as a visibility
    /// timeout: 0 (at once) if the consumer is `shutting_down`, otherwise as the policy says;
    /// `None` to leave it to come back when its visibility lapses.
    pub(crate) fn visibility_on_drop(&self, shutting_down: bool) -> Option<VisibilityTimeout> {
        if shutting_down {
            return Some(VisibilityTimeout::ZERO);
        }
        self.ctx
            .retry_policy()
            .visibility_on_drop(self.receive_count(), self.room())
    }

    /// Completes when the delivery is lost, with the reason; never completes otherwise.
    pub(crate) fn lost(self: &Arc<Self>) -> impl Future<Output = LostReason> + Send + 'static {
        self.once_state(lost_reason)
    }

    /// Completes when the delivery has ended (acked, or dropped and settled), with how.
    pub(crate) fn ended(self: &Arc<Self>) -> impl Future<Output = End> + Send + 'static {
        self.once_state(|state| match state {
            State::Acked => Some(End::Acked),
            State::Ended { .. } => Some(End::NotAcked),
            _ => None,
        })
    }

    /// Completes with what `seen` makes of the state, the first time it makes something of it.
    fn once_state<T>(
        self: &Arc<Self>,
        seen: impl Fn(State) -> Option<T> + Send + 'static,
    ) -> impl Future<Output = T> + Send + 'static {
        let lease = self.clone();
        async move {
            loop {
                // Registered before the look, so a change right after it wakes us.
                let changed = lease.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if let Some(found) = seen(lease.state()) {
                    return found;
                }
                changed.await;
            }
        }
    }
}

impl OnAnswer for Lease {
    /// A delete's success that arrives before the deadline makes the ack true, whenever the
    /// ack's caller gets to see it (see [`Lease::deleted`]).
    fn answered(&self, result: &Result<(), Error>) {
        if result.is_err() || !self.marks.has(Mark::Deleting) {
            return;
        }
        let status = self.lock();
        let settling = matches!(status.state, State::Settling | State::SettleWaiting);
        let deadline = self.received_at() + Duration::from_millis(u64::from(status.deadline_ms));
        if settling && Instant::now() <= deadline {
            self.marks.set(Mark::DeletedInTime);
        }
    }
}

impl SettleHooks for Lease {
    fn cohort(&self) -> Option<Arc<Cohort>> {
        self.cohort.clone()
    }

    fn still_ours(&self) -> bool {
        self.lost_reason().is_none()
    }

    fn waiting_to_retry(&self) {
        self.transition(|s| s == State::Settling, |_| State::SettleWaiting);
    }

    fn retrying(&self) {
        self.transition(|s| s == State::SettleWaiting, |_| State::Settling);
    }
}

/// A state that `lost()` or `ended()` waits for.
fn watched(state: State) -> bool {
    matches!(
        state,
        State::Lost(_) | State::AbandonedLost(_) | State::Acked | State::Ended { .. }
    )
}

/// Held, whoever decides about an unsettled drop.
fn held(state: State) -> bool {
    matches!(state, State::Held | State::InHandler)
}

fn lost_reason(state: State) -> Option<LostReason> {
    match state {
        State::Lost(reason)
        | State::AbandonedLost(reason)
        | State::Ended { lost: Some(reason) } => Some(reason),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
