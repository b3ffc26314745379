//! B6: what adaptive visibility saves. 200 messages whose handlers take durations drawn from
//! a fixed-seed log-normal (median 20 s, 95th percentile 60 s), at most 20 at once, each
//! acked when its handler is done: extension requests per message with a fixed 30 s
//! visibility timeout against `adaptive_visibility(10 s, 120 s)` (starting from the same
//! 30 s), and messages seen twice.
//!
//! ```sh
//! cargo bench --bench visibility                                # MemoryQueue, full scale
//! scripts/with-sqs-server.sh cargo bench --bench visibility     # also the test server
//! ```
//!
//! On `MemoryQueue` the runtime's clock is paused, so the full-scale durations take no real
//! time and every run gives the same figures. On the test server everything is scaled down
//! by 10 (durations from median 2 s, a fixed 3 s, adaptive within 1 s to 12 s) so that a run
//! takes under a minute; visibility timeouts are whole seconds, so the half second the
//! estimate adds weighs ten times as much there.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqs_consumer::memory::Action;
use sqs_consumer::{Consumer, ConsumerBuilder, Delivery, MemoryQueue};
use tokio::time::sleep;

mod common;
use common::{new_queue, send_ten, server_client, server_name, server_runs, CountRequests};

const MESSAGES: usize = 200;
const MAX_IN_FLIGHT: usize = 20;
/// The log-normal's median and 95th percentile, seconds (full scale).
const MEDIAN: f64 = 20.0;
const P95: f64 = 60.0;
const SEED: u64 = 6;

fn main() {
    let durations = durations(1.0);
    let (median, p95, longest) = spread(&durations);
    println!(
        "B6  {MESSAGES} messages, handler durations log-normal (seed {SEED}: median {median:.1} s, \
         95th percentile {p95:.1} s, longest {longest:.1} s), max_in_flight({MAX_IN_FLIGHT}), \
         acked when done"
    );
    let memory = |variant| memory_run(&durations, Policy::FULL, variant);
    report(
        "MemoryQueue, full scale, paused clock",
        (memory(Variant::Fixed), memory(Variant::Adaptive)),
    );
    match std::env::var("SQS_TEST_ENDPOINT") {
        Ok(endpoint) => {
            let scaled = self::durations(0.1);
            let runs = server_runs();
            let label = format!(
                "test server ({}), scaled by 1/10, median of {runs} runs",
                server_name()
            );
            let median_of_runs = |variant| {
                let results: Vec<Run> = (0..runs)
                    .map(|_| server_run(&endpoint, &scaled, Policy::SCALED, variant))
                    .collect();
                Run::median(results)
            };
            report(
                &label,
                (
                    median_of_runs(Variant::Fixed),
                    median_of_runs(Variant::Adaptive),
                ),
            );
        }
        Err(_) => println!(
            "    test server: skipped (no SQS_TEST_ENDPOINT; run under scripts/with-sqs-server.sh)"
        ),
    }
}

/// The visibility settings compared: fixed, and adaptive within bounds; seconds.
#[derive(Debug, Clone, Copy)]
struct Policy {
    fixed: u64,
    adaptive: (u64, u64),
}

impl Policy {
    const FULL: Self = Self {
        fixed: 30,
        adaptive: (10, 120),
    };

    const SCALED: Self = Self {
        fixed: 3,
        adaptive: (1, 12),
    };

    /// `builder` with this policy's `variant`.
    fn apply(self, variant: Variant, builder: ConsumerBuilder) -> ConsumerBuilder {
        let builder = builder
            .visibility_timeout(Duration::from_secs(self.fixed))
            .max_in_flight(MAX_IN_FLIGHT);
        match variant {
            Variant::Fixed => builder,
            Variant::Adaptive => builder.adaptive_visibility(
                Duration::from_secs(self.adaptive.0),
                Duration::from_secs(self.adaptive.1),
            ),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Variant {
    Fixed,
    Adaptive,
}

/// One run's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    extension_requests: f64,
    extensions: f64,
    seen_twice: usize,
    lost: u64,
    last_timeout: Duration,
}

impl Run {
    fn median(mut runs: Vec<Run>) -> Run {
        let seen_twice = runs.iter().map(|r| r.seen_twice).sum();
        let lost = runs.iter().map(|r| r.lost).sum();
        runs.sort_by(|a, b| a.extension_requests.total_cmp(&b.extension_requests));
        Run {
            seen_twice,
            lost,
            ..runs[runs.len() / 2]
        }
    }
}

fn report(label: &str, (fixed, adaptive): (Run, Run)) {
    println!("    {label}:");
    for (name, run) in [("fixed", fixed), ("adaptive", adaptive)] {
        println!(
            "      {name:>8}: {:.3} extension requests per message ({:.2} extensions each); \
             seen twice {}, lost {}; last receive's timeout {:?}",
            run.extension_requests, run.extensions, run.seen_twice, run.lost, run.last_timeout
        );
    }
    println!(
        "      adaptive / fixed: {:.2} of the extension requests",
        adaptive.extension_requests / fixed.extension_requests
    );
}

/// One variant on `MemoryQueue`, the runtime's clock paused.
fn memory_run(durations: &[Duration], policy: Policy, variant: Variant) -> Run {
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let q = MemoryQueue::new();
            for i in 0..MESSAGES {
                q.send(format!("message {i}")).unwrap();
            }
            let consumer = policy
                .apply(variant, Consumer::in_memory(&q))
                .build()
                .unwrap();
            let run = handle_all(&consumer, durations).await;
            let counts = q.requests();
            let requests = counts.requests(Action::ChangeMessageVisibilityBatch)
                + counts.requests(Action::ChangeMessageVisibility);
            Run {
                extension_requests: requests as f64 / MESSAGES as f64,
                ..run
            }
        })
    }
}

