//! Per-message-group sequencing for FIFO queues.
//!
//! One receive from a FIFO queue may return several messages of one group, in order. SQS
//! hands out no more of that group while any of them is in flight, but handling them at
//! once would still break their order. So the deliveries of a group from one receive are
//! handed out one at a time; the next waits (kept hidden by the keeper) until the one
//! before it has ended. If one ends without an ack, the rest are released, so that SQS
//! delivers them again in order after it.

use std::collections::{HashMap, VecDeque};

use futures_util::future::{join_all, BoxFuture};
use tokio_util::sync::CancellationToken;

use crate::delivery::Delivery;
use crate::lease::End;

/// Splits one receive's deliveries into groups handled one delivery at a time: one group per
/// `MessageGroupId` on a FIFO queue (in receive order), one per message otherwise.
pub(crate) fn partition(deliveries: Vec<Delivery>, fifo: bool) -> Vec<VecDeque<Delivery>> {
    if !fifo {
        return deliveries
            .into_iter()
            .map(|d| VecDeque::from([d]))
            .collect();
    }
    let mut groups: Vec<VecDeque<Delivery>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for d in deliveries {
        let Some(group) = d.message_group_id().map(str::to_owned) else {
            groups.push(VecDeque::from([d]));
            continue;
        };
        let i = *index.entry(group).or_insert_with(|| {
            groups.push(VecDeque::new());
            groups.len() - 1
        });
        groups[i].push_back(d);
    }
    groups
}

/// Hands a group's deliveries to `hand_out` one at a time, each after the one before it
/// ended with an ack. On a delivery that ends otherwise, or on shutdown, releases the rest.
/// The first is always handed out: the run decided to when it received it (a shutdown that
/// began since still lets it be handled, within the shutdown timeout).
pub(crate) async fn run_group<F>(
    mut group: VecDeque<Delivery>,
    shutdown: CancellationToken,
    hand_out: F,
) where
    F: Fn(Delivery) -> BoxFuture<'static, ()>,
{
    while let Some(d) = group.pop_front() {
        if group.is_empty() {
            hand_out(d).await;
            return;
        }
        let ended = d.ended();
        hand_out(d).await;
        // The handler may have moved the delivery elsewhere: wait for its real end.
        let end = tokio::select! {
            end = ended => end,
            () = shutdown.cancelled() => End::NotAcked,
        };
        if end != End::Acked || shutdown.is_cancelled() {
            break;
        }
    }
    release_waiting(group).await;
}

/// Releases deliveries that were waiting their turn in a FIFO group whose order broke (or
/// whose run is shutting down), so that SQS delivers them again in order.
async fn release_waiting(waiting: impl IntoIterator<Item = Delivery>) {
    let waiting: Vec<Delivery> = waiting.into_iter().collect();
    if !waiting.is_empty() {
        tracing::debug!(
            count = waiting.len(),
            "releasing the rest of FIFO message groups, to keep their order"
        );
    }
    for d in waiting {
        if let Err(err) = d.release().await {
            tracing::warn!(error = %err.chain(), "releasing a waiting FIFO delivery failed; it returns when its visibility lapses");
        }
    }
}

/// Hands one receive's deliveries to `hand_out` as handler batches. On a standard queue, one batch of
/// all of them. On a FIFO queue, rounds: each round's batch holds the next delivery of every
/// group still going, in receive order; a group goes on to the next round once its delivery
/// of this round ended with an ack, and otherwise (or on shutdown) the rest of it is
/// released.
pub(crate) async fn run_batches<F>(
    deliveries: Vec<Delivery>,
    fifo: bool,
    shutdown: CancellationToken,
    hand_out: F,
) where
    F: Fn(Vec<Delivery>) -> BoxFuture<'static, ()>,
{
    if !fifo {
        hand_out(deliveries).await;
        return;
    }
    let mut going = partition(deliveries, true);
    let mut stopped = Vec::new();
    // The first round is always handed out, as in `run_group`.
    let mut first = true;
    while !going.is_empty() {
        if !std::mem::take(&mut first) && shutdown.is_cancelled() {
            stopped.append(&mut going);
            break;
        }
        let mut heads = Vec::with_capacity(going.len());
        let mut ends = Vec::with_capacity(going.len());
        for group in &mut going {
            if let Some(d) = group.pop_front() {
                ends.push(d.ended());
                heads.push(d);
            }
        }
        hand_out(heads).await;
        // The handler may have moved deliveries elsewhere: wait for their real ends.
        let ends = tokio::select! {
            ends = join_all(ends) => ends,
            () = shutdown.cancelled() => vec![End::NotAcked; going.len()],
        };
        let mut next = Vec::with_capacity(going.len());
        for (group, end) in going.into_iter().zip(ends) {
            if group.is_empty() {
                continue;
            }
            if end == End::Acked {
                next.push(group);
            } else {
                stopped.push(group);
            }
        }
        going = next;
    }
    release_waiting(stopped.into_iter().flatten()).await;
}
