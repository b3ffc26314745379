//! The same handlers in AWS Lambda (feature `lambda`): events made of messages received from
//! a `MemoryQueue` on the paused clock, handled by `Invocations::invoke`. Outcomes map to the
//! partial batch response; leases are kept past the visibility timeout and capped by the
//! function's deadline; handlers still running near the deadline are cancelled and their
//! messages released; a FIFO queue's first failure fails the rest of the event.
#![cfg(feature = "lambda")]

#[macro_use]
mod common;

guard_logs!();

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use common::{memory_fifo, memory_queue, secs};
use sqs_consumer::lambda::{self, Function, Invocations};
use sqs_consumer::memory::{Action, SendOptions};
use sqs_consumer::{AckMode, Batch, Delivery, MemoryQueue};
use tokio::time::{sleep, sleep_until};

const ARN: &str = "arn:aws:sqs:us-east-1:000000000000:jobs";

/// An event of up to `n` messages received from `q` now, as Lambda's poller receives them.
async fn event_of(q: &MemoryQueue, n: usize) -> SqsEvent {
    let mut got = Vec::new();
    while got.len() < n {
        let want = u32::try_from((n - got.len()).min(10)).unwrap();
        let batch = q.receive(want, Duration::ZERO).await.unwrap();
        if batch.is_empty() {
            break;
        }
        got.extend(batch);
    }
    lambda::event(ARN, got)
}

