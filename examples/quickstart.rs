//! Runs a consumer against an in-memory queue: no AWS account needed.
//!
//! Three messages, each held for 5 s by a handler while the visibility timeout is 2 s. The
//! keeper keeps each one hidden (see the `visibility extended` lines), the handler acks,
//! and the example exits once the queue is empty, printing what it cost:
//!
//! ```text
//! cargo run --example quickstart        # the log on stderr, then on stdout:
//! done: 3 messages, 3 handler calls, 3 acked, 0 lost
//! requests: 15 in all: 2 ReceiveMessage, 8 ChangeMessageVisibilityBatch carrying 12 extensions, 1 DeleteMessageBatch carrying 3 deletes
//! ```
//!
//! The second receive is the long poll under way when the queue is empty: the stop waits
//! for it (a stop never abandons a poll, which SQS would still hand a message), and the log
//! says so ("waiting for 1 receive under way, up to 2s"). Its `wait_time` of 2 s keeps that
//! short; the default is 20 s. The request counts vary a little with timing; every number
//! printed is read from the queue and the consumer, and `tests/project/examples.rs` checks them
//! against what happened.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqs_consumer::memory::Action;
use sqs_consumer::{BoxError, Consumer, Delivery, MemoryQueue, Stats};

/// The example itself: writes its summary to `out` and returns the consumer's stats.
pub async fn run(out: &mut impl Write) -> Result<Stats, BoxError> {
    let queue = MemoryQueue::builder()
        .visibility_timeout(Duration::from_secs(2))
        .build()?;
    let jobs = ["resize image 1", "resize image 2", "resize image 3"];
    for job in jobs {
        queue.send(job)?;
    }

    let consumer = Consumer::in_memory(&queue)
        .max_in_flight(3)
        .wait_time(Duration::from_secs(2))
        .build()?;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let handler = move |delivery: Delivery| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                message_id = delivery.message_id(),
                bytes = delivery.body().len(),
                "working for 5 s, 2.5 visibility timeouts"
            );
            tokio::time::sleep(Duration::from_secs(5)).await;
            delivery.ack().await
        }
    };

    // Stop (gracefully) once every message has been acked.
    let drained = async {
        while !queue.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    consumer.run_until(handler, drained).await?;

    let stats = consumer.stats();
    let r = queue.requests();
    writeln!(
        out,
        "done: {} messages, {} handler calls, {} acked, {} lost",
        jobs.len(),
        calls.load(Ordering::Relaxed),
        stats.acked,
        stats.lost
    )?;
    writeln!(
        out,
        "requests: {} in all: {} ReceiveMessage, {} ChangeMessageVisibilityBatch carrying {} \
         extensions, {} DeleteMessageBatch carrying {} deletes",
        r.total(),
        r.requests(Action::ReceiveMessage),
        r.requests(Action::ChangeMessageVisibilityBatch),
        r.visibility_changes(),
        r.requests(Action::DeleteMessageBatch),
        r.deletes()
    )?;
    Ok(stats)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqs_consumer=debug".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    run(&mut std::io::stdout()).await?;
    Ok(())
}
