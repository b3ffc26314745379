//! One invocation for one queue: the event's records renewed (their leases made true, since
//! nobody knows how long they waited before the invocation), handed to the handler as
//! deliveries, kept hidden until the answer, and the records not done, for the partial batch
//! response.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::SqsMessage;
use tokio::time::Instant;

use crate::consumer::Consumer;
use crate::engine::event::{Event, EventEnd, FifoFailure};
use crate::engine::{Engine, HandOut};
use crate::error::Error;
use crate::lambda::records;
use crate::lease::{AfterAck, Holder};
use crate::limits::VisibilityTimeout;
use crate::queue::deferred_deletes::DeferredDeletes;
use crate::readable::{Count, Secs};

/// When an invocation's steps end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Times {
    /// Handlers still running then are cancelled and their messages released: the
    /// function's deadline less the margin.
    pub(crate) handlers_until: Instant,
    /// The wait for the releases under way ends then: half the margin before the deadline,
    /// the other half left to answer Lambda.
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
            handlers_until: before(margin),
            flush_until: before(margin / 2),
            deadline,
        }
    }
}

/// A queue's consumer in this function: its settings, its deliveries' deletes (for the
/// answer), its handler, and what it does with records done and records of a FIFO queue
/// that are not.
pub(crate) struct QueueHandling {
    pub(crate) consumer: Consumer,
    pub(crate) deletes: DeferredDeletes,
    pub(crate) hand_out: HandOut,
    pub(crate) after_ack: AfterAck,
    pub(crate) fifo_failure: FifoFailure,
}

/// What the answer needs of a record.
struct Record {
    message_id: String,
    receipt: String,
    /// Its FIFO message group, if any.
    group: Option<String>,
}

impl Record {
    fn of(record: &SqsMessage) -> Self {
        Self {
            message_id: record.message_id.clone().unwrap_or_default(),
            receipt: record.receipt_handle.clone().unwrap_or_default(),
            group: record.attributes.get("MessageGroupId").cloned(),
        }
    }
}

/// The records of a FIFO queue that a record not done fails with it, as the answer is made.
struct Broken {
    failure: FifoFailure,
    all: bool,
    groups: HashSet<Option<String>>,
}

impl Broken {
    fn new(failure: FifoFailure) -> Self {
        Self {
            failure,
            all: false,
            groups: HashSet::new(),
        }
    }

    /// Whether a record not done before fails `record`.
    fn fails(&self, record: &Record) -> bool {
        self.all || self.groups.contains(&record.group)
    }

    /// `record` is not done: it fails the later records, as the setting says.
    fn by(&mut self, record: &Record) {
        match self.failure {
            FifoFailure::FailsTheRest => self.all = true,
            FifoFailure::FailsItsGroup => {
                self.groups.insert(record.group.clone());
            }
        }
    }
}

impl QueueHandling {
    fn engine(&self) -> &Engine {
        self.consumer.engine()
    }

    /// The queue's own visibility timeout (read once for the function's life), or an error
    /// if no answer came before the handlers' end.
    pub(crate) async fn visibility_timeout(
        &self,
        times: Times,
    ) -> Result<VisibilityTimeout, Error> {
        let read = self.engine().queue_visibility_timeout();
        match tokio::time::timeout_at(times.handlers_until, read).await {
            Ok(read) => read,
            Err(_) => Err(Error::LambdaEvent {
                reason: format!(
                    "the visibility timeout of {} was not read before the function's deadline",
                    self.engine().queue_name()
                ),
                source: None,
            }),
        }
    }

    /// Handles `records` (all of this queue's in the event), whose visibility timeout is
    /// `visibility_timeout`; the message ids of those not done, in the event's order.
    pub(crate) async fn handle(
        &self,
        records: Vec<SqsMessage>,
        visibility_timeout: VisibilityTimeout,
        times: Times,
    ) -> Vec<String> {
        let engine = self.engine();
        let keys: Vec<Record> = records.iter().map(Record::of).collect();
        let renewed_at = Instant::now();
        let renewed = self.renew(&keys, visibility_timeout, times).await;
        let (handed, unhandled) = self.to_hand_out(&keys, &renewed);
        engine.release_unhandled(&unhandled).await;
        let messages = records
            .into_iter()
            .zip(&handed)
            .filter(|(_, handed)| **handed)
            .map(|(record, _)| records::message(record))
            .collect();
        let event = Event {
            messages,
            renewed_at,
            visibility_timeout,
            holder: Holder {
                ends_at: times.deadline,
                after_ack: self.after_ack,
            },
            fifo_failure: self.fifo_failure,
        };
        let run = engine.hand_out_event(event, &self.hand_out);
        let end = engine
            .end_event(run, times.handlers_until, times.flush_until)
            .await;
        self.say_how_it_ended(&end, times);
        self.not_done(keys, &end)
    }

