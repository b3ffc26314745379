//! The test command's DynamoDB (moto's beside SQS, or dynalite beside LocalStack), for the
//! idempotency store's tests (feature `dynamodb`).

use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;

/// A client for the DynamoDB at `DYNAMODB_TEST_ENDPOINT`; panics saying how to start one when
/// it is unset.
pub fn client() -> aws_sdk_dynamodb::Client {
    let endpoint = std::env::var("DYNAMODB_TEST_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "this test needs a DynamoDB-compatible server and DYNAMODB_TEST_ENDPOINT is not \
             set: run it under scripts/with-sqs-server.sh (moto) or scripts/with-localstack.sh \
             (dynalite)"
        )
    });
    client_at(&endpoint)
}

/// A client for the DynamoDB-compatible server at `endpoint`.
pub fn client_at(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .endpoint_url(endpoint)
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// The unexpired records of `table` (by its `expires_at_ms`, on the system clock): how many
/// are done, how many in progress.
pub async fn records(client: &aws_sdk_dynamodb::Client, table: &str) -> (usize, usize) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let items = client
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    let text = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| match item
        .get(name)
    {
        Some(AttributeValue::S(v) | AttributeValue::N(v)) => v.clone(),
        _ => String::new(),
    };
    let alive = items
        .iter()
        .filter(|item| text(item, "expires_at_ms").parse::<u128>().unwrap_or(0) > now);
    let (mut done, mut in_progress) = (0, 0);
    for item in alive {
        match text(item, "state").as_str() {
            "done" => done += 1,
            "in_progress" => in_progress += 1,
            other => panic!("a record in state {other:?}"),
        }
    }
    (done, in_progress)
}
