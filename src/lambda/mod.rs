//! The same handlers in AWS Lambda, fed by an SQS event source mapping (feature `lambda`).
//!
//! [`run`] serves a function's invocations with a [`Handler`], [`run_batch`] with a
//! [`BatchHandler`]: each record of the event becomes a [`Delivery`](crate::Delivery), its
//! lease renewed before its handler runs and kept by the keeper until the invocation answers,
//! and the invocation answers with a partial batch response naming the records not done.
//! [`Function`] sets the consumer's settings, the deadline margin, what an ack does and what a
//! FIFO failure fails; [`Invocations`] handles events without the Lambda runtime (in tests).
//! The guide's [lambda page](crate::guide::lambda) tells what differs from a worker, and how
//! to deploy.
//!
//! ```no_run
//! use sqs_consumer::{Delivery, Error};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
//!     let client = aws_sdk_sqs::Client::new(&config);
//!     sqs_consumer::lambda::run(client, |delivery: Delivery| async move {
//!         println!("handling {}", delivery.message_id());
//!         delivery.ack().await // left to Lambda, which deletes what is reported done
//!     })
//!     .await
//! }
//! ```

mod invocation;
mod records;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::types::Message;
use futures_util::future::BoxFuture;
use lambda_runtime::{Diagnostic, LambdaEvent};

use crate::builder::ConsumerBuilder;
use crate::consumer::Consumer;
use crate::engine::{Engine, HandOut};
use crate::error::Error;
use crate::handler::batch::BatchHandler;
use crate::handler::Handler;
use crate::lease::AfterAck;
use crate::memory::MemoryQueue;
use crate::queue::deferred_deletes::{DeferredDeletes, Deletes};
use crate::stats::Stats;
use invocation::{QueueHandling, Times};

pub use crate::engine::event::FifoFailure;

/// How long before the function's deadline the handlers still running are cancelled, by
/// default: their messages are released and reported failed, and the invocation answers in
/// time with what was done.
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_millis(500);

/// Serves this Lambda function's SQS invocations with `handler` until the runtime stops,
/// with the default settings ([`Function`] chooses others).
///
/// # Errors
///
/// [`Error::LambdaRuntime`] when the process does not run in Lambda, or the Lambda Runtime
/// API fails.
pub async fn run<H: Handler>(client: aws_sdk_sqs::Client, handler: H) -> Result<(), Error> {
    Function::new(client).run(handler).await
}

/// [`run`], with a [`BatchHandler`]: each invocation's deliveries in batches (a FIFO queue's
/// whole event in one).
///
/// # Errors
///
/// As for [`run`].
pub async fn run_batch<H: BatchHandler>(
    client: aws_sdk_sqs::Client,
    handler: H,
) -> Result<(), Error> {
    Function::new(client).run_batch(handler).await
}

/// A Lambda function's consumer settings: what [`ConsumerBuilder`] sets for a worker (the
/// retry policy, ack mode, handler timeout, dead-letter step, payloads), and the deadline
/// margin.
///
/// ```
/// use std::time::Duration;
/// use sqs_consumer::lambda::Function;
/// use sqs_consumer::{AckMode, Delivery, MemoryQueue, RetryPolicy};
///
/// # fn main() -> Result<(), sqs_consumer::Error> {
/// # let queue = MemoryQueue::new();
/// let invocations = Function::in_memory(&queue) // `Function::new(client)` in Lambda
///     .consumer(|builder| {
///         builder
///             .ack_mode(AckMode::OnSuccess)
///             .handler_timeout(Duration::from_secs(60))
///             .retry_policy(RetryPolicy::ReleaseNow)
///     })
///     .deadline_margin(Duration::from_secs(1))
///     .handler(|_: Delivery| async { Ok::<_, sqs_consumer::Error>(()) })?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Function {
    source: Source,
    configure: Configure,
    deadline_margin: Duration,
    acks: Acks,
    fifo_failure: FifoFailure,
}

/// What an ack (or a move to the dead-letter queue, whose original is deleted) does in an
/// invocation. Either way the record is reported done, and is visible to nobody before the
/// answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Acks {
    /// Nothing is sent: the keeper goes on keeping the record hidden until the invocation
    /// answers, and Lambda deletes it then. Costs no request where the invocation's other
    /// records are extended anyway; a done record whose invocation dies before answering
    /// (a crash, not a timeout: the deadline margin answers before those) is handled again.
    /// The default.
    #[default]
    LeftToLambda,
    /// `DeleteMessage` at once, as in a worker, batched; `ack` says `Ok` once SQS answered,
    /// and Lambda's own delete after the answer finds the message gone. One request more for
    /// every ten records done, and done is done even if the invocation dies afterwards.
    DeletedAtOnce,
}

