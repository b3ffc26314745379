//! An Amazon SQS consumer that keeps a message hidden for as long as your handler holds it.
//!
//! SQS has no lease: a received message is hidden for its visibility timeout, and if the
//! consumer is still working when that lapses, the queue hands the message to someone else.
//! This crate receives messages with long polling, wraps each in a [`Delivery`], and keeps
//! it hidden with a heartbeat (`ChangeMessageVisibility` halfway through each timeout) until
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
//! See the README for the delivery lifecycle, the settings and the exact semantics.
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rustdoc::broken_intra_doc_links
)]

// Modules sit on layers and import only from layers below them (`tests/layers.rs`
// holds the crate to it):
//   API      config, consumer, consumer_handle, stream, json (feature `json`)
//   engine   dispatch, handling, receiver, fifo, handler, batch_handler, in_flight_limit
//   lease    delivery, heartbeat, lease, context, retry
//   wire     batch, lease_thread, queue (the seam; queue::sdk maps it to the SDK)
//   fake     memory (serves the seam)
//   ground   limits, error, stats, backoff, lost_acks
mod backoff;
mod batch;
mod batch_handler;
mod config;
mod consumer;
mod consumer_handle;
mod context;
mod delivery;
mod dispatch;
mod error;
mod fifo;
mod handler;
mod handling;
mod heartbeat;
mod in_flight_limit;
#[cfg(feature = "json")]
mod json;
mod lease;
mod lease_thread;
mod limits;
mod lost_acks;
mod memory;
mod queue;
mod receiver;
mod retry;
mod stats;
mod stream;

pub use batch_handler::{Batch, BatchHandler};
pub use config::ConsumerBuilder;
pub use consumer::Consumer;
pub use consumer_handle::ConsumerHandle;
pub use delivery::Delivery;
pub use error::{BoxError, Error, ErrorKind, LostReason};
pub use handler::Handler;
pub use handling::AckMode;
pub use in_flight_limit::InFlightLimit;
#[cfg(feature = "json")]
pub use json::{SnsMessageAttribute, SnsNotification};
pub use memory::builder::MemoryQueueBuilder;
pub use memory::counts::{Action, RequestCounts};
pub use memory::faults::{Faults, InjectedFaults};
pub use memory::{MemoryQueue, SendOptions};
pub use retry::RetryPolicy;
pub use stats::Stats;
pub use stream::DeliveryStream;

/// The README's Rust examples, compiled and run as doc tests (they use every feature).
#[cfg(all(doctest, feature = "from-env", feature = "json", feature = "metrics"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
