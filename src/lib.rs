//! An Amazon SQS consumer that keeps a message hidden for as long as your handler holds it.
//!
//! SQS has no lease: a received message is hidden for its visibility timeout, and if the
//! consumer is still working when that lapses, the queue hands the message to someone else.
//! This crate receives messages with long polling, wraps each in a [`Delivery`], and keeps
//! it hidden with a keeper (`ChangeMessageVisibility` halfway through each timeout) until
//! you [`ack`](Delivery::ack) it, [`release`](Delivery::release) it, or drop it, up to
//! SQS's limit of 12 hours after the receive.
//!
//! ```
//! use std::time::Duration;
//! use sqs_consumer::{Consumer, Delivery, MemoryQueue};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), sqs_consumer::Error> {
//! // An in-memory queue; with a real one, use `Consumer::builder(client, queue_url)`.
//! let queue = MemoryQueue::new();
//! queue.send("hello")?;
//!
//! let consumer = Consumer::in_memory(&queue)
//!     .visibility_timeout(Duration::from_secs(30))
//!     .max_in_flight(16)
//!     .build()?;
//!
//! let run = consumer.run(|delivery: Delivery| async move {
//!     println!("handling {}", delivery.body());
//!     delivery.ack().await // DeleteMessage
//! });
//! // `run` returns only on a fatal error; here we stop it once the queue is empty.
//! tokio::select! {
//!     result = run => result?,
//!     _ = async { while !queue.is_empty() { tokio::time::sleep(Duration::from_millis(10)).await } } => {}
//! }
//! assert!(queue.is_empty());
//! # Ok(()) }
//! ```
//!
//! # Where to read on
//!
//! The [`guide`] is the manual, one page per topic:
//!
//! - [`guide::lifecycle`]: a delivery's life from the receive to its ack, release, drop or loss;
//! - [`guide::handlers`]: handler outcomes, [`AckMode`], batches, [`Delivery::fail`], pause,
//!   the [`RetryPolicy`], [`Stats`] and streams;
//! - [`guide::settings`]: every [`ConsumerBuilder`] setting with its default and range;
//! - [`guide::semantics`]: the guarantees, exactly, and how each is tested;
//! - [`guide::keeper`]: the keeper that extends visibility, and blocking work in handlers;
//! - [`guide::flow_control`]: a receive rate ([`RateLimit`]), batch windows, cancellation on
//!   a lost lease;
//! - [`guide::idempotency`]: a message's work done once in effect, with an
//!   [`idempotency`] store that follows the lease, and what it cannot promise;
//! - [`guide::fifo`], [`guide::shutdown`], [`guide::errors`] (who retries what),
//!   [`guide::bad_input`], [`guide::cost`];
//! - `guide::integrations` (features `json` and `from-env`): SNS envelopes, EventBridge
//!   events, typed bodies, one in-flight budget for several queues, spans and trace
//!   continuation, metrics;
//! - `guide::tower` (feature `tower`): a `tower::Service` as the handler, inside your layers;
//! - `guide::payloads` (feature `s3`): large messages stored in S3 by Amazon's Extended
//!   Client libraries, read before the handler;
//! - `guide::lambda` (feature `lambda`): the same handlers in an AWS Lambda function;
//! - [`guide::testing`]: the in-memory queue ([`memory`]), local servers, and what they
//!   answer differently from AWS.
//!
//! # The types
//!
//! [`Consumer`] is built by a [`ConsumerBuilder`] ([`Consumer::builder`] for your own
//! `aws_sdk_sqs::Client`, `Consumer::from_env` with the standard AWS configuration,
//! [`Consumer::in_memory`] for a [`MemoryQueue`]). It hands each message to a [`Handler`]
//! (any async closure taking a [`Delivery`]), a [`BatchHandler`] (a [`Batch`] per receive) or
//! a [`DeliveryStream`]. It is cheap to clone: a clone pauses, resumes and stops it from elsewhere;
//! [`InFlightLimit`] shares one budget of held deliveries between consumers, [`RateLimit`] one
//! budget of messages per second. Failures are an
//! [`Error`] with an [`ErrorKind`] and, for a lost lease, a [`LostReason`].
//!
//! # Cargo features
//!
//! - `from-env` (default): `Consumer::from_env`, through `aws-config`.
//! - `signal` (default): [`shutdown_signal`], SIGTERM or Ctrl-C, through Tokio's `signal`
//!   feature.
//! - `json`: `Delivery::json`, `Delivery::sns`, `Delivery::json_or_sns`, `SnsNotification`;
//!   `Delivery::eventbridge`, `EventBridgeEvent`; `Delivery::json_unwrapped` (a raw body, an
//!   SNS notification or an EventBridge event).
//! - `metrics`: counters and histograms through the `metrics` facade.
//! - `opentelemetry`: the `delivery` span's parent is the producer's span (W3C `traceparent`,
//!   else X-Ray's `AWSTraceHeader`), through `tracing-opentelemetry` 0.34 (OpenTelemetry
//!   0.33), so your spans join the producer's trace with no code of yours.
//! - `tower`: `ServiceHandler` and `ServiceBatchHandler`, any `tower::Service` as a handler,
//!   so `tower` layers (timeouts, concurrency and rate limits, tracing) wrap it; its
//!   `poll_ready` holds back receives.
//! - `s3`: `ConsumerBuilder::s3_payloads`, `Delivery::payload_location`, `PayloadLocation`:
//!   payloads that Amazon's Extended Client libraries store in S3, through `aws-sdk-s3`
//!   (without its default features: you build the S3 client).
//! - `dynamodb`: `idempotency::DynamoDbStore`, the idempotency store every worker of a queue
//!   shares, in a DynamoDB table, through `aws-sdk-dynamodb` (without its default features:
//!   you build the DynamoDB client).
//! - `lambda`: `lambda::run`, `lambda::run_batch`: the same handlers in AWS Lambda, fed by an
//!   SQS event source mapping, with partial batch responses, leases kept past the visibility
//!   timeout and no batch lost to a function timeout, through `lambda_runtime` and
//!   `aws_lambda_events`.
//!
//! With none of them the crate needs no HTTP client, TLS stack or `aws-config`: you pass the
//! client you built. Items that need a feature say so.
#![cfg_attr(not(test), forbid(unsafe_code))]
// The unit tests' leak guard is installed before their first test, which takes `unsafe`.
#![cfg_attr(test, deny(unsafe_code))]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rustdoc::broken_intra_doc_links,
    clippy::missing_errors_doc
)]