/// The message ids the response reports failed.
fn failed(response: &SqsBatchResponse) -> BTreeSet<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// The message ids the response reports failed, in its order.
fn reported(response: &SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// The event's message ids, in its order.
fn record_ids(event: &SqsEvent) -> Vec<String> {
    event
        .records
        .iter()
        .map(|r| r.message_id.clone().unwrap())
        .collect()
}

/// The function's deadline, `left` from now.
fn deadline_in(left: Duration) -> SystemTime {
    SystemTime::now() + left
}

/// Does what the body says: `ack`, `err`, `release`, `later` (`release_after` 60 s),
/// `fail`, `drop`, `panic`, `stuck` (an hour's work), `dead` (`dead_letter`), or `ok` (returns
/// `Ok` without settling); anything after a `-` is ignored.
async fn as_the_body_says(d: Delivery) -> Result<(), sqs_consumer::BoxError> {
    // A suffix after `-` keeps bodies apart (a FIFO queue deduplicates equal ones).
    match d.body().split('-').next().unwrap_or_default() {
        "ack" => d.ack().await?,
        "err" => return Err("the handler failed".into()),
        "release" => d.release().await?,
        "later" => d.release_after(secs(60)).await?,
        "fail" => d.fail("failed on purpose").await?,
        "drop" => drop(d),
        "panic" => panic!("the handler panicked"),
        "stuck" => {
            sleep(secs(3600)).await;
            d.ack().await?;
        }
        "dead" => d.dead_letter("cannot be handled").await?,
        _ => {}
    }
    Ok(())
}

/// A batch handler doing what each body says, one after another; the batch's outcome is
/// the first error, if any.
async fn each_as_the_body_says(batch: Batch) -> Result<(), sqs_consumer::BoxError> {
    let mut outcome = Ok(());
    for d in batch {
        let done = as_the_body_says(d).await;
        if outcome.is_ok() {
            outcome = done;
        }
    }
    outcome
}

/// Sends one message per body; their ids by body.
fn send_all(q: &MemoryQueue, bodies: &[&str]) -> Vec<(String, String)> {
    bodies
        .iter()
        .map(|b| ((*b).to_owned(), q.send(*b).unwrap()))
        .collect()
}

fn ids_of(sent: &[(String, String)], bodies: &[&str]) -> BTreeSet<String> {
    sent.iter()
        .filter(|(b, _)| bodies.contains(&b.as_str()))
        .map(|(_, id)| id.clone())
        .collect()
}

/// Each outcome lands where Lambda expects it: an ack is left for Lambda to delete (nothing
/// is sent), every other outcome is in `batchItemFailures`; a release is visible at once,
/// `release_after` after its delay, the rest when their visibility lapses.
#[tokio::test(start_paused = true)]
async fn mixed_outcomes_give_exactly_the_failed_items() {
    let q = memory_queue(30);
    let bodies = [
        "ack", "err", "release", "later", "fail", "drop", "panic", "ack",
    ];
    let sent = send_all(&q, &bodies);
    let invocations = Function::in_memory(&q).handler(as_the_body_says).unwrap();
    let event = event_of(&q, bodies.len()).await;
    let response = invocations.invoke(event, deadline_in(secs(60))).await;
    let not_done = ["err", "release", "later", "fail", "drop", "panic"];
    assert_eq!(failed(&response), ids_of(&sent, &not_done));
    assert_eq!(q.requests().deletes(), 0, "acks are left to Lambda");
    assert_eq!(q.len(), bodies.len(), "nothing deleted");
    assert_eq!(q.visible_len(), 1, "the release is visible at once");
    sleep(secs(31)).await;
    // The acked ones stay hidden only as long as Lambda takes to delete them: here nobody
    // does, so they come back with the others, all but `later`.
    assert_eq!(q.visible_len(), bodies.len() - 1);
    sleep(secs(30)).await;
    assert_eq!(q.visible_len(), bodies.len(), "`later` after its 60 s");
    let stats = invocations.stats(ARN).expect("the queue's consumer");
    assert_eq!(
        (stats.acked, stats.handler_errors),
        (2, 2),
        "err and fail: {stats:?}"
    );
    assert_eq!(stats.handler_panics, 1, "{stats:?}");
}

/// A handler past its `handler_timeout` fails its record; a move to the dead-letter queue
/// sends the copy and is done, so that Lambda deletes the original.
#[tokio::test(start_paused = true)]
async fn a_timed_out_handler_fails_and_a_dead_lettered_record_is_done() {
    let q = memory_queue(30);
    let dlq = MemoryQueue::new();
    let sent = send_all(&q, &["stuck", "dead", "ack"]);
    let invocations = Function::in_memory(&q)
        .consumer({
            let dlq = dlq.clone();
            move |b| b.handler_timeout(secs(5)).dead_letter(&dlq, 5)
        })
        .handler(as_the_body_says)
        .unwrap();
    let start = tokio::time::Instant::now();
    let response = invocations
        .invoke(event_of(&q, 3).await, deadline_in(secs(60)))
        .await;
    assert_eq!(failed(&response), ids_of(&sent, &["stuck"]));
    assert!(start.elapsed() < secs(6), "ended at the handler timeout");
    assert_eq!(dlq.len(), 1, "the copy was sent");
    let stats = invocations.stats(ARN).unwrap();
    assert_eq!(
        (stats.handler_timeouts, stats.dead_lettered),
        (1, 1),
        "{stats:?}"
    );
}

/// A record reads in the handler as the message a worker's receive brings: body, receive
/// count, attributes, sent time, and the queue's visibility timeout.
#[tokio::test(start_paused = true)]
async fn a_delivery_reads_as_in_a_worker() {
    let q = memory_queue(30);
    let options = SendOptions::new().message_attribute("tenant", "acme");
    let id = q.send_with("order", options).unwrap();
    // A first receive lapses: the record's receive count is 2.
    q.receive(1, Duration::ZERO).await.unwrap();
    sleep(secs(31)).await;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let invocations = {
        let seen = seen.clone();
        Function::in_memory(&q)
            .handler(move |d: Delivery| {
                let tenant = d.message().message_attributes().unwrap()["tenant"].clone();
                seen.lock().unwrap().push(format!(
                    "{} {} {} {} {} {:?}",
                    d.message_id(),
                    d.body(),
                    d.receive_count(),
                    tenant.string_value().unwrap(),
                    d.sent_at().is_some(),
                    d.visibility_timeout(),
                ));
                d.ack()
            })
            .unwrap()
    };
    let response = invocations
        .invoke(event_of(&q, 1).await, deadline_in(secs(60)))
        .await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        *seen.lock().unwrap(),
        [format!("{id} order 2 acme true 30s")]
    );
}

