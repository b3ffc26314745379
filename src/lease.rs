//! A delivery's lease: its receipt handle, its current visibility deadline, and the one state
//! that its guard, its heartbeat and its watchers (`lost()`, FIFO sequencing) agree on.
//!
//! ```text
//!   Held --ack/release starts--> Settling --delete succeeded--> Acked
//!    |                              |
//!    | heartbeat: gone/lapsed       | the settle call: gone
//!    v                              v
//!   Lost(reason) <------------------+
//!
//!   Drop: Held, Settling -> Ended { lost: None }; Lost(r) -> Ended { lost: Some(r) };
//!         Acked stays Acked.
//! ```
//!
//! Only a `Held` lease can be lost by its heartbeat: once an ack or release has started, its
//! own outcome decides (an extension that reaches SQS just after the delete fails, but the
//! message was not lost).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::context::Context;
use crate::error::LostReason;
use crate::stats::Counter;

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// The heartbeat keeps the message hidden.
    Held,
    /// `ack`, `release` or `release_after` is under way.
    Settling,
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

#[derive(Debug, Clone, Copy)]
struct Status {
    /// When the message's visibility ends, as far as this consumer knows.
    deadline: Instant,
    state: State,
}

/// What a delivery and its heartbeat share.
#[derive(Debug)]
pub(crate) struct Lease {
    ctx: Arc<Context>,
    receipt: String,
    status: watch::Sender<Status>,
}

impl Lease {
    pub(crate) fn new(ctx: Arc<Context>, receipt: String, deadline: Instant) -> Self {
        let (status, _) = watch::channel(Status {
            deadline,
            state: State::Held,
        });
        Self {
            ctx,
            receipt,
            status,
        }
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub(crate) fn receipt(&self) -> &str {
        &self.receipt
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.status.borrow().deadline
    }

    pub(crate) fn set_deadline(&self, deadline: Instant) {
        self.status.send_modify(|s| s.deadline = deadline);
    }

    pub(crate) fn state(&self) -> State {
        self.status.borrow().state
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        lost_reason(self.state())
    }

    /// An ack or release starts: from now on its outcome decides.
    pub(crate) fn begin_settle(&self) {
        self.status.send_if_modified(|s| {
            let held = s.state == State::Held;
            if held {
                s.state = State::Settling;
            }
            held
        });
    }

    /// The heartbeat found the delivery lost; it counts only while the lease is `Held`.
    /// Returns whether it counted.
    pub(crate) fn heartbeat_lost(&self, reason: LostReason) -> bool {
        self.lose(reason, |state| state == State::Held)
    }

    /// A settle call found the delivery lost (or knew it already); the first reason wins.
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        self.lose(reason, |state| {
            matches!(state, State::Held | State::Settling)
        });
    }

    fn lose(&self, reason: LostReason, from: impl Fn(State) -> bool) -> bool {
        let lost = self.status.send_if_modified(|s| {
            let applies = from(s.state);
            if applies {
                s.state = State::Lost(reason);
            }
            applies
        });
        if lost {
            self.ctx.count(Counter::Lost);
        }
        lost
    }

    /// The delete succeeded (and the delivery was not lost).
    pub(crate) fn acked(&self) {
        self.status.send_if_modified(|s| {
            let settling = s.state == State::Settling;
            if settling {
                s.state = State::Acked;
            }
            settling
        });
    }

    /// The delivery was dropped.
    pub(crate) fn end(&self) {
        self.status.send_modify(|s| {
            s.state = match s.state {
                State::Acked => State::Acked,
                other => State::Ended {
                    lost: lost_reason(other),
                },
            }
        });
    }

    /// Completes when the delivery is lost, with the reason; never completes otherwise.
    pub(crate) fn lost(self: &Arc<Self>) -> impl Future<Output = LostReason> + Send + 'static {
        let lease = self.clone();
        async move {
            let mut rx = lease.status.subscribe();
            loop {
                if let Some(reason) = lost_reason(rx.borrow_and_update().state) {
                    return reason;
                }
                if rx.changed().await.is_err() {
                    // Unreachable while `lease` (and so the sender) is alive; stay pending.
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Completes when the delivery has ended (acked, or dropped), with how.
    pub(crate) fn ended(&self) -> impl Future<Output = End> + Send + 'static {
        let mut rx = self.status.subscribe();
        async move {
            loop {
                match rx.borrow_and_update().state {
                    State::Acked => return End::Acked,
                    State::Ended { .. } => return End::NotAcked,
                    _ => {}
                }
                if rx.changed().await.is_err() {
                    return End::NotAcked;
                }
            }
        }
    }
}

fn lost_reason(state: State) -> Option<LostReason> {
    match state {
        State::Lost(reason) | State::Ended { lost: Some(reason) } => Some(reason),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryQueue;
    use crate::queue::Queue;
    use crate::retry::RetryPolicy;

    fn lease() -> Arc<Lease> {
        let ctx = Context::new(&Queue::new(MemoryQueue::new()), RetryPolicy::Leave);
        Arc::new(Lease::new(Arc::new(ctx), "r".into(), Instant::now()))
    }

    #[tokio::test]
    async fn a_heartbeat_result_racing_a_settle_call_does_not_lose_the_delivery() {
        // An extension sent just before the ack reaches SQS just after the delete, and fails.
        let l = lease();
        l.begin_settle();
        assert!(!l.heartbeat_lost(LostReason::ReceiptHandleInvalid));
        assert_eq!(l.state(), State::Settling);
        l.acked();
        l.end();
        assert_eq!(l.ended().await, End::Acked);
        assert_eq!(l.context().stats(0).lost, 0);
    }

    #[tokio::test]
    async fn the_first_reason_wins_and_survives_the_drop() {
        let l = lease();
        let lost = l.lost();
        assert!(l.heartbeat_lost(LostReason::NotInFlight));
        l.mark_lost(LostReason::ReceiptHandleInvalid);
        assert_eq!(l.lost_reason(), Some(LostReason::NotInFlight));
        l.acked(); // an ack of a lost delivery does not make it acked
        l.end();
        assert_eq!(lost.await, LostReason::NotInFlight);
        assert_eq!(l.lost_reason(), Some(LostReason::NotInFlight));
        assert_eq!(l.ended().await, End::NotAcked);
        assert_eq!(l.context().stats(0).lost, 1, "counted once");
    }

    #[tokio::test]
    async fn a_settle_call_can_find_it_lost() {
        let l = lease();
        l.begin_settle();
        l.mark_lost(LostReason::ReceiptHandleInvalid);
        assert_eq!(l.state(), State::Lost(LostReason::ReceiptHandleInvalid));
        l.begin_settle(); // no way back to Settling
        assert!(l.lost_reason().is_some());
    }
}
