//! L1: what the `lambda` feature costs per event, against a hand-written handler that builds
//! the `SqsBatchResponse` itself (AWS's documented pattern: a loop over the records, the
//! failures collected). Both handle the same event (10 records, Lambda's default batch size,
//! and 100) with work that takes no time, on a one-thread runtime (a function of one vCPU),
//! events one after another, runs of the two in turn. The crate's side answers through
//! `Invocations::invoke`, the service `lambda_runtime` calls; the runtime's own HTTP round
//! trip is the same for both and left out.
//!
//! L2: the SQS requests an invocation sends per record (the renewal, extensions, deletes),
//! with acks left to Lambda and deleted at once, on `MemoryQueue` and the paused clock (the
//! counts are exact; Lambda's own receives and deletes are not counted): 10 and 100 records
//! acked at once; the same with one of them held 12 s at a visibility of 5 s; and the
//! batching window's case, 3 records delivered 4 s into a visibility of 10 s, one held 7 s.
//!
//! `cargo bench --features lambda --bench lambda`

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use sqs_consumer::lambda::{self, Acks, Function, Invocations};
use sqs_consumer::memory::Action;
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

/// One L2 case: `records` records received from a queue of visibility `visibility` s, handed
/// to the function `late` s after the receive; the first held `hold` s, the others acked at
/// once.
#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    records: usize,
    visibility: u64,
    late: u64,
    hold: u64,
}

const CASES: [Case; 5] = [
    Case {
        name: "10 acked at once",
        records: 10,
        visibility: 30,
        late: 0,
        hold: 0,
    },
    Case {
        name: "100 acked at once",
        records: 100,
        visibility: 30,
        late: 0,
        hold: 0,
    },
    Case {
        name: "10, one held 12 s at T = 5 s",
        records: 10,
        visibility: 5,
        late: 0,
        hold: 12,
    },
    Case {
        name: "100, one held 12 s at T = 5 s",
        records: 100,
        visibility: 5,
        late: 0,
        hold: 12,
    },
    Case {
        name: "3 delivered 4 s late at T = 10 s, one held 7 s",
        records: 3,
        visibility: 10,
        late: 4,
        hold: 7,
    },
];

/// The SQS requests one invocation of `case` sends, per record, with `acks`.
async fn requests_per_record(case: Case, acks: Acks) -> f64 {
    let queue = MemoryQueue::builder()
        .visibility_timeout(Duration::from_secs(case.visibility))
        .build()
        .unwrap();
    let event = event_of(&queue, case.records).await;
    let held = event.records[0].message_id.clone();
    tokio::time::sleep(Duration::from_secs(case.late)).await;
    let hold = Duration::from_secs(case.hold);
    let invocations = Function::in_memory(&queue)
        .acks(acks)
        .handler(move |d: Delivery| {
            let holds = Some(d.message_id()) == held.as_deref();
            async move {
                if holds {
                    tokio::time::sleep(hold).await;
                }
                d.ack().await
            }
        })
        .expect("valid settings");
    let before = queue.requests();
    let deadline = SystemTime::now() + Duration::from_secs(60);
    let response = invocations.invoke(event, deadline).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "every record done");
    let after = queue.requests();
    let sent = [
        Action::ChangeMessageVisibilityBatch,
        Action::DeleteMessageBatch,
    ]
    .into_iter()
    .chain([Action::ChangeMessageVisibility, Action::DeleteMessage])
    .map(|a| after.requests(a) - before.requests(a))
    .sum::<u64>();
    sent as f64 / case.records as f64
}

fn l2() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        for case in CASES {
            let left = requests_per_record(case, Acks::LeftToLambda).await;
            let deleted = requests_per_record(case, Acks::DeletedAtOnce).await;
            println!(
                "L2, {}: {left:.2} requests a record with acks left to Lambda, {deleted:.2} \
                 deleted at once",
                case.name
            );
        }
    });
}

fn main() {
    l2();
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
                let (wall, cpu) = per_event(&event, |e| async {
                    invocations.invoke(e, deadline()).await.unwrap()
                })
                .await;
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