    /// Makes each record's lease true now: a visibility change to `visibility_timeout` for
    /// every ten,
    /// before any handler runs. Whether each was renewed; a record that is gone (received
    /// again elsewhere, its lease lapsed meanwhile) or that could not be renewed in time is
    /// not.
    async fn renew(
        &self,
        keys: &[Record],
        visibility_timeout: VisibilityTimeout,
        times: Times,
    ) -> Vec<bool> {
        if visibility_timeout.is_zero() {
            // Visible to everyone at once: there is nothing to keep (nor to renew).
            return vec![true; keys.len()];
        }
        let engine = self.engine();
        let receipts: Vec<&str> = keys.iter().map(|k| k.receipt.as_str()).collect();
        let renew = engine.renew(&receipts, visibility_timeout);
        let results = tokio::time::timeout_at(times.handlers_until, renew)
            .await
            .unwrap_or_default();
        let lost = results
            .iter()
            .filter(|r| matches!(r, Err(e) if e.is_lost()))
            .count();
        let failures: Vec<&Error> = results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .filter(|e| !e.is_lost())
            .collect();
        if lost > 0 {
            tracing::warn!(
                queue = %engine.queue_name(),
                "{} gone before the invocation began (received again elsewhere, or their \
                 visibility lapsed while Lambda held them): not handled, reported failed",
                Count(lost, "record was", "records were"),
            );
        }
        let not_renewed = failures.len() + keys.len() - results.len();
        if not_renewed > 0 {
            tracing::warn!(
                queue = %engine.queue_name(),
                error = failures.first().map(|e| tracing::field::display(e.chain())),
                "{} not renewed before the deadline margin: not handled, reported failed",
                Count(not_renewed, "record was", "records were"),
            );
        }
        let mut renewed: Vec<bool> = results.iter().map(Result::is_ok).collect();
        renewed.resize(keys.len(), false);
        renewed
    }

    /// Which records go to the handler, and the receipts of those renewed but not handed out:
    /// on a FIFO queue, a record not renewed fails the records after it (every one, or its
    /// group's, as the setting says), which are released unhandled to keep their order.
    fn to_hand_out<'a>(&self, keys: &'a [Record], renewed: &[bool]) -> (Vec<bool>, Vec<&'a str>) {
        let fifo = self.engine().is_fifo();
        let mut broken = Broken::new(self.fifo_failure);
        let mut unhandled = Vec::new();
        let handed = keys
            .iter()
            .zip(renewed)
            .map(|(key, renewed)| {
                let hand_out = *renewed && !(fifo && broken.fails(key));
                if fifo && !hand_out {
                    broken.by(key);
                    if *renewed {
                        unhandled.push(key.receipt.as_str());
                    }
                }
                hand_out
            })
            .collect();
        (handed, unhandled)
    }

    /// Says once what the cut at the deadline cancelled, and what it could not release in
    /// time.
    fn say_how_it_ended(&self, end: &EventEnd, times: Times) {
        let queue = self.engine().queue_name();
        if end.cancelled > 0 {
            tracing::warn!(
                %queue,
                margin = %Secs(times.deadline.saturating_duration_since(times.handlers_until)),
                "{} still running shortly before the function's deadline: cancelled, their \
                 messages released and reported failed",
                Count(end.cancelled, "handler was", "handlers were"),
            );
        }
        if end.unanswered > 0 {
            tracing::warn!(
                %queue,
                "{} unanswered at the function's deadline: those messages come back when \
                 their visibility lapses",
                Count(end.unanswered, "release", "releases"),
            );
        }
    }

    /// The message ids of the records not done: a record is done when its delivery was
    /// acked (or moved to the dead-letter queue) and its delete succeeded or is left to
    /// Lambda. On a FIFO queue, a record not done fails the later ones too (every one, or its
    /// group's): Lambda deletes what is reported done, and a later message of a group must
    /// not go before it.
    fn not_done(&self, keys: Vec<Record>, end: &EventEnd) -> Vec<String> {
        let fifo = self.engine().is_fifo();
        let mut broken = Broken::new(self.fifo_failure);
        let mut not_done = Vec::new();
        for key in keys {
            // A record never handed out may still have been deleted: one whose earlier ack
            // was lost, deleted on sight without its handler.
            let deleted = self.deletes.take(&key.receipt);
            let acked = !end.handed_out.contains(&key.receipt) || end.acked.contains(&key.receipt);
            let done = deleted && acked && !(fifo && broken.fails(&key));
            if !done {
                if fifo {
                    broken.by(&key);
                }
                not_done.push(key.message_id);
            }
        }
        not_done
    }
}