#[derive(Clone)]
enum Source {
    Sqs(aws_sdk_sqs::Client),
    Memory(MemoryQueue),
}

type Configure = Arc<dyn Fn(ConsumerBuilder) -> ConsumerBuilder + Send + Sync>;

/// The deadline margins `deadline_margin` takes.
const DEADLINE_MARGINS: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(60);

impl Function {
    /// A function whose events come from queues reached through `client` (its region the
    /// queues').
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        Self::from(Source::Sqs(client))
    }

    /// A function whose events come from `queue`, whatever queue ARN they name: for tests of
    /// a function's handler, with events made by [`event`] from what `queue` gives.
    pub fn in_memory(queue: &MemoryQueue) -> Self {
        Self::from(Source::Memory(queue.clone()))
    }

    fn from(source: Source) -> Self {
        Self {
            source,
            configure: Arc::new(|builder| builder),
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            acks: Acks::default(),
            fifo_failure: FifoFailure::default(),
        }
    }

    /// Settings of the consumer each queue's records are handled with, on the builder
    /// [`Consumer::builder`] gives for the queue's ARN. The receive settings (`wait_time`,
    /// `receive_batch_size`, rates, `batch_window`) play no part: Lambda receives. `max_in_flight`
    /// bounds the handlers running at once. `visibility_timeout` and `adaptive_visibility`
    /// are refused: Lambda's receive applies the queue's own visibility timeout.
    ///
    /// Defaults to the builder's defaults.
    #[must_use]
    pub fn consumer(
        mut self,
        configure: impl Fn(ConsumerBuilder) -> ConsumerBuilder + Send + Sync + 'static,
    ) -> Self {
        self.configure = Arc::new(configure);
        self
    }

    /// How long before the function's deadline the handlers still running are cancelled:
    /// their messages are released (visible again at once) and reported failed, and the
    /// invocation answers with what was done, so that Lambda deletes it. Half the margin
    /// goes to the releases, the other half to the answer.
    ///
    /// Defaults to 500 ms ([`DEFAULT_DEADLINE_MARGIN`]); 100 ms..=60 s.
    #[must_use]
    pub fn deadline_margin(mut self, margin: Duration) -> Self {
        self.deadline_margin = margin;
        self
    }

    /// What an ack does: left to Lambda, the record kept hidden until the answer, or a
    /// `DeleteMessage` at once. The guide's [lambda page](crate::guide::lambda) gives what
    /// each costs.
    ///
    /// Defaults to [`Acks::LeftToLambda`].
    #[must_use]
    pub fn acks(mut self, acks: Acks) -> Self {
        self.acks = acks;
        self
    }

    /// On a FIFO queue, which later records of the event a record not done fails with it:
    /// every one (AWS's rule), or its own message group's only.
    ///
    /// Defaults to [`FifoFailure::FailsTheRest`].
    #[must_use]
    pub fn fifo_failure(mut self, failure: FifoFailure) -> Self {
        self.fifo_failure = failure;
        self
    }

    /// The invocations of a function that runs `handler` on each record.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a setting out of its range, as
    /// [`build`](ConsumerBuilder::build) says, or one refused in Lambda (see
    /// [`consumer`](Function::consumer)).
    pub fn handler<H: Handler>(self, handler: H) -> Result<Invocations, Error> {
        let handler = Arc::new(handler);
        self.invocations(Arc::new(move |engine: &Engine| {
            engine.each_of_event(handler.clone())
        }))
    }

    /// The invocations of a function that runs `handler` on each event's deliveries, in
    /// batches of at most the builder's `max_batch` (a FIFO queue's event in one batch).
    ///
    /// # Errors
    ///
    /// As for [`handler`](Function::handler).
    pub fn batch_handler<H: BatchHandler>(self, handler: H) -> Result<Invocations, Error> {
        let handler = Arc::new(handler);
        self.invocations(Arc::new(move |engine: &Engine| {
            engine.batches_always_ready(handler.clone())
        }))
    }

    /// Serves the function's invocations with `handler` until the Lambda runtime stops.
    ///
    /// # Errors
    ///
    /// As for [`handler`](Function::handler), and [`Error::LambdaRuntime`] as for [`run`].
    pub async fn run<H: Handler>(self, handler: H) -> Result<(), Error> {
        serve(self.handler(handler)?).await
    }

    /// [`run`](Function::run), with a [`BatchHandler`].
    ///
    /// # Errors
    ///
    /// As for [`run`](Function::run).
    pub async fn run_batch<H: BatchHandler>(self, handler: H) -> Result<(), Error> {
        serve(self.batch_handler(handler)?).await
    }

    fn invocations(self, hand_out: MakeHandOut) -> Result<Invocations, Error> {
        if !DEADLINE_MARGINS.contains(&self.deadline_margin) {
            return Err(Error::invalid(
                "deadline_margin",
                self.deadline_margin,
                "100 ms..=60 s",
            ));
        }
        // Checked now, for a queue of no account: a bad setting stops the function at its
        // start, not at every invocation.
        let checked = self.builder("checked-settings");
        checked.check_for_lambda()?;
        drop(checked.build()?);
        Ok(Invocations(Arc::new(Shared {
            function: self,
            hand_out,
            queues: Mutex::default(),
        })))
    }

    /// The builder of `queue`'s consumer, as configured.
    fn builder(&self, queue: &str) -> ConsumerBuilder {
        let builder = match &self.source {
            Source::Sqs(client) => Consumer::builder(client.clone(), queue),
            Source::Memory(memory) => Consumer::in_memory(memory),
        };
        (self.configure)(builder)
    }
}

