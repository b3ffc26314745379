use super::*;
use crate::test_support::seconds;

/// A queue that never answers.
struct Silent;

impl Transport for Silent {
    fn describe(&self) -> &str {
        "silent"
    }
    fn short_name(&self) -> &str {
        "silent"
    }
    fn resolve(&self) -> BoxFuture<'_, Result<String, Error>> {
        Box::pin(std::future::pending())
    }
    fn backlog(&self) -> BoxFuture<'_, Result<Backlog, Error>> {
        Box::pin(std::future::pending())
    }
    fn is_fifo(&self) -> bool {
        false
    }
    fn receive<'a>(&'a self, _: Receive<'a>) -> BoxFuture<'a, Result<Vec<Message>, Error>> {
        Box::pin(std::future::pending())
    }
    fn send_message<'a>(&'a self, _: NewMessage<'a>) -> BoxFuture<'a, Result<String, Error>> {
        Box::pin(std::future::pending())
    }
    fn delete_batch<'a>(&'a self, _: &'a [BatchEntry<'a>]) -> BoxFuture<'a, BatchResult> {
        Box::pin(std::future::pending())
    }
    fn change_visibility_batch<'a>(
        &'a self,
        _: &'a [BatchEntry<'a>],
    ) -> BoxFuture<'a, BatchResult> {
        Box::pin(std::future::pending())
    }
    fn visibility_timeout(&self) -> BoxFuture<'_, Result<VisibilityTimeout, Error>> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test(start_paused = true)]
async fn every_call_ends_within_its_limit() {
    let q = Queue::new(Silent).with_request_timeout(Duration::from_secs(3));
    let start = tokio::time::Instant::now();
    let entry = [BatchEntry {
        id: ENTRY_IDS[0],
        receipt: "r",
        visibility_timeout: seconds(5),
    }];
    let receive = Receive {
        max_messages: 10,
        wait: Duration::from_secs(20),
        visibility_timeout: None,
        message_attribute_names: &[],
        system_attribute_names: &[],
    };
    let err = q.receive(receive).await.unwrap_err();
    assert!(
        err.is_retryable() && err.to_string().contains("no answer"),
        "{err}"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(23), "wait + timeout");
    for (operation, err) in [
        (
            "DeleteMessageBatch",
            q.delete_batch(&entry).await.unwrap_err(),
        ),
        (
            "ChangeMessageVisibilityBatch",
            q.change_visibility_batch(&entry).await.unwrap_err(),
        ),
        (
            "GetQueueAttributes",
            q.visibility_timeout().await.unwrap_err(),
        ),
        ("GetQueueUrl", q.resolve().await.unwrap_err()),
        ("GetQueueAttributes", q.backlog().await.unwrap_err()),
        (
            "SendMessage",
            q.send_message(NewMessage {
                body: "b",
                attributes: &HashMap::new(),
                group_id: None,
                deduplication_id: None,
            })
            .await
            .unwrap_err(),
        ),
    ] {
        assert!(err.is_retryable(), "{err}");
        assert!(err.to_string().contains(operation), "{err}");
    }
    assert_eq!(start.elapsed(), Duration::from_secs(23 + 6 * 3));
}
