//! Hands what the receive loop brings to handlers (or to a stream): turns messages into
//! deliveries, skips redeliveries whose ack was lost, keeps FIFO groups in order, and runs
//! the graceful shutdown.
//!
//! Beside it: a Lambda event's records (`event.rs`, feature `lambda`), FIFO group order
//! (`fifo.rs`), and the steps before a handler sees a delivery (`preparing.rs`): its payload
//! read from S3 (`payload_reading.rs`, feature `s3`) and its idempotency key claimed
//! (`claiming.rs`).

pub(crate) mod claiming;
#[cfg(feature = "lambda")]
pub(crate) mod event;
pub(crate) mod fifo;
#[cfg(feature = "s3")]
pub(crate) mod payload_reading;
mod preparing;
pub(crate) mod run;

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::instrument::WithSubscriber;

use crate::dead_letter::DeadLetter;
use crate::delivery::run_ties::RunTies;
use crate::delivery::{Delivery, Received};
use crate::engine::claiming::KeyFn;
use crate::engine::run::{ReceiveTask, Run};
use crate::error::Error;
use crate::flow::slot::Slot;
use crate::handler::batch::BatchHandler;
use crate::handler::batch_window::Collector;
use crate::handler::handling::{self, HandlerSettings};
use crate::handler::Handler;
use crate::idempotency::Recording;
use crate::keeper::Keeper;
use crate::keeper_thread::KeeperRuntime;
use crate::lease::context::Context;
use crate::queue::Queue;
use crate::readable::{Count, Secs};
use crate::receive::{ReceiveSettings, ReceivedBatch, Receiver, Receiving};
use crate::retry_policy::RetryPolicy;
use crate::settle_calls::request_batch::{Cohort, RequestsAtOnce};
use crate::settle_calls::unfinished_deletes::Unfinished;
use crate::stats::{Counter, Measure, Stats};
use crate::trace::parent::SpanHook;

/// How long a stop waits past its shutdown timeout for the releases and acks under way: the
/// default shutdown timeout (25 s) and this fit a stop in 28 s, inside the 30 s grace period
/// Kubernetes, ECS and systemd give by default.
pub(crate) const FINAL_FLUSH: Duration = Duration::from_secs(3);

/// What happens to the deliveries handed out, and what each receive waits for first.
#[derive(Clone)]
pub(crate) struct HandOut {
    to: HandTo,
    /// Completes when the handler can take more (a tower service's `poll_ready`): a receive
    /// with none under way waits for it, as for its `max_in_flight` slots; one more beside
    /// them starts only if it completes at once. `None`: always ready.
    ready: Option<ReadyForMore>,
}

/// Where deliveries go.
#[derive(Clone)]
enum HandTo {
    /// One at a time: run a handler, or send it down a stream.
    Each(HandOutEach),
    /// Several together, as a handler batch (a FIFO queue's in rounds), with the run's
    /// shutdown.
    Batch(HandOutBatch),
}

/// Runs a handler on one delivery, or sends it down a stream.
pub(crate) type HandOutEach = Arc<dyn Fn(Delivery) -> BoxFuture<'static, ()> + Send + Sync>;

/// Waits until the handler can take more.
type ReadyForMore = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

impl HandOut {
    /// Each delivery to `each`, ready at all times.
    pub(crate) fn each(each: HandOutEach) -> Self {
        Self {
            to: HandTo::Each(each),
            ready: None,
        }
    }

    fn to_batches(to_handler: HandOutBatch) -> Self {
        Self {
            to: HandTo::Batch(to_handler),
            ready: None,
        }
    }

    /// The same, each receive waiting for `ready` first.
    fn waiting_for(mut self, ready: ReadyForMore) -> Self {
        self.ready = Some(ready);
        self
    }

    /// Completes when the handler can take more deliveries.
    fn ready(&self) -> impl Future<Output = ()> + Send + 'static {
        let ready = self.ready.clone();
        async move {
            if let Some(ready) = ready {
                ready().await;
            }
        }
    }
}

/// Runs a batch handler on some deliveries, for the run the token stops.
pub(crate) type HandOutBatch =
    Arc<dyn Fn(Vec<Delivery>, CancellationToken) -> BoxFuture<'static, ()> + Send + Sync>;