/// With `AckMode::OnSuccess`, a handler's `Ok` is an ack, left to Lambda; its `Err` a
/// failure.
#[tokio::test(start_paused = true)]
async fn on_success_an_ok_is_done_and_an_err_is_not() {
    let q = memory_queue(30);
    let sent = send_all(&q, &["ok", "err", "ok"]);
    let invocations = Function::in_memory(&q)
        .consumer(|b| b.ack_mode(AckMode::OnSuccess))
        .handler(as_the_body_says)
        .unwrap();
    let response = invocations
        .invoke(event_of(&q, 3).await, deadline_in(secs(60)))
        .await;
    assert_eq!(failed(&response), ids_of(&sent, &["err"]));
    assert_eq!(q.requests().deletes(), 0);
}

/// A handler that works for 100 s on a queue whose visibility timeout is 30 s: its message
/// is never visible to another receiver meanwhile, and its ack is done.
#[tokio::test(start_paused = true)]
async fn an_item_held_past_the_queues_timeout_stays_hidden_and_is_done() {
    let q = memory_queue(30);
    let id = q.send("long").unwrap();
    let invocations = Function::in_memory(&q)
        .handler(|d: Delivery| async move {
            sleep(secs(100)).await;
            d.ack().await
        })
        .unwrap();
    let event = event_of(&q, 1).await;
    let invoke = invocations.invoke(event, deadline_in(secs(900)));
    let other_receiver = async {
        for _ in 0..110 {
            let got = q.receive(10, Duration::ZERO).await.unwrap();
            assert!(got.is_empty(), "visible while held: {got:?}");
            sleep(secs(1)).await;
        }
    };
    let (response, ()) = tokio::join!(invoke, other_receiver);
    assert!(failed(&response).is_empty(), "{id} done");
    let stats = invocations.stats(ARN).unwrap();
    assert!(stats.extended >= 3, "extended every 15 s: {stats:?}");
}

/// A handler still running shortly before the function's deadline is cancelled: its message
/// is released (visible at once) and reported failed, and the invocation answers before the
/// deadline with the others done.
#[tokio::test(start_paused = true)]
async fn a_handler_outliving_the_deadline_is_reported_failed_before_it() {
    let q = memory_queue(30);
    let sent = send_all(&q, &["stuck", "ack", "ack"]);
    let invocations = Function::in_memory(&q)
        .handler(|d: Delivery| async move {
            if d.body() == "stuck" {
                sleep(secs(3600)).await;
            }
            d.ack().await
        })
        .unwrap();
    let event = event_of(&q, 3).await;
    let start = tokio::time::Instant::now();
    let response = invocations.invoke(event, deadline_in(secs(10))).await;
    let took = start.elapsed();
    assert!(
        took >= secs(10) - lambda::DEFAULT_DEADLINE_MARGIN && took < secs(10),
        "answered {took:?} after the start, the deadline at 10 s"
    );
    assert_eq!(failed(&response), ids_of(&sent, &["stuck"]));
    assert_eq!(
        q.visible_len(),
        1,
        "the cancelled one is visible again at once"
    );
    let stats = invocations.stats(ARN).unwrap();
    assert_eq!((stats.acked, stats.released), (2, 1), "{stats:?}");
}

