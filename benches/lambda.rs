//! L1: what the `lambda` feature costs per event, against a hand-written handler that builds
//! the `SqsBatchResponse` itself (AWS's documented pattern: a loop over the records, the
//! failures collected). Both handle the same event (10 records, Lambda's default batch size,
//! and 100) with work that takes no time, on a one-thread runtime (a function of one vCPU),
//! events one after another, runs of the two in turn. The crate's side answers through
//! `Invocations::invoke`, the service `lambda_runtime` calls; the runtime's own HTTP round
//! trip is the same for both and left out.
//!
//! `cargo bench --features lambda --bench lambda`

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use sqs_consumer::lambda::{self, Function, Invocations};
use sqs_consumer::{Delivery, MemoryQueue};

const ARN: &str = "arn:aws:sqs:us-east-1:123456789012:jobs";
const RUNS: usize = 5;
const EVENTS: usize = 5_000;

/// The work of one record: none, but not nothing the compiler can drop.
fn work(body: &str) -> Result<(), &'static str> {
    if std::hint::black_box(body).is_empty() {
        Err("empty")
    } else {
        Ok(())
    }
}

/// The hand-written handler, as AWS documents it for Rust.
async fn hand_written(event: SqsEvent) -> SqsBatchResponse {
    let mut failures = Vec::new();
    for record in event.records {
        if work(record.body.as_deref().unwrap_or_default()).is_err() {
            failures.push(failure(&record));
        }
    }
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = failures;
    response
}

fn failure(record: &SqsMessage) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    failure.item_identifier = record.message_id.clone().unwrap_or_default();
    failure
}

/// The crate's invocations of the same work, each record acked (left to Lambda).
fn invocations(queue: &MemoryQueue) -> Invocations {
    Function::in_memory(queue)
        .handler(|d: Delivery| async move {
            work(d.body())?;
            d.ack().await.map_err(sqs_consumer::BoxError::from)
        })
        .expect("valid settings")
}

/// An event of `n` messages received from `queue`.
async fn event_of(queue: &MemoryQueue, n: usize) -> SqsEvent {
    for i in 0..n {
        queue.send(format!("message {i}")).unwrap();
    }
    let mut messages = Vec::new();
    while messages.len() < n {
        messages.extend(queue.receive(10, Duration::ZERO).await.unwrap());
    }
    lambda::event(ARN, messages)
}

/// Wall time and CPU time per event of `EVENTS` events through `handle`.
async fn per_event<F, Fut>(event: &SqsEvent, handle: F) -> (Duration, Duration)
where
    F: Fn(SqsEvent) -> Fut,
    Fut: std::future::Future<Output = SqsBatchResponse>,
{
    let cpu = common::cpu_time_in("/proc/self/stat").unwrap_or_default();
    let start = Instant::now();
    for _ in 0..EVENTS {
        let response = handle(event.clone()).await;
        assert!(response.batch_item_failures.is_empty(), "every record done");
    }
    let wall = start.elapsed() / EVENTS as u32;
    let cpu = common::cpu_time_in("/proc/self/stat").unwrap_or_default() - cpu;
    (wall, cpu / EVENTS as u32)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for records in [10, 100] {
            let queue = MemoryQueue::new();
            let event = event_of(&queue, records).await;
            let invocations = invocations(&queue);
            let deadline = || SystemTime::now() + Duration::from_secs(900);
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            let (mut ours_cpu, mut theirs_cpu) = (Vec::new(), Vec::new());
            for _ in 0..RUNS {
                let (wall, cpu) = per_event(&event, |e| invocations.invoke(e, deadline())).await;
                ours.push(wall.as_secs_f64() * 1e6);
                ours_cpu.push(cpu.as_secs_f64() * 1e6);
                let (wall, cpu) = per_event(&event, hand_written).await;
                theirs.push(wall.as_secs_f64() * 1e6);
                theirs_cpu.push(cpu.as_secs_f64() * 1e6);
            }
            let (ours, theirs) = (common::median(ours), common::median(theirs));
            println!(
                "L1, {records} records: {ours:.1} us an event through the crate ({:.2} us a \
                 record), {theirs:.1} us hand-written; {:.1} us more an event; CPU {:.1} and \
                 {:.1} us (medians of {RUNS} runs of {EVENTS} events)",
                ours / records as f64,
                ours - theirs,
                common::median(ours_cpu),
                common::median(theirs_cpu),
            );
        }
    });
}
