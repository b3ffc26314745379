//! An isolated keeper's thread ends once the consumer and every delivery it handed out are
//! gone: dropping a consumer leaks no thread. A test binary of its own, so that no other
//! test's consumer starts or ends a thread meanwhile.

use std::time::Duration;

use sqs_consumer::{Consumer, MemoryQueue};

mod common;

guard_logs!();

use common::take_one;

/// The keeper threads of this process, as Linux lists them.
fn keeper_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "sqs-keeper")
        .count()
}

/// Waits (at most 5 s) for the count of keeper threads to become `n`.
async fn settles_at(n: usize) -> usize {
    for _ in 0..250 {
        if keeper_threads() == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    keeper_threads()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_keeper_thread_outlives_its_consumer_and_deliveries() {
    if !cfg!(target_os = "linux") {
        return;
    }
    assert_eq!(keeper_threads(), 0);
    let q = MemoryQueue::new();
    for i in 0..3 {
        q.send(format!("m{i}")).unwrap();
    }
    // Built and dropped without running.
    let idle = Consumer::in_memory(&q)
        .isolated_keeper(true)
        .build()
        .unwrap();
    // The thread names itself as it starts.
    assert_eq!(settles_at(1).await, 1);
    drop(idle);
    assert_eq!(settles_at(0).await, 0, "an idle consumer's thread");

    // A delivery outlives its consumer: the thread stays until the delivery is settled.
    let consumer = Consumer::in_memory(&q)
        .isolated_keeper(true)
        .build()
        .unwrap();
    let d = take_one(&consumer).await;
    drop(consumer);
    assert_eq!(settles_at(1).await, 1, "kept for the delivery still held");
    d.ack().await.unwrap();
    assert_eq!(settles_at(0).await, 0, "after the last delivery");

    // A consumer that ran and was shut down, with a delivery dropped unsettled.
    let consumer = Consumer::in_memory(&q)
        .isolated_keeper(true)
        .build()
        .unwrap();
    let d = take_one(&consumer).await;
    let handler = |d: sqs_consumer::Delivery| async move { d.ack().await };
    consumer
        .run_until(handler, async {
            // Until the last message is taken (at most 5 s).
            for _ in 0..500 {
                if q.visible_len() == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
    drop(d);
    drop(consumer);
    assert_eq!(settles_at(0).await, 0, "after shutdown and drop");
}