/// The cut at the deadline says once what it cancelled, and what it could not release in
/// time; an invocation that ends in time says nothing of it.
#[tokio::test(start_paused = true)]
async fn the_cut_at_the_deadline_says_what_it_cancelled_and_left_unanswered() {
    // Every request takes 1 s: the cancelled one's release is still unanswered at the end
    // of the wait for it, half the margin before the deadline.
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(30))
        .latency(secs(1))
        .build()
        .unwrap();
    send_all(&q, &["stuck", "ack"]);
    let (logs, _guard) = common::capture_logs();
    let invocations = Function::in_memory(&q).handler(as_the_body_says).unwrap();
    let response = invocations
        .invoke(event_of(&q, 2).await, deadline_in(secs(10)))
        .await;
    assert_eq!(response.batch_item_failures.len(), 1);
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let said = |what: &str| text.lines().filter(|l| l.contains(what)).count();
    assert_eq!(
        said("1 handler was still running shortly before the function's deadline"),
        1,
        "{text}"
    );
    assert_eq!(said("unanswered at the function's deadline"), 1, "{text}");
    q.send("ack").unwrap();
    let quiet = invocations
        .invoke(event_of(&q, 1).await, deadline_in(secs(10)))
        .await;
    assert!(quiet.batch_item_failures.is_empty());
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert_eq!(text.matches("function's deadline").count(), 2, "{text}");
}

/// Without the queue's visibility timeout nothing can be kept hidden: the whole event is
/// reported failed, with the error logged; the next event reads it again.
#[tokio::test(start_paused = true)]
async fn an_event_whose_queue_cannot_be_read_is_reported_failed_whole() {
    let q = memory_queue(30);
    let sent = send_all(&q, &["ack", "ack-2"]);
    let (logs, _guard) = common::capture_logs();
    let invocations = Function::in_memory(&q).handler(as_the_body_says).unwrap();
    q.fail_next(Action::GetQueueAttributes, "InternalError", 1);
    let response = invocations
        .invoke(event_of(&q, 2).await, deadline_in(secs(60)))
        .await;
    assert_eq!(failed(&response), ids_of(&sent, &["ack", "ack-2"]));
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("cannot read the queue's visibility timeout"))
        .unwrap_or_else(|| panic!("no line for it: {text}"));
    assert!(
        line.contains(" ERROR ") && line.contains("InternalError"),
        "{line}"
    );
    sleep(secs(31)).await;
    let response = invocations
        .invoke(event_of(&q, 2).await, deadline_in(secs(60)))
        .await;
    assert!(
        response.batch_item_failures.is_empty(),
        "read again, and done"
    );
}

/// A delivery kept beyond its invocation (moved out of the handler) is extended no further
/// than the function's deadline: a message whose function died comes back then, not a
/// visibility timeout later.
#[tokio::test(start_paused = true)]
async fn no_extension_runs_past_the_functions_deadline() {
    let q = memory_queue(30);
    q.send("kept").unwrap();
    let kept: Arc<Mutex<Vec<Delivery>>> = Arc::default();
    let invocations = {
        let kept = kept.clone();
        Function::in_memory(&q)
            .handler(move |d: Delivery| {
                kept.lock().unwrap().push(d);
                async { Ok::<_, sqs_consumer::Error>(()) }
            })
            .unwrap()
    };
    let start = tokio::time::Instant::now();
    let response = invocations
        .invoke(event_of(&q, 1).await, deadline_in(secs(50)))
        .await;
    assert_eq!(response.batch_item_failures.len(), 1, "not acked");
    // Extended at 15 s (to 45 s), and at 30 s to the deadline at 50 s, not to 60 s.
    sleep_until(start + secs(49)).await;
    assert_eq!(q.visible_len(), 0, "hidden until the deadline");
    let stats = invocations.stats(ARN).unwrap();
    assert_eq!(stats.extended, 2, "{stats:?}");
    assert_eq!(
        stats.capped, 0,
        "the 12-hour cap is not what cut it: {stats:?}"
    );
    sleep_until(start + secs(51)).await;
    assert_eq!(q.visible_len(), 1, "visible at the deadline");
    assert_eq!(kept.lock().unwrap().len(), 1);
}