/// The validated settings a consumer runs with.
#[derive(Debug, Clone)]
pub(crate) struct ConsumerSettings {
    pub(crate) receive: ReceiveSettings,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) retry_policy: RetryPolicy,
    /// Where failed messages are moved, if anywhere.
    pub(crate) dead_letter: Option<DeadLetter>,
    /// Called with each `delivery` span before it is entered, if set.
    pub(crate) span_hook: Option<SpanHook>,
    pub(crate) handling: HandlerSettings,
    pub(crate) leases: Leases,
    /// Where payloads are read from (feature `s3`), if the consumer reads them.
    #[cfg(feature = "s3")]
    pub(crate) payloads: Option<crate::payload::store::PayloadStore>,
    /// Where each message's work is recorded, and the user's key for it, if set.
    pub(crate) idempotency: Option<(Recording, Option<KeyFn>)>,
}

/// Where a consumer's leases are kept and settled.
#[derive(Debug, Clone)]
pub(crate) struct Leases {
    /// The queue the keeper and the settle calls use: the consumer's own, or the same queue
    /// through a client of its own when the keeper is isolated.
    pub(crate) queue: Queue,
    /// Where the keeper and the settle calls run.
    pub(crate) keeper_runtime: KeeperRuntime,
}

/// The receive loop and what it feeds: one per consumer.
#[derive(Debug)]
pub(crate) struct Engine {
    ctx: Arc<Context>,
    /// Keeps every delivery of this consumer hidden.
    keeper: Keeper,
    receiver: Receiver,
    shutdown_timeout: Duration,
    handling: HandlerSettings,
    /// Cancelled by `Consumer::shutdown`: every run and stream of this consumer stops
    /// as on its signal, and one started later stops at once.
    shutdown_requested: CancellationToken,
    /// The user's idempotency key (`idempotency_key`), if set.
    idempotency_key: Option<KeyFn>,
}

impl Engine {
    /// An engine that receives from `queue`, and keeps and settles its deliveries as
    /// `settings.leases` says.
    pub(crate) fn new(queue: Queue, settings: ConsumerSettings) -> Self {
        let Leases {
            queue: keeper_queue,
            keeper_runtime,
        } = settings.leases;
        let receive = settings.receive;
        let (recording, idempotency_key) = settings.idempotency.unzip();
        let at_once = RequestsAtOnce::for_slots(receive.max_in_flight);
        let ctx = Context::new(
            &keeper_queue,
            settings.retry_policy,
            keeper_runtime.clone(),
            at_once,
        )
        .with_dead_letter(settings.dead_letter)
        .with_span_hook(settings.span_hook)
        .with_adaptive_visibility(receive.adaptive.clone())
        .with_idempotency(recording);
        #[cfg(feature = "s3")]
        let ctx = ctx.with_payloads(settings.payloads);
        let receiver = Receiver::new(
            queue,
            receive,
            ctx.calls().releases_at_once(),
            ctx.receive_health(),
        );
        Self {
            ctx: Arc::new(ctx),
            keeper: Keeper::new(keeper_runtime),
            receiver,
            shutdown_timeout: settings.shutdown_timeout,
            handling: settings.handling,
            shutdown_requested: CancellationToken::new(),
            idempotency_key: idempotency_key.flatten(),
        }
    }

    /// A hand-out that runs `handler` on each delivery.
    pub(crate) fn each<H: Handler>(&self, handler: H) -> HandOut {
        let handler = Arc::new(handler);
        let settings = self.handling;
        let ready = handler.clone();
        HandOut::each(Arc::new(move |d| {
            Box::pin(handling::run_handler(handler.clone(), d, settings))
        }))
        .waiting_for(Arc::new(move || {
            let handler = ready.clone();
            Box::pin(async move { handler.ready().await })
        }))
    }

    /// A hand-out that runs `handler` on each receive's deliveries.
    pub(crate) fn batches<H: BatchHandler>(&self, handler: H) -> HandOut {
        let handler = Arc::new(handler);
        let ready = handler.clone();
        self.batches_always_ready(handler)
            .waiting_for(Arc::new(move || {
                let handler = ready.clone();
                Box::pin(async move { handler.ready().await })
            }))
    }

