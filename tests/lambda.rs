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
use sqs_consumer::lambda::{self, Acks, FifoFailure, Function, Invocations};
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
/// `fail`, `drop`, `panic`, `stuck` (an hour's work), `dead` (`dead_letter`), `hold<n>` (`n`
/// seconds' work, then `ack`), `err<n>` (`n` seconds' work, then `err`), or `ok` (returns
/// `Ok` without settling); anything after a `-` is ignored.
async fn as_the_body_says(d: Delivery) -> Result<(), sqs_consumer::BoxError> {
    // A suffix after `-` keeps bodies apart (a FIFO queue deduplicates equal ones).
    let says = d.body().split('-').next().unwrap_or_default().to_owned();
    if let Some(n) = says.strip_prefix("hold") {
        sleep(secs(n.parse()?)).await;
        return Ok(d.ack().await?);
    }
    if let Some(n) = says.strip_prefix("err").filter(|n| !n.is_empty()) {
        sleep(secs(n.parse()?)).await;
        return Err("the handler failed".into());
    }
    match says.as_str() {
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

/// The message ids of the deliveries a function's handler got, in the order it got them.
type Handled = Arc<Mutex<Vec<String>>>;

/// `function`'s invocations with a handler that notes each delivery's message id, then does
/// what its body says.
fn noting(function: Function) -> (Invocations, Handled) {
    let handled: Handled = Arc::default();
    let noted = handled.clone();
    let invocations = function
        .handler(move |d: Delivery| {
            noted.lock().unwrap().push(d.message_id().to_owned());
            as_the_body_says(d)
        })
        .unwrap();
    (invocations, handled)
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
    let response = invocations
        .invoke(event, deadline_in(secs(60)))
        .await
        .unwrap();
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
        .await
        .unwrap();
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
        .await
        .unwrap();
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
        .await
        .unwrap();
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
    assert!(failed(&response.unwrap()).is_empty(), "{id} done");
    let stats = invocations.stats(ARN).unwrap();
    assert!(stats.extended >= 3, "extended every 15 s: {stats:?}");
}

/// Runs `invoke` while another receiver looks at `q` every 250 ms; the answer, and the
/// bodies the other receiver got before it.
async fn watched<F>(q: &MemoryQueue, invoke: F) -> (SqsBatchResponse, Vec<String>)
where
    F: std::future::Future<Output = Result<SqsBatchResponse, sqs_consumer::Error>>,
{
    tokio::pin!(invoke);
    let mut seen = Vec::new();
    loop {
        tokio::select! {
            answer = &mut invoke => return (answer.unwrap(), seen),
            () = sleep(Duration::from_millis(250)) => {
                let got = q.receive(10, Duration::ZERO).await.unwrap();
                seen.extend(got.iter().filter_map(|m| m.body().map(str::to_owned)));
            }
        }
    }
}

/// Lambda may hand out records long after it received them (a batching window): the lease
/// counts from the receive. Visibility 10 s, the event delivered 4 s after the receive, the
/// function's deadline 8 s away: the records are renewed (one request for all three) before
/// any handler runs, and none is visible to another receiver before the answer, one held
/// 7 s included.
#[tokio::test(start_paused = true)]
async fn an_event_delivered_late_in_its_visibility_stays_hidden_until_the_answer() {
    let q = memory_queue(10);
    send_all(&q, &["hold7", "ack", "ack-2"]);
    let invocations = Function::in_memory(&q).handler(as_the_body_says).unwrap();
    let event = event_of(&q, 3).await;
    sleep(secs(4)).await;
    let start = tokio::time::Instant::now();
    let (response, seen) = watched(&q, invocations.invoke(event, deadline_in(secs(8)))).await;
    assert!(seen.is_empty(), "visible before the answer: {seen:?}");
    assert!(start.elapsed() >= secs(7), "held for 7 s");
    assert!(failed(&response).is_empty(), "all done: {response:?}");
    let counts = q.requests();
    assert_eq!(
        counts.requests(Action::ChangeMessageVisibilityBatch),
        1,
        "one renewal for the three, and no extension needed within the renewed 10 s"
    );
}

/// Records acked at once stay hidden while another record of the invocation is still
/// handled, until the answer (Lambda deletes them after it): visibility 5 s, one record held
/// 12 s beside three acked at once. Their extensions share the held one's requests.
#[tokio::test(start_paused = true)]
async fn records_done_early_stay_hidden_until_the_answer() {
    let q = memory_queue(5);
    send_all(&q, &["hold12", "ack", "ack-2", "ack-3"]);
    let invocations = Function::in_memory(&q).handler(as_the_body_says).unwrap();
    let event = event_of(&q, 4).await;
    let (response, seen) = watched(&q, invocations.invoke(event, deadline_in(secs(30)))).await;
    assert!(seen.is_empty(), "visible before the answer: {seen:?}");
    assert!(failed(&response).is_empty(), "all done: {response:?}");
    let counts = q.requests();
    assert_eq!(counts.deletes(), 0, "left to Lambda");
    // The renewal, then an extension every 2.5 s until the answer at 12 s: each a request
    // for all four.
    assert_eq!(counts.requests(Action::ChangeMessageVisibilityBatch), 5);
    assert_eq!(counts.visibility_changes(), 5 * 4);
    // Let go of at the answer: back when their last extension lapses, as nobody deletes
    // them here.
    sleep(secs(6)).await;
    assert_eq!(q.visible_len(), 4);
}

/// With `Acks::DeletedAtOnce` an ack is a `DeleteMessage` at once, as in a worker, and the
/// record is done; the others are still kept hidden until the answer.
#[tokio::test(start_paused = true)]
async fn acks_deleted_at_once_delete_at_once_and_are_done() {
    let q = memory_queue(5);
    send_all(&q, &["hold12", "ack", "ack-2", "err"]);
    let invocations = Function::in_memory(&q)
        .acks(Acks::DeletedAtOnce)
        .handler(as_the_body_says)
        .unwrap();
    let event = event_of(&q, 4).await;
    let err_id = event
        .records
        .iter()
        .find(|r| r.body.as_deref() == Some("err"))
        .and_then(|r| r.message_id.clone())
        .unwrap();
    let deleted_early = async {
        sleep(secs(1)).await;
        q.len()
    };
    let ((response, seen), left) = tokio::join!(
        watched(&q, invocations.invoke(event, deadline_in(secs(30)))),
        deleted_early
    );
    assert_eq!(left, 2, "the two acks deleted at once");
    assert_eq!(failed(&response), BTreeSet::from([err_id]));
    assert!(
        !seen.is_empty() && seen.iter().all(|b| b == "err"),
        "only the failed one, once its visibility lapsed: {seen:?}"
    );
    let counts = q.requests();
    assert_eq!(
        counts.requests(Action::DeleteMessageBatch),
        2,
        "the acks, then the held one"
    );
    assert_eq!(q.len(), 1, "the failed one is left");
}

/// A record that is gone before the invocation began (its visibility lapsed while Lambda
/// held it, and another receiver took it) is not handled: the renewal says it is gone, and
/// it is reported failed. The others are handled.
#[tokio::test(start_paused = true)]
async fn a_record_gone_before_the_invocation_is_reported_failed_unhandled() {
    let q = memory_queue(10);
    let sent = send_all(&q, &["ack", "ack-2"]);
    let event = event_of(&q, 2).await;
    sleep(secs(11)).await;
    // Another receiver takes one of them; the other is left visible.
    let taken = q.receive(1, Duration::ZERO).await.unwrap();
    let taken_id = taken[0].message_id().unwrap().to_owned();
    let (invocations, handled) = noting(Function::in_memory(&q));
    let response = invocations
        .invoke(event, deadline_in(secs(60)))
        .await
        .unwrap();
    assert_eq!(failed(&response), BTreeSet::from([taken_id.clone()]));
    let others: Vec<String> = sent
        .iter()
        .map(|(_, id)| id.clone())
        .filter(|id| *id != taken_id)
        .collect();
    assert_eq!(
        *handled.lock().unwrap(),
        others,
        "the gone one is not handled"
    );
}

/// The renewal says once how many records were gone before the invocation, and once how many
/// it could not renew (with why); an event renewed in full says neither.
#[tokio::test(start_paused = true)]
async fn the_renewal_says_once_what_was_gone_and_what_it_could_not_renew() {
    let gone_line = "gone before the invocation began";
    let not_renewed_line = "not renewed before the deadline margin";
    let (logs, _guard) = common::capture_logs();
    let said = |what: &str| {
        let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| l.contains(what))
            .map(str::to_owned)
            .collect();
        logs.lock().unwrap().clear();
        lines
    };
    // Renewed in full: nothing said.
    let q = memory_queue(10);
    let (invocations, _) = noting(Function::in_memory(&q));
    send_all(&q, &["ack", "ack-2"]);
    let event = event_of(&q, 2).await;
    invocations
        .invoke(event, deadline_in(secs(60)))
        .await
        .unwrap();
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        !text.contains(gone_line) && !text.contains(not_renewed_line),
        "{text}"
    );
    // One of two gone: said once, and nothing said of renewals that failed.
    let q = memory_queue(10);
    let (invocations, _) = noting(Function::in_memory(&q));
    send_all(&q, &["ack", "ack-2"]);
    let event = event_of(&q, 2).await;
    sleep(secs(11)).await;
    q.receive(1, Duration::ZERO).await.unwrap();
    invocations
        .invoke(event, deadline_in(secs(60)))
        .await
        .unwrap();
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(!text.contains(not_renewed_line), "{text}");
    let gone = said(gone_line);
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert!(gone[0].contains("1 record was gone"), "{gone:?}");
    // Both refused: said once, with the error.
    let q = memory_queue(10);
    let (invocations, _) = noting(Function::in_memory(&q));
    send_all(&q, &["ack", "ack-2"]);
    let event = event_of(&q, 2).await;
    for action in [
        Action::ChangeMessageVisibility,
        Action::ChangeMessageVisibilityBatch,
    ] {
        q.fail_next(action, "AccessDenied", 2);
    }
    let response = invocations
        .invoke(event, deadline_in(secs(60)))
        .await
        .unwrap();
    assert_eq!(response.batch_item_failures.len(), 2);
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(!text.contains(gone_line), "{text}");
    let not_renewed = said(not_renewed_line);
    assert_eq!(not_renewed.len(), 1, "{not_renewed:?}");
    assert!(
        not_renewed[0].contains("2 records were") && not_renewed[0].contains("AccessDenied"),
        "{not_renewed:?}"
    );
}

