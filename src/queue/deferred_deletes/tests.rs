use super::*;
use crate::memory::counts::Action;
use crate::memory::MemoryQueue;
use crate::queue::ENTRY_IDS;
use crate::test_support::seconds;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn a_delete_is_recorded_and_not_sent_and_a_visibility_change_is_sent() {
    let memory = MemoryQueue::new();
    memory.send("a").unwrap();
    memory.send("b").unwrap();
    let deletes = DeferredDeletes::new(Deletes::LeftToLambda);
    let queue = deferring(Queue::new(memory.clone()), deletes.clone());
    let got = memory.receive(2, Duration::ZERO).await.unwrap();
    let receipts: Vec<&str> = got.iter().filter_map(|m| m.receipt_handle()).collect();
    let entry = |i: usize, secs| BatchEntry {
        id: ENTRY_IDS[i],
        receipt: receipts[i],
        visibility_timeout: seconds(secs),
    };
    let answered = queue.delete_batch(&[entry(0, 0)]).await.unwrap();
    assert!(matches!(answered[..], [Ok(())]));
    queue.change_visibility_batch(&[entry(1, 0)]).await.unwrap()[0]
        .as_ref()
        .unwrap();
    assert_eq!(memory.requests().deletes(), 0, "no delete sent");
    assert_eq!(memory.visible_len(), 1, "the release went to the queue");
    assert!(deletes.take(receipts[0]));
    assert!(!deletes.take(receipts[0]), "taken once");
    assert!(!deletes.take(receipts[1]));
}

#[tokio::test(start_paused = true)]
async fn deletes_sent_at_once_are_sent_and_only_the_successes_recorded() {
    let memory = MemoryQueue::new();
    memory.send("a").unwrap();
    let deletes = DeferredDeletes::new(Deletes::SentAtOnce);
    let queue = deferring(Queue::new(memory.clone()), deletes.clone());
    let got = memory.receive(1, Duration::ZERO).await.unwrap();
    let receipt = got[0].receipt_handle().unwrap();
    let entries = [
        BatchEntry {
            id: ENTRY_IDS[0],
            receipt,
            visibility_timeout: seconds(0),
        },
        BatchEntry {
            id: ENTRY_IDS[1],
            receipt: "not-a-receipt-handle",
            visibility_timeout: seconds(0),
        },
    ];
    let answered = queue.delete_batch(&entries).await.unwrap();
    assert!(answered[0].is_ok() && answered[1].is_err(), "{answered:?}");
    let sent = memory.requests();
    assert_eq!(
        sent.requests(Action::DeleteMessageBatch),
        1,
        "sent, both in one request"
    );
    assert!(memory.is_empty());
    assert!(deletes.take(receipt));
    assert!(!deletes.take("not-a-receipt-handle"), "its delete failed");
}