    /// A hand-out that runs `handler` on each handler batch, with no wait for the handler to be
    /// ready (an event's batches are there already).
    pub(crate) fn batches_always_ready<H: BatchHandler>(&self, handler: Arc<H>) -> HandOut {
        let (ctx, settings) = (self.ctx.clone(), self.handling);
        HandOut::to_batches(Arc::new(move |deliveries, shutdown| {
            Box::pin(handling::run_batch_handler(
                handler.clone(),
                ctx.clone(),
                shutdown,
                deliveries,
                settings,
            ))
        }))
    }

    /// Pauses or resumes receiving; see `Consumer::pause`.
    pub(crate) fn set_receiving(&self, receiving: Receiving) {
        self.receiver.set(receiving);
    }

    /// Starts the graceful stop of every run and stream of this consumer, now and later.
    pub(crate) fn request_shutdown(&self) {
        self.shutdown_requested.cancel();
    }

    /// Completes when `signal` does, or when a shutdown is requested.
    pub(crate) async fn stop_signal<S: Future<Output = ()>>(&self, signal: S) {
        tokio::select! {
            () = signal => {}
            () = self.shutdown_requested.cancelled() => {}
        }
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.receiver.is_paused()
    }

    pub(crate) fn queue_name(&self) -> &str {
        self.ctx.queue_name()
    }

    pub(crate) fn receive_settings(&self) -> &ReceiveSettings {
        self.receiver.settings()
    }

    pub(crate) fn receiver(&self) -> &Receiver {
        &self.receiver
    }

    /// Deliveries held right now.
    pub(crate) fn in_flight(&self) -> usize {
        usize::try_from(self.ctx.held()).unwrap_or(usize::MAX)
    }

    /// Where each message's work is recorded, if anywhere.
    #[cfg(test)]
    pub(crate) fn idempotency(&self) -> Option<&crate::idempotency::Recording> {
        self.ctx.idempotency()
    }

    pub(crate) fn is_isolated(&self) -> bool {
        self.ctx.calls().is_isolated()
    }

    pub(crate) fn stats(&self) -> Stats {
        let slots = self.receiver.slots_taken();
        self.ctx.stats(u64::try_from(slots).unwrap_or(u64::MAX))
    }

    /// Receives and hand-outs until `signal` completes or a fatal error, then shuts down
    /// gracefully (see `Consumer::run_until`).
    pub(crate) async fn run_until<S>(
        self: &Arc<Self>,
        hand_out: HandOut,
        signal: S,
    ) -> Result<(), Error>
    where
        S: Future<Output = ()>,
    {
        let run = self.new_run(CancellationToken::new(), CancellationToken::new());
        let late = run.late.clone();
        // Dropped during the shutdown, the run's deliveries are released at once (before it,
        // the loop's task sees to that).
        let _release_on_drop = run.ties.shutdown().clone().drop_guard();
        // Until the receives under way are in, the run goes on as before the signal (but
        // starts no receive): a message released now could be taken by one of them again.
        let stop = CancellationToken::new();
        let engine = self.clone();
        let stop_receiving = stop.clone();
        let receiving = async move {
            let mut run = run;
            // Declared after the run, so dropped before it: if the loop is dropped (its task
            // aborted) or panics, the run is cancelled first, and the deliveries its aborted
            // handlers drop are released at once.
            let release_on_drop = run.ties.shutdown().clone().drop_guard();
            let result = engine.receive(&mut run, &hand_out, &stop_receiving).await;
            release_on_drop.disarm();
            (result, run)
        };
        let receiving = ReceiveTask::start(receiving);
        let (ended, deadline) = self.receive_until(receiving, signal, &stop, &late).await;
        let (result, run) = ended?;
        self.shut_down(run, deadline).await;
        result
    }