/// On a FIFO queue the first record not done fails every later one: the handler is not run
/// on them, they are released, and they are reported failed.
#[tokio::test(start_paused = true)]
async fn on_a_fifo_queue_the_first_failure_fails_every_later_item() {
    let q = memory_fifo(30);
    let mut sent = Vec::new();
    for (i, (body, group)) in [("ack", "a"), ("ack", "b"), ("err", "a"), ("ack", "b")]
        .into_iter()
        .enumerate()
    {
        let options = SendOptions::new()
            .group_id(group)
            .deduplication_id(i.to_string());
        sent.push(q.send_with(body, options).unwrap());
    }
    let handled: Arc<Mutex<Vec<String>>> = Arc::default();
    let invocations = {
        let handled = handled.clone();
        Function::in_memory(&q)
            .handler(move |d: Delivery| {
                handled.lock().unwrap().push(d.message_id().to_owned());
                as_the_body_says(d)
            })
            .unwrap()
    };
    let event = event_of(&q, 4).await;
    assert_eq!(event.records.len(), 4);
    let order = record_ids(&event);
    let response = invocations.invoke(event, deadline_in(secs(60))).await;
    assert_eq!(
        reported(&response),
        order[2..],
        "the failure and every record after it"
    );
    assert_eq!(
        *handled.lock().unwrap(),
        order[..3],
        "in order, none after the failure"
    );
    assert_eq!(q.visible_len(), 1, "the one never handled is released");
}

/// A batch handler on a FIFO queue gets the whole event in one batch, in order; what it
/// acks after the first record it leaves is reported failed too.
#[tokio::test(start_paused = true)]
async fn a_fifo_batch_is_one_batch_and_fails_from_its_first_failure_on() {
    let q = memory_fifo(30);
    for i in 0..4 {
        let options = SendOptions::new()
            .group_id("g")
            .deduplication_id(i.to_string());
        q.send_with(format!("m{i}"), options).unwrap();
    }
    let sizes: Arc<Mutex<Vec<usize>>> = Arc::default();
    let invocations = {
        let sizes = sizes.clone();
        Function::in_memory(&q)
            .batch_handler(move |batch: Batch| {
                sizes.lock().unwrap().push(batch.len());
                async move {
                    for d in batch {
                        if d.body() != "m1" {
                            d.ack().await?;
                        }
                    }
                    Ok::<_, sqs_consumer::Error>(())
                }
            })
            .unwrap()
    };
    let event = event_of(&q, 4).await;
    let order = record_ids(&event);
    let response = invocations.invoke(event, deadline_in(secs(60))).await;
    assert_eq!(reported(&response), order[1..]);
    assert_eq!(*sizes.lock().unwrap(), [4]);
}

/// Settings that cannot hold in Lambda are refused when the function starts, naming them.
#[test]
fn a_visibility_timeout_of_the_consumers_own_is_refused() {
    let q = MemoryQueue::new();
    let refused = |f: Function| f.handler(as_the_body_says).unwrap_err().to_string();
    let err = refused(Function::in_memory(&q).consumer(|b| b.visibility_timeout(secs(60))));
    assert!(err.contains("`visibility_timeout`"), "{err}");
    let err = refused(Function::in_memory(&q).deadline_margin(Duration::from_millis(10)));
    assert!(
        err.contains("`deadline_margin`") && err.contains("100 ms..=60 s"),
        "{err}"
    );
    let err = refused(Function::in_memory(&q).consumer(|b| b.max_in_flight(0)));
    assert!(err.contains("`max_in_flight`"), "{err}");
    let err =
        refused(Function::in_memory(&q).consumer(|b| b.adaptive_visibility(secs(10), secs(60))));
    assert!(err.contains("`adaptive_visibility`"), "{err}");
    #[cfg(feature = "s3")]
    {
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::Config::builder()
                .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
                .build(),
        );
        let err = refused(Function::in_memory(&q).consumer(move |b| {
            b.s3_payloads(s3.clone())
                .any_payload_bucket()
                .delete_payload_on_ack(true)
        }));
        assert!(err.contains("`delete_payload_on_ack`"), "{err}");
    }
}

