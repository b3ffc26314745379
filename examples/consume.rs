//! Consumes a real queue (AWS, or any SQS-compatible server) until Ctrl-C, then shuts down
//! gracefully: receiving stops at once, running handlers get up to 30 s to finish, whatever
//! is still held after that is released for another consumer.
//!
//! ```text
//! QUEUE_URL=https://sqs.eu-west-1.amazonaws.com/123456789012/jobs cargo run --example consume
//! ```
//!
//! Credentials and region come from the usual AWS environment and config files. For a local
//! server, point the SDK at it:
//!
//! ```text
//! AWS_ENDPOINT_URL_SQS=http://127.0.0.1:5000 AWS_REGION=us-east-1 \
//! AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
//! QUEUE_URL=http://127.0.0.1:5000/123456789012/jobs cargo run --example consume
//! ```
//!
//! `HOLD_SECS` (default 0) makes the handler hold each message that long before acking, to
//! watch the heartbeat at work.

use std::time::Duration;

use sqs_consumer::{Consumer, Delivery, RetryPolicy};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,sqs_consumer=debug")),
        )
        .init();

    let queue_url = std::env::var("QUEUE_URL").map_err(|_| "set QUEUE_URL to the queue's URL")?;
    let hold = std::env::var("HOLD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or_default();

    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = aws_sdk_sqs::Client::new(&config);
    let consumer = Consumer::builder(client, queue_url)
        .max_in_flight(16)
        .shutdown_timeout(Duration::from_secs(30))
        .retry_policy(RetryPolicy::backoff(
            Duration::from_secs(5),
            Duration::from_secs(300),
        ))
        .build()?;

    let handler = move |delivery: Delivery| async move {
        tracing::info!(
            message_id = delivery.message_id(),
            receive_count = delivery.receive_count(),
            bytes = delivery.body().len(),
            "handling"
        );
        tokio::time::sleep(hold).await;
        delivery.ack().await
    };

    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("Ctrl-C: shutting down");
    };
    consumer.run_until(handler, ctrl_c).await?;
    tracing::info!(stats = ?consumer.stats(), "stopped");
    Ok(())
}
