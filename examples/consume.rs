//! Consumes a real queue (AWS, or any SQS-compatible server) until SIGTERM or Ctrl-C, then
//! stops gracefully: no receive starts, the one under way is awaited, running handlers get
//! up to 25 s (the default `shutdown_timeout`) to finish, and whatever is still held after
//! that is released for another consumer: within 28 s of the signal, inside the 30 s that
//! Kubernetes, ECS and systemd wait before they kill the process. On the way out it prints
//! what it did:
//!
//! ```text
//! QUEUE_URL=https://sqs.eu-west-1.amazonaws.com/123456789012/jobs cargo run --example consume
//! ...
//! stopped: 120 received, 120 acked, 0 released, 0 extensions, 0 lost, 0 handler errors, 0 receive failures
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
//! watch the keeper at work.

use std::future::Future;
use std::io::Write;
use std::time::Duration;

use sqs_consumer::{BoxError, Consumer, ConsumerBuilder, Delivery, Error, RetryPolicy, Stats};

/// The consumer's settings: 16 messages at a time, and a failed one back after 5 s, 10 s,
/// 20 s, ... up to 5 minutes.
pub fn settings(consumer: ConsumerBuilder) -> ConsumerBuilder {
    consumer
        .max_in_flight(16)
        .retry_policy(RetryPolicy::backoff(
            Duration::from_secs(5),
            Duration::from_secs(300),
        ))
}

/// The handler: holds the message for `hold` (the work), then acks it.
pub async fn handle(delivery: Delivery, hold: Duration) -> Result<(), Error> {
    tracing::info!(
        message_id = delivery.message_id(),
        receive_count = delivery.receive_count(),
        bytes = delivery.body().len(),
        "handling"
    );
    tokio::time::sleep(hold).await;
    delivery.ack().await
}

/// `HOLD_SECS`, the time the handler holds each message (0 when unset).
pub fn hold_from_env() -> Duration {
    std::env::var("HOLD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or_default()
}

/// The example itself: consumes with `consumer` (a builder for the queue) until `stop`,
/// holding each message for `hold`; writes its summary to `out` and returns the consumer's
/// stats.
pub async fn run(
    consumer: ConsumerBuilder,
    hold: Duration,
    stop: impl Future<Output = ()>,
    out: &mut impl Write,
) -> Result<Stats, BoxError> {
    let consumer = settings(consumer).build()?;
    let handler = move |delivery: Delivery| handle(delivery, hold);
    consumer.run_until(handler, stop).await?;

    let s = consumer.stats();
    writeln!(
        out,
        "stopped: {} received, {} acked, {} released, {} extensions, {} lost, {} handler errors, \
         {} receive failures",
        s.received, s.acked, s.released, s.extended, s.lost, s.handler_errors, s.receive_failures
    )?;
    Ok(s)
}

/// The error, if any, said on one line (its `Display`: what failed and why), not its `Debug`.
#[tokio::main]
async fn main() -> std::process::ExitCode {
    match consume_until_stopped().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn consume_until_stopped() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            // The consumer says what failed in one line; the SDK's credentials chain would
            // add its own, with its whole `Debug` output.
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqs_consumer=debug,aws_config=error".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let queue_url = std::env::var("QUEUE_URL").map_err(|_| "set QUEUE_URL to the queue's URL")?;
    let hold = hold_from_env();

    // Credentials, region and endpoint (AWS_ENDPOINT_URL_SQS) the standard AWS way.
    let consumer = Consumer::from_env(queue_url).await;
    run(
        consumer,
        hold,
        sqs_consumer::shutdown_signal(),
        &mut std::io::stdout(),
    )
    .await?;
    Ok(())
}