/// Outside Lambda, the example says why on one line and exits 1 (the runtime would panic).
#[test]
fn the_example_outside_lambda_says_why_on_one_line_and_exits_1() {
    let mut command = std::process::Command::new(server::example_binary("lambda"));
    command
        .env_remove("AWS_LAMBDA_RUNTIME_API")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test");
    let out = common::output_within(&mut command, secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "error: the Lambda runtime stopped: AWS_LAMBDA_RUNTIME_API is not set: this process \
         does not run in AWS Lambda"
    );
}

/// Every entry point says so when the process does not run in Lambda (this test's has no
/// `AWS_LAMBDA_RUNTIME_API`), and returns.
#[tokio::test]
async fn outside_lambda_every_entry_point_returns_the_runtimes_error() {
    assert!(std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none());
    let client = common::client_for("http://127.0.0.1:1");
    let ack = |d: Delivery| d.ack();
    let results = [
        lambda::run(client.clone(), ack).await,
        lambda::run_batch(client.clone(), each_as_the_body_says).await,
        Function::new(client.clone()).run(ack).await,
        Function::new(client).run_batch(each_as_the_body_says).await,
    ];
    for result in results {
        let err = result.unwrap_err();
        assert!(err.is_fatal(), "{err}");
        assert!(
            err.to_string()
                .contains("AWS_LAMBDA_RUNTIME_API is not set"),
            "{err}"
        );
    }
}

/// `Invocations` is what `lambda_runtime` serves.
#[allow(dead_code)]
fn invocations_are_a_lambda_service(
    i: Invocations,
) -> impl lambda_runtime::Service<lambda_runtime::LambdaEvent<SqsEvent>, Response = SqsBatchResponse>
{
    i
}

/// The same, through a local Lambda Runtime API and `lambda_runtime`, in a function process
/// of its own, with events of messages received from the test server: visibility changes
/// and releases hit a real queue.
mod server {
    use std::process::{Command, Stdio};
    use std::time::Instant;

    use aws_sdk_sqs::types::Message;
    use common::runtime_api::{Answer, RuntimeApi};
    use common::{KillOnDrop, Kind, TestQueue};

    use super::*;

    /// What the function process runs.
    enum Program {
        /// This test binary's `function_process`, with `as_the_body_says`.
        BodySays,
        /// The same, with `each_as_the_body_says` as a batch handler.
        BatchBodySays,
        /// `examples/lambda.rs`, holding each message `HOLD_SECS`.
        Example { hold_secs: u64 },
    }