/// A record whose earlier ack found its delivery lost comes back in a later event: deleted
/// on sight without its handler, and reported done (Lambda deletes it), not failed.
#[tokio::test(start_paused = true)]
async fn a_record_whose_ack_was_lost_is_deleted_on_sight_and_reported_done() {
    let q = memory_queue(10);
    send_all(&q, &["ack"]);
    let handled: Handled = Arc::default();
    let invocations = {
        let (q, handled) = (q.clone(), handled.clone());
        Function::in_memory(&q.clone())
            .handler(move |d: Delivery| {
                let q = q.clone();
                handled.lock().unwrap().push(d.receive_count().to_string());
                async move {
                    // The first time, no extension goes through until its lease has lapsed.
                    for action in [
                        Action::ChangeMessageVisibility,
                        Action::ChangeMessageVisibilityBatch,
                    ] {
                        q.fail_for(action, "InternalError", secs(11));
                    }
                    sleep(secs(12)).await;
                    d.ack().await
                }
            })
            .unwrap()
    };
    let first = invocations
        .invoke(event_of(&q, 1).await, deadline_in(secs(60)))
        .await
        .unwrap();
    assert_eq!(first.batch_item_failures.len(), 1, "its ack was lost");
    let again = event_of(&q, 1).await;
    assert_eq!(again.records.len(), 1, "it came back");
    let second = invocations
        .invoke(again, deadline_in(secs(60)))
        .await
        .unwrap();
    assert!(
        second.batch_item_failures.is_empty(),
        "{:?}",
        second.batch_item_failures
    );
    assert_eq!(
        *handled.lock().unwrap(),
        ["1"],
        "handled the first time only"
    );
}

