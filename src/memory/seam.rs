//! The crate's queue seam, served by a `MemoryQueue`: each call waits out the queue's
//! latency, as a network round trip would.

use aws_sdk_sqs::types::Message;
use futures_util::future::BoxFuture;

use crate::error::Error;
use crate::memory::counts::Action;
use crate::memory::MemoryQueue;
use crate::queue::{BatchEntry, BatchResult, Receive, Transport};

impl Transport for MemoryQueue {
    fn describe(&self) -> String {
        format!("memory:{}", self.name())
    }

    fn is_fifo(&self) -> bool {
        MemoryQueue::is_fifo(self)
    }

    fn receive(&self, req: Receive) -> BoxFuture<'_, Result<Vec<Message>, Error>> {
        let visibility = req
            .visibility
            .map(|secs| std::time::Duration::from_secs(u64::from(secs)));
        Box::pin(self.receive_with_visibility(req.max_messages, req.wait, visibility))
    }

    fn delete_batch<'a>(&'a self, entries: &'a [BatchEntry<'a>]) -> BoxFuture<'a, BatchResult> {
        Box::pin(async move {
            self.round_trip().await;
            self.batch(Action::DeleteMessageBatch, entries)
        })
    }

    fn change_visibility_batch<'a>(
        &'a self,
        entries: &'a [BatchEntry<'a>],
    ) -> BoxFuture<'a, BatchResult> {
        Box::pin(async move {
            self.round_trip().await;
            self.batch(Action::ChangeMessageVisibilityBatch, entries)
        })
    }

    fn visibility_timeout(&self) -> BoxFuture<'_, Result<u32, Error>> {
        Box::pin(async move {
            let timeout = self.visibility_timeout_request()?;
            Ok(u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX))
        })
    }
}
