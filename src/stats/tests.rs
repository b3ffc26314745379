use super::*;
use crate::test_support::seconds;

#[test]
fn each_counter_lands_in_its_own_field() {
    let c = Counters::default();
    assert_eq!(c.bump(Counter::Acked), 1);
    assert_eq!(c.bump(Counter::Acked), 2);
    c.bump(Counter::SkippedRedeliveries);
    c.extension_delay(Duration::from_millis(7));
    c.extension_delay(Duration::from_millis(3));
    c.delivery_started();
    c.delivery_started();
    c.delivery_ended();
    c.visibility_applied(seconds(30));
    c.visibility_applied(seconds(41));
    let s = c.snapshot(4);
    assert_eq!(s.visibility_timeout, Duration::from_secs(41));
    assert_eq!((s.acked, s.skipped_redeliveries, s.received), (2, 1, 0));
    assert_eq!(s.worst_extension_delay, Duration::from_millis(7));
    assert_eq!((s.in_flight, s.reserved), (1, 3));
}

#[tokio::test(start_paused = true)]
async fn receive_health_counts_runs_of_failures_and_the_time_since_an_answer() {
    let c = Counters::default();
    let health = c.receive_health();
    let s = c.snapshot(0);
    assert_eq!(
        (
            s.receive_failures,
            s.consecutive_receive_failures,
            s.since_last_receive
        ),
        (0, 0, None)
    );
    assert_eq!(health.answered(), None, "no run of failures to end");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(
        c.snapshot(0).since_last_receive,
        Some(Duration::from_secs(2))
    );
    let first = health.failed();
    tokio::time::advance(Duration::from_secs(3)).await;
    let second = health.failed();
    assert_eq!((first.consecutive, first.lasted), (1, Duration::ZERO));
    assert_eq!(
        (second.consecutive, second.lasted),
        (2, Duration::from_secs(3))
    );
    let s = c.snapshot(0);
    assert_eq!((s.receive_failures, s.consecutive_receive_failures), (2, 2));
    assert_eq!(s.since_last_receive, Some(Duration::from_secs(5)));
    tokio::time::advance(Duration::from_secs(1)).await;
    let ended = health.answered().expect("a run of failures ended");
    assert_eq!(
        (ended.consecutive, ended.lasted),
        (2, Duration::from_secs(4))
    );
    let s = c.snapshot(0);
    assert_eq!((s.receive_failures, s.consecutive_receive_failures), (2, 0));
    assert_eq!(s.since_last_receive, Some(Duration::ZERO));
    // A new run starts from its own first failure.
    tokio::time::advance(Duration::from_secs(7)).await;
    assert_eq!(health.failed().lasted, Duration::ZERO);
}

#[test]
fn every_counter_has_a_field_of_its_own() {
    let all = [
        Counter::Received,
        Counter::Acked,
        Counter::Released,
        Counter::Extended,
        Counter::ExtensionFailures,
        Counter::LateExtensions,
        Counter::Lost,
        Counter::Capped,
        Counter::HandlerErrors,
        Counter::HandlerPanics,
        Counter::HandlerTimeouts,
        Counter::Unsettled,
        Counter::SkippedRedeliveries,
        Counter::LostAcks,
        Counter::PayloadFailures,
        Counter::PayloadDeleteFailures,
        Counter::CancelledOnLost,
        Counter::DeadLettered,
        Counter::DuplicatesSkipped,
        Counter::DuplicatesDelayed,
        Counter::IdempotencyFailures,
    ];
    assert_eq!(all.len(), COUNTERS);
    let c = Counters::default();
    // The n-th counter bumped n times: each field must show its own count.
    for (n, counter) in (1..).zip(all) {
        for _ in 0..n {
            c.bump(counter);
        }
    }
    let s = c.snapshot(0);
    let fields = [
        s.received,
        s.acked,
        s.released,
        s.extended,
        s.extension_failures,
        s.late_extensions,
        s.lost,
        s.capped,
        s.handler_errors,
        s.handler_panics,
        s.handler_timeouts,
        s.unsettled,
        s.skipped_redeliveries,
        s.lost_acks,
        s.payload_failures,
        s.payload_delete_failures,
        s.cancelled_on_lost,
        s.dead_lettered,
        s.duplicates_skipped,
        s.duplicates_delayed,
        s.idempotency_failures,
    ];
    let expected: Vec<u64> = (1..=21).collect();
    assert_eq!(fields.to_vec(), expected);
}