/// On a FIFO queue, a record gone before the invocation began fails the later records as a
/// failure does: every one by default, its group's only with `FifoFailure::FailsItsGroup`;
/// those are released unhandled, and the rest is handled.
#[tokio::test(start_paused = true)]
async fn on_a_fifo_queue_a_record_gone_before_the_invocation_fails_the_later_ones() {
    for failure in [FifoFailure::FailsTheRest, FifoFailure::FailsItsGroup] {
        let q = memory_fifo(10);
        for (body, group) in [("ack-a1", "a"), ("ack-a2", "a"), ("ack-b1", "b")] {
            let options = SendOptions::new().group_id(group);
            q.send_with(body, options).unwrap();
        }
        let event = event_of(&q, 3).await;
        let order = record_ids(&event);
        sleep(secs(11)).await;
        // Another receiver takes the first of group a, now visible again.
        let taken = q.receive(1, Duration::ZERO).await.unwrap();
        assert_eq!(taken[0].body(), Some("ack-a1"));
        let (invocations, handled) = noting(Function::in_memory(&q).fifo_failure(failure));
        let response = invocations
            .invoke(event, deadline_in(secs(60)))
            .await
            .unwrap();
        let (expected, handled_ids) = match failure {
            FifoFailure::FailsItsGroup => (&order[..2], &order[2..]),
            _ => (&order[..], &order[..0]),
        };
        assert_eq!(reported(&response), expected, "{failure:?}");
        assert_eq!(*handled.lock().unwrap(), handled_ids, "{failure:?}");
    }
}

