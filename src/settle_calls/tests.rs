use std::time::Duration;

use futures::executor::block_on;

use super::*;
use crate::memory::counts::Action;
use crate::test_support::seconds;
use crate::MemoryQueue;

fn calls(q: &MemoryQueue) -> Arc<SettleCalls> {
    Arc::new(SettleCalls::new(
        &Queue::new(q.clone()),
        KeeperRuntime::Caller,
        RequestsAtOnce::default(),
    ))
}

/// A delivery lost meanwhile: no retry can help it.
struct Lost;

impl OnAnswer for Lost {
    fn answered(&self, _: &Result<(), Error>) {}
}

impl SettleHooks for Lost {
    fn still_ours(&self) -> bool {
        false
    }

    fn waiting_to_retry(&self) {}

    fn retrying(&self) {}
}

fn lost() -> Option<Arc<dyn SettleHooks>> {
    Some(Arc::new(Lost))
}

/// A delete on behalf of no delivery (a redelivered message whose ack had failed) is
/// retried as an ack's is.
#[tokio::test(start_paused = true)]
async fn a_delete_for_no_delivery_is_retried_after_a_transient_failure() {
    let q = MemoryQueue::new();
    let calls = calls(&q);
    q.send("x").expect("send");
    let message = q
        .receive(1, Duration::ZERO)
        .await
        .expect("receive")
        .remove(0);
    let receipt = message.receipt_handle().expect("a receipt handle");
    q.fail_next(Action::DeleteMessageBatch, "InternalError", 1);
    calls
        .delete(receipt, None)
        .await
        .expect("deleted on the second try");
    assert!(q.is_empty());
    assert_eq!(q.requests().requests(Action::DeleteMessageBatch), 2);
}

/// Without a runtime no batch request can go, and the first try fails (retryably). A
/// settle still ours goes on to retry, which nothing can run: it fails naming its own
/// call. One for a lost delivery does not retry: it keeps the first try's error.
#[test]
fn without_a_runtime_only_a_settle_still_ours_goes_on_to_retry() {
    let calls = calls(&MemoryQueue::new());
    let items = || vec![("r".to_owned(), None), ("s".to_owned(), lost())];
    let mut results = vec![
        block_on(calls.delete("r", None)),
        block_on(calls.delete("r", lost())),
    ];
    results.extend(block_on(calls.delete_all(items())));
    results.push(block_on(calls.release("r", seconds(5), None)));
    results.push(block_on(calls.release("r", seconds(5), lost())));
    results.extend(block_on(calls.release_all(items(), seconds(0))));
    let messages: Vec<String> = results
        .into_iter()
        .map(|r| r.expect_err("no runtime").to_string())
        .collect();
    let starts: Vec<&str> = messages
        .iter()
        .map(|m| m.split(" failed").next().unwrap_or_default())
        .collect();
    let (delete, delete_batch) = ("SQS DeleteMessage", "SQS DeleteMessageBatch");
    let (change, change_batch) = (
        "SQS ChangeMessageVisibility",
        "SQS ChangeMessageVisibilityBatch",
    );
    assert_eq!(
        starts,
        [
            delete,
            delete_batch,
            delete,
            delete_batch,
            change,
            change_batch,
            change,
            change_batch
        ],
        "{messages:#?}"
    );
}
