//! Messages another service received, handed out as deliveries of a run of their own: an AWS
//! Lambda invocation's event (feature `lambda`). Their leases are made true first (one
//! visibility change for every ten), since nobody knows how long they waited before the
//! invocation; then they are handled, kept hidden until the invocation answers, and the
//! run's end tells which were acked.

use std::collections::HashSet;
use std::sync::Arc;

use aws_sdk_sqs::types::Message;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Engine, HandOut, Order};
use crate::engine::run::Run;
use crate::error::Error;
use crate::handler::handling;
use crate::handler::Handler;
use crate::lease::{Holder, State};
use crate::limits::VisibilityTimeout;
use crate::receive::ReceivedBatch;

/// Which records of a FIFO queue's event a record that is not done fails with it, for the
/// partial batch response (and which are then released without being handled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FifoFailure {
    /// Every later record of the event, whatever its message group: AWS's rule for FIFO
    /// queues, and the default.
    #[default]
    FailsTheRest,
    /// The later records of its own message group only: the other groups' records go on
    /// being handled, each group still in order (Powertools' `skip_group_on_error`).
    FailsItsGroup,
}

/// Messages of this consumer's queue that another service received: a Lambda invocation's
/// event, its records renewed.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) messages: Vec<Message>,
    /// Just before their leases were made true (the renewal's request): their visibility
    /// timeout counts from it.
    pub(crate) renewed_at: Instant,
    /// The visibility timeout of the renewal (the queue's own).
    pub(crate) visibility_timeout: VisibilityTimeout,
    /// Who holds them: when the invocation ends, and what an ack leaves to the keeper.
    pub(crate) holder: Holder,
    pub(crate) fifo_failure: FifoFailure,
}

/// How an event's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventEnd {
    /// Handlers (or FIFO sequences, or batches) still running at the deadline, cancelled.
    pub(crate) cancelled: usize,
    /// Releases still unanswered when the wait for them ended.
    pub(crate) unanswered: usize,
    /// The receipt handles of the deliveries acked (or moved to the dead-letter queue).
    pub(crate) acked: HashSet<String>,
    /// The receipt handles of every delivery handed out.
    pub(crate) handed_out: HashSet<String>,
}

impl Engine {
    /// A hand-out that runs `handler` on each delivery of an event, at most `max_in_flight`
    /// at a time: the others wait their turn, kept hidden.
    pub(crate) fn each_of_event<H: Handler>(&self, handler: Arc<H>) -> HandOut {
        let settings = self.handling;
        let turns = Arc::new(tokio::sync::Semaphore::new(
            self.receive_settings().max_in_flight,
        ));
        HandOut::each(Arc::new(move |d| {
            let (handler, turns) = (handler.clone(), turns.clone());
            Box::pin(async move {
                // Never closed: the wait ends with a turn.
                let _turn = turns.acquire_owned().await;
                handling::run_handler(handler, d, settings).await;
            })
        }))
    }

    /// `true` for a FIFO queue.
    pub(crate) fn is_fifo(&self) -> bool {
        self.ctx.is_fifo()
    }

    /// The queue's own visibility timeout, read once for the consumer's life (one try,
    /// bounded by the request timeout: a caller with a deadline retries, or not).
    pub(crate) async fn queue_visibility_timeout(&self) -> Result<VisibilityTimeout, Error> {
        self.receiver.queue_visibility_timeout().await
    }

    /// Makes the visibility of the messages `receipts` name `visibility_timeout` from now, in
    /// requests of ten: each one's result, in order. A message that is gone already (received
    /// again by someone else, or deleted) answers `Error::Lost`.
    pub(crate) async fn renew(
        &self,
        receipts: &[&str],
        visibility_timeout: VisibilityTimeout,
    ) -> Vec<Result<(), Error>> {
        self.ctx
            .calls()
            .renew_all(receipts, visibility_timeout)
            .await
    }

    /// Makes the messages `receipts` name visible again at once, unhandled; failures are
    /// logged (those messages come back when their visibility lapses).
    pub(crate) async fn release_unhandled(&self, receipts: &[&str]) {
        if receipts.is_empty() {
            return;
        }
        let items = receipts.iter().map(|r| ((*r).to_owned(), None)).collect();
        let results = self
            .ctx
            .calls()
            .release_all(items, VisibilityTimeout::ZERO)
            .await;
        let failed = results.iter().filter(|r| r.is_err()).count();
        if let Some(Err(err)) = results.into_iter().find(Result::is_err) {
            tracing::warn!(
                queue = %self.queue_name(),
                failed,
                error = %err.chain(),
                "releasing records left unhandled failed; they come back when their \
                 visibility lapses"
            );
        }
    }

    /// Starts handing out `event`'s messages (as [`Order::Event`] says) in a run of its own.
    pub(crate) fn hand_out_event(&self, event: Event, hand_out: &HandOut) -> Run {
        let hand_out = &self.preparing(hand_out);
        let mut run = self.new_run(CancellationToken::new(), CancellationToken::new());
        let received = ReceivedBatch {
            messages: event.messages,
            slots: Vec::new(),
            received_at: event.renewed_at,
            returned_at: event.renewed_at,
            visibility_timeout: event.visibility_timeout,
            holder: Some(event.holder),
        };
        self.hand_out_received(
            received,
            &mut run,
            hand_out,
            Order::Event(event.fifo_failure),
        );
        run
    }

    /// Lets the handlers of an event's `run` go on until `until`. Then cancels those still
    /// running, releases what they held and what still waited its turn, waits until
    /// `flush_until` for the run's releases under way, and lets go of the acked leases kept
    /// hidden until now.
    pub(crate) async fn end_event(
        &self,
        run: Run,
        until: Instant,
        flush_until: Instant,
    ) -> EventEnd {
        let Run {
            ties,
            mut groups,
            event_leases,
            ..
        } = run;
        let _ =
            tokio::time::timeout_at(until, async { while groups.join_next().await.is_some() {} })
                .await;
        // From here on, a delivery dropped is released at once.
        ties.shutdown().cancel();
        let cancelled = groups.len();
        groups.shutdown().await;
        // This run's releases only: another invocation's calls (concurrent invocations share
        // the queue's consumer) are not this one's to wait for.
        let releases = ties.background();
        releases.close();
        let _ = tokio::time::timeout_at(flush_until, releases.wait()).await;
        let unanswered = releases.len();
        let mut end = EventEnd {
            cancelled,
            unanswered,
            acked: HashSet::new(),
            handed_out: HashSet::new(),
        };
        for lease in event_leases {
            end.handed_out.insert(lease.receipt().to_owned());
            if lease.state() == State::Acked {
                end.acked.insert(lease.receipt().to_owned());
                // Answered now: Lambda deletes it. (A delivery still held, moved out of its
                // handler, stays kept until the deadline.)
                lease.end_hold();
                ties.keeper().let_go(&lease);
            }
        }
        end
    }
}