/// On a FIFO queue, the later records that a record gone before the invocation fails are
/// released unhandled: visible again at once, not left hidden for the renewed timeout.
#[tokio::test(start_paused = true)]
async fn on_a_fifo_queue_the_records_a_gone_one_fails_are_visible_again_at_once() {
    for (failure, visible) in [
        (FifoFailure::FailsTheRest, vec!["ack-a2", "ack-b1"]),
        (FifoFailure::FailsItsGroup, vec!["ack-a2"]),
    ] {
        let q = memory_fifo(10);
        for (body, group) in [("ack-a1", "a"), ("ack-a2", "a"), ("ack-b1", "b")] {
            q.send_with(body, SendOptions::new().group_id(group))
                .unwrap();
        }
        let event = event_of(&q, 3).await;
        // Deleted before the invocation: its renewal finds it gone, while the others' holds.
        let first = &event.records[0];
        assert_eq!(first.body.as_deref(), Some("ack-a1"));
        q.delete(first.receipt_handle.as_deref().unwrap()).unwrap();
        let (invocations, _) = noting(Function::in_memory(&q).fifo_failure(failure));
        invocations
            .invoke(event, deadline_in(secs(60)))
            .await
            .unwrap();
        let mut again: Vec<String> = q
            .receive(10, Duration::ZERO)
            .await
            .unwrap()
            .iter()
            .filter_map(|m| m.body().map(str::to_owned))
            .collect();
        again.sort();
        assert_eq!(again, visible, "{failure:?}");
    }
}

/// An event the partial batch response cannot describe truthfully is answered with an
/// error, and none of its records is handled: no records, a record that is not SQS's, one
/// without a message id, a receipt handle or a queue ARN.
#[tokio::test(start_paused = true)]
async fn an_event_the_answer_cannot_describe_is_answered_with_an_error() {
    let q = memory_queue(30);
    let (invocations, handled) = noting(Function::in_memory(&q));
    type Break = fn(&mut aws_lambda_events::event::sqs::SqsMessage);
    let cases: [(&str, Break); 5] = [
        ("it has no records", |_| {}),
        ("is not an SQS record", |r| {
            r.event_source = Some("aws:sns".into())
        }),
        ("has no messageId", |r| r.message_id = None),
        ("has no receiptHandle", |r| {
            r.receipt_handle = Some(String::new())
        }),
        ("has no eventSourceARN", |r| r.event_source_arn = None),
    ];
    for (says, break_it) in cases {
        send_all(&q, &["ack", "ack-2"]);
        let mut event = event_of(&q, 2).await;
        if says == "it has no records" {
            event.records.clear();
        } else {
            break_it(&mut event.records[1]);
        }
        let err = invocations
            .invoke(event, deadline_in(secs(60)))
            .await
            .unwrap_err();
        assert!(
            matches!(err, sqs_consumer::Error::LambdaEvent { .. }) && err.is_fatal(),
            "{err:?}"
        );
        assert!(err.to_string().contains(says), "{says}: {err}");
        assert!(handled.lock().unwrap().is_empty(), "{says}: none handled");
        // Visible again for the next case.
        sleep(secs(31)).await;
    }
    assert_eq!(q.requests().visibility_changes(), 0, "none renewed");
}

/// `FifoFailure::FailsItsGroup`: a record not done fails the later records of its own group
/// only, which are released unhandled; the other groups go on, each in order.
#[tokio::test(start_paused = true)]
async fn on_a_fifo_queue_a_failure_can_fail_its_group_only() {
    let q = memory_fifo(30);
    let script = [
        ("ack", "a"),
        ("ack", "b"),
        ("err", "a"),
        ("ack", "b"),
        ("ack", "a"),
        ("ack", "c"),
        ("ack", "b"),
    ];
    let mut groups = std::collections::HashMap::new();
    for (i, (body, group)) in script.into_iter().enumerate() {
        let options = SendOptions::new()
            .group_id(group)
            .deduplication_id(i.to_string());
        let id = q.send_with(format!("{body}-{i}"), options).unwrap();
        groups.insert(id, group);
    }
    let (invocations, handled) =
        noting(Function::in_memory(&q).fifo_failure(FifoFailure::FailsItsGroup));
    let event = event_of(&q, script.len()).await;
    let order = record_ids(&event);
    assert_eq!(order.len(), script.len());
    let response = invocations
        .invoke(event, deadline_in(secs(60)))
        .await
        .unwrap();
    assert_eq!(
        reported(&response),
        [order[2].clone(), order[4].clone()],
        "the failure and its group's later record, nothing of b or c"
    );
    let handled = handled.lock().unwrap().clone();
    assert!(!handled.contains(&order[4]), "the later a is not handled");
    assert_eq!(handled.len(), script.len() - 1);
    for group in ["a", "b", "c"] {
        let in_order: Vec<&String> = order.iter().filter(|id| groups[*id] == group).collect();
        let as_handled: Vec<&String> = handled.iter().filter(|id| groups[*id] == group).collect();
        assert!(
            in_order.starts_with(&as_handled),
            "group {group} handled in its order: {as_handled:?} of {in_order:?}"
        );
    }
    assert_eq!(q.visible_len(), 1, "the later a, released unhandled");
}

