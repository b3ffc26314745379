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

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqs_consumer::memory::SendOptions;
use sqs_consumer::{BoxError, Consumer, Delivery, MemoryQueue, RetryPolicy};

/// The entries each account had applied, in the order they were applied.
pub type Ledger = BTreeMap<String, Vec<u32>>;

/// The example itself: writes each step and the final ledger to `out`, and returns the
/// ledger.
pub async fn run(out: impl Write + Send + 'static) -> Result<Ledger, BoxError> {
    let out = Arc::new(Mutex::new(out));
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
    let applied: Arc<Mutex<Ledger>> = Arc::default();
    let log = applied.clone();
    let printer = out.clone();
    let handler = move |delivery: Delivery| {
        let log = log.clone();
        let out = printer.clone();
        async move {
            let (account, entry) = delivery.body().split_once(':').ok_or("malformed entry")?;
            let entry: u32 = entry.parse()?;
            tokio::time::sleep(Duration::from_millis(u64::from(entry * 37 % 90))).await;
            if account == "bob" && entry == 2 && delivery.receive_count() == 1 {
                writeln!(
                    out.lock().map_err(|_| "poisoned")?,
                    "bob:2 failed on its first try"
                )?;
                return Err("simulated failure".into());
            }
            {
                let mut out = out.lock().map_err(|_| "poisoned")?;
                writeln!(
                    out,
                    "applied {account}:{entry} (try {})",
                    delivery.receive_count()
                )?;
                log.lock()
                    .map_err(|_| "poisoned")?
                    .entry(account.to_owned())
                    .or_default()
                    .push(entry);
            }
            delivery.ack().await?;
            Ok::<(), BoxError>(())
        }
    };

    let drained = async {
        while !queue.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    consumer.run_until(handler, drained).await?;

    let ledger = applied.lock().map_err(|_| "poisoned")?.clone();
    let mut out = out.lock().map_err(|_| "poisoned")?;
    for (account, entries) in &ledger {
        writeln!(out, "{account}: {entries:?}")?;
    }
    Ok(ledger)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    run(std::io::stdout()).await?;
    Ok(())
}