    /// A Lambda function serving `api`'s invocations, killed when dropped.
    fn start(api: &RuntimeApi, program: Program) -> KillOnDrop {
        let mut command = match program {
            Program::BodySays | Program::BatchBodySays => {
                let handler = match program {
                    Program::BatchBodySays => "batch",
                    _ => "body",
                };
                let mut c = Command::new(std::env::current_exe().expect("this test binary"));
                c.args(["server::function_process", "--exact", "--include-ignored"])
                    .args(["--nocapture", "--test-threads=1"])
                    .env("LAMBDA_TEST_HANDLER", handler);
                c
            }
            Program::Example { hold_secs } => {
                let mut c = Command::new(example_binary("lambda"));
                c.env("HOLD_SECS", hold_secs.to_string());
                c
            }
        };
        command
            .env("AWS_LAMBDA_RUNTIME_API", api.address())
            .env("AWS_LAMBDA_FUNCTION_NAME", "test")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
            .env("AWS_ENDPOINT_URL_SQS", common::server_endpoint())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null());
        KillOnDrop(command.spawn().expect("the function starts"))
    }

    /// The example's binary, built beside this test by `cargo test --all-features`.
    pub(super) fn example_binary(name: &str) -> std::path::PathBuf {
        let exe = std::env::current_exe().expect("the test's own path");
        let dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("target/<profile>");
        let binary = dir.join("examples").join(name);
        assert!(
            binary.exists(),
            "{} is missing: `cargo test --all-features` builds it",
            binary.display()
        );
        binary
    }

    /// Not a test: the Lambda function process the tests below start (with
    /// `LAMBDA_TEST_HANDLER` set), serving the Runtime API its environment names. Alone it
    /// has nothing to serve and returns.
    #[test]
    #[ignore = "the Lambda function the server tests start, with LAMBDA_TEST_HANDLER set"]
    fn function_process() {
        if std::env::var_os("LAMBDA_TEST_HANDLER").is_none() {
            return;
        }
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let client = common::server_client();
        let served = match std::env::var("LAMBDA_TEST_HANDLER").as_deref() {
            Ok("batch") => runtime.block_on(lambda::run_batch(client, each_as_the_body_says)),
            _ => runtime.block_on(lambda::run(client, as_the_body_says)),
        };
        panic!("the function stopped serving: {served:?}");
    }

    /// Up to `n` messages received from `q` now, with all their attributes.
    async fn receive(q: &TestQueue, n: usize) -> Vec<Message> {
        let mut got = Vec::new();
        for _ in 0..20 {
            if got.len() >= n {
                break;
            }
            got.extend(q.receive_raw(secs(1)).await);
        }
        got
    }

    /// Invokes the function with an event of `messages`, its deadline `timeout` away: the ids
    /// it reports failed, in its order, and how long it took to answer.
    async fn invoke(
        api: &RuntimeApi,
        q: &TestQueue,
        messages: Vec<Message>,
        timeout: Duration,
    ) -> (Vec<String>, Duration) {
        let event = lambda::event(&q.arn().await, messages);
        let started = Instant::now();
        let answer = api.invoke(&event, timeout).await;
        let took = started.elapsed();
        let Answer::Response(response) = answer else {
            panic!("the function failed: {answer:?}");
        };
        let failed = response["batchItemFailures"]
            .as_array()
            .unwrap_or_else(|| panic!("no batchItemFailures in {response}"))
            .iter()
            .map(|f| f["itemIdentifier"].as_str().unwrap().to_owned())
            .collect();
        (failed, took)
    }

    fn ids(messages: &[Message], bodies: &[&str]) -> BTreeSet<String> {
        messages
            .iter()
            .filter(|m| bodies.contains(&m.body().unwrap_or_default()))
            .map(|m| m.message_id().unwrap().to_owned())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn mixed_outcomes_give_exactly_the_failed_items() {
        require_server!("server::mixed_outcomes_give_exactly_the_failed_items");
        let q = TestQueue::new(Kind::Server, 30).await;
        let bodies = ["ack", "err", "release", "fail", "drop", "panic", "ack"];
        for body in bodies {
            q.send(body).await;
        }
        let api = RuntimeApi::start().await;
        let _function = start(&api, Program::BodySays);
        let messages = receive(&q, bodies.len()).await;
        assert_eq!(messages.len(), bodies.len());
        let expected = ids(&messages, &["err", "release", "fail", "drop", "panic"]);
        let (failed, _) = invoke(&api, &q, messages.clone(), secs(20)).await;
        assert_eq!(failed.into_iter().collect::<BTreeSet<_>>(), expected);
        let again = q.receive_raw(Duration::ZERO).await;
        let released: Vec<&str> = again.iter().filter_map(|m| m.body()).collect();
        assert_eq!(released, ["release"], "only the release is visible at once");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn a_batch_handler_serves_the_runtime_with_the_same_outcomes() {
        require_server!("server::a_batch_handler_serves_the_runtime_with_the_same_outcomes");
        let q = TestQueue::new(Kind::Server, 30).await;
        let bodies = ["ack", "err", "release", "ack"];
        for body in bodies {
            q.send(body).await;
        }
        let api = RuntimeApi::start().await;
        let _function = start(&api, Program::BatchBodySays);
        let messages = receive(&q, bodies.len()).await;
        let expected = ids(&messages, &["err", "release"]);
        let (failed, _) = invoke(&api, &q, messages, secs(20)).await;
        assert_eq!(failed.into_iter().collect::<BTreeSet<_>>(), expected);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn an_item_held_past_the_queues_timeout_is_never_visible_meanwhile() {
        require_server!("server::an_item_held_past_the_queues_timeout_is_never_visible_meanwhile");
        const TIMEOUT: u64 = 4;
        let q = TestQueue::new(Kind::Server, TIMEOUT).await;
        q.send("held").await;
        let api = RuntimeApi::start().await;
        // The example's handler holds it for 2.5 of the queue's timeouts.
        let _function = start(
            &api,
            Program::Example {
                hold_secs: TIMEOUT * 5 / 2,
            },
        );
        let messages = receive(&q, 1).await;
        let invoked = invoke(&api, &q, messages, secs(60));
        tokio::pin!(invoked);
        let mut looks = 0;
        let (failed, took) = loop {
            tokio::select! {
                answer = &mut invoked => break answer,
                () = sleep(Duration::from_millis(250)) => {
                    let seen = q.receive_raw(Duration::ZERO).await;
                    assert!(seen.is_empty(), "visible while held: {seen:?}");
                    looks += 1;
                }
            }
        };
        assert!(failed.is_empty(), "done: {failed:?}");
        assert!(took >= secs(TIMEOUT * 5 / 2), "held {took:?}");
        assert!(looks >= 20, "looked {looks} times");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn a_handler_outliving_the_deadline_is_reported_failed_before_it() {
        require_server!("server::a_handler_outliving_the_deadline_is_reported_failed_before_it");
        let q = TestQueue::new(Kind::Server, 30).await;
        for body in ["stuck", "ack", "ack"] {
            q.send(body).await;
        }
        let api = RuntimeApi::start().await;
        let _function = start(&api, Program::BodySays);
        let messages = receive(&q, 3).await;
        let stuck = ids(&messages, &["stuck"]);
        let timeout = secs(4);
        let (failed, took) = invoke(&api, &q, messages, timeout).await;
        assert_eq!(failed.into_iter().collect::<BTreeSet<_>>(), stuck);
        let margin = lambda::DEFAULT_DEADLINE_MARGIN;
        assert!(
            took >= timeout - margin - Duration::from_millis(100) && took < timeout,
            "answered after {took:?}; the deadline was {timeout:?} away"
        );
        let again = q.receive_raw(Duration::ZERO).await;
        let bodies: Vec<&str> = again.iter().filter_map(|m| m.body()).collect();
        assert_eq!(bodies, ["stuck"], "released at the cancel, the others done");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn on_a_fifo_queue_the_first_failure_fails_every_later_item() {
        require_server!("server::on_a_fifo_queue_the_first_failure_fails_every_later_item");
        let q = TestQueue::new_fifo(Kind::Server, 30).await;
        // Bodies apart: the queue deduplicates by content.
        for (body, group) in [
            ("ack-1", "a"),
            ("ack-2", "b"),
            ("err-1", "a"),
            ("ack-3", "b"),
            ("ack-4", "c"),
        ] {
            q.send_to_group(body, group).await;
        }
        let api = RuntimeApi::start().await;
        let _function = start(&api, Program::BodySays);
        let messages = receive(&q, 5).await;
        let order: Vec<String> = messages
            .iter()
            .map(|m| m.message_id().unwrap().to_owned())
            .collect();
        let first_failure = messages
            .iter()
            .position(|m| m.body() == Some("err-1"))
            .unwrap_or_else(|| panic!("the failing message was not received: {messages:?}"));
        let (failed, _) = invoke(&api, &q, messages, secs(20)).await;
        assert_eq!(
            failed,
            order[first_failure..],
            "the failure and every record after it, in order"
        );
    }
}