/// Two invocations in flight at once in one function (Lambda's managed concurrency): each
/// keeps its own records hidden and answers for them alone, the short one without waiting
/// for the long one.
#[tokio::test(start_paused = true)]
async fn two_invocations_in_flight_at_once_answer_each_for_its_own() {
    let q = memory_queue(5);
    let long = send_all(&q, &["hold20", "err"]);
    let long_event = event_of(&q, 2).await;
    let short = send_all(&q, &["ack-3", "release", "hold3"]);
    let short_event = event_of(&q, 3).await;
    let invocations = Function::in_memory(&q).handler(as_the_body_says).unwrap();
    let start = tokio::time::Instant::now();
    let long_invocation = async {
        let answer = invocations.invoke(long_event, deadline_in(secs(60))).await;
        (answer.unwrap(), start.elapsed())
    };
    let short_invocation = async {
        let answer = invocations.invoke(short_event, deadline_in(secs(60))).await;
        (answer.unwrap(), start.elapsed())
    };
    let ((long_answer, long_took), (short_answer, short_took)) =
        tokio::join!(long_invocation, short_invocation);
    assert_eq!(failed(&long_answer), ids_of(&long, &["err"]));
    assert_eq!(failed(&short_answer), ids_of(&short, &["release"]));
    assert!(
        short_took >= secs(3) && short_took < secs(4),
        "{short_took:?}"
    );
    assert!(
        long_took >= secs(20) && long_took < secs(21),
        "{long_took:?}"
    );
    let stats = invocations.stats(ARN).unwrap();
    assert_eq!((stats.acked, stats.lost), (3, 0), "{stats:?}");
}

/// An invocation waits for its own releases before it answers, not for another's: requests
/// take 3 s (the queue's visibility timeout is read, and the records renewed, by 6 s), the
/// long invocation's failed record is released (`RetryPolicy::ReleaseNow`) from 7 s to 10 s,
/// and the short one's handler ends at 8 s.
#[tokio::test(start_paused = true)]
async fn an_invocation_waits_for_its_own_releases_not_anothers() {
    const LATENCY: Duration = Duration::from_secs(3);
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(30))
        .latency(LATENCY)
        .build()
        .unwrap();
    send_all(&q, &["err1"]);
    let long_event = event_of(&q, 1).await;
    send_all(&q, &["hold2"]);
    let short_event = event_of(&q, 1).await;
    let invocations = Function::in_memory(&q)
        .consumer(|b| b.retry_policy(sqs_consumer::RetryPolicy::ReleaseNow))
        .handler(as_the_body_says)
        .unwrap();
    let start = tokio::time::Instant::now();
    let long_invocation = async {
        let answer = invocations.invoke(long_event, deadline_in(secs(60))).await;
        (answer.unwrap(), start.elapsed())
    };
    let short_invocation = async {
        let answer = invocations.invoke(short_event, deadline_in(secs(60))).await;
        (answer.unwrap(), start.elapsed())
    };
    let ((long_answer, long_took), (short_answer, short_took)) =
        tokio::join!(long_invocation, short_invocation);
    assert_eq!(long_answer.batch_item_failures.len(), 1);
    assert!(short_answer.batch_item_failures.is_empty());
    let handlers_start = LATENCY * 2;
    assert!(
        long_took >= handlers_start + secs(1) + LATENCY,
        "after its release: {long_took:?}"
    );
    assert_eq!(
        short_took,
        handlers_start + secs(2),
        "not after the other's release"
    );
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
    let response = invocations
        .invoke(event, deadline_in(secs(10)))
        .await
        .unwrap();
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
        .await
        .unwrap();
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
        .await
        .unwrap();
    assert!(quiet.batch_item_failures.is_empty());
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert_eq!(text.matches("function's deadline").count(), 2, "{text}");
}