impl fmt::Debug for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Function")
            .field("deadline_margin", &self.deadline_margin)
            .field("acks", &self.acks)
            .field("fifo_failure", &self.fifo_failure)
            .finish_non_exhaustive()
    }
}

type MakeHandOut = Arc<dyn Fn(&Engine) -> HandOut + Send + Sync>;

/// A function's invocations: SQS events in, partial batch responses out. A
/// `lambda_runtime` service ([`run`] serves one); cheap to clone.
///
/// Each queue named by an event gets its consumer at its first event, kept for the
/// function's life: its visibility timeout is read once.
#[derive(Clone)]
pub struct Invocations(Arc<Shared>);

struct Shared {
    function: Function,
    hand_out: MakeHandOut,
    /// Each queue's consumer, by its ARN.
    queues: Mutex<HashMap<String, Arc<QueueHandling>>>,
}

impl Invocations {
    /// Handles `event` for a function that ends at `deadline` (Lambda's, from the
    /// invocation's context): the records not done.
    ///
    /// # Errors
    ///
    /// [`Error::LambdaEvent`] for an event a partial batch response cannot answer truthfully
    /// (the guide's [lambda page](crate::guide::lambda) lists each case), before any record
    /// of it is handled; logged at `error`. Lambda retries the whole batch.
    pub async fn invoke(
        &self,
        event: SqsEvent,
        deadline: SystemTime,
    ) -> Result<SqsBatchResponse, Error> {
        let answer = self.answer(event, deadline).await;
        if let Err(err) = &answer {
            tracing::error!(
                error = %err.chain(),
                "answering the invocation with an error, none of its records handled: Lambda \
                 retries the whole batch"
            );
        }
        answer
    }

    async fn answer(
        &self,
        event: SqsEvent,
        deadline: SystemTime,
    ) -> Result<SqsBatchResponse, Error> {
        let times = Times::new(deadline, self.0.function.deadline_margin);
        // Every queue ready (its consumer, its visibility timeout) before any record is
        // handled: an event that cannot be handled whole is answered with an error.
        let mut ready = Vec::new();
        for (arn, records) in by_queue(event.records)? {
            let unreadable = |err: Error| Error::LambdaEvent {
                reason: format!("the records of queue {arn} cannot be kept hidden"),
                source: Some(Box::new(err)),
            };
            let queue = self.queue(&arn).map_err(unreadable)?;
            let visibility_timeout = queue.visibility_timeout(times).await.map_err(unreadable)?;
            ready.push((queue, records, visibility_timeout));
        }
        let handled = ready
            .into_iter()
            .map(|(queue, records, visibility_timeout)| async move {
                queue.handle(records, visibility_timeout, times).await
            });
        let not_done = futures_util::future::join_all(handled).await;
        let mut response = SqsBatchResponse::default();
        response.batch_item_failures = not_done.into_iter().flatten().map(failure).collect();
        Ok(response)
    }

    /// The counters of the consumer of the queue `queue_arn` names, once an event named it.
    pub fn stats(&self, queue_arn: &str) -> Option<Stats> {
        let queues = self.0.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.get(queue_arn).map(|q| q.consumer.stats())
    }

    /// The consumer of the queue `arn` names: made and kept at its first event.
    fn queue(&self, arn: &str) -> Result<Arc<QueueHandling>, Error> {
        let mut queues = self.0.queues.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queues.get(arn) {
            return Ok(queue.clone());
        }
        let function = &self.0.function;
        let (deletes, after_ack) = match function.acks {
            Acks::LeftToLambda => (Deletes::LeftToLambda, AfterAck::KeepHidden),
            Acks::DeletedAtOnce => (Deletes::SentAtOnce, AfterAck::LetGo),
        };
        let deletes = DeferredDeletes::new(deletes);
        let consumer = function
            .builder(arn)
            .defer_deletes(deletes.clone())
            .build()?;
        let hand_out = (self.0.hand_out)(consumer.engine());
        let queue = Arc::new(QueueHandling {
            consumer,
            deletes,
            hand_out,
            after_ack,
            fifo_failure: function.fifo_failure,
        });
        queues.insert(arn.to_owned(), queue.clone());
        Ok(queue)
    }
}

