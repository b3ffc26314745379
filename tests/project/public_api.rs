//! The public API, written down in one place: every public path of the crate, named once.
//!
//! `ROOT` and `MEMORY` are the names the crate root and `sqs_consumer::memory` export (checked
//! against `src/lib.rs` and `src/memory/mod.rs`, so a name added or removed there fails
//! here); `every_public_item` (compiled, never run) uses every public function, method,
//! field and variant, so a rename or a changed signature fails to compile here. A change to
//! the public API changes this file, and shows in review; write it in `CHANGELOG.md` too.
#![allow(dead_code, unused_must_use, clippy::no_effect_underscore_binding)]

use std::collections::BTreeSet;
use std::time::Duration;

use sqs_consumer::idempotency::{
    Begun, Hold, Key, MemoryStore, Owner, Ownership, Store, StoreError, StoreFuture,
};
use sqs_consumer::memory::{
    Action, Faults, InjectedFaults, MemoryQueueBuilder, RequestCounts, SendOptions,
};
#[allow(deprecated)]
use sqs_consumer::{
    AckMode, Backlog, Batch, BatchHandler, BoxError, Consumer, ConsumerBuilder, ConsumerHandle,
    DeadLetterQueue, Delivery, DeliveryStream, Error, ErrorKind, Handler, InFlightLimit,
    LostReason, MemoryQueue, RateLimit, RetryPolicy, Stats,
};

/// What the crate root exports: its types, and its modules (`memory`, `idempotency`, `guide`,
/// and `lambda` with its feature).
const ROOT: &[&str] = &[
    "AckMode",
    "Backlog",
    "Batch",
    "BatchHandler",
    "BoxError",
    "Consumer",
    "ConsumerBuilder",
    "ConsumerHandle",
    "DeadLetterQueue",
    "Delivery",
    "DeliveryStream",
    "Error",
    "ErrorKind",
    "EventBridgeEvent",
    "Handler",
    "InFlightLimit",
    "LostReason",
    "MemoryQueue",
    "PayloadLocation",
    "RateLimit",
    "RetryPolicy",
    "ServiceBatchHandler",
    "ServiceHandler",
    "SnsMessageAttribute",
    "SnsNotification",
    "Stats",
    "TraceCarrier",
    "TraceParent",
    "guide",
    "idempotency",
    "lambda",
    "memory",
    "shutdown_signal",
];

/// The types `sqs_consumer::lambda` exports (feature `lambda`).
const LAMBDA: &[&str] = &["Acks", "FifoFailure", "Function", "Invocations"];

/// What `sqs_consumer::idempotency` exports.
const IDEMPOTENCY: &[&str] = &[
    "Begun",
    "DynamoDbStore",
    "Hold",
    "Key",
    "MemoryStore",
    "Owner",
    "Ownership",
    "Store",
    "StoreError",
    "StoreFuture",
];

/// What `sqs_consumer::memory` exports.
const MEMORY: &[&str] = &[
    "Action",
    "Faults",
    "InjectedFaults",
    "MemoryQueue",
    "MemoryQueueBuilder",
    "RequestCounts",
    "SendOptions",
];

