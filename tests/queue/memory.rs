//! `MemoryQueue` semantics, one test per rule SQS follows, on tokio's paused clock.

use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName as Attr};
use sqs_consumer::memory::{Action, SendOptions};
use sqs_consumer::{Error, MemoryQueue};
use tokio::time::{sleep, sleep_until, Instant};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn queue(visibility: u64) -> MemoryQueue {
    MemoryQueue::builder()
        .visibility_timeout(secs(visibility))
        .build()
        .unwrap()
}

fn handle(m: &Message) -> String {
    m.receipt_handle().unwrap().to_owned()
}

fn receive_count(m: &Message) -> u32 {
    m.attributes().unwrap()[&Attr::ApproximateReceiveCount]
        .parse()
        .unwrap()
}

fn code(r: Result<(), Error>) -> String {
    r.expect_err("the call should fail")
        .code()
        .expect("an SQS error code")
        .to_owned()
}

async fn receive(q: &MemoryQueue) -> Vec<Message> {
    q.receive(10, Duration::ZERO).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_received_message_is_hidden_for_the_visibility_timeout() {
    let q = queue(30);
    q.send("m").unwrap();
    let start = Instant::now();
    assert_eq!(receive(&q).await.len(), 1);
    assert_eq!((q.visible_len(), q.in_flight_len()), (0, 1));
    sleep_until(start + secs(29)).await;
    assert!(receive(&q).await.is_empty());
    sleep_until(start + secs(30)).await;
    assert_eq!(
        receive(&q).await.len(),
        1,
        "visible again once the timeout lapses"
    );
}

#[tokio::test(start_paused = true)]
async fn a_receive_can_name_its_own_visibility_timeout() {
    let q = queue(30);
    q.send("m").unwrap();
    q.receive_with_visibility(1, Duration::ZERO, Some(secs(5)))
        .await
        .unwrap();
    sleep(secs(5)).await;
    assert_eq!(receive(&q).await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn receipt_handles_change_on_every_receive_and_old_ones_are_answered_as_aws_does() {
    let q = queue(10);
    q.send("m").unwrap();
    let first = handle(&receive(&q).await[0]);
    sleep(secs(10)).await;
    let second = handle(&receive(&q).await[0]);
    assert_ne!(first, second);
    // An extension with the old handle: AWS's "does not exist or is not available".
    let err = q.change_visibility(&first, secs(30)).unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameterValue"));
    assert!(
        err.to_string()
            .contains("Message does not exist or is not available for visibility timeout change"),
        "{err}"
    );
    assert!(err.is_lost(), "{err}");
    // A delete with the old handle succeeds and deletes nothing.
    q.delete(&first).expect("AWS answers success");
    assert_eq!(q.len(), 1);
    assert_eq!(code(q.delete("not-a-handle")), "ReceiptHandleIsInvalid");
    q.delete(&second).unwrap();
    assert!(q.is_empty());
    q.delete(&second)
        .expect("deleting a deleted message again succeeds, as in SQS");
    let err = q.change_visibility(&second, secs(30)).unwrap_err();
    assert!(err.is_lost(), "an extension of a deleted message: {err}");
}

#[tokio::test(start_paused = true)]
async fn changing_visibility_after_the_timeout_lapsed_succeeds_and_does_nothing() {
    let q = queue(10);
    q.send("m").unwrap();
    let h = handle(&receive(&q).await[0]);
    sleep(secs(10)).await;
    q.change_visibility(&h, secs(10))
        .expect("AWS answers success");
    assert_eq!(receive(&q).await.len(), 1, "and the message stays visible");
}

#[tokio::test(start_paused = true)]
async fn change_visibility_counts_from_the_call_and_zero_shows_it_at_once() {
    let q = queue(10);
    q.send("m").unwrap();
    let h = handle(&receive(&q).await[0]);
    sleep(secs(8)).await;
    q.change_visibility(&h, secs(10)).unwrap();
    sleep(secs(9)).await; // 17 s after the receive: hidden until 18 s
    assert!(receive(&q).await.is_empty());
    q.change_visibility(&h, secs(0)).unwrap();
    assert_eq!(receive(&q).await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn visibility_cannot_end_past_12_hours_after_the_receive() {
    let q = queue(43_200);
    q.send("m").unwrap();
    let h = handle(&receive(&q).await[0]);
    sleep(secs(100)).await;
    let err = q.change_visibility(&h, secs(43_200 - 99)).unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameterValue"));
    assert!(err.is_fatal());
    q.change_visibility(&h, secs(43_200 - 100))
        .expect("exactly 12 h is allowed");
    assert_eq!(
        code(q.change_visibility(&h, secs(43_201))),
        "InvalidParameterValue"
    );
}

#[tokio::test(start_paused = true)]
async fn every_receive_raises_the_receive_count() {
    let q = queue(1);
    q.send("m").unwrap();
    for expected in 1..=4 {
        let m = &receive(&q).await[0];
        assert_eq!(receive_count(m), expected);
        sleep(secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn queue_and_message_delays_hide_new_messages() {
    let q = MemoryQueue::builder().delay(secs(5)).build().unwrap();
    q.send("queue delay").unwrap();
    q.send_with("own delay", SendOptions::new().delay(secs(1)))
        .unwrap();
    assert_eq!(q.delayed_len(), 2);
    sleep(secs(1)).await;
    assert_eq!(receive(&q).await[0].body(), Some("own delay"));
    sleep(secs(3)).await;
    assert!(receive(&q).await.is_empty());
    sleep(secs(1)).await;
    assert_eq!(receive(&q).await[0].body(), Some("queue delay"));
    let err = q
        .send_with("too late", SendOptions::new().delay(secs(901)))
        .unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameterValue"));
}

#[tokio::test(start_paused = true)]
async fn redrive_moves_a_message_to_the_dead_letter_queue_on_its_next_receive() {
    let dlq = MemoryQueue::new();
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(1))
        .dead_letter_queue(&dlq, 2)
        .build()
        .unwrap();
    let id = q.send("first").unwrap();
    q.send("second").unwrap();
    for _ in 0..2 {
        let got = receive(&q).await;
        assert_eq!(got.len(), 2);
        sleep(secs(1)).await;
    }
    // Third receive: both were received twice without a delete, so both move.
    let got = receive(&q).await;
    assert!(got.is_empty());
    assert_eq!(dlq.len(), 2);
    let moved = receive(&dlq).await;
    assert!(moved.iter().any(|m| m.message_id() == Some(id.as_str())));
    assert!(moved.iter().all(|m| receive_count(m) == 1));
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_deleted_message_never_reaches_the_dead_letter_queue() {
    let dlq = MemoryQueue::new();
    let q = MemoryQueue::builder()
        .visibility_timeout(secs(1))
        .dead_letter_queue(&dlq, 1)
        .build()
        .unwrap();
    q.send("ok").unwrap();
    let m = &receive(&q).await[0];
    q.delete(&handle(m)).unwrap();
    sleep(secs(2)).await;
    assert!(receive(&q).await.is_empty());
    assert!(dlq.is_empty());
}

#[tokio::test(start_paused = true)]
async fn redrive_settings_are_checked() {
    let std_dlq = MemoryQueue::new();
    let err = MemoryQueue::builder()
        .dead_letter_queue(&std_dlq, 0)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("max_receive_count"));
    let err = MemoryQueue::builder()
        .fifo(true)
        .dead_letter_queue(&std_dlq, 3)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("dead_letter_queue"));
}

fn fifo() -> MemoryQueue {
    MemoryQueue::builder()
        .fifo(true)
        .content_based_deduplication(true)
        .visibility_timeout(secs(10))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn fifo_locks_a_group_while_any_of_its_messages_is_in_flight() {
    let q = fifo();
    for body in ["a1", "a2", "b1"] {
        let group = &body[..1];
        q.send_with(body, SendOptions::new().group_id(group))
            .unwrap();
    }
    let first = q.receive(1, Duration::ZERO).await.unwrap();
    assert_eq!(first[0].body(), Some("a1"));
    // a2 waits behind a1; b1 is free.
    let next = receive(&q).await;
    let bodies: Vec<_> = next.iter().map(|m| m.body().unwrap()).collect();
    assert_eq!(bodies, ["b1"]);
    q.delete(&handle(&first[0])).unwrap();
    assert_eq!(receive(&q).await[0].body(), Some("a2"));
}

#[tokio::test(start_paused = true)]
async fn fifo_keeps_group_order_across_redeliveries() {
    let q = fifo();
    for i in 0..3 {
        q.send_with(format!("m{i}"), SendOptions::new().group_id("g"))
            .unwrap();
    }
    let got = receive(&q).await;
    let bodies: Vec<_> = got.iter().map(|m| m.body().unwrap()).collect();
    assert_eq!(
        bodies,
        ["m0", "m1", "m2"],
        "one receive may return a group's run in order"
    );
    // Release m1 and m2 but keep m0: nothing of the group comes while m0 is held.
    q.change_visibility(&handle(&got[1]), secs(0)).unwrap();
    q.change_visibility(&handle(&got[2]), secs(0)).unwrap();
    assert!(receive(&q).await.is_empty());
    q.change_visibility(&handle(&got[0]), secs(0)).unwrap();
    let again: Vec<_> = receive(&q)
        .await
        .iter()
        .map(|m| m.body().unwrap().to_owned())
        .collect();
    assert_eq!(again, ["m0", "m1", "m2"]);
}

#[tokio::test(start_paused = true)]
async fn fifo_deduplicates_within_five_minutes() {
    let q = fifo();
    let g = || SendOptions::new().group_id("g");
    let a = q.send_with("same", g()).unwrap();
    let b = q.send_with("same", g()).unwrap();
    assert_eq!(a, b, "content-based duplicate returns the first id");
    let c = q.send_with("other", g().deduplication_id("x")).unwrap();
    let d = q
        .send_with("different body", g().deduplication_id("x"))
        .unwrap();
    assert_eq!(c, d, "explicit id duplicate");
    assert_eq!(q.len(), 2);
    sleep(secs(300)).await;
    q.send_with("same", g()).unwrap();
    assert_eq!(q.len(), 3, "accepted again after the window");
}

#[tokio::test(start_paused = true)]
async fn fifo_refuses_sends_without_a_group_or_deduplication_id() {
    let q = MemoryQueue::builder().fifo(true).build().unwrap();
    assert_eq!(q.send("x").unwrap_err().code(), Some("MissingParameter"));
    assert_eq!(
        q.send_with("x", SendOptions::new().group_id("g"))
            .unwrap_err()
            .code(),
        Some("InvalidParameterValue")
    );
    assert!(q.name().ends_with(".fifo"));
}

#[tokio::test(start_paused = true)]
async fn long_polling_waits_for_a_message_and_returns_as_it_arrives() {
    let q = queue(30);
    let sender = q.clone();
    let start = Instant::now();
    tokio::spawn(async move {
        sleep(secs(5)).await;
        sender.send("late").unwrap();
    });
    let got = q.receive(10, secs(20)).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(start.elapsed(), secs(5));
    // An empty queue answers after the full wait.
    let start = Instant::now();
    assert!(q.receive(10, secs(20)).await.unwrap().is_empty());
    assert_eq!(start.elapsed(), secs(20));
}

#[tokio::test(start_paused = true)]
async fn long_polling_returns_a_message_whose_timeout_lapses_meanwhile() {
    let q = queue(3);
    q.send("m").unwrap();
    receive(&q).await;
    let start = Instant::now();
    assert_eq!(q.receive(10, secs(20)).await.unwrap().len(), 1);
    assert_eq!(start.elapsed(), secs(3));
}

#[tokio::test(start_paused = true)]
async fn requests_are_counted_per_action_and_faults_are_injected() {
    let q = queue(30);
    q.send("m").unwrap();
    q.fail_next(Action::ReceiveMessage, "RequestThrottled", 1);
    let err = q.receive(10, Duration::ZERO).await.unwrap_err();
    assert!(err.is_retryable());
    let m = &receive(&q).await[0];
    q.change_visibility(&handle(m), secs(60)).unwrap();
    q.delete(&handle(m)).unwrap();
    let counts = q.requests();
    assert_eq!(counts.requests(Action::SendMessage), 1);
    assert_eq!(counts.requests(Action::ReceiveMessage), 2);
    assert_eq!(counts.requests(Action::ChangeMessageVisibility), 1);
    assert_eq!(counts.requests(Action::DeleteMessage), 1);
    assert_eq!((counts.deletes(), counts.visibility_changes()), (1, 1));
    assert_eq!(counts.total(), 5);
}

#[tokio::test(start_paused = true)]
async fn receive_arguments_are_checked() {
    let q = queue(30);
    for (max, wait) in [(0, 0), (11, 0), (1, 21)] {
        let err = q.receive(max, secs(wait)).await.unwrap_err();
        assert_eq!(err.code(), Some("InvalidParameterValue"));
    }
    let err = MemoryQueue::builder()
        .visibility_timeout(secs(43_201))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("visibility_timeout"));
}

#[tokio::test(start_paused = true)]
async fn the_12_hour_limit_counts_from_the_receive_request_not_the_hand_out() {
    let q = queue(30);
    let sender = q.clone();
    tokio::spawn(async move {
        sleep(secs(10)).await;
        sender.send("late").unwrap();
    });
    // The request arrives at 0 s; the message is handed out at 10 s.
    let m = q.receive(1, secs(20)).await.unwrap().pop().unwrap();
    let err = q
        .change_visibility(&handle(&m), secs(43_200 - 9))
        .unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameterValue"));
    q.change_visibility(&handle(&m), secs(43_200 - 10)).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_sees_a_visibility_shortened_meanwhile() {
    let q = queue(300);
    q.send("m").unwrap();
    let h = handle(&receive(&q).await[0]);
    let changer = q.clone();
    tokio::spawn(async move {
        sleep(secs(1)).await;
        changer.change_visibility(&h, secs(2)).unwrap();
    });
    let start = Instant::now();
    assert_eq!(q.receive(10, secs(20)).await.unwrap().len(), 1);
    assert_eq!(start.elapsed(), secs(3));
}

#[test]
fn out_of_range_memory_queue_settings_are_refused() {
    let field_of = |b: sqs_consumer::memory::MemoryQueueBuilder| match b.build() {
        Err(Error::InvalidConfig { field, .. }) => field,
        other => panic!("expected InvalidConfig, got {other:?}"),
    };
    assert_eq!(
        field_of(MemoryQueue::builder().visibility_timeout(secs(43_201))),
        "visibility_timeout"
    );
    assert_eq!(field_of(MemoryQueue::builder().delay(secs(901))), "delay");
    let dlq = MemoryQueue::new();
    assert_eq!(
        field_of(MemoryQueue::builder().dead_letter_queue(&dlq, 0)),
        "max_receive_count"
    );
    let fifo_dlq = MemoryQueue::builder().fifo(true).build().unwrap();
    assert_eq!(
        field_of(MemoryQueue::builder().dead_letter_queue(&fifo_dlq, 3)),
        "dead_letter_queue"
    );
}
