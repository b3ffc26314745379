//! What the unit tests share: a consumer's context on a `MemoryQueue`, a delivery held as
//! the consumer holds one, and the text of a decode error.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::delivery::run_ties::RunTies;
use crate::delivery::{Delivery, Received};
use crate::keeper::Keeper;
use crate::keeper_thread::KeeperRuntime;
use crate::lease::context::Context;
use crate::limits::VisibilityTimeout;
use crate::memory::MemoryQueue;
use crate::queue::Queue;
use crate::retry_policy::RetryPolicy;
use crate::settle_calls::request_batch::RequestsAtOnce;

/// What the deliveries of a consumer on `queue` share, with the default settings (the retry
/// policy `Leave`, the keeper on the caller's runtime).
pub(crate) fn context(queue: &MemoryQueue) -> Context {
    Context::new(
        &Queue::new(queue.clone()),
        RetryPolicy::Leave,
        KeeperRuntime::Caller,
        RequestsAtOnce::default(),
    )
}

/// Receives the queue's first message the way the consumer does, with `visibility`
/// (or the queue's own timeout) and no in-flight slot.
pub(crate) async fn hold(queue: &MemoryQueue, visibility: Option<u32>) -> Delivery {
    let run = RunTies::new(Default::default(), Keeper::new(KeeperRuntime::Caller));
    hold_in(queue, visibility, run).await
}

/// As [`hold`], kept by `run`'s keeper (shared by the deliveries of one run).
pub(crate) async fn hold_in(
    queue: &MemoryQueue,
    visibility: Option<u32>,
    run: Arc<RunTies>,
) -> Delivery {
    let received_at = Instant::now();
    let mut messages = queue
        .receive_with_visibility(
            1,
            Duration::ZERO,
            visibility.map(|v| Duration::from_secs(u64::from(v))),
        )
        .await
        .expect("receive");
    let message = messages.pop().expect("a message to receive");
    assert!(message.receipt_handle().is_some(), "a receipt handle");
    let secs = visibility.map_or(queue.visibility_timeout().as_secs(), u64::from);
    let ctx = context(queue);
    let received = Received {
        received_at,
        returned_at: Instant::now(),
        visibility_timeout: seconds(secs),
        slot: None,
        run,
        cohort: None,
        holder: None,
    };
    Delivery::start(Arc::new(ctx), message, received)
}

/// A visibility timeout of `secs` seconds (at most 12 hours), as the tests write them.
pub(crate) fn seconds(secs: u64) -> VisibilityTimeout {
    VisibilityTimeout::at_most_max(secs)
}

/// The `expected` and the source's text of the `Error::Decode` that `result` must be.
#[cfg(feature = "json")]
pub(crate) fn decode_error(
    result: Result<impl std::fmt::Debug, crate::error::Error>,
) -> (String, String) {
    match result {
        Err(crate::error::Error::Decode {
            expected, source, ..
        }) => (expected, source.to_string()),
        other => panic!("expected Error::Decode, got {other:?}"),
    }
}
