//! How late extensions get when handlers block the runtime's threads, and what
//! `spawn_blocking` does about it.
//!
//! ```sh
//! cargo bench --bench starved
//! ```
//!
//! A 2-thread runtime runs two consumers. One holds 100 deliveries (T = 4 s, so each needs
//! an extension every 2 s) in handlers that only wait. The other runs N handlers at a time
//! whose work blocks for 2.5 s at a stretch (more than T/2) (CPU-bound code in async, say): first called in
//! the async handler itself, then moved to `tokio::task::spawn_blocking`. The figures are the
//! first consumer's: the worst lateness of an extension, the extensions done late, and the
//! deliveries lost, with the holder's keeper on a thread of its own (`isolated_keeper(true)`,
//! the default for a consumer on an SDK client) and on the runtime's threads (`false`, the
//! default for a `MemoryQueue`). Real time, about 10 s a line.

use std::time::Duration;

use sqs_consumer::{BoxError, Consumer, Delivery, MemoryQueue};
use tokio::time::sleep;

const HELD: usize = 100;
const T: u64 = 4;
const HOLD: Duration = Duration::from_secs(9);
const BLOCK: Duration = Duration::from_millis(2_500);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Work {
    InAsync,
    SpawnBlocking,
}

fn run(blockers: usize, work: Work, isolated: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let held = MemoryQueue::builder()
            .visibility_timeout(Duration::from_secs(T))
            .build()
            .unwrap();
        for i in 0..HELD {
            held.send(format!("held {i}")).unwrap();
        }
        let busy = MemoryQueue::new();
        for i in 0..1_000 {
            busy.send(format!("work {i}")).unwrap();
        }
        let holder = Consumer::in_memory(&held)
            .isolated_keeper(isolated)
            .max_in_flight(HELD)
            .build()
            .unwrap();
        let worker = Consumer::in_memory(&busy)
            .max_in_flight(blockers.max(1))
            .build()
            .unwrap();
        let hold = |d: Delivery| async move {
            sleep(HOLD).await;
            d.ack().await
        };
        let block = move |d: Delivery| async move {
            match work {
                // Blocks the runtime thread this task runs on.
                Work::InAsync => std::thread::sleep(BLOCK),
                Work::SpawnBlocking => {
                    tokio::task::spawn_blocking(|| std::thread::sleep(BLOCK)).await?
                }
            }
            d.ack().await?;
            Ok::<(), BoxError>(())
        };
        let until = || sleep(HOLD + Duration::from_millis(500));
        if blockers == 0 {
            holder.run_until(hold, until()).await.unwrap();
        } else {
            let (a, b) = tokio::join!(
                holder.run_until(hold, until()),
                worker.run_until(block, until())
            );
            a.unwrap();
            b.unwrap();
        }
        let s = holder.stats();
        println!(
            "keeper {:<9} {blockers} blocking handler(s), work {:<14} worst extension \
             {:>9.1?} after due; late extensions {:>4}; lost {:>3} of {HELD}; acked {:>3}",
            if isolated { "isolated," } else { "shared," },
            format!("{work:?}:"),
            s.worst_extension_delay,
            s.late_extensions,
            s.lost,
            s.acked,
        );
    });
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!(
        "starved runtime: 2 worker threads, {HELD} deliveries held at T = {T} s for {HOLD:?}, \
         blocking stretches of {BLOCK:?}"
    );
    for isolated in [false, true] {
        run(0, Work::InAsync, isolated);
        for n in [1, 2, 4] {
            run(n, Work::InAsync, isolated);
            if !isolated {
                run(n, Work::SpawnBlocking, isolated);
            }
        }
    }
}
