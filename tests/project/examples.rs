//! Every example's output, checked: each example's body is compiled in here and run, and
//! what it prints must agree with what happened (read from the queue and the consumer by
//! other means), so a wrong summary fails the suite.

#[allow(dead_code)]
#[path = "../../examples/quickstart.rs"]
mod quickstart;

#[cfg(all(feature = "from-env", feature = "signal"))]
#[allow(dead_code)]
#[path = "../../examples/consume.rs"]
mod consume;

#[allow(dead_code)]
#[path = "../../examples/fifo.rs"]
mod fifo;

#[cfg(feature = "tower")]
#[allow(dead_code)]
#[path = "../../examples/tower.rs"]
mod tower_example;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(all(feature = "from-env", feature = "signal"))]
use crate::common::{left_on_server, server_client, server_queue_with};

/// The lines an example printed.
fn lines(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The tower example: its limits held (at most 3 at once, 4 calls a second), its one slow
/// job timed out once and was tried again, and it says so.
#[cfg(feature = "tower")]
#[tokio::test(start_paused = true)]
async fn the_tower_example_prints_what_its_layers_did() {
    let mut out = Vec::new();
    let started = tokio::time::Instant::now();
    let summary = tower_example::run(&mut out)
        .await
        .expect("the example runs");
    let took = started.elapsed();
    let stats = &summary.stats;
    assert_eq!(
        (stats.acked, stats.handler_errors, stats.received),
        (12, 1, 13)
    );
    assert_eq!(
        summary.most_at_once, 3,
        "the concurrency limit reached and held"
    );
    // 13 calls at 4 a second: the last starts 3 s after the first at the earliest.
    assert!(took >= Duration::from_secs(3), "{took:?}");
    assert_eq!(
        lines(&out),
        [format!(
            "done: 12 messages, {} acked, {} timed out and tried again, at most {} at once",
            stats.acked, stats.handler_errors, summary.most_at_once
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn quickstart_prints_what_happened() {
    let mut out = Vec::new();
    let started = tokio::time::Instant::now();
    let stats = quickstart::run(&mut out).await.expect("the example runs");
    // Handlers hold 5 s; the next receive starts as their acks free the slots, and the stop
    // waits for it (abandoning it would end at about 5.1 s): its 2 s wait, not the default
    // 20 s.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(6_500) && took <= Duration::from_millis(7_500),
        "{took:?}"
    );
    let printed = lines(&out);
    // Three messages, each held 5 s at T = 2 s: extended at 1, 2, 3 and 4 s, and at 5 s
    // too when that round's timer fires just before the ack.
    assert_eq!((stats.received, stats.acked, stats.lost), (3, 3, 0));
    assert!((12..=15).contains(&stats.extended), "{stats:?}");
    assert_eq!(
        printed[0],
        "done: 3 messages, 3 handler calls, 3 acked, 0 lost"
    );
    let requests = &printed[1];
    assert!(
        requests.contains(&format!("carrying {} extensions", stats.extended)),
        "{requests}"
    );
    assert!(requests.contains("carrying 3 deletes"), "{requests}");
    // The extensions of deliveries received together share requests: one per round.
    let rounds = stats.extended / 3;
    assert!(
        requests.contains(&format!(" {rounds} ChangeMessageVisibilityBatch ")),
        "{requests}"
    );
    assert!(requests.contains(" 1 DeleteMessageBatch "), "{requests}");
}

#[tokio::test(start_paused = true)]
async fn fifo_prints_each_ledger_in_send_order() {
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let out = Shared::default();
    let ledger = fifo::run(out.clone()).await.expect("the example runs");
    let printed = lines(&out.0.lock().unwrap());
    for account in ["alice", "bob", "carol"] {
        assert_eq!(ledger[account], [1, 2, 3, 4, 5], "{account}");
        assert!(
            printed.contains(&format!("{account}: [1, 2, 3, 4, 5]")),
            "{printed:#?}"
        );
        let applied: Vec<&String> = printed
            .iter()
            .filter(|l| l.starts_with(&format!("applied {account}:")))
            .collect();
        assert_eq!(applied.len(), 5, "{printed:#?}");
    }
    let at = |line: &str| printed.iter().position(|l| l.starts_with(line));
    let failed = at("bob:2 failed on its first try").expect("bob:2 fails once");
    let retried = at("applied bob:2 (try 2)").expect("bob:2 retried");
    let next = at("applied bob:3").expect("bob:3 applied");
    assert!(failed < retried && retried < next, "{printed:#?}");
}

#[cfg(all(feature = "from-env", feature = "signal"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn consume_against_the_test_server_prints_its_stats() {
    crate::require_server!("consume_against_the_test_server_prints_its_stats");
    const MESSAGES: usize = 30;
    let client = server_client();
    let url = server_queue_with(&client, MESSAGES).await;
    let limit = tokio::time::Instant::now() + Duration::from_secs(60);
    let drained = {
        let (client, url) = (client.clone(), url.clone());
        async move {
            while left_on_server(&client, &url).await > 0 {
                assert!(
                    tokio::time::Instant::now() < limit,
                    "the queue was not drained"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let mut out = Vec::new();
    let consumer = sqs_consumer::Consumer::builder(client.clone(), url.clone());
    let stats = consume::run(consumer, Duration::ZERO, drained, &mut out)
        .await
        .expect("the example runs");
    assert_eq!(left_on_server(&client, &url).await, 0);
    // The test server may hand a message out twice (it is not atomic under concurrent
    // receives), so received and acked may exceed the messages sent; they must agree with
    // the printed line either way.
    assert!(stats.acked >= MESSAGES as u64, "{stats:?}");
    assert_eq!(
        stats.received, stats.acked,
        "every delivery acked: {stats:?}"
    );
    assert_eq!(
        lines(&out),
        [format!(
            "stopped: {} received, {} acked, 0 released, {} extensions, 0 lost, 0 handler errors, \
             0 receive failures",
            stats.received, stats.acked, stats.extended
        )]
    );
}
