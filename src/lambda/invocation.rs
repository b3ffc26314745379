//! One invocation for one queue: the event's records handed to the handler as deliveries,
//! and the records not done, for the partial batch response.

use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::SqsMessage;
use tokio::time::Instant;

use crate::consumer::Consumer;
use crate::engine::{Dispatch, Event};
use crate::lambda::records;
use crate::queue::deferred_deletes::DeferredDeletes;
use crate::readable::{Count, Secs};

/// When an invocation's steps end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Times {
    /// The invocation's start: the records' first visibility timeout counts from it.
    pub(crate) start: Instant,
    /// Handlers still running then are cancelled and their messages released: the
    /// function's deadline less the margin.
    pub(crate) handlers_until: Instant,
    /// The wait for acks and releases under way ends then: half the margin before the
    /// deadline, the other half left to answer Lambda.
    pub(crate) flush_until: Instant,
    /// The function's deadline: no extension runs past it.
    pub(crate) deadline: Instant,
}

impl Times {
    /// The steps of an invocation starting now, whose function ends at `deadline` (the wall
    /// clock's, as Lambda gives it), with `margin` kept before it.
    pub(crate) fn new(deadline: SystemTime, margin: Duration) -> Self {
        let start = Instant::now();
        let left = deadline
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        let deadline = start + left;
        let before = |d: Duration| deadline.checked_sub(d).unwrap_or(start).max(start);
        Self {
            start,
            handlers_until: before(margin),
            flush_until: before(margin / 2),
            deadline,
        }
    }
}

/// A queue's consumer in this function: its settings, its deliveries' deletes (left to
/// Lambda), and its handler.
pub(crate) struct QueueHandling {
    pub(crate) consumer: Consumer,
    pub(crate) deletes: DeferredDeletes,
    pub(crate) dispatch: Dispatch,
}

impl QueueHandling {
    /// Handles `records` (all of this queue's in the event); the message ids of those not
    /// done, in the event's order.
    pub(crate) async fn handle(&self, records: Vec<SqsMessage>, times: Times) -> Vec<String> {
        let engine = self.consumer.engine();
        let keys: Vec<(String, String)> = records
            .iter()
            .map(|r| {
                let id = r.message_id.clone().unwrap_or_default();
                (id, r.receipt_handle.clone().unwrap_or_default())
            })
            .collect();
        let read = tokio::time::timeout_at(times.handlers_until, engine.queue_visibility_timeout());
        let timeout = match read.await {
            Ok(Ok(timeout)) => timeout,
            failed => {
                let error = match failed {
                    Ok(Err(err)) => err.chain().to_string(),
                    _ => "no answer before the function's deadline".to_owned(),
                };
                tracing::error!(
                    queue = %engine.queue_name(),
                    %error,
                    "cannot read the queue's visibility timeout, without which no message \
                     can be kept hidden: the whole event is reported failed"
                );
                return keys.into_iter().map(|(id, _)| id).collect();
            }
        };
        let event = Event {
            messages: records.into_iter().map(records::message).collect(),
            received_at: times.start,
            timeout,
            ends_at: times.deadline,
        };
        let run = engine.hand_out_event(event, &self.dispatch);
        let end = engine
            .end_event(run, times.handlers_until, times.flush_until)
            .await;
        if end.cancelled > 0 {
            tracing::warn!(
                queue = %engine.queue_name(),
                margin = %Secs(times.deadline.saturating_duration_since(times.handlers_until)),
                "{} still running shortly before the function's deadline: cancelled, their \
                 messages released and reported failed",
                Count(end.cancelled, "handler was", "handlers were"),
            );
        }
        if end.unanswered > 0 {
            tracing::warn!(
                queue = %engine.queue_name(),
                "{} unanswered at the function's deadline: those messages come back when \
                 their visibility lapses",
                Count(end.unanswered, "ack or release", "acks and releases"),
            );
        }
        self.not_done(keys, engine.is_fifo())
    }

    /// The message ids of the records whose delete was not asked for. On a FIFO queue, every
    /// record after the first such one too, done or not: Lambda deletes what is reported done,
    /// and a later message of its group must not go before it.
    fn not_done(&self, keys: Vec<(String, String)>, fifo: bool) -> Vec<String> {
        let mut broken = false;
        keys.into_iter()
            .filter_map(|(id, receipt)| {
                let done = self.deletes.take(&receipt) && !broken;
                broken |= fifo && !done;
                (!done).then_some(id)
            })
            .collect()
    }
}
