use std::time::Duration;

use super::*;
use crate::test_support::hold;
use crate::MemoryQueue;

/// A batch of `n` messages sent to `q` and received.
async fn batch_of(q: &MemoryQueue, n: usize) -> Batch {
    let mut deliveries = Vec::new();
    for i in 0..n {
        q.send(format!("m{i}")).expect("send");
        deliveries.push(hold(q, None).await);
    }
    Batch::new(deliveries)
}

#[tokio::test(start_paused = true)]
async fn a_batch_reads_as_its_deliveries_in_receive_order() {
    let q = MemoryQueue::new();
    let batch = batch_of(&q, 3).await;
    assert!(!batch.is_empty());
    let mut bodies = Vec::new();
    for d in &batch {
        bodies.push(d.body().to_owned());
    }
    assert_eq!(bodies, ["m0", "m1", "m2"]);
    let shown = format!("{batch:?}");
    for d in &batch {
        assert!(shown.contains(d.message_id()), "{shown}");
    }
    assert!(Batch::new(Vec::new()).is_empty());
    assert_eq!(format!("{:?}", Batch::new(Vec::new())), "[]");
}

#[tokio::test(start_paused = true)]
async fn release_all_makes_every_message_visible_at_once() {
    let q = MemoryQueue::new();
    let batch = batch_of(&q, 3).await;
    assert_eq!(q.visible_len(), 0);
    batch.release_all().await.expect("released");
    assert_eq!(q.visible_len(), 3, "no wait before they are back");
    let again = q.receive(10, Duration::ZERO).await.expect("receive");
    assert_eq!(again.len(), 3);
}
