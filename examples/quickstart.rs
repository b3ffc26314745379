//! Runs a consumer against an in-memory queue: no AWS account needed.
//!
//! Three messages, each held for 5 s by a handler while the visibility timeout is 2 s. The
//! heartbeat keeps each one hidden (see the `visibility extended` lines), the handler acks,
//! and the example exits once the queue is empty.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqs_consumer::{Consumer, Delivery, MemoryQueue};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,sqs_consumer=debug")),
        )
        .init();

    let queue = MemoryQueue::builder()
        .visibility_timeout(Duration::from_secs(2))
        .build()?;
    for job in ["resize image 1", "resize image 2", "resize image 3"] {
        queue.send(job)?;
    }

    let consumer = Consumer::in_memory(&queue).max_in_flight(3).build()?;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let handler = move |delivery: Delivery| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                message_id = delivery.message_id(),
                body = delivery.body(),
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

    let requests = queue.requests();
    println!(
        "done: 3 messages, {} handler calls; {} receives, {} visibility extensions, {} deletes",
        calls.load(Ordering::Relaxed),
        requests.receive_message,
        requests.change_message_visibility,
        requests.delete_message
    );
    Ok(())
}
