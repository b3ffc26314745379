//! Cost and throughput: requests per message, CPU per message, heartbeat cost, memory per
//! held delivery.
//!
//! ```text
//! cargo bench --bench throughput            # B1 to B3 (in memory)
//! cargo bench --bench throughput -- b1 b3   # some of them
//! scripts/bench.sh                          # also B4, against the SQS-compatible test server
//! ```
//!
//! - B1: MemoryQueue, an instant-ack handler, 100,000 messages, on a one-thread runtime:
//!   messages/s, CPU microseconds per message, requests per message by action.
//! - B2: MemoryQueue, 10,000 deliveries held for 3 visibility timeouts (paused clock):
//!   heartbeat requests per delivery per extension round.
//! - B3: 120,000 deliveries held at once with heartbeats (real time): memory per delivery and
//!   the worst delay of an extension past its due time (half a timeout).
//! - B4: the test server, 5,000 messages, instant ack: messages/s and requests per message.
//!
//! Every figure is the median of several runs where a run is cheap enough.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use sqs_consumer::{Action, Consumer, Delivery, Error, MemoryQueue, RequestCounts};
use tokio::time::{sleep, Instant};

/// Counts the bytes allocated and not yet freed, to measure memory per held delivery
/// without the allocator's own overhead and fragmentation (RSS is reported too).
struct CountingAlloc;

static LIVE_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static LIVE_ALLOCS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counter only adds
// and subtracts the sizes it was given.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed);
        LIVE_ALLOCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::alloc::System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        LIVE_ALLOCS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        std::alloc::System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn live_bytes() -> usize {
    LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |b: &str| args.is_empty() || args.iter().any(|a| a == b);
    if wants("b1") {
        b1();
    }
    if wants("b2") {
        b2();
    }
    if wants("b3") {
        b3();
    }
    if wants("b4") {
        match std::env::var("SQS_TEST_ENDPOINT") {
            Ok(endpoint) => b4(&endpoint),
            Err(_) => println!("B4: skipped (set SQS_TEST_ENDPOINT, or run scripts/bench.sh)"),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Process CPU time (user + system), from /proc; `None` where there is none.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports these in USER_HZ, 100 per second on every mainstream build.
    Some(Duration::from_millis(ticks * 10))
}

/// Resident memory, from /proc.
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn per_message(counts: &RequestCounts, messages: u64) -> String {
    let m = messages as f64;
    format!(
        "receive {:.3}, delete {:.3} (batch {:.3}), change-visibility {:.3} (batch {:.3}), total {:.3}",
        counts.requests(Action::ReceiveMessage) as f64 / m,
        counts.requests(Action::DeleteMessage) as f64 / m,
        counts.requests(Action::DeleteMessageBatch) as f64 / m,
        counts.requests(Action::ChangeMessageVisibility) as f64 / m,
        counts.requests(Action::ChangeMessageVisibilityBatch) as f64 / m,
        (counts.total() - counts.requests(Action::SendMessage)) as f64 / m,
    )
}

// ---- B1 ----

fn b1() {
    const MESSAGES: u64 = 100_000;
    const RUNS: usize = 5;
    let (mut rates, mut cpus, mut reqs) = (vec![], vec![], vec![]);
    let mut last = None;
    for _ in 0..RUNS {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (rate, cpu, counts) = rt.block_on(async {
            let q = MemoryQueue::new();
            for i in 0..MESSAGES {
                q.send(format!("message {i}")).unwrap();
            }
            let consumer = Consumer::in_memory(&q).max_in_flight(100).build().unwrap();
            let (start, cpu0) = (Instant::now(), cpu_time());
            let drained = async {
                while !q.is_empty() {
                    sleep(Duration::from_millis(1)).await;
                }
            };
            consumer
                .run_until(|d: Delivery| d.ack(), drained)
                .await
                .unwrap();
            let elapsed = start.elapsed();
            let cpu = cpu_time().zip(cpu0).map(|(a, b)| a - b).unwrap_or_default();
            let counts = q.requests();
            assert_eq!(consumer.stats().acked, MESSAGES);
            (MESSAGES as f64 / elapsed.as_secs_f64(), cpu, counts)
        });
        rates.push(rate);
        cpus.push(cpu.as_secs_f64() * 1e6 / MESSAGES as f64);
        reqs.push((counts.total() - counts.requests(Action::SendMessage)) as f64 / MESSAGES as f64);
        last = Some(counts);
    }
    println!(
        "B1  MemoryQueue, instant ack, {MESSAGES} messages, one-thread runtime, median of {RUNS}:"
    );
    println!(
        "    {:.0} messages/s; {:.2} us CPU per message; {:.3} requests per message",
        median(rates),
        median(cpus),
        median(reqs)
    );
    if let Some(c) = last {
        println!("    per message (last run): {}", per_message(&c, MESSAGES));
    }
}

// ---- B2 ----

fn b2() {
    const DELIVERIES: usize = 10_000;
    const T: u64 = 30;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let q = MemoryQueue::builder()
            .visibility_timeout(Duration::from_secs(T))
            .build()
            .unwrap();
        for i in 0..DELIVERIES {
            q.send(format!("m{i}")).unwrap();
        }
        let consumer = Consumer::in_memory(&q).max_in_flight(DELIVERIES).build().unwrap();
        let handler = |d: Delivery| async move {
            sleep(Duration::from_secs(3 * T)).await;
            d.ack().await
        };
        let drained = async {
            while !q.is_empty() {
                sleep(Duration::from_millis(100)).await;
            }
        };
        consumer.run_until(handler, drained).await.unwrap();
        let c = q.requests();
        let stats = consumer.stats();
        // Every extension sent counts, including those of the last round, which the acks
        // overtook (the heartbeat stops before it records them).
        let sent = c.visibility_changes();
        let requests = c.requests(Action::ChangeMessageVisibilityBatch)
            + c.requests(Action::ChangeMessageVisibility);
        let rounds = sent as f64 / DELIVERIES as f64;
        println!("B2  MemoryQueue, {DELIVERIES} deliveries held 3 timeouts (T = {T} s, paused clock):");
        println!(
            "    {rounds:.1} extension rounds each; {requests} ChangeMessageVisibility(Batch) requests for {sent} extensions: {:.3} requests per delivery per round",
            requests as f64 / sent as f64
        );
        println!("    lost: {}, extension failures: {}", stats.lost, stats.extension_failures);
    });
}