impl fmt::Debug for Invocations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invocations")
            .field("function", &self.0.function)
            .finish_non_exhaustive()
    }
}

/// The invocation's answer: the partial batch response, or an error (its chain as the
/// message) for an event that response cannot answer truthfully.
impl lambda_runtime::Service<LambdaEvent<SqsEvent>> for Invocations {
    type Response = SqsBatchResponse;
    type Error = Diagnostic;
    type Future = BoxFuture<'static, Result<SqsBatchResponse, Diagnostic>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Diagnostic>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<SqsEvent>) -> Self::Future {
        let invocations = self.clone();
        Box::pin(async move {
            let deadline = event.context.deadline();
            let answer = invocations.invoke(event.payload, deadline).await;
            answer.map_err(|err| Diagnostic {
                error_type: "sqs_consumer::Error::LambdaEvent".to_owned(),
                error_message: err.chain().to_string(),
            })
        })
    }
}

/// An SQS event of `messages` received from the queue `queue_arn` names, as Lambda would
/// send it: for tests of a function, with messages received from a [`MemoryQueue`] or a
/// test server (ask for all system attributes, so that the receive count comes along).
pub fn event(queue_arn: &str, messages: impl IntoIterator<Item = Message>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages
        .into_iter()
        .map(|m| records::record(queue_arn, m))
        .collect();
    event
}

/// Serves `invocations` with the Lambda runtime, which reads the function's environment.
async fn serve(invocations: Invocations) -> Result<(), Error> {
    // The runtime panics without these; outside Lambda, say so instead.
    for name in [
        "AWS_LAMBDA_RUNTIME_API",
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_FUNCTION_VERSION",
    ] {
        if std::env::var_os(name).is_none() {
            return Err(Error::LambdaRuntime {
                reason: format!("{name} is not set: this process does not run in AWS Lambda"),
                source: None,
            });
        }
    }
    // Concurrent invocations where Lambda runs several in one process
    // (`AWS_LAMBDA_MAX_CONCURRENCY`), one at a time otherwise.
    lambda_runtime::run_concurrent(invocations)
        .await
        .map_err(|source| Error::LambdaRuntime {
            reason: source.to_string(),
            source: Some(source),
        })
}

/// The event's records by the queue they came from, each queue's in the event's order; an
/// error for an event a partial batch response cannot answer truthfully: no records, a
/// record that is not SQS's, or one without the message id that names it, the receipt handle
/// that keeps it or the queue it came from.
fn by_queue(records: Vec<SqsMessage>) -> Result<Vec<(String, Vec<SqsMessage>)>, Error> {
    if records.is_empty() {
        return Err(malformed(
            "it has no records: it is not an SQS event".to_owned(),
        ));
    }
    let mut queues: Vec<(String, Vec<SqsMessage>)> = Vec::new();
    for (i, record) in records.into_iter().enumerate() {
        let present = |field: &Option<String>| field.as_deref().is_some_and(|f| !f.is_empty());
        let id = record.message_id.as_deref().unwrap_or_default();
        let missing = if record.event_source.as_deref() != Some("aws:sqs") {
            Some(format!(
                "record {i} is not an SQS record (its eventSource is {:?})",
                record.event_source.as_deref().unwrap_or("missing")
            ))
        } else if !present(&record.message_id) {
            Some(format!(
                "record {i} has no messageId: the answer could not name it"
            ))
        } else if !present(&record.receipt_handle) {
            Some(format!(
                "record {i} (message {id}) has no receiptHandle: it could be neither kept \
                 hidden nor released"
            ))
        } else if !present(&record.event_source_arn) {
            Some(format!(
                "record {i} (message {id}) has no eventSourceARN: its queue is unknown"
            ))
        } else {
            None
        };
        if let Some(reason) = missing {
            return Err(malformed(reason));
        }
        let arn = record.event_source_arn.clone().unwrap_or_default();
        match queues.iter_mut().find(|(q, _)| *q == arn) {
            Some((_, records)) => records.push(record),
            None => queues.push((arn, vec![record])),
        }
    }
    Ok(queues)
}

fn malformed(reason: String) -> Error {
    Error::LambdaEvent {
        reason,
        source: None,
    }
}

fn failure(message_id: String) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    failure.item_identifier = message_id;
    failure
}
