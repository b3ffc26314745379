//! A held delivery's footprint.
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Delivery, Received, RunTies};
use crate::keeper::Keeper;
use crate::keeper_thread::KeeperRuntime;
use crate::memory::MemoryQueue;
use crate::test_support::{context, seconds};

/// 120,000 deliveries may be held at once: the guard and its lease must stay small.
#[tokio::test]
async fn a_held_delivery_stays_small() {
    let q = MemoryQueue::new();
    let ctx = Arc::new(context(&q));
    q.send("x").unwrap();
    let m = q.receive(1, Duration::ZERO).await.unwrap().pop().unwrap();
    let received = Received {
        received_at: Instant::now(),
        returned_at: Instant::now(),
        visibility_timeout: seconds(30),
        slot: None,
        run: RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller)),
        cohort: None,
        holder: None,
    };
    let d = Delivery::start(ctx, m, received);
    let (lease, delivery) = (std::mem::size_of_val(&*d.lease), std::mem::size_of_val(&d));
    // 120,000 may be held at once (B3 in benches/throughput.rs): a byte more on a lease
    // can take the allocator to its next size. S3's payload location adds its place.
    let most = if cfg!(feature = "s3") { 360 } else { 344 };
    assert!(lease <= most, "Lease: {lease} bytes");
    assert!(delivery <= 48, "Delivery: {delivery} bytes");
}