/// One variant on the test server.
fn server_run(endpoint: &str, durations: &[Duration], policy: Policy, variant: Variant) -> Run {
    {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let counter = CountRequests::default();
            let client = server_client(endpoint, &counter);
            let setup = server_client(endpoint, &CountRequests::default());
            let url = new_queue(&setup, "b6").await;
            for first in (0..MESSAGES).step_by(10) {
                send_ten(&setup, &url, first).await;
            }
            let consumer = policy
                .apply(variant, Consumer::builder(client, url.clone()))
                .build()
                .unwrap();
            let run = handle_all(&consumer, durations).await;
            let counts = counter.0.lock().unwrap();
            let requests = counts
                .get("ChangeMessageVisibilityBatch")
                .copied()
                .unwrap_or(0)
                + counts.get("ChangeMessageVisibility").copied().unwrap_or(0);
            Run {
                extension_requests: requests as f64 / MESSAGES as f64,
                ..run
            }
        })
    }
}

/// Runs `consumer` until every message is acked (bounded: the longest duration and a minute
/// for each wave of them), each handler taking its message's duration.
async fn handle_all(consumer: &Consumer, durations: &[Duration]) -> Run {
    let durations: Arc<Vec<Duration>> = Arc::new(durations.to_vec());
    let seen = Arc::new(Mutex::new(HashMap::<String, u32>::new()));
    let twice = Arc::new(AtomicUsize::new(0));
    let acked = Arc::new(AtomicUsize::new(0));
    let all_acked = Arc::new(tokio::sync::Notify::new());
    let total: Duration = durations.iter().sum();
    let handler = {
        let (seen, twice, acked, all_acked) = (
            seen.clone(),
            twice.clone(),
            acked.clone(),
            all_acked.clone(),
        );
        move |d: Delivery| {
            let (durations, seen, twice, acked, all_acked) = (
                durations.clone(),
                seen.clone(),
                twice.clone(),
                acked.clone(),
                all_acked.clone(),
            );
            async move {
                // The bodies are "message <index>", as `send_ten` sends them.
                let index: usize = d.body().trim_start_matches("message ").parse().unwrap_or(0);
                let before = seen.lock().unwrap().insert(d.message_id().to_owned(), 1);
                if before.is_some() {
                    twice.fetch_add(1, SeqCst);
                }
                sleep(durations[index]).await;
                d.ack().await?;
                if acked.fetch_add(1, SeqCst) + 1 == MESSAGES {
                    all_acked.notify_one();
                }
                Ok::<_, sqs_consumer::Error>(())
            }
        }
    };
    let bound = total / MAX_IN_FLIGHT as u32 * 2 + Duration::from_secs(600);
    let done = tokio::time::timeout(bound, all_acked.notified());
    consumer
        .run_until(handler, async {
            assert!(
                done.await.is_ok(),
                "not every message acked within {bound:?}"
            );
        })
        .await
        .unwrap();
    let stats = consumer.stats();
    Run {
        extension_requests: 0.0,
        extensions: stats.extended as f64 / MESSAGES as f64,
        seen_twice: twice.load(SeqCst),
        lost: stats.lost,
        last_timeout: stats.visibility_timeout,
    }
}

/// The handler durations, `scale` times the full-scale ones: a log-normal with the median
/// [`MEDIAN`] and the 95th percentile [`P95`], drawn with a fixed seed.
fn durations(scale: f64) -> Vec<Duration> {
    let sigma = (P95 / MEDIAN).ln() / 1.644_853_6;
    let mut state = SEED;
    let mut uniform = move || {
        // splitmix64: a fixed sequence, no dependency.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..MESSAGES)
        .map(|_| {
            // Box-Muller: one standard normal from two uniforms.
            let (u1, u2) = (uniform(), uniform());
            let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            Duration::from_secs_f64(MEDIAN * (sigma * normal).exp() * scale)
        })
        .collect()
}

/// The sample's median, 95th percentile and longest, seconds.
fn spread(durations: &[Duration]) -> (f64, f64, f64) {
    let mut secs: Vec<f64> = durations.iter().map(Duration::as_secs_f64).collect();
    secs.sort_by(f64::total_cmp);
    let at = |q: f64| secs[((secs.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95), at(1.0))
}
