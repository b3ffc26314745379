//! The batch answers `tests/queue/fidelity.rs` checks on the test servers, here on the in-memory
//! queue (its batch calls are the crate's own seam, not public).
use std::time::Duration;

use super::*;
use crate::test_support::seconds;

fn entry<'a>(id: &'static str, receipt: &'a str) -> BatchEntry<'a> {
    BatchEntry {
        id,
        receipt,
        visibility_timeout: seconds(30),
    }
}

async fn held(q: &MemoryQueue) -> (String, String) {
    q.send("a").unwrap();
    q.send("b").unwrap();
    let got = q.receive(10, Duration::ZERO).await.unwrap();
    let handle = |m: &Message| m.receipt_handle().unwrap_or_default().to_owned();
    (handle(&got[0]), handle(&got[1]))
}

#[tokio::test(start_paused = true)]
async fn batch_entry_ids_duplicates_and_partial_failures_are_answered_as_aws_does() {
    let q = MemoryQueue::new();
    let (a, b) = held(&q).await;
    for result in [
        q.change_visibility_batch(&[entry("x", &a), entry("x", &b)])
            .await,
        q.delete_batch(&[entry("x", &a), entry("x", &b)]).await,
    ] {
        let err = result.expect_err("two entries with one id");
        assert_eq!(err.code(), Some("BatchEntryIdsNotDistinct"));
    }
    assert_eq!(q.in_flight_len(), 2, "nothing done");

    let answers = q
        .change_visibility_batch(&[entry("0", &a), entry("1", "not-a-receipt-handle")])
        .await
        .expect("a partial failure is not a failed request");
    assert!(answers[0].is_ok());
    let err = answers[1].as_ref().expect_err("the bad entry fails alone");
    assert_eq!(err.code(), Some("ReceiptHandleIsInvalid"));

    // One handle twice under distinct ids: the second delete finds it deleted, which
    // succeeds.
    let answers = q
        .delete_batch(&[entry("0", &b), entry("1", &b)])
        .await
        .unwrap();
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    assert_eq!(q.len(), 1);
}