// ---- B3 ----

fn b3() {
    const DELIVERIES: usize = 120_000;
    const T: u64 = 20;
    const HOLD: Duration = Duration::from_secs(2 * T + 5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let q = MemoryQueue::builder()
            .visibility_timeout(Duration::from_secs(T))
            .build()
            .unwrap();
        for i in 0..DELIVERIES {
            q.send(format!("m{i}")).unwrap();
        }
        let consumer = Consumer::in_memory(&q)
            .max_in_flight(DELIVERIES)
            .shutdown_timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let held: Arc<Mutex<Vec<Delivery>>> =
            Arc::new(Mutex::new(Vec::with_capacity(DELIVERIES)));
        let (rss_before, live_before) = (rss_bytes().unwrap_or(0), live_bytes());
        let allocs_before = LIVE_ALLOCS.load(std::sync::atomic::Ordering::Relaxed);
        let h = held.clone();
        let handler = move |d: Delivery| {
            let h = h.clone();
            async move {
                h.lock().unwrap().push(d);
                Ok::<(), Error>(())
            }
        };
        let (mut rss_held, mut live_held, mut allocs_held) = (0, 0, 0);
        let mut fill = Duration::ZERO;
        let signal = async {
            let start = Instant::now();
            while held.lock().unwrap().len() < DELIVERIES {
                sleep(Duration::from_millis(10)).await;
            }
            fill = start.elapsed();
            rss_held = rss_bytes().unwrap_or(0);
            live_held = live_bytes();
            allocs_held = LIVE_ALLOCS.load(std::sync::atomic::Ordering::Relaxed);
            sleep(HOLD).await;
        };
        consumer.run_until(handler, signal).await.unwrap();
        let stats = consumer.stats();
        let lost_or_visible = q.visible_len();
        let per = (rss_held.saturating_sub(rss_before)) as f64 / DELIVERIES as f64;
        let live = live_held.saturating_sub(live_before) as f64 / DELIVERIES as f64;
        let allocs = allocs_held.saturating_sub(allocs_before) as f64 / DELIVERIES as f64;
        println!("B3  {DELIVERIES} deliveries held at once (T = {T} s, {:?} held, 2 worker threads):", HOLD);
        println!(
            "    received in {fill:.2?}; per held delivery: {live:.0} bytes in {allocs:.1} allocations (the queue's side included), {per:.0} bytes of resident memory"
        );
        println!(
            "    worst extension delay past T/2: {:?} (T/2 = {} s); extensions {}, lost {}, visible while held {}",
            stats.worst_extension_delay,
            T / 2,
            stats.extended,
            stats.lost,
            lost_or_visible
        );
        let all: Vec<Delivery> = std::mem::take(&mut *held.lock().unwrap());
        drop(all);
    });
}

