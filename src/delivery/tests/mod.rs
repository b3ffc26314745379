//! The guard and its keeper driven through a real `Delivery` on a `MemoryQueue`, on
//! the paused clock: `sleep` here only moves virtual time forward.

mod keeping;
mod losing;
mod sharing;
mod size;

use tokio::time::{sleep, sleep_until};

use super::*;
use crate::keeper::schedule::COALESCE_WINDOW;
use crate::keeper::Keeper;
use crate::keeper_thread::KeeperRuntime;
use crate::limits::CAP_MARGIN;
use crate::memory::counts::Action;
use crate::memory::MemoryQueue;
use crate::settle_calls::SettleHooks;
use crate::test_support::{hold, hold_in};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn queue(visibility: u64) -> MemoryQueue {
    MemoryQueue::builder()
        .visibility_timeout(secs(visibility))
        .build()
        .expect("valid queue")
}

fn extensions(queue: &MemoryQueue) -> u64 {
    queue.requests().visibility_changes()
}

fn receipt_of(d: &Delivery) -> String {
    d.lease.receipt().to_owned()
}

#[tokio::test(start_paused = true)]
async fn debug_output_hides_the_receipt_handle() {
    let q = queue(10);
    q.send("secret body").unwrap();
    let d = hold(&q, None).await;
    let text = format!("{d:?}");
    assert!(text.contains(d.message_id()));
    assert!(!text.contains(&receipt_of(&d)));
    assert!(!text.contains("secret body"));
    // Only the handle's first 8 characters: enough to tell two apart.
    let start: String = receipt_of(&d).chars().take(8).collect();
    assert!(
        text.contains(&format!("receipt_handle: \"{start}…\"")),
        "{text}"
    );
}