/// The names a file exports: its `pub use` lists and `pub mod`s, and its own `pub` items.
fn exported(path: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("pub use ") {
            let list = rest.trim_end_matches(';');
            let list = match list.split_once('{') {
                Some((_, inner)) => inner.trim_end_matches('}').to_owned(),
                None => list.rsplit("::").next().unwrap().to_owned(),
            };
            names.extend(list.split(',').map(|n| n.trim().to_owned()));
        } else if let Some(rest) = line.strip_prefix("pub mod ") {
            names.insert(rest.trim_end_matches(';').trim().to_owned());
        } else if let Some(rest) = line
            .strip_prefix("pub struct ")
            .or_else(|| line.strip_prefix("pub enum "))
            .or_else(|| line.strip_prefix("pub trait "))
            .or_else(|| line.strip_prefix("pub type "))
        {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.insert(name);
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

fn listed(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn the_root_and_memory_export_exactly_the_listed_names() {
    assert_eq!(
        exported("src/lib.rs"),
        listed(ROOT),
        "the crate root's exports changed: update ROOT (and CHANGELOG.md)"
    );
    assert_eq!(
        exported("src/memory/mod.rs"),
        listed(MEMORY),
        "sqs_consumer::memory's exports changed: update MEMORY (and CHANGELOG.md)"
    );
    assert_eq!(
        exported("src/idempotency/mod.rs"),
        listed(IDEMPOTENCY),
        "sqs_consumer::idempotency's exports changed: update IDEMPOTENCY (and CHANGELOG.md)"
    );
    assert_eq!(
        exported("src/lambda/mod.rs"),
        listed(LAMBDA),
        "sqs_consumer::lambda's exports changed: update LAMBDA (and CHANGELOG.md)"
    );
}

/// Every public function, method, field and variant, used once with its signature's types.
async fn every_public_item(
    client: aws_sdk_sqs::Client,
    delivery: Delivery,
    batch: Batch,
    error: Error,
    stats: Stats,
) -> Result<(), Error> {
    // Stopping on SIGTERM or Ctrl-C.
    #[cfg(feature = "signal")]
    {
        let signal = sqs_consumer::shutdown_signal();
        fn is_stop_signal(_: &(impl std::future::Future<Output = ()> + Send + 'static)) {}
        is_stop_signal(&signal);
    }

    // In AWS Lambda.
    #[cfg(feature = "lambda")]
    {
        use sqs_consumer::lambda::{self, Acks, FifoFailure, Function, Invocations};
        let ack = |d: Delivery| d.ack();
        let batch = |_: Batch| async { Ok::<_, Error>(()) };
        let _: Duration = lambda::DEFAULT_DEADLINE_MARGIN;
        let function: Function = Function::new(client.clone())
            .consumer(|builder| builder)
            .deadline_margin(Duration::ZERO)
            .acks(Acks::LeftToLambda)
            .acks(Acks::DeletedAtOnce)
            .fifo_failure(FifoFailure::FailsTheRest)
            .fifo_failure(FifoFailure::FailsItsGroup);
        let _: Function = Function::in_memory(&MemoryQueue::new());
        let invocations: Invocations = function.clone().handler(ack)?;
        let _: Invocations = function.clone().batch_handler(batch)?;
        let event: aws_lambda_events::event::sqs::SqsEvent =
            lambda::event("arn", Vec::<aws_sdk_sqs::types::Message>::new());
        let _: aws_lambda_events::event::sqs::SqsBatchResponse = invocations
            .invoke(event, std::time::SystemTime::now())
            .await?;
        let _: Option<Stats> = invocations.stats("arn");
        lambda::run(client.clone(), ack).await?;
        lambda::run_batch(client.clone(), batch).await?;
        function.clone().run(ack).await?;
        function.run_batch(batch).await?;
        if let Error::LambdaRuntime { reason, source } = &error {
            let _: (&String, &Option<BoxError>) = (reason, source);
        }
        if let Error::LambdaEvent { reason, source } = &error {
            let _: (&String, &Option<BoxError>) = (reason, source);
        }
    }

    // Building a consumer.
    let limit: InFlightLimit = InFlightLimit::new(8);
    let (_, _): (usize, usize) = (limit.max(), limit.in_use());
    let rate: RateLimit = RateLimit::new(1.0);
    let (_, _): (f64, u32) = (rate.per_second(), rate.burst());
    let builder: ConsumerBuilder = Consumer::builder(client.clone(), "url")
        .visibility_timeout(Duration::ZERO)
        .wait_time(Duration::ZERO)
        .receive_batch_size(10)
        .max_in_flight(1)
        .shutdown_timeout(Duration::ZERO)
        .give_up_after(Duration::ZERO)
        .retry_policy(RetryPolicy::backoff(Duration::ZERO, Duration::ZERO))
        .max_concurrent_receives(1)
        .request_timeout(Duration::ZERO)
        .handler_timeout(Duration::ZERO)
        .ack_mode(AckMode::OnSuccess)
        .message_attribute_names(["a"])
        .message_system_attribute_names([
            aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp,
        ])
        .shared_in_flight_limit(&limit)
        .max_receive_rate(1.0)
        .shared_rate_limit(&rate)
        .cancel_on_lost(true)
        .max_batch(10)
        .batch_window(Duration::ZERO)
        .dead_letter("dlq", 1)
        .adaptive_visibility(Duration::ZERO, Duration::ZERO)
        .isolated_keeper(true)
        .on_delivery_span(|_: &tracing::Span, _: Option<&sqs_consumer::TraceParent>| {})
        .keeper_client(client)
        .idempotency(MemoryStore::new())
        .idempotency_key(|d: &Delivery| Ok::<_, BoxError>(d.message_id().to_owned()))
        .idempotency_keep_done(Duration::ZERO);
    // The former names, deprecated.
    #[allow(deprecated)]
    let builder: ConsumerBuilder = ConsumerBuilder::rate_limit(
        ConsumerBuilder::in_flight_limit(ConsumerBuilder::batch_size(builder, 10), &limit),
        &rate,
    );
    #[cfg(feature = "s3")]
    let builder: ConsumerBuilder = builder
        .s3_payloads(s3_client())
        .payload_buckets(["payloads"])
        .payload_buckets(vec![String::from("payloads")])
        .any_payload_bucket()
        .max_payload_bytes(1)
        .delete_payload_on_ack(false);
    let consumer: Consumer = builder.build()?;
    #[cfg(feature = "from-env")]
    let _: ConsumerBuilder = Consumer::from_env("url").await;
    let queue = MemoryQueue::new();
    let _: ConsumerBuilder = Consumer::in_memory(&queue);
    let from_str: DeadLetterQueue = "dlq".into();
    let targets: [DeadLetterQueue; 4] = [
        from_str,
        String::from("dlq").into(),
        (&String::from("dlq")).into(),
        (&queue).into(),
    ];
    let _ = targets;
    for policy in [RetryPolicy::Leave, RetryPolicy::ReleaseNow] {
        let _ = policy;
    }
    let _ = [AckMode::Manual, AckMode::OnSuccess, AckMode::Always];

    // Running it.
    let (_, _, _): (usize, bool, Stats) = (
        consumer.in_flight(),
        consumer.has_isolated_keeper(),
        consumer.stats(),
    );
    consumer.pause();
    consumer.resume();
    let _: bool = consumer.is_paused();
    let clone: Consumer = consumer.clone();
    clone.shutdown();
    // The former name of a clone, deprecated.
    #[allow(deprecated)]
    let _: ConsumerHandle = Consumer::handle(&consumer);
    let handler = |d: Delivery| d.ack();
    consumer.run(handler).await?;
    consumer.run_until(handler, async {}).await?;
    let batch_handler = |b: Batch| b.ack_all();
    consumer.run_batch(batch_handler).await?;
    consumer.run_batch_until(batch_handler, async {}).await?;
    let _: DeliveryStream = consumer.stream();
    let _: DeliveryStream = consumer.stream_until(async {});
    let _: String = consumer.queue_url().await?;
    let Backlog {
        visible,
        in_flight,
        delayed,
        ..
    } = consumer.backlog().await?;
    let _: [u64; 3] = [visible, in_flight, delayed];
    fn handlers(_: impl Handler, _: impl BatchHandler) {}
    handlers(handler, batch_handler);
    Handler::ready(&handler).await;
    BatchHandler::ready(&batch_handler).await;
    #[cfg(feature = "tower")]
    {
        let service = tower::service_fn(|d: Delivery| d.ack());
        let batch_service = tower::service_fn(|b: Batch| b.ack_all());
        let handler: sqs_consumer::ServiceHandler<_> = sqs_consumer::ServiceHandler::new(service);
        let batch_handler = sqs_consumer::ServiceBatchHandler::new(batch_service);
        handlers(handler, batch_handler);
    }

    // A batch.
    let (_, _): (usize, bool) = (batch.len(), batch.is_empty());
    let _: Vec<&Delivery> = batch.iter().collect();
    batch.release_all().await?;

    // A delivery.
    let _: (&str, &str, &aws_sdk_sqs::types::Message, Option<&str>, u32) = (
        delivery.message_id(),
        delivery.body(),
        delivery.message(),
        delivery.message_group_id(),
        delivery.receive_count(),
    );
    let _: [tokio::time::Instant; 3] = [
        delivery.received_at(),
        delivery.deadline(),
        delivery.hard_deadline(),
    ];
    let _: Duration = delivery.visibility_timeout();
    let _: bool = delivery.is_lost();
    let _: LostReason = delivery.lost().await;
    #[cfg(feature = "s3")]
    if let Some(location) = delivery.payload_location() {
        let _: &sqs_consumer::PayloadLocation = location;
        let _: (&str, &str, u64) = (location.bucket(), location.key(), location.declared_size());
    }
    let _: Option<std::time::SystemTime> = delivery.sent_at();
    let _: Option<Duration> = delivery.age();
    let _: &tracing::Span = delivery.span();
    if let Some(parent) = delivery.trace_parent() {
        let sqs_consumer::TraceParent {
            trace_id,
            span_id,
            sampled,
            trace_state,
            carrier,
            ..
        } = parent.clone();
        let _: (String, String, bool, Option<String>) = (trace_id, span_id, sampled, trace_state);
        match carrier {
            sqs_consumer::TraceCarrier::W3c | sqs_consumer::TraceCarrier::XRay => {}
            _ => {}
        }
        let _: String = parent.traceparent();
    }
    #[cfg(feature = "json")]
    {
        let _: Result<u64, Error> = delivery.json::<u64>();
        let _: Result<u64, Error> = delivery.json_or_sns::<u64>();
        let _: Result<u64, Error> = delivery.json_unwrapped::<u64>();
        let event: sqs_consumer::EventBridgeEvent<u64> = delivery.eventbridge::<u64>()?;
        let sqs_consumer::EventBridgeEvent {
            id,
            source,
            detail_type,
            time,
            account,
            region,
            resources,
            detail,
            ..
        } = event;
        let _: ([String; 6], Vec<String>, u64) = (
            [id, source, detail_type, time, account, region],
            resources,
            detail,
        );
        let notification: sqs_consumer::SnsNotification = delivery.sns()?;
        let _: Result<u64, Error> = notification.json::<u64>();
        let sqs_consumer::SnsNotification {
            message,
            subject,
            topic_arn,
            message_id,
            timestamp,
            message_attributes,
            ..
        } = notification;
        let _: (String, Option<String>, String, String, String) =
            (message, subject, topic_arn, message_id, timestamp);
        for (_, attribute) in message_attributes {
            let sqs_consumer::SnsMessageAttribute {
                data_type, value, ..
            } = attribute;
            let _: (String, String) = (data_type, value);
        }
    }
    let boxed: BoxError = "why".into();
    match 0 {
        0 => delivery.ack().await?,
        1 => delivery.release().await?,
        2 => delivery.release_after(Duration::ZERO).await?,
        3 => delivery.dead_letter(String::from("why")).await?,
        _ => delivery.fail(boxed).await?,
    }

    // Errors and what they report.
    let (_, _, _): (bool, bool, bool) = (error.is_lost(), error.is_retryable(), error.is_fatal());
    let _: Option<&str> = error.code();
    match error.kind() {
        ErrorKind::Retryable | ErrorKind::Fatal => {}
        ErrorKind::Lost(
            LostReason::ReceiptHandleInvalid
            | LostReason::NotInFlight
            | LostReason::ExtensionFailed
            | LostReason::HardDeadline
            | LostReason::LapsedBeforeAnswer
            | LostReason::KeyTaken,
        ) => {}
        _ => {}
    }
    match error {
        Error::InvalidConfig {
            field,
            got,
            allowed,
        } => {
            let _: (&str, String, &str) = (field, got, allowed);
        }
        Error::Lost {
            message_id, reason, ..
        } => {
            let _: (String, LostReason) = (message_id, reason);
        }
        Error::Payload {
            message_id,
            bucket,
            key,
            reason,
            kind,
            ..
        } => {
            let _: (String, String, String, String, ErrorKind) =
                (message_id, bucket, key, reason, kind);
        }
        Error::Idempotency {
            message_id,
            operation,
            kind,
            source,
        } => {
            let _: (Option<String>, &str, ErrorKind, BoxError) =
                (message_id, operation, kind, source);
        }
        _ => {}
    }
    let Stats {
        received,
        acked,
        released,
        extended,
        extension_failures,
        worst_extension_delay,
        late_extensions,
        lost,
        capped,
        handler_errors,
        handler_panics,
        handler_timeouts,
        unsettled,
        in_flight,
        reserved,
        skipped_redeliveries,
        lost_acks,
        payload_failures,
        payload_delete_failures,
        cancelled_on_lost,
        dead_lettered,
        duplicates_skipped,
        duplicates_delayed,
        idempotency_failures,
        visibility_timeout,
        receive_failures,
        consecutive_receive_failures,
        since_last_receive,
        ..
    } = stats;
    let _: Option<Duration> = since_last_receive;
    let _: [u64; 25] = [
        duplicates_skipped,
        duplicates_delayed,
        idempotency_failures,
        receive_failures,
        consecutive_receive_failures,
        received,
        acked,
        released,
        extended,
        extension_failures,
        late_extensions,
        lost,
        capped,
        handler_errors,
        handler_panics,
        handler_timeouts,
        unsettled,
        in_flight,
        reserved,
        skipped_redeliveries,
        lost_acks,
        payload_failures,
        payload_delete_failures,
        cancelled_on_lost,
        dead_lettered,
    ];
    let _: [Duration; 2] = [worst_extension_delay, visibility_timeout];

    // The idempotency store and its parts.
    let store: MemoryStore = MemoryStore::new();
    store.fail_next(1);
    let (_, _, _): (usize, usize, u64) = (store.done(), store.in_progress(), store.calls());
    let key: Key = Key::new("q", "k");
    let _: &str = key.as_str();
    let owner: Owner = Owner::new("m", "r");
    let (_, _): (&str, &str) = (owner.message_id(), owner.receive());
    let store: &dyn Store = &store;
    let hold: Hold = Hold::new(Duration::ZERO, Duration::ZERO);
    let (_, _): (Duration, Duration) = (hold.lease(), hold.record());
    let begun: Result<Begun, StoreError> = store.begin(&key, &owner, hold).await;
    if let Ok(Begun::Started | Begun::Done | Begun::InProgress { .. }) = begun {}
    let owned: StoreFuture<'_, Ownership> = store.extend(&key, &owner, hold);
    if let Ok(Ownership::Ours | Ownership::Taken) = owned.await {}
    let _: Result<Ownership, StoreError> = store.complete(&key, &owner, Duration::ZERO).await;
    let _: Result<(), StoreError> = store.abandon(&key, &owner).await;
    #[cfg(feature = "dynamodb")]
    {
        use sqs_consumer::idempotency::DynamoDbStore;
        let dynamodb = dynamodb_client();
        DynamoDbStore::create_table(&dynamodb, "table").await?;
        let _: DynamoDbStore = DynamoDbStore::new(dynamodb, "table");
    }
    let err: StoreError = StoreError::retryable("x");
    let _: (bool, StoreError) = (err.is_retryable(), StoreError::fatal("x"));

    // The in-memory queue.
    let faults: Faults = Faults::new(1)
        .internal_error(0.0)
        .throttle(0.0)
        .lost_answer(0.0)
        .held_answer(0.0, Duration::ZERO)
        .actions([Action::ReceiveMessage]);
    let builder: MemoryQueueBuilder = MemoryQueue::builder()
        .name("q")
        .latency(Duration::ZERO)
        .visibility_timeout(Duration::ZERO)
        .delay(Duration::ZERO)
        .fifo(false)
        .content_based_deduplication(false)
        .dead_letter_queue(&queue, 1)
        .faults(faults);
    let q: MemoryQueue = builder.build()?;
    let options: SendOptions = SendOptions::new()
        .delay(Duration::ZERO)
        .message_attribute("a", "b")
        .aws_trace_header("h")
        .group_id("g")
        .deduplication_id("d");
    let (_, _): (String, String) = (q.send("a")?, q.send_with("b", options)?);
    let _: Vec<aws_sdk_sqs::types::Message> = q.receive(1, Duration::ZERO).await?;
    let _: Vec<aws_sdk_sqs::types::Message> =
        q.receive_with_visibility(1, Duration::ZERO, None).await?;
    q.delete("h")?;
    q.change_visibility("h", Duration::ZERO)?;
    q.fail_next(Action::DeleteMessage, "InternalError", 1);
    q.fail_for(Action::ReceiveMessage, "InternalError", Duration::ZERO);
    let (_, _, _): (&str, bool, Duration) = (q.name(), q.is_fifo(), q.visibility_timeout());
    let _: [usize; 4] = [q.len(), q.visible_len(), q.in_flight_len(), q.delayed_len()];
    let _: bool = q.is_empty();
    let InjectedFaults {
        internal_error,
        throttle,
        lost_answer,
        held_answer,
        ..
    } = q.injected();
    let _: [u64; 4] = [internal_error, throttle, lost_answer, held_answer];
    let counts: RequestCounts = q.requests();
    let _: [u64; 6] = [
        counts.requests(Action::SendMessage),
        counts.total(),
        counts.deletes(),
        counts.visibility_changes(),
        counts.empty_receives(),
        counts.non_empty_receives(),
    ];
    for action in [
        Action::SendMessage,
        Action::ReceiveMessage,
        Action::DeleteMessage,
        Action::ChangeMessageVisibility,
        Action::GetQueueAttributes,
        Action::DeleteMessageBatch,
        Action::ChangeMessageVisibilityBatch,
    ] {
        let _: &str = action.name();
    }
    Ok(())
}

#[cfg(feature = "s3")]
fn s3_client() -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .build(),
    )
}

#[cfg(feature = "dynamodb")]
fn dynamodb_client() -> aws_sdk_dynamodb::Client {
    unimplemented!("compiled, never run")
}
