//! Where a consumer's queue comes from (a URL, name or ARN through a client, or a
//! `MemoryQueue`), and the keeper's own client when it runs on a thread of its own.

use crate::error::Error;
use crate::memory::MemoryQueue;
use crate::queue::sdk::SdkQueue;
use crate::queue::Queue;
use crate::queue_ref::QueueRef;

/// Where a consumer's messages come from.
#[derive(Debug)]
pub(super) enum Source {
    /// A queue given by URL, name or ARN (checked by `build`), through a client.
    Sqs {
        client: aws_sdk_sqs::Client,
        queue: String,
    },
    Memory(MemoryQueue),
}

/// Where the keeper (and the batchers of acks and releases) runs, as the builder was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeeperPlacement {
    /// On a thread of its own when a client of its own can be had, else on the caller's
    /// runtime; always on the caller's for a `MemoryQueue`.
    Default,
    /// On a thread of its own (`isolated_keeper(true)`).
    OwnThread,
    /// On the caller's runtime (`isolated_keeper(false)`).
    CallersRuntime,
}

/// The consumer's queue, and the keeper's own when it gets a thread of its own.
pub(super) fn queues(
    source: Source,
    keeper_client: Option<aws_sdk_sqs::Client>,
    placement: KeeperPlacement,
) -> Result<(Queue, Option<Queue>), Error> {
    match source {
        Source::Sqs { client, queue } => {
            let sqs = SdkQueue::new(client, QueueRef::parse(&queue)?);
            check_region("queue", &sqs)?;
            let own = match keeper_client {
                Some(client) => Some(sqs.with_client(client)),
                None => sqs.with_own_connections(),
            };
            let queue = Queue::new(sqs);
            let keeper_queue = match (placement, own) {
                (KeeperPlacement::CallersRuntime, _) | (KeeperPlacement::Default, None) => None,
                (_, Some(own)) => Some(queue.through(own)),
                (KeeperPlacement::OwnThread, None) => {
                    return Err(Error::invalid(
                        "isolated_keeper",
                        true,
                        "only with a client of the keeper's own: the consumer's client names \
                         its HTTP client, so give one with `keeper_client`",
                    ))
                }
            };
            Ok((queue, keeper_queue))
        }
        Source::Memory(memory) => {
            if keeper_client.is_some() {
                return Err(Error::invalid(
                    "keeper_client",
                    "a client",
                    "none for a MemoryQueue consumer (its keeper calls the queue directly)",
                ));
            }
            let queue = Queue::new(memory);
            let keeper_queue = (placement == KeeperPlacement::OwnThread).then(|| queue.clone());
            Ok((queue, keeper_queue))
        }
    }
}

/// An ARN's region must be the client's: the client sends every call to its own region's
/// endpoint.
pub(super) fn check_region(field: &'static str, sqs: &SdkQueue) -> Result<(), Error> {
    match (sqs.given().region(), sqs.client_region()) {
        (Some(arn), Some(client)) if arn != client => Err(Error::invalid(
            field,
            format!("{} (the client's region is {client})", sqs.given()),
            "an ARN in the client's region: build the client for the queue's region",
        )),
        _ => Ok(()),
    }
}