    /// Drives `receiving` (the receive loop of a run, stopped by `stop`) until `signal`, then
    /// until the receives under way are in: what they bring is handed out while the shutdown
    /// timeout allows. Past it, the run's `late` token is cancelled: what the receives still
    /// bring is kept hidden and released once they are all in. Returns the loop's result and
    /// the shutdown's deadline.
    pub(crate) async fn receive_until<R, S>(
        &self,
        receiving: R,
        signal: S,
        stop: &CancellationToken,
        late: &CancellationToken,
    ) -> (R::Output, Instant)
    where
        R: Future,
        S: Future<Output = ()>,
    {
        tokio::pin!(receiving);
        let signal = self.stop_signal(signal);
        let ended = tokio::select! {
            biased;
            () = signal => None,
            result = &mut receiving => Some(result),
        };
        let deadline = Instant::now() + self.shutdown_timeout;
        if let Some(result) = ended {
            return (result, deadline);
        }
        tracing::info!(
            queue = %self.queue_name(),
            shutdown_timeout = %Secs(self.shutdown_timeout),
            "stopping: no new receive; handlers may run until the shutdown timeout, then what \
             is still held is released"
        );
        stop.cancel();
        let result = tokio::select! {
            result = &mut receiving => result,
            () = tokio::time::sleep_until(deadline) => {
                tracing::info!(
                    "shutdown timeout passed with a receive under way: what it brings is \
                     released once it is in"
                );
                late.cancel();
                receiving.await
            }
        };
        (result, deadline)
    }

    /// Receives and hand-outs for `run` until `stop` is cancelled (once the receives under
    /// way are in) or a fatal error.
    pub(crate) async fn receive(
        &self,
        run: &mut Run,
        hand_out: &HandOut,
        stop: &CancellationToken,
    ) -> Result<(), Error> {
        let hand_out = &self.preparing(hand_out);
        self.receiver
            .run(
                stop,
                || hand_out.ready(),
                |received| {
                    // Group tasks log their own failures; this only frees finished ones.
                    while run.groups.try_join_next().is_some() {}
                    self.hand_out_received(received, run, hand_out, Order::Queue);
                },
            )
            .await
    }

    /// Lets the FIFO groups already received finish handing out their deliveries, and
    /// releases what arrived too late to be handed out.
    pub(crate) async fn finish_groups(&self, run: &mut Run) {
        run.release_late().await;
        while run.groups.join_next().await.is_some() {}
    }

    /// The graceful shutdown of a stream, once receiving has stopped: releases what was not
    /// handed out yet (the FIFO deliveries waiting their turn, and what `release_buffered`
    /// drops), waits until `deadline` for the deliveries handed out to be settled or
    /// dropped, then for the settle calls under way.
    pub(crate) async fn drain_stream(
        &self,
        mut run: Run,
        deadline: Instant,
        release_buffered: impl Fn(),
    ) {
        run.ties.shutdown().cancel();
        release_buffered();
        self.finish_groups(&mut run).await;
        release_buffered();
        let held = run.ties.held();
        if held > 0 {
            tracing::info!(
                "waiting for {} handed out to be settled, up to {}",
                Count(held, "delivery", "deliveries"),
                Secs(deadline.saturating_duration_since(Instant::now()))
            );
        }
        if tokio::time::timeout_at(deadline, run.ties.none_held())
            .await
            .is_err()
        {
            tracing::warn!(
                held = run.ties.held(),
                "deliveries still held at the shutdown timeout: they stay with their holders, \
                 and dropping one releases it at once"
            );
        }
        self.flush(deadline).await;
        tracing::info!(queue = %self.queue_name(), "stream stopped");
    }