/// Every log line of the unit tests passes the suite's leak guard, installed before the
/// first test.
#[cfg(test)]
#[path = "../tests/common/log_guard.rs"]
#[allow(unsafe_code, unreachable_pub, dead_code, missing_docs)]
mod leak_guard;

#[cfg(test)]
#[allow(unsafe_code)]
#[ctor::ctor(unsafe)]
fn install_the_leak_guard() {
    use tracing_subscriber::layer::SubscriberExt;
    let subscriber = tracing_subscriber::registry().with(leak_guard::layer());
    tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
    leak_guard::fail_at_exit_on_leaks();
}

// Every file sits on a layer and imports only from layers below it: the table is in
// CONTRIBUTING.md, "Layers", and `tests/project/layers.rs` reads it and holds the crate to it.
#[cfg(feature = "json")]
mod body;
mod builder;
mod call_retries;
mod consumer;
mod dead_letter;
mod delivery;
mod engine;
mod error;
mod flow;
pub mod guide;
mod handler;
pub mod idempotency;
mod keeper;
mod keeper_thread;
#[cfg(feature = "lambda")]
#[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
pub mod lambda;
mod lease;
mod limits;
pub mod memory;
mod millis;
#[cfg(feature = "s3")]
mod payload;
mod queue;
mod queue_ref;
mod readable;
mod receive;
mod retry_policy;
mod settle_calls;
mod stats;
#[cfg(test)]
mod test_support;
mod trace;

#[cfg(feature = "json")]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
pub use body::eventbridge::EventBridgeEvent;
#[cfg(feature = "json")]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
pub use body::json::{SnsMessageAttribute, SnsNotification};
pub use builder::dead_letter_queue::DeadLetterQueue;
pub use builder::ConsumerBuilder;
#[cfg(feature = "signal")]
#[cfg_attr(docsrs, doc(cfg(feature = "signal")))]
pub use consumer::shutdown_signal::shutdown_signal;
pub use consumer::stream::DeliveryStream;
pub use consumer::Consumer;
#[allow(deprecated)]
pub use consumer::ConsumerHandle;
pub use delivery::Delivery;
pub use error::{BoxError, Error, ErrorKind, LostReason};
pub use flow::in_flight_limit::InFlightLimit;
pub use flow::rate_limit::RateLimit;
pub use handler::batch::{Batch, BatchHandler};
pub use handler::handling::AckMode;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use handler::service::{ServiceBatchHandler, ServiceHandler};
pub use handler::Handler;
pub use memory::MemoryQueue;
#[cfg(feature = "s3")]
#[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
pub use payload::pointer::PayloadLocation;
pub use queue::backlog::Backlog;
pub use retry_policy::RetryPolicy;
pub use stats::Stats;
pub use trace::parent::{TraceCarrier, TraceParent};

/// The README's Rust examples, compiled and run as doc tests (they use every feature).
#[cfg(all(
    doctest,
    feature = "from-env",
    feature = "signal",
    feature = "json",
    feature = "metrics"
))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