/// Without the queue's visibility timeout nothing can be kept hidden: the invocation answers
/// with an error (Lambda retries the whole batch), none of its records handled, the error
/// logged; the next event reads it again.
#[tokio::test(start_paused = true)]
async fn an_event_whose_queue_cannot_be_read_is_answered_with_an_error() {
    let q = memory_queue(30);
    send_all(&q, &["ack", "ack-2"]);
    let (logs, _guard) = common::capture_logs();
    let (invocations, handled) = noting(Function::in_memory(&q));
    q.fail_next(Action::GetQueueAttributes, "InternalError", 1);
    let err = invocations
        .invoke(event_of(&q, 2).await, deadline_in(secs(60)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, sqs_consumer::Error::LambdaEvent { .. }),
        "{err}"
    );
    assert!(err.is_retryable(), "as its queue's read: {err}");
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        source
            .as_deref()
            .unwrap_or_default()
            .contains("InternalError"),
        "{source:?}"
    );
    assert!(handled.lock().unwrap().is_empty(), "none handled");
    assert_eq!(q.requests().visibility_changes(), 0, "none renewed");
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("answering the invocation with an error"))
        .unwrap_or_else(|| panic!("no line for it: {text}"));
    assert!(
        line.contains(" ERROR ") && line.contains("InternalError"),
        "{line}"
    );
    sleep(secs(31)).await;
    let response = invocations
        .invoke(event_of(&q, 2).await, deadline_in(secs(60)))
        .await
        .unwrap();
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
        .await
        .unwrap();
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
    let (invocations, handled) = noting(Function::in_memory(&q));
    let event = event_of(&q, 4).await;
    assert_eq!(event.records.len(), 4);
    let order = record_ids(&event);
    let response = invocations
        .invoke(event, deadline_in(secs(60)))
        .await
        .unwrap();
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
    let response = invocations
        .invoke(event, deadline_in(secs(60)))
        .await
        .unwrap();
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
    for margin in [Duration::from_millis(99), Duration::from_millis(60_001)] {
        let err = refused(Function::in_memory(&q).deadline_margin(margin));
        assert!(
            err.contains("`deadline_margin`") && err.contains("100 ms..=60 s"),
            "{err}"
        );
    }
    for margin in [Duration::from_millis(100), Duration::from_secs(60)] {
        let function = Function::in_memory(&q).deadline_margin(margin);
        assert!(function.handler(as_the_body_says).is_ok(), "{margin:?}");
    }
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
        /// The same as `BodySays`, a FIFO failure failing its group only.
        GroupFailure,
        /// The same as `BodySays`, two invocations at a time
        /// (`AWS_LAMBDA_MAX_CONCURRENCY=2`).
        TwoAtATime,
        /// `examples/lambda.rs`, holding each message `HOLD_SECS`.
        Example { hold_secs: u64 },
    }

    /// A Lambda function serving `api`'s invocations, killed when dropped.
    fn start(api: &RuntimeApi, program: Program) -> KillOnDrop {
        let mut command = match program {
            Program::BodySays
            | Program::BatchBodySays
            | Program::GroupFailure
            | Program::TwoAtATime => {
                let handler = match program {
                    Program::BatchBodySays => "batch",
                    Program::GroupFailure => "group",
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
        if matches!(program, Program::TwoAtATime) {
            command.env("AWS_LAMBDA_MAX_CONCURRENCY", "2");
        }
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
            Ok("group") => runtime.block_on(
                Function::new(client)
                    .fifo_failure(FifoFailure::FailsItsGroup)
                    .run(as_the_body_says),
            ),
            _ => runtime.block_on(lambda::run(client, as_the_body_says)),
        };
        panic!("the function stopped serving: {served:?}");
    }

    /// `bodies` sent to `q`, a function serving `program`, and the messages received for an
    /// event of them (all of them, or the test fails).
    async fn serving(
        q: &TestQueue,
        bodies: &[&str],
        program: Program,
    ) -> (RuntimeApi, KillOnDrop, Vec<Message>) {
        for body in bodies {
            q.send(body).await;
        }
        let api = RuntimeApi::start().await;
        let function = start(&api, program);
        let messages = receive(q, bodies.len()).await;
        assert_eq!(messages.len(), bodies.len(), "received {messages:?}");
        (api, function, messages)
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
        (failed_in(answer), started.elapsed())
    }

    /// The ids a response reports failed, in its order.
    fn failed_in(answer: Answer) -> Vec<String> {
        let Answer::Response(response) = answer else {
            panic!("the function failed: {answer:?}");
        };
        response["batchItemFailures"]
            .as_array()
            .unwrap_or_else(|| panic!("no batchItemFailures in {response}"))
            .iter()
            .map(|f| f["itemIdentifier"].as_str().unwrap().to_owned())
            .collect()
    }

    /// [`invoke`], while another receiver looks at `q` every 250 ms: the ids reported failed,
    /// and the bodies the other receiver got before the answer.
    async fn invoke_watched(
        api: &RuntimeApi,
        q: &TestQueue,
        messages: Vec<Message>,
        timeout: Duration,
    ) -> (Vec<String>, Vec<String>) {
        let invoked = invoke(api, q, messages, timeout);
        tokio::pin!(invoked);
        let mut seen = Vec::new();
        loop {
            tokio::select! {
                (failed, _) = &mut invoked => return (failed, seen),
                () = sleep(Duration::from_millis(250)) => {
                    let got = q.receive_raw(Duration::ZERO).await;
                    seen.extend(got.iter().filter_map(|m| m.body().map(str::to_owned)));
                }
            }
        }
    }

    /// Lambda may hand out records long after it received them: visibility 10 s, the event
    /// delivered 4 s after the receive, the function's deadline 8 s away, one record held
    /// 7 s. Nothing is visible to another receiver (looking every 250 ms) before the answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn an_event_delivered_late_in_its_visibility_stays_hidden_until_the_answer() {
        require_server!(
            "server::an_event_delivered_late_in_its_visibility_stays_hidden_until_the_answer"
        );
        let q = TestQueue::new(Kind::Server, 10).await;
        let bodies = ["hold7", "ack", "ack-2"];
        let (api, _function, messages) = serving(&q, &bodies, Program::BodySays).await;
        sleep(secs(4)).await;
        let (failed, seen) = invoke_watched(&api, &q, messages, secs(8)).await;
        assert!(seen.is_empty(), "visible before the answer: {seen:?}");
        assert!(failed.is_empty(), "all done: {failed:?}");
    }

    /// Records acked at once stay hidden until the answer while another record of the
    /// invocation is handled: visibility 5 s, one record held 12 s beside three acked at
    /// once; nothing is visible to another receiver (looking every 250 ms) before the answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn records_done_early_stay_hidden_until_the_answer() {
        require_server!("server::records_done_early_stay_hidden_until_the_answer");
        let q = TestQueue::new(Kind::Server, 5).await;
        let bodies = ["hold12", "ack", "ack-2", "ack-3"];
        let (api, _function, messages) = serving(&q, &bodies, Program::BodySays).await;
        let (failed, seen) = invoke_watched(&api, &q, messages, secs(20)).await;
        assert!(seen.is_empty(), "visible before the answer: {seen:?}");
        assert!(failed.is_empty(), "all done: {failed:?}");
    }

    /// An event the answer cannot describe is answered with an error through the runtime
    /// (Lambda retries the whole batch): a record without `messageId`; and a payload that is
    /// no SQS event at all gets the runtime's own error. Nothing of either is handled.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn an_event_the_answer_cannot_describe_is_answered_with_an_error() {
        require_server!("server::an_event_the_answer_cannot_describe_is_answered_with_an_error");
        let q = TestQueue::new(Kind::Server, 30).await;
        let bodies = ["release", "release-2"];
        let (api, _function, messages) = serving(&q, &bodies, Program::BodySays).await;
        let mut event = lambda::event(&q.arn().await, messages);
        event.records[1].message_id = None;
        let Answer::Error(error) = api.invoke(&event, secs(20)).await else {
            panic!("answered a record it cannot name");
        };
        assert!(error.contains("has no messageId"), "{error}");
        let scheduled =
            serde_json::json!({"source": "aws.events", "detail-type": "Scheduled Event"});
        let Answer::Error(error) = api.invoke(&scheduled, secs(20)).await else {
            panic!("answered an event that is not SQS's");
        };
        assert!(!error.is_empty());
        let visible = q.receive_raw(Duration::ZERO).await;
        assert!(visible.is_empty(), "none handled (released): {visible:?}");
    }

    /// A FIFO event of three groups with a failure in group a, served by `program`: the
    /// records reported failed are the failure and, as `failure` says, every later record or
    /// its group's later records only, in the event's order.
    async fn a_fifo_failure_fails(program: Program, failure: FifoFailure) {
        let q = TestQueue::new_fifo(Kind::Server, 30).await;
        let script = [
            ("ack-1", "a"),
            ("ack-2", "b"),
            ("err-1", "a"),
            ("ack-3", "b"),
            ("ack-4", "a"),
            ("ack-5", "c"),
        ];
        // Bodies apart: the queue deduplicates by content.
        for (body, group) in script {
            q.send_to_group(body, group).await;
        }
        let api = RuntimeApi::start().await;
        let _function = start(&api, program);
        let messages = receive(&q, script.len()).await;
        let group_of = |m: &Message| {
            let body = m.body().unwrap_or_default();
            script.iter().find(|(b, _)| *b == body).map(|(_, g)| *g)
        };
        let first_failure = messages
            .iter()
            .position(|m| m.body() == Some("err-1"))
            .unwrap_or_else(|| panic!("the failing message was not received: {messages:?}"));
        let expected: Vec<String> = messages
            .iter()
            .enumerate()
            .filter(|(i, m)| {
                *i >= first_failure
                    && (failure == FifoFailure::FailsTheRest || group_of(m) == Some("a"))
            })
            .map(|(_, m)| m.message_id().unwrap().to_owned())
            .collect();
        let (failed, _) = invoke(&api, &q, messages, secs(20)).await;
        assert_eq!(failed, expected, "{failure:?}, in the event's order");
    }

    /// On a FIFO queue with `FifoFailure::FailsItsGroup`, a failure fails the rest of its
    /// group only: the other groups' records are done.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn on_a_fifo_queue_a_failure_can_fail_its_group_only() {
        require_server!("server::on_a_fifo_queue_a_failure_can_fail_its_group_only");
        a_fifo_failure_fails(Program::GroupFailure, FifoFailure::FailsItsGroup).await;
    }

    /// Two invocations in flight at once in one function process (Lambda's managed
    /// concurrency): the short one answers while the long one still holds its record, and
    /// each answers for its own records.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn two_invocations_in_flight_at_once_answer_each_for_its_own() {
        require_server!("server::two_invocations_in_flight_at_once_answer_each_for_its_own");
        let q = TestQueue::new(Kind::Server, 4).await;
        for body in ["hold6", "err"] {
            q.send(body).await;
        }
        let long = receive(&q, 2).await;
        for body in ["ack", "release"] {
            q.send(body).await;
        }
        let short = receive(&q, 2).await;
        let (long_failed, short_failed) = (ids(&long, &["err"]), ids(&short, &["release"]));
        let api = RuntimeApi::start().await;
        let _function = start(&api, Program::TwoAtATime);
        let started = Instant::now();
        let long_invocation = async {
            let (failed, seen) = invoke_watched(&api, &q, long, secs(20)).await;
            (failed, seen, started.elapsed())
        };
        let short_invocation = async {
            let (failed, took) = invoke(&api, &q, short.clone(), secs(20)).await;
            // As Lambda does: it deletes the records reported done.
            for done in short
                .iter()
                .filter(|m| !failed.iter().any(|f| Some(f.as_str()) == m.message_id()))
            {
                q.delete_raw(done.receipt_handle().unwrap()).await;
            }
            (failed, took)
        };
        let ((long_answer, seen, long_took), (short_answer, short_took)) =
            tokio::join!(long_invocation, short_invocation);
        assert_eq!(
            long_answer.into_iter().collect::<BTreeSet<_>>(),
            long_failed
        );
        assert_eq!(
            short_answer.into_iter().collect::<BTreeSet<_>>(),
            short_failed
        );
        assert!(long_took >= secs(6), "held 6 s: {long_took:?}");
        assert!(
            short_took < secs(3),
            "not after the long one: {short_took:?}"
        );
        // The failed ones follow the retry policy (the release at once, the error when its
        // visibility lapses); the held one and the acked one are never seen.
        assert!(
            seen.iter().all(|b| b == "release" || b == "err"),
            "only the failed ones: {seen:?}"
        );
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
        let (api, _function, messages) = serving(&q, &bodies, Program::BodySays).await;
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
        let (api, _function, messages) = serving(&q, &bodies, Program::BatchBodySays).await;
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
        let bodies = ["stuck", "ack", "ack"];
        let (api, _function, messages) = serving(&q, &bodies, Program::BodySays).await;
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
        a_fifo_failure_fails(Program::BodySays, FifoFailure::FailsTheRest).await;
    }
}

