//! The handler and settings of `examples/consume.rs`, unchanged, deployed as an AWS Lambda
//! function fed by an SQS event source mapping (feature `lambda`).
//!
//! Each invocation's records are handled as deliveries: kept hidden while the handler works
//! (past the queue's visibility timeout if need be), and the invocation answers with the
//! records not done (`batchItemFailures`), so the mapping needs `ReportBatchItemFailures`.
//! Build and deploy it with cargo-lambda (the guide's `lambda` page has the steps):
//!
//! ```text
//! cargo lambda build --release --example lambda --features lambda
//! cargo lambda deploy --binary-name lambda jobs-handler
//! aws lambda create-event-source-mapping --function-name jobs-handler \
//!     --event-source-arn arn:aws:sqs:eu-west-1:123456789012:jobs \
//!     --batch-size 10 --function-response-types ReportBatchItemFailures
//! ```
//!
//! `HOLD_SECS` (default 0) makes the handler hold each message that long before acking, as in
//! `consume`. Outside Lambda the example says so on one line and exits with 1.

use std::process::ExitCode;

#[allow(dead_code)] // its `main` is `consume`'s own
#[path = "consume.rs"]
mod consume;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,aws_config=error".into()),
        )
        // CloudWatch adds its own timestamps, and shows no colours.
        .without_time()
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();

    // Credentials and region from the function's role and environment.
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = aws_sdk_sqs::Client::new(&config);
    let hold = consume::hold_from_env();
    let served = sqs_consumer::lambda::Function::new(client)
        .consumer(consume::settings)
        .run(move |delivery| consume::handle(delivery, hold))
        .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