// ---- B4 ----

/// Counts requests per operation, retries included.
#[derive(Debug, Default, Clone)]
struct CountRequests(Arc<Mutex<BTreeMap<String, u64>>>);

impl Intercept for CountRequests {
    fn name(&self) -> &'static str {
        "CountRequests"
    }

    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(m) = cfg.load::<Metadata>() {
            *self
                .0
                .lock()
                .unwrap()
                .entry(m.name().to_owned())
                .or_default() += 1;
        }
        Ok(())
    }
}

/// Sends messages `first..first + 10` in one batch.
async fn send_ten(client: &aws_sdk_sqs::Client, url: &str, first: usize) {
    let mut call = client.send_message_batch().queue_url(url);
    for i in first..first + 10 {
        call = call.entries(
            aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(format!("message {i}"))
                .build()
                .unwrap(),
        );
    }
    call.send().await.unwrap();
}

fn b4(endpoint: &str) {
    const MESSAGES: usize = 5_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let counter = CountRequests::default();
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "test", "test", None, None, "bench",
            ))
            .endpoint_url(endpoint)
            .interceptor(counter.clone())
            .build();
        let client = aws_sdk_sqs::Client::from_conf(config);
        let url = client
            .create_queue()
            .queue_name(format!("bench-b4-{}", std::process::id()))
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        // The consumer is measured at saturation: the queue never runs dry until the last
        // messages. The test server spends time proportional to its queue's length on every
        // message sent or deleted, so rather than all 5,000 at first, FEEDERS tasks keep
        // about BACKLOG messages in the queue (waiting or in flight) ahead of the acks.
        const BACKLOG: usize = 200;
        const FEEDERS: usize = 4;
        let sent = Arc::new(AtomicUsize::new(0));
        let acked = Arc::new(AtomicUsize::new(0));
        let feed = |client: aws_sdk_sqs::Client, url: String, until: Option<usize>| {
            let (sent, acked) = (sent.clone(), acked.clone());
            async move {
                let until = until.unwrap_or(MESSAGES);
                loop {
                    while sent.load(SeqCst) >= acked.load(SeqCst) + BACKLOG {
                        if sent.load(SeqCst) >= until {
                            return;
                        }
                        sleep(Duration::from_millis(2)).await;
                    }
                    let first = sent.fetch_add(10, SeqCst);
                    if first >= until {
                        sent.fetch_sub(10, SeqCst);
                        return;
                    }
                    send_ten(&client, &url, first).await;
                }
            }
        };
        // Fill the backlog first, then feed while the consumer runs.
        feed(client.clone(), url.clone(), Some(BACKLOG)).await;
        let feeders: Vec<_> = (0..FEEDERS)
            .map(|_| tokio::spawn(feed(client.clone(), url.clone(), None)))
            .collect();
        let consumer = Consumer::builder(client.clone(), url.clone())
            .visibility_timeout(Duration::from_secs(60))
            .max_in_flight(100)
            .build()
            .unwrap();
        let before = counter.0.lock().unwrap().clone();
        let start = Instant::now();
        let done = async {
            while consumer.stats().acked < MESSAGES as u64 {
                sleep(Duration::from_millis(2)).await;
            }
        };
        let handler = {
            let acked = acked.clone();
            move |d: Delivery| {
                let acked = acked.clone();
                async move {
                    d.ack().await?;
                    acked.fetch_add(1, SeqCst);
                    Ok::<_, sqs_consumer::Error>(())
                }
            }
        };
        consumer.run_until(handler, done).await.unwrap();
        let elapsed = start.elapsed();
        for f in feeders {
            f.await.unwrap();
        }
        let mut counts = counter.0.lock().unwrap().clone();
        for (op, n) in &mut counts {
            *n -= before.get(op).copied().unwrap_or(0);
        }
        counts.remove("SendMessageBatch");
        counts.retain(|_, n| *n > 0);
        let total: u64 = counts.values().sum();
        println!("B4  test server (moto), {MESSAGES} messages, {BACKLOG} kept queued ahead, instant ack:");
        println!(
            "    {:.0} messages/s; {:.3} requests per message ({})",
            MESSAGES as f64 / elapsed.as_secs_f64(),
            total as f64 / MESSAGES as f64,
            counts
                .iter()
                .map(|(op, n)| format!("{op} {:.3}", *n as f64 / MESSAGES as f64))
                .collect::<Vec<_>>()
                .join(", ")
        );
    });
}