    /// Turns a receive into deliveries (the keeper keeps them from here) and starts their
    /// groups, in `order`. Never awaits, so a shutdown cannot cut it in half.
    fn hand_out_received(
        &self,
        received: ReceivedBatch,
        run: &mut Run,
        hand_out: &HandOut,
        order: Order,
    ) {
        let ctx = &self.ctx;
        let (ties, groups, late) = (&run.ties, &mut run.groups, run.late.clone());
        let shutdown = ties.shutdown();
        ctx.observe(Measure::ReceiveBatchSize, received.messages.len() as f64);
        ctx.visibility_applied(received.visibility_timeout);
        let mut slots = received.slots.into_iter();
        let mut deliveries = Vec::with_capacity(received.messages.len());
        // A FIFO group's deliveries settle one after another, never together.
        let cohort = (!ctx.is_fifo() && received.messages.len() > 1).then(Arc::<Cohort>::default);
        for message in received.messages {
            // A server that returns more than asked still gets every message handled (and
            // kept); only the slot accounting is exceeded.
            let slot = slots.next();
            let message_id = message.message_id().unwrap_or_default();
            let Some(receipt) = message.receipt_handle() else {
                tracing::warn!(%message_id, "skipped a message without a receipt handle");
                continue;
            };
            if let Some(unfinished) = ctx.take_unfinished(message_id) {
                finish_delete(ctx, unfinished, (message_id, receipt), slot, ties);
                continue;
            }
            let at_receive = Received {
                received_at: received.received_at,
                returned_at: received.returned_at,
                visibility_timeout: received.visibility_timeout,
                slot,
                run: ties.clone(),
                cohort: cohort.clone(),
                holder: received.holder,
            };
            let delivery = Delivery::start(ctx.clone(), message, at_receive);
            if order.is_event() {
                run.event_leases.push(delivery.lease().clone());
            }
            deliveries.push(delivery);
        }
        if late.is_cancelled() {
            // Received after the shutdown's deadline (a receive under way at the signal that
            // answered late): too late to be handled. Kept hidden (other receives may still be
            // under way, and would take them again) and released once all are in.
            run.late_arrivals.extend(deliveries);
            return;
        }
        match &hand_out.to {
            HandTo::Each(each) => {
                for group in order.groups(deliveries, ctx.is_fifo()) {
                    let each = each.clone();
                    // Boxed: the task then moves a pointer around, not the whole state machine.
                    // A spawned task logs for the subscriber its worker sees (the global one);
                    // these carry the run's, a thread-scoped one included.
                    groups.spawn(
                        Box::pin(fifo::run_group(group, shutdown.clone(), move |d| each(d)))
                            .with_current_subscriber(),
                    );
                }
            }
            HandTo::Batch(_) if deliveries.is_empty() => {}
            HandTo::Batch(to_handler) if order.is_event() => {
                // FIFO: one handler batch in the event's order, whatever its size.
                let max = if ctx.is_fifo() {
                    deliveries.len()
                } else {
                    self.handling.batching.max
                };
                let mut deliveries = deliveries;
                while !deliveries.is_empty() {
                    let rest = deliveries.split_off(max.min(deliveries.len()));
                    let handling =
                        to_handler(std::mem::replace(&mut deliveries, rest), shutdown.clone());
                    groups.spawn(handling.with_current_subscriber());
                }
            }
            HandTo::Batch(to_handler) => {
                let batching = self.handling.batching;
                if !batching.window.is_zero() {
                    let collector = run.collector.get_or_insert_with(|| {
                        let hand_out = self.hand_out_batches(to_handler, shutdown);
                        let (collector, task) = Collector::start(batching, hand_out);
                        groups.spawn(task.with_current_subscriber());
                        collector
                    });
                    collector.push(deliveries);
                    return;
                }
                let hand_out = self.hand_out_batches(to_handler, shutdown);
                let mut deliveries = deliveries;
                while !deliveries.is_empty() {
                    let rest = deliveries.split_off(batching.max.min(deliveries.len()));
                    let handling = hand_out(std::mem::replace(&mut deliveries, rest));
                    groups.spawn(handling.with_current_subscriber());
                }
            }
        }
    }

    /// Hands each handler batch to `to_handler` (a FIFO queue's in rounds, one delivery of
    /// each group at a time), for the run that `shutdown` stops.
    fn hand_out_batches(
        &self,
        to_handler: &HandOutBatch,
        shutdown: &CancellationToken,
    ) -> crate::handler::batch_window::HandOutFilled {
        let (to_handler, shutdown) = (to_handler.clone(), shutdown.clone());
        let fifo = self.ctx.is_fifo();
        Box::new(move |deliveries| {
            let (to_handler, token) = (to_handler.clone(), shutdown.clone());
            Box::pin(fifo::run_batches(
                deliveries,
                fifo,
                shutdown.clone(),
                move |ds| to_handler(ds, token.clone()),
            ))
        })
    }

    /// Steps 3 to 6 of the shutdown described on `Consumer::run_until`; handlers may run
    /// until `deadline`.
    async fn shut_down(&self, run: Run, deadline: Instant) {
        run.drain(deadline, deadline.max(Instant::now()) + FINAL_FLUSH)
            .await;
        self.flush(deadline).await;
        // The deadline is the shutdown timeout after the signal (or the loop's end).
        let stopping_for = deadline
            .checked_sub(self.shutdown_timeout)
            .map(|signalled| Secs(signalled.elapsed()));
        tracing::info!(
            queue = %self.queue_name(),
            stopping_for = stopping_for.map(tracing::field::display),
            "consumer stopped"
        );
    }

