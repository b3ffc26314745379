//! A FIFO queue: messages of one group are handled one at a time, in order; groups run in
//! parallel. In memory, no AWS account needed.
//!
//! ```text
//! cargo run --example fifo
//! ```
//!
//! Three accounts each get five ledger entries. Handlers take a varying time, yet every
//! account's entries are applied in the order they were sent; entry 2 of account "bob"
//! fails once and is retried before entry 3 of "bob" runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqs_consumer::{Consumer, Delivery, MemoryQueue, RetryPolicy, SendOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let queue = MemoryQueue::builder()
        .name("ledger.fifo")
        .fifo(true)
        .content_based_deduplication(true)
        .visibility_timeout(Duration::from_secs(10))
        .build()?;
    for entry in 1..=5 {
        for account in ["alice", "bob", "carol"] {
            queue.send_with(
                format!("{account}:{entry}"),
                SendOptions::new().group_id(account),
            )?;
        }
    }

    let consumer = Consumer::in_memory(&queue)
        .max_in_flight(15)
        // A failed entry comes back at once (before the rest of its group).
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()?;
    let applied: Arc<Mutex<HashMap<String, Vec<u32>>>> = Arc::default();
    let log = applied.clone();
    let handler = move |delivery: Delivery| {
        let log = log.clone();
        async move {
            let (account, entry) = delivery.body().split_once(':').ok_or("malformed entry")?;
            let entry: u32 = entry.parse()?;
            tokio::time::sleep(Duration::from_millis(u64::from(entry * 37 % 90))).await;
            if account == "bob" && entry == 2 && delivery.receive_count() == 1 {
                println!("bob:2 failed on its first try");
                return Err("simulated failure".into());
            }
            println!(
                "applied {account}:{entry} (try {})",
                delivery.receive_count()
            );
            log.lock()
                .map_err(|_| "poisoned")?
                .entry(account.to_owned())
                .or_default()
                .push(entry);
            delivery.ack().await?;
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }
    };

    let drained = async {
        while !queue.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    consumer.run_until(handler, drained).await?;

    for (account, entries) in applied.lock().map_err(|_| "poisoned")?.iter() {
        println!("{account}: {entries:?}");
    }
    Ok(())
}
