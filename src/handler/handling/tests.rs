use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::*;
use crate::keeper::LET_GO_WITHIN;
use crate::memory::MemoryQueue;
use crate::test_support::hold;

/// A delivery its handler dropped is acked by the handler's `Ok` (`AckMode::OnSuccess`),
/// and the keeper lets go of its lease then (within `LET_GO_WITHIN`, though its next
/// timer is half a timeout away), as for one the handler acked itself.
#[tokio::test(start_paused = true)]
async fn a_delivery_acked_by_its_handlers_outcome_leaves_the_keeper_within_a_second() {
    let q = MemoryQueue::builder()
        .visibility_timeout(Duration::from_secs(30))
        .build()
        .expect("valid queue");
    q.send("dropped in its handler").expect("send");
    let delivery = hold(&q, None).await;
    let lease = delivery.lease().clone();
    // As a consumer does: its keeper outlives each handler.
    let keeper = delivery.run_ties().keeper().clone();
    let settings = HandlerSettings {
        ack_mode: AckMode::OnSuccess,
        ..Default::default()
    };
    let handler = |delivery: Delivery| async move {
        sleep(Duration::from_secs(2)).await; // the keeper holds it by now
        drop(delivery);
        Ok::<(), BoxError>(())
    };
    run_handler(Arc::new(handler), delivery, settings).await;
    assert!(q.is_empty(), "acked by the handler's Ok");
    let settled = Instant::now();
    while Arc::strong_count(&lease) > 1 {
        assert!(settled.elapsed() <= LET_GO_WITHIN, "still kept");
        sleep(Duration::from_millis(10)).await;
    }
    drop(keeper);
}

/// A delivery its handler dropped and whose outcome is an error meets the retry policy
/// (here: left to lapse), and the keeper lets go of its lease then, within
/// `LET_GO_WITHIN`, though its next timer is half a timeout away.
#[tokio::test(start_paused = true)]
async fn a_delivery_failed_by_its_handlers_outcome_leaves_the_keeper_within_a_second() {
    let q = MemoryQueue::builder()
        .visibility_timeout(Duration::from_secs(30))
        .build()
        .expect("valid queue");
    q.send("dropped in its handler").expect("send");
    let delivery = hold(&q, None).await;
    let lease = delivery.lease().clone();
    let keeper = delivery.run_ties().keeper().clone();
    let handler = |delivery: Delivery| async move {
        sleep(Duration::from_secs(2)).await; // the keeper holds it by now
        drop(delivery);
        Err::<(), BoxError>("failed".into())
    };
    run_handler(Arc::new(handler), delivery, HandlerSettings::default()).await;
    let settled = Instant::now();
    while Arc::strong_count(&lease) > 1 {
        assert!(settled.elapsed() <= LET_GO_WITHIN, "still kept");
        sleep(Duration::from_millis(10)).await;
    }
    drop(keeper);
}