    /// Waits for the releases and acks under way, for at most [`FINAL_FLUSH`] past the
    /// shutdown's `deadline` (or past now, if a receive answered later than it).
    async fn flush(&self, deadline: Instant) {
        let end = deadline.max(Instant::now()) + FINAL_FLUSH;
        let left = self.ctx.calls().flush(end).await;
        if let Some(recording) = self.ctx.idempotency() {
            // The keys of the deliveries released by the shutdown, given back.
            recording.settled(end).await;
        }
        if left > 0 {
            tracing::warn!(
                "{} still unanswered {} after the shutdown timeout: \
                 stopping without them (their messages come back when their visibility \
                 lapses)",
                Count(left, "ack or release", "acks and releases"),
                Secs(FINAL_FLUSH)
            );
        }
    }

    /// A run that `shutdown` stops, and `late` ends (see `Run::late`).
    pub(crate) fn new_run(&self, shutdown: CancellationToken, late: CancellationToken) -> Run {
        Run {
            ties: RunTies::new(shutdown, self.keeper.clone()),
            groups: JoinSet::new(),
            late,
            late_arrivals: Vec::new(),
            collector: None,
            event_leases: Vec::new(),
        }
    }
}

/// The order in which one receive's deliveries are handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// The consumer's own receive: each message at once, a FIFO group's one at a time (a
    /// batch handler's in rounds, one of each group), and batches cut by the batch settings.
    Queue,
    /// An event another service received (a Lambda invocation's): a FIFO queue's messages
    /// one at a time in the event's order, and at the first one not acked the rest of the
    /// event released, or the rest of its group, as the event's `FifoFailure` says (a batch
    /// handler's in one batch); other queues' as for `Queue`, without a batch window.
    #[cfg(feature = "lambda")]
    Event(event::FifoFailure),
}

impl Order {
    /// Deliveries split into the groups handed out one delivery at a time.
    fn groups(self, deliveries: Vec<Delivery>, fifo: bool) -> Vec<VecDeque<Delivery>> {
        match self {
            #[cfg(feature = "lambda")]
            Order::Event(event::FifoFailure::FailsTheRest) if fifo => vec![deliveries.into()],
            _ => fifo::partition(deliveries, fifo),
        }
    }

    /// `true` for an event another service received.
    fn is_event(self) -> bool {
        match self {
            Order::Queue => false,
            #[cfg(feature = "lambda")]
            Order::Event(_) => true,
        }
    }
}

/// Deletes a message that came back although its delete was due (an ack that found its
/// delivery lost, or a move to the dead-letter queue whose copy is sent): its handler is not
/// called again, and no second copy is sent. Runs in a settle task that shutdown waits for;
/// `slot` is held until the delete is done.
fn finish_delete(
    ctx: &Arc<Context>,
    unfinished: Unfinished,
    (message_id, receipt): (&str, &str),
    slot: Option<Slot>,
    run: &RunTies,
) {
    match unfinished {
        Unfinished::Ack => {
            ctx.count(Counter::SkippedRedeliveries);
            tracing::info!(
                %message_id,
                "deleting a redelivered message whose ack had failed (its delivery was lost); \
                 the handler is not called again"
            );
        }
        Unfinished::Move => tracing::info!(
            %message_id,
            "deleting a redelivered message whose copy is in the dead-letter queue already \
             (deleting it had failed); the handler is not called again"
        ),
    }
    let settle = ctx.clone();
    let receipt = receipt.to_owned();
    let message_id = message_id.to_owned();
    let delete = async move {
        match settle.calls().delete(&receipt, None).await {
            Ok(()) if unfinished == Unfinished::Move => {
                settle.count(Counter::DeadLettered);
                tracing::warn!(%message_id, "moved to the dead-letter queue");
            }
            Ok(()) => {}
            Err(err) => {
                settle.remember_unfinished(&message_id, unfinished);
                tracing::warn!(%message_id, error = %err, "deleting a redelivered message failed");
            }
        }
        drop(slot);
    };
    if let Some(runtime) = ctx.calls().runtime(None) {
        // The run's too: an event's answer counts on it (the record is done once deleted).
        ctx.calls()
            .spawn(run.background().track_future(delete), &runtime);
    }
}