/// With an idempotency store shared by two function instances, a record whose key the other
/// instance did is reported done without its handler, and acked (Lambda deletes it).
#[tokio::test(start_paused = true)]
async fn a_record_whose_key_another_instance_did_is_done_without_its_handler() {
    use sqs_consumer::idempotency::MemoryStore;
    let q = memory_queue(10);
    let store = MemoryStore::new();
    let instance = || {
        let store = store.clone();
        noting(Function::in_memory(&q).consumer(move |builder| {
            builder
                .idempotency(store.clone())
                .idempotency_key(|d: &Delivery| {
                    Ok::<_, sqs_consumer::BoxError>(
                        d.body().split('-').next().unwrap_or_default().to_owned(),
                    )
                })
        }))
    };
    let ((one, handled_one), (two, handled_two)) = (instance(), instance());
    send_all(&q, &["ack-first"]);
    let first = one
        .invoke(event_of(&q, 1).await, deadline_in(secs(60)))
        .await
        .unwrap();
    assert!(first.batch_item_failures.is_empty());
    send_all(&q, &["ack-again"]);
    let second = two
        .invoke(event_of(&q, 1).await, deadline_in(secs(60)))
        .await
        .unwrap();
    assert!(second.batch_item_failures.is_empty(), "reported done");
    assert_eq!(
        (
            handled_one.lock().unwrap().len(),
            handled_two.lock().unwrap().len()
        ),
        (1, 0)
    );
    assert_eq!(two.stats(ARN).unwrap().duplicates_skipped, 1);
    assert_eq!(store.done(), 1);
}
