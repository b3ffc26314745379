use std::sync::{Arc, Mutex};

use super::*;
use crate::test_support::hold;
use crate::MemoryQueue;

/// `n` deliveries of messages sent to `q`.
async fn held(q: &MemoryQueue, n: usize) -> Vec<Delivery> {
    let mut deliveries = Vec::new();
    for i in 0..n {
        q.send(format!("m{i}")).expect("send");
        deliveries.push(hold(q, None).await);
    }
    deliveries
}

fn batching(max: usize, window_secs: u64) -> Batching {
    Batching {
        max,
        window: Duration::from_secs(window_secs),
    }
}

#[tokio::test(start_paused = true)]
async fn what_is_left_of_a_full_batch_waits_a_whole_window_from_its_arrival() {
    let q = MemoryQueue::new();
    let mut filling = Filling::new(batching(2, 5));
    let start = Instant::now();
    assert!(filling.add(held(&q, 1).await, start).is_empty());
    assert_eq!(filling.due, Some(start + Duration::from_secs(5)));
    let later = start + Duration::from_secs(3);
    let full = filling.add(held(&q, 2).await, later);
    assert_eq!(full.iter().map(Vec::len).collect::<Vec<_>>(), [2]);
    assert_eq!(filling.due, Some(later + Duration::from_secs(5)));
    assert_eq!(filling.take().len(), 1);
    assert_eq!(filling.due, None);
}

/// A collector whose batches were all full when its run ended hands out no empty one.
#[tokio::test(start_paused = true)]
async fn a_run_that_ends_between_batches_hands_over_no_empty_batch() {
    let q = MemoryQueue::new();
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let hand_out: HandOutFilled = {
        let sizes = sizes.clone();
        Box::new(move |batch: Vec<Delivery>| {
            sizes.lock().expect("sizes").push(batch.len());
            Box::pin(async {})
        })
    };
    let (collector, task) = Collector::start(batching(2, 5), hand_out);
    collector.push(held(&q, 4).await);
    drop(collector);
    task.await;
    assert_eq!(*sizes.lock().expect("sizes"), [2, 2]);
}
