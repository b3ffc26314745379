//! Cost and throughput: requests per message, CPU per message, extension cost, memory per
//! held delivery.
//!
//! ```text
//! cargo bench --bench throughput            # B1 to B3 (in memory)
//! cargo bench --bench throughput -- b1 b3   # some of them
//! scripts/bench.sh                          # also B4 and B5, against the SQS-compatible test server
//! ```
//!
//! - B1: MemoryQueue, an instant-ack handler, 100,000 messages, on a one-thread runtime:
//!   messages/s, CPU microseconds per message, requests per message by action.
//! - B2: MemoryQueue, 10,000 deliveries held for 3 visibility timeouts (paused clock):
//!   extension requests per delivery per extension round.
//! - B3: 120,000 deliveries held at once kept by the keeper (real time): memory per delivery and
//!   the worst delay of an extension past its due time (half a timeout).
//! - B4: the test server, 5,000 messages, instant ack, with the default settings (on two
//!   threads and on one, the keeper isolated or not), with `max_in_flight(100)`, and with no
//!   consumer at all (the same requests made by hand with the SDK, one after the other, on
//!   one thread and on the 2-thread runtime):
//!   messages/s, requests per message, client CPU per message, and per thread its CPU and
//!   how often it went to sleep. First, where the time goes: the CPU one `ReceiveMessage`
//!   call costs its thread when a canned answer comes at once and when it comes 13 ms later.
//!   `B4_ONLY=<n>[,<n>...]` runs only those of its lines: 0 default settings, 1 keeper not
//!   isolated, 2 `max_in_flight(100)`, 3 one thread, 4 no consumer, 5 handlers ending apart,
//!   6 no consumer on the 2-thread runtime (what the runtime's second worker costs the SDK's
//!   own calls), 7 one thread with the keeper on a thread of its own.
//! - B5: the test server, 50 messages held 5 s each at a visibility timeout of 2 s, with
//!   `max_in_flight(50)` and with the default settings: extension requests and entries per
//!   message, failed extension attempts, messages seen twice.
//!
//! Every figure is the median of several runs where a run is cheap enough; the server
//! benches make 3 runs each, or `BENCH_RUNS` (1 to profile a single run).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::box_error::BoxError;
use sqs_consumer::memory::{Action, RequestCounts};
use sqs_consumer::{Consumer, Delivery, Error, MemoryQueue};
use tokio::time::{sleep, Instant};

mod common;
use common::{
    cpu_time_in, median, new_queue, send_ten, server_client, server_config, server_cpu_time,
    server_name, server_runs, wanted, CountAnswers, CountRequests,
};

// Memory per held delivery is measured without the allocator's own overhead and
// fragmentation (RSS is reported too).
#[global_allocator]
static ALLOC: common::CountingAlloc = common::CountingAlloc;

fn main() {
    let wants = wanted();
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
        b4_idle_cost();
    }
    for (name, bench) in [("b4", b4 as fn(&str)), ("w1", w1), ("w3", w3), ("b5", b5)] {
        if wants(name) {
            match std::env::var("SQS_TEST_ENDPOINT") {
                Ok(endpoint) => bench(&endpoint),
                Err(_) => println!(
                    "{}: skipped (set SQS_TEST_ENDPOINT, or run scripts/bench.sh)",
                    name.to_uppercase()
                ),
            }
        }
    }
}

/// Why a CPU or memory figure can be missing.
const NO_PROC: &str = "n/a: /proc could not be read";

/// A figure with `precision` decimals, or why it could not be measured.
fn figure(value: Option<f64>, precision: usize) -> String {
    match value {
        Some(v) => format!("{v:.precision$}"),
        None => NO_PROC.to_owned(),
    }
}

/// The median of figures every run measured; `None` if one could not.
fn median_of(values: Vec<Option<f64>>) -> Option<f64> {
    values.into_iter().collect::<Option<Vec<f64>>>().map(median)
}

/// Process CPU time (user + system), from /proc; `None` where there is none.
fn cpu_time() -> Option<Duration> {
    cpu_time_in("/proc/self/stat")
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

/// What B1's handler is: a closure, or the same work as a tower service (feature `tower`).
#[derive(Clone, Copy, PartialEq)]
enum B1Handler {
    Closure,
    #[cfg(feature = "tower")]
    Service,
}

/// One B1 run: messages per second, CPU microseconds per message, the requests.
fn b1_run(handler: B1Handler, messages: u64) -> (f64, Option<f64>, RequestCounts) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let q = MemoryQueue::new();
        for i in 0..messages {
            q.send(format!("message {i}")).unwrap();
        }
        // A stop waits for the poll under way (its wait time, on the emptied queue): a
        // short one, and the figures are taken when the queue is drained.
        let consumer = Consumer::in_memory(&q)
            .max_in_flight(100)
            .wait_time(Duration::from_secs(1))
            .build()
            .unwrap();
        let (start, cpu0) = (Instant::now(), cpu_time());
        let mut drained_at = None;
        let drained = async {
            while !q.is_empty() {
                sleep(Duration::from_millis(1)).await;
            }
            drained_at = Some((start.elapsed(), cpu_time()));
        };
        match handler {
            B1Handler::Closure => consumer.run_until(|d: Delivery| d.ack(), drained).await,
            #[cfg(feature = "tower")]
            B1Handler::Service => {
                let service = tower::service_fn(|d: Delivery| d.ack());
                let handler = sqs_consumer::ServiceHandler::new(service);
                consumer.run_until(handler, drained).await
            }
        }
        .unwrap();
        let (elapsed, cpu1) = drained_at.unwrap();
        let cpu = cpu1.zip(cpu0).map(|(a, b)| a - b);
        assert_eq!(consumer.stats().acked, messages);
        (
            messages as f64 / elapsed.as_secs_f64(),
            cpu.map(|cpu| cpu.as_secs_f64() * 1e6 / messages as f64),
            q.requests(),
        )
    })
}

fn b1() {
    const MESSAGES: u64 = 100_000;
    const RUNS: usize = 5;
    let handlers = [
        B1Handler::Closure,
        #[cfg(feature = "tower")]
        B1Handler::Service,
    ];
    // (rates, CPU per message, requests per message) by handler, the runs interleaved so
    // the machine's drift falls on both alike.
    let mut figures = vec![(vec![], vec![], vec![]); handlers.len()];
    let mut last = None;
    for _ in 0..RUNS {
        for (i, &handler) in handlers.iter().enumerate() {
            let (rate, cpu, counts) = b1_run(handler, MESSAGES);
            figures[i].0.push(rate);
            figures[i].1.push(cpu);
            figures[i].2.push(
                (counts.total() - counts.requests(Action::SendMessage)) as f64 / MESSAGES as f64,
            );
            if handler == B1Handler::Closure {
                last = Some(counts);
            }
        }
    }
    println!(
        "B1  MemoryQueue, instant ack, {MESSAGES} messages, one-thread runtime, median of {RUNS}:"
    );
    let mut medians = vec![];
    for (i, (rates, cpus, reqs)) in figures.into_iter().enumerate() {
        let label = if i == 0 {
            "closure"
        } else {
            "ServiceHandler(service_fn)"
        };
        let (rate, cpu) = (median(rates), median_of(cpus));
        println!(
            "    {label}: {rate:.0} messages/s; {} us CPU per message; {:.3} requests per message",
            figure(cpu, 2),
            median(reqs)
        );
        medians.push((rate, cpu));
    }
    if let [(closure, closure_cpu), (service, service_cpu)] = medians[..] {
        println!(
            "    service / closure: {:.3} of the rate; {} of the CPU per message",
            service / closure,
            figure(service_cpu.zip(closure_cpu).map(|(s, c)| s / c), 3)
        );
    }
    if let Some(c) = last {
        println!(
            "    per message (last run, closure): {}",
            per_message(&c, MESSAGES)
        );
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
        // overtook (the keeper stops before it records them).
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
        let (rss_before, live_before) = (rss_bytes(), common::live_bytes());
        let allocs_before = common::live_allocs();
        let h = held.clone();
        let handler = move |d: Delivery| {
            let h = h.clone();
            async move {
                h.lock().unwrap().push(d);
                Ok::<(), Error>(())
            }
        };
        let (mut rss_held, mut live_held, mut allocs_held) = (None, 0, 0);
        let mut fill = Duration::ZERO;
        let signal = async {
            let start = Instant::now();
            while held.lock().unwrap().len() < DELIVERIES {
                sleep(Duration::from_millis(10)).await;
            }
            fill = start.elapsed();
            rss_held = rss_bytes();
            live_held = common::live_bytes();
            allocs_held = common::live_allocs();
            sleep(HOLD).await;
        };
        consumer.run_until(handler, signal).await.unwrap();
        let stats = consumer.stats();
        let lost_or_visible = q.visible_len();
        let per = rss_held
            .zip(rss_before)
            .map(|(held, before)| held.saturating_sub(before) as f64 / DELIVERIES as f64);
        let live = live_held.saturating_sub(live_before) as f64 / DELIVERIES as f64;
        let allocs = allocs_held.saturating_sub(allocs_before) as f64 / DELIVERIES as f64;
        println!("B3  {DELIVERIES} deliveries held at once (T = {T} s, {:?} held, 2 worker threads):", HOLD);
        println!(
            "    received in {fill:.2?}; per held delivery: {live:.0} bytes in {allocs:.1} allocations (the queue's side included), {} bytes of resident memory",
            figure(per, 0)
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

/// CPU time (user + system) of the calling thread, from /proc.
fn thread_cpu_time() -> Option<Duration> {
    cpu_time_in("/proc/thread-self/stat")
}

/// CPU time so far of each thread of this process, and the times it went to sleep
/// (voluntary context switches), by thread name.
fn threads_cpu() -> BTreeMap<String, (Duration, u64)> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let cpu = cpu_time_in(&dir.join("stat").to_string_lossy()).unwrap_or_default();
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let sleeps: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_default();
        let entry = by_name.entry(name.trim().to_string()).or_default();
        entry.0 += cpu;
        entry.1 += sleeps;
    }
    by_name
}

/// One B4 run's figures.
struct B4Run {
    per_second: f64,
    requests_per_message: f64,
    breakdown: String,
    /// Process CPU time per message, the feeding thread's excluded; `None` without /proc.
    cpu_per_message: Option<Duration>,
    /// The test server's CPU time per message; `None` without its PID.
    server_cpu_per_message: Option<Duration>,
}

type Settings = fn(sqs_consumer::ConsumerBuilder) -> sqs_consumer::ConsumerBuilder;

/// The runtime a B4 run's taker runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Threads {
    /// A current-thread runtime.
    One,
    /// A multi-thread runtime of 2 workers.
    Two,
}

/// Who takes the messages in a B4 run.
#[derive(Clone, Copy)]
enum Taker {
    /// A consumer with these settings.
    Consumer(Settings, Threads),
    /// No consumer: the same requests made by hand, one after the other, in one task (a
    /// `ReceiveMessage` of up to 10, then one `DeleteMessageBatch` of what it brought). What
    /// the SDK's own calls cost, with nothing of this crate.
    Sdk(Threads),
    /// A consumer with the default settings on a 2-thread runtime whose handlers end apart:
    /// each waits 0 to 4 ms (by turns) before its ack, so the acks of one receive reach the
    /// batcher one by one.
    HandlersApart,
}

/// The messages of a B4 (and W1) run.
const MESSAGES: usize = 5_000;

/// B4 with the consumer `settings` makes: 5,000 messages, instant ack, `backlog` of them kept
/// queued ahead of the acks (all 5,000 for W1).
fn b4_run(endpoint: &str, taker: Taker, backlog: usize) -> B4Run {
    // The consumer is measured at saturation: the queue never runs dry until the last
    // messages. The test server spends time proportional to its queue's length on every
    // message sent or deleted, so for B4, rather than all 5,000 at first, FEEDERS tasks keep
    // about `backlog` messages in the queue (waiting or in flight) ahead of the acks. They run
    // on a thread of their own, with a client of their own, so that their CPU time can be told
    // apart from the consumer's.
    const FEEDERS: usize = 4;
    let counter = CountRequests::default();
    let sent = Arc::new(AtomicUsize::new(0));
    let acked = Arc::new(AtomicUsize::new(0));
    let feeder_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let feed_client = server_client(endpoint, &CountRequests::default());
    let url = feeder_rt.block_on(new_queue(&feed_client, "b4"));
    let feed = |client: aws_sdk_sqs::Client, url: String, until: Option<usize>| {
        let (sent, acked) = (sent.clone(), acked.clone());
        async move {
            let until = until.unwrap_or(MESSAGES);
            loop {
                while sent.load(SeqCst) >= acked.load(SeqCst) + backlog {
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
    feeder_rt.block_on(feed(feed_client.clone(), url.clone(), Some(backlog)));
    let feeders = {
        let tasks: Vec<_> = (0..FEEDERS)
            .map(|_| feed(feed_client.clone(), url.clone(), None))
            .collect();
        std::thread::Builder::new()
            .name("feeder".into())
            .spawn(move || {
                let before = thread_cpu_time().unwrap_or_default();
                feeder_rt.block_on(futures_util::future::join_all(tasks));
                thread_cpu_time().unwrap_or_default() - before
            })
            .unwrap()
    };
    let threads = match taker {
        Taker::Consumer(_, threads) | Taker::Sdk(threads) => threads,
        Taker::HandlersApart => Threads::Two,
    };
    let rt = if threads == Threads::One {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("consumer-rt")
            .enable_all()
            .build()
            .unwrap()
    };
    let client = server_client(endpoint, &counter);
    let cpu_readable = cpu_time().is_some() && thread_cpu_time().is_some();
    let (elapsed, cpu, server_cpu) = rt.block_on(async {
        let settings = match taker {
            Taker::Consumer(settings, _) => settings,
            Taker::HandlersApart => |b| b,
            Taker::Sdk(_) => {
                let cpu_before = cpu_time().unwrap_or_default();
                let server_before = server_cpu_time();
                let start = Instant::now();
                // In a task, as a consumer's receive loop runs: on the 2-thread runtime, on a
                // worker rather than the thread `block_on` blocks.
                let (client, url, acked) = (client.clone(), url.clone(), acked.clone());
                tokio::spawn(async move { take_by_hand(&client, &url, &acked, MESSAGES).await })
                    .await
                    .unwrap();
                let server = server_cpu_time()
                    .zip(server_before)
                    .map(|(after, before)| after.saturating_sub(before));
                return (
                    start.elapsed(),
                    cpu_time().unwrap_or_default() - cpu_before,
                    server,
                );
            }
        };
        let consumer = settings(Consumer::builder(client.clone(), url.clone()))
            .build()
            .unwrap();
        let cpu_before = cpu_time().unwrap_or_default();
        let server_before = server_cpu_time();
        let threads_before = threads_cpu();
        let start = Instant::now();
        // Woken by the last ack, not polled: a poll loop's wake-ups would count as the
        // consumer's CPU time.
        let all_acked = Arc::new(tokio::sync::Notify::new());
        // The figures are taken at the last ack: the stop then waits for the poll under way
        // (up to the default wait time of 20 s), which is no part of serving the messages.
        let mut acked_at = None;
        let last_ack = all_acked.clone();
        let done = async {
            last_ack.notified().await;
            acked_at = Some((
                start.elapsed(),
                cpu_time().unwrap_or_default(),
                server_cpu_time(),
            ));
        };
        let apart = matches!(taker, Taker::HandlersApart);
        let started = Arc::new(AtomicUsize::new(0));
        let handler = {
            let acked = acked.clone();
            move |d: Delivery| {
                let (acked, all_acked) = (acked.clone(), all_acked.clone());
                // Counted on that line only: the other lines measure the crate's own CPU.
                let delay = apart.then(|| started.fetch_add(1, SeqCst) % 5);
                async move {
                    if let Some(ms) = delay {
                        tokio::time::sleep(Duration::from_millis(ms as u64)).await;
                    }
                    d.ack().await?;
                    if acked.fetch_add(1, SeqCst) + 1 == MESSAGES {
                        all_acked.notify_one();
                    }
                    Ok::<_, sqs_consumer::Error>(())
                }
            }
        };
        consumer.run_until(handler, done).await.unwrap();
        let (elapsed, cpu_at_last_ack, server_at_last_ack) = acked_at.unwrap();
        let server = server_at_last_ack
            .zip(server_before)
            .map(|(after, before)| after.saturating_sub(before));
        let threads_after = threads_cpu();
        let shares: Vec<String> = threads_after
            .iter()
            .map(|(name, (cpu, sleeps))| {
                let (cpu0, sleeps0) = threads_before.get(name).copied().unwrap_or_default();
                let spent = cpu.saturating_sub(cpu0);
                format!(
                    "{name} {:.3} ms, {:.2} sleeps",
                    spent.as_secs_f64() * 1e3 / MESSAGES as f64,
                    sleeps.saturating_sub(sleeps0) as f64 / MESSAGES as f64
                )
            })
            .collect();
        eprintln!("      threads (per message): {}", shares.join(", "));
        (elapsed, cpu_at_last_ack - cpu_before, server)
    });
    let feeding = feeders.join().unwrap();
    let counts = counter.0.lock().unwrap().clone();
    let total: u64 = counts.values().sum();
    B4Run {
        per_second: MESSAGES as f64 / elapsed.as_secs_f64(),
        requests_per_message: total as f64 / MESSAGES as f64,
        breakdown: counts
            .iter()
            .map(|(op, n)| format!("{op} {:.3}", *n as f64 / MESSAGES as f64))
            .collect::<Vec<_>>()
            .join(", "),
        cpu_per_message: cpu_readable.then(|| cpu.saturating_sub(feeding) / MESSAGES as u32),
        server_cpu_per_message: server_cpu.map(|cpu| cpu / MESSAGES as u32),
    }
}

/// Receives and deletes `messages` messages with the SDK alone: a `ReceiveMessage` of up to
/// 10 (long poll), then one `DeleteMessageBatch` of what it brought, one after the other.
async fn take_by_hand(
    client: &aws_sdk_sqs::Client,
    url: &str,
    acked: &AtomicUsize,
    messages: usize,
) {
    use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
    while acked.load(SeqCst) < messages {
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(20)
            .visibility_timeout(30)
            .send()
            .await
            .unwrap();
        let entries: Vec<_> = received
            .messages()
            .iter()
            .enumerate()
            .map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .unwrap()
            })
            .collect();
        if entries.is_empty() {
            continue;
        }
        let n = entries.len();
        client
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
        acked.fetch_add(n, SeqCst);
    }
}

/// B4, where the time goes: one `ReceiveMessage` call bringing 10 messages costs the
/// client's thread more CPU the longer it sleeps waiting for the answer. A canned answer of
/// 10 messages (moto's answer, with its `Connection: close`) is served on a thread of its own
/// at once, then 13 ms late (about moto's time to answer a receive); the calls are made one
/// after the other on a current-thread runtime, and only the calling thread's CPU counts.
fn b4_idle_cost() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const CALLS: u32 = 400;
    let delay_ms = Arc::new(AtomicUsize::new(0));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    let messages: Vec<String> = (0..10)
        .map(|i| {
            format!(
                r#"{{"MessageId": "{i:08}-f8fc-473b-b0e8-99d5abd6b6fa", "ReceiptHandle": "{}", "MD5OfBody": "4c3b0edb243435fced5cbe8c23ed4785", "Body": "message {i} with a body of some length", "Attributes": {{"ApproximateReceiveCount": "1"}}}}"#,
                "r".repeat(200)
            )
        })
        .collect();
    let body = format!(r#"{{"Messages": [{}]}}"#, messages.join(", "));
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    // The server's thread serves until the process ends.
    {
        let delay_ms = delay_ms.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((mut socket, _)) = listener.accept().await else {
                        return;
                    };
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    // The head, then as much body as it announces.
                    loop {
                        let n = socket.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        request.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&request);
                        if let Some(end) = text.find("\r\n\r\n") {
                            let length = text[..end]
                                .lines()
                                .find_map(|l| {
                                    let (name, value) = l.split_once(':')?;
                                    name.eq_ignore_ascii_case("content-length")
                                        .then(|| value.trim().parse::<usize>().ok())?
                                })
                                .unwrap_or(0);
                            if request.len() >= end + 4 + length {
                                break;
                            }
                        }
                    }
                    let delay = delay_ms.load(SeqCst) as u64;
                    if delay > 0 {
                        sleep(Duration::from_millis(delay)).await;
                    }
                    let _ = socket.write_all(answer.as_bytes()).await;
                    let _ = socket.shutdown().await;
                }
            });
        })
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = server_client(&endpoint, &CountRequests::default());
    let url = format!("{endpoint}/000000000000/canned");
    let per_call = |delay: usize| {
        delay_ms.store(delay, SeqCst);
        rt.block_on(async {
            let before = thread_cpu_time().unwrap_or_default();
            for _ in 0..CALLS {
                let out = client
                    .receive_message()
                    .queue_url(&url)
                    .max_number_of_messages(10)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(out.messages().len(), 10);
            }
            (thread_cpu_time().unwrap_or_default() - before) / CALLS
        })
    };
    per_call(0); // warm up
    let at_once = per_call(0);
    let late = per_call(13);
    println!(
        "B4  where the time goes: one ReceiveMessage of 10 canned messages, a new connection \
         each, one thread: {:.0} us CPU per call answered at once, {:.0} us answered 13 ms later \
         ({:.1}x: each sleep of the thread costs it)",
        at_once.as_secs_f64() * 1e6,
        late.as_secs_f64() * 1e6,
        late.as_secs_f64() / at_once.as_secs_f64().max(1e-9),
    );
}

fn b4(endpoint: &str) {
    let runs_per_variant = server_runs();
    println!(
        "B4  test server ({}), 5000 messages, 200 kept queued ahead, instant ack \
         (medians of {runs_per_variant} runs):",
        server_name()
    );
    // The consumer runs on a 2-thread runtime, except on the current-thread lines: one
    // thread, with the keeper on it too (line 3: what the hops between threads cost) or on its
    // own thread (line 7: what the keeper thread's hops cost alone).
    let variants: [(&str, Taker); 8] = [
        ("default settings", Taker::Consumer(|b| b, Threads::Two)),
        (
            "default settings, keeper not isolated",
            Taker::Consumer(|b| b.isolated_keeper(false), Threads::Two),
        ),
        (
            "max_in_flight(100), T = 60 s",
            Taker::Consumer(
                |b| {
                    b.max_in_flight(100)
                        .visibility_timeout(Duration::from_secs(60))
                },
                Threads::Two,
            ),
        ),
        (
            "default settings, keeper not isolated, current-thread runtime",
            Taker::Consumer(|b| b.isolated_keeper(false), Threads::One),
        ),
        (
            "no consumer: the SDK's calls alone, one at a time, one thread",
            Taker::Sdk(Threads::One),
        ),
        (
            "default settings, handlers ending 0 to 4 ms apart",
            Taker::HandlersApart,
        ),
        (
            "no consumer: the SDK's calls alone, one at a time, on the 2-thread runtime",
            Taker::Sdk(Threads::Two),
        ),
        (
            "default settings, current-thread runtime",
            Taker::Consumer(|b| b, Threads::One),
        ),
    ];
    let only: Option<Vec<usize>> = std::env::var("B4_ONLY")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    let chosen: Vec<(usize, &str, Taker)> = variants
        .into_iter()
        .enumerate()
        .filter(|(i, _)| only.as_ref().is_none_or(|o| o.contains(i)))
        .map(|(i, (name, taker))| (i, name, taker))
        .collect();
    // Run by run, the lines in turn, so that the machine's drift falls on each alike.
    let mut all_runs: Vec<Vec<B4Run>> = chosen.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs_per_variant {
        for (runs, &(_, _, taker)) in all_runs.iter_mut().zip(&chosen) {
            runs.push(b4_run(endpoint, taker, 200));
        }
    }
    for (runs, &(_, name, _)) in all_runs.iter().zip(&chosen) {
        let rpm = median(runs.iter().map(|r| r.requests_per_message).collect());
        let mid = runs
            .iter()
            .find(|r| r.requests_per_message == rpm)
            .unwrap_or(&runs[0]);
        println!(
            "    {name}: {:.0} messages/s; {rpm:.3} requests per message ({}); client CPU \
             {} ms per message",
            median(runs.iter().map(|r| r.per_second).collect()),
            mid.breakdown,
            figure(
                median_of(
                    runs.iter()
                        .map(|r| r.cpu_per_message.map(|c| c.as_secs_f64() * 1e3))
                        .collect()
                ),
                3
            ),
        );
        println!(
            "      runs: {}",
            runs.iter()
                .map(|r| format!(
                    "{:.3} req/msg, {} ms/msg",
                    r.requests_per_message,
                    figure(r.cpu_per_message.map(|c| c.as_secs_f64() * 1e3), 3)
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    one_thread_against_the_sdk(&chosen, &all_runs);
}

/// With both one-thread lines run (3, the consumer; 4, the SDK alone), the consumer's client
/// CPU per message over the SDK's, run by run (each pair ran back to back), and their median.
fn one_thread_against_the_sdk(chosen: &[(usize, &str, Taker)], all_runs: &[Vec<B4Run>]) {
    let line = |n| chosen.iter().position(|&(i, _, _)| i == n);
    let (Some(consumer), Some(sdk)) = (line(3), line(4)) else {
        return;
    };
    let ratios: Option<Vec<f64>> = all_runs[consumer]
        .iter()
        .zip(&all_runs[sdk])
        .map(|(c, s)| Some(c.cpu_per_message?.as_secs_f64() / s.cpu_per_message?.as_secs_f64()))
        .collect();
    let Some(ratios) = ratios else {
        return;
    };
    println!(
        "    one thread, the consumer's client CPU over the SDK's alone, run by run: {}; median \
         {:.2}",
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        median(ratios.clone())
    );
}

/// W1: the same with the whole backlog queued before the consumer starts (no feeding), default
/// settings: requests per message (the floor is 0.200: receives of 10, deletes of 10) and
/// messages per second.
fn w1(endpoint: &str) {
    if server_name() == "moto" {
        // moto scans its whole queue on every receive: with 5,000 queued a run takes most of
        // an hour and measures moto.
        println!("W1: skipped on moto (run it against LocalStack: see the benchmarks page)");
        return;
    }
    let runs = server_runs();
    println!(
        "W1  test server ({}), 5000 messages all queued first, instant ack, default settings \
         (medians of {runs} runs):",
        server_name()
    );
    let runs: Vec<B4Run> = (0..runs)
        .map(|_| b4_run(endpoint, Taker::Consumer(|b| b, Threads::Two), MESSAGES))
        .collect();
    let rpm = median(runs.iter().map(|r| r.requests_per_message).collect());
    let mid = runs
        .iter()
        .find(|r| r.requests_per_message == rpm)
        .unwrap_or(&runs[0]);
    let ms = |d: Option<Duration>| figure(d.map(|d| d.as_secs_f64() * 1e3), 3);
    println!(
        "    {:.0} messages/s; {rpm:.3} requests per message ({}); CPU per message: client {} ms, \
         server {} ms",
        median(runs.iter().map(|r| r.per_second).collect()),
        mid.breakdown,
        ms(median_of(
            runs.iter()
                .map(|r| r.cpu_per_message.map(|d| d.as_secs_f64()))
                .collect()
        )
        .map(Duration::from_secs_f64)),
        ms(median_of(
            runs.iter()
                .map(|r| r.server_cpu_per_message.map(|d| d.as_secs_f64()))
                .collect()
        )
        .map(Duration::from_secs_f64)),
    );
    println!(
        "      runs: {}",
        runs.iter()
            .map(|r| format!(
                "{:.3} req/msg, {:.0} msg/s, server {} ms",
                r.requests_per_message,
                r.per_second,
                ms(r.server_cpu_per_message)
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    // One line per run for scripts/peer-bench.sh, which sets these beside the peer's.
    let json = |d: Option<Duration>| {
        d.map_or("null".to_owned(), |d| {
            format!("{:.4}", d.as_secs_f64() * 1e3)
        })
    };
    for r in &runs {
        println!(
            "      {{\"consumer\": \"sqs-consumer\", \"per_second\": {:.1}, \"requests_per_message\": {:.4}, \"client_cpu_ms\": {}, \"server_cpu_ms\": {}}}",
            r.per_second,
            r.requests_per_message,
            json(r.cpu_per_message),
            json(r.server_cpu_per_message)
        );
    }
}

// ---- W3 ----

/// One W3 run's figures.
struct W3Run {
    requests_per_message: f64,
    breakdown: String,
    /// Release requests, and the entries they carried.
    releases: (u64, u64),
    /// Receives sent by the last ack, and those answered by then.
    receives: (u64, u64),
}

impl W3Run {
    /// Requests per message less the receives still waiting at the last ack.
    fn answered_per_message(&self) -> f64 {
        let waiting = self.receives.0.saturating_sub(self.receives.1);
        self.requests_per_message - waiting as f64 / W3_MESSAGES as f64
    }
}

const W3_MESSAGES: usize = 100;

/// W3: 100 messages queued, each failing its first delivery, `RetryPolicy::ReleaseNow`, then
/// acked on the second: requests per message by action. The floor is 0.40: two receives of
/// 10 per 10 messages, one release request and one delete request of 10.
fn w3_run(endpoint: &str) -> W3Run {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (counter, answers) = (CountRequests::default(), CountAnswers::default());
    let client = aws_sdk_sqs::Client::from_conf(
        server_config(endpoint)
            .interceptor(counter.clone())
            .interceptor(answers.clone())
            .build(),
    );
    let setup = server_client(endpoint, &CountRequests::default());
    rt.block_on(async {
        let url = new_queue(&setup, "w3").await;
        for first in (0..W3_MESSAGES).step_by(10) {
            send_ten(&setup, &url, first).await;
        }
        let consumer = Consumer::builder(client, url)
            .retry_policy(sqs_consumer::RetryPolicy::ReleaseNow)
            .build()
            .unwrap();
        let acked = Arc::new(AtomicUsize::new(0));
        let all_acked = Arc::new(tokio::sync::Notify::new());
        let handler = {
            let (acked, all_acked) = (acked.clone(), all_acked.clone());
            move |d: Delivery| {
                let (acked, all_acked) = (acked.clone(), all_acked.clone());
                async move {
                    if d.receive_count() == 1 {
                        return Err(BoxError::from("fails its first delivery"));
                    }
                    d.ack().await?;
                    if acked.fetch_add(1, SeqCst) + 1 == W3_MESSAGES {
                        all_acked.notify_one();
                    }
                    Ok(())
                }
            }
        };
        let done = tokio::time::timeout(Duration::from_secs(120), all_acked.notified());
        // Counted at the last ack: the stop then waits for the poll under way, which is no
        // part of serving the messages.
        let (mut at_last_ack, mut answered) = (BTreeMap::new(), 0);
        consumer
            .run_until(handler, async {
                assert!(
                    done.await.is_ok(),
                    "W3: not every message acked within 2 minutes"
                );
                at_last_ack = counter.0.lock().unwrap().clone();
                answered = answers
                    .0
                    .lock()
                    .unwrap()
                    .get("ReceiveMessage")
                    .copied()
                    .unwrap_or(0);
            })
            .await
            .unwrap();
        let stats = consumer.stats();
        let counts = at_last_ack;
        let total: u64 = counts.values().sum();
        W3Run {
            requests_per_message: total as f64 / W3_MESSAGES as f64,
            breakdown: counts
                .iter()
                .map(|(op, n)| format!("{op} {:.3}", *n as f64 / W3_MESSAGES as f64))
                .collect::<Vec<_>>()
                .join(", "),
            releases: (
                counts
                    .get("ChangeMessageVisibilityBatch")
                    .copied()
                    .unwrap_or(0)
                    + counts.get("ChangeMessageVisibility").copied().unwrap_or(0),
                stats.released,
            ),
            receives: (counts.get("ReceiveMessage").copied().unwrap_or(0), answered),
        }
    })
}

fn w3(endpoint: &str) {
    let runs = server_runs();
    println!(
        "W3  test server ({}), 100 messages, each failing its first delivery, \
         RetryPolicy::ReleaseNow, default settings (medians of {runs} runs; floor 0.40):",
        server_name()
    );
    let runs: Vec<W3Run> = (0..runs).map(|_| w3_run(endpoint)).collect();
    let rpm = median(runs.iter().map(|r| r.requests_per_message).collect());
    let mid = runs
        .iter()
        .find(|r| r.requests_per_message == rpm)
        .unwrap_or(&runs[0]);
    println!(
        "    {rpm:.3} requests per message ({}); releases: {} requests for {} entries",
        mid.breakdown, mid.releases.0, mid.releases.1
    );
    // The long polls still waiting at the last ack serve whatever comes next, not these
    // messages: the requests answered by then are the ones these messages cost.
    println!(
        "    answered by the last ack: {:.3} requests per message",
        median(runs.iter().map(W3Run::answered_per_message).collect())
    );
    // A receive sent but not answered by the last ack is a long poll still waiting.
    println!(
        "      runs (receives sent, answered by the last ack): {}",
        runs.iter()
            .map(|r| format!(
                "{:.3} ({}, {})",
                r.requests_per_message, r.receives.0, r.receives.1
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

// ---- B5 ----

/// One B5 run's figures.
struct B5Run {
    /// Not every message was acked within the run's minute: its figures are not counted.
    timed_out: bool,
    requests_per_message: f64,
    entries_per_message: f64,
    failed: u64,
    seen_twice: usize,
    lost: u64,
}

/// B5 with the consumer `settings` makes: 50 messages, each held 5 s at a visibility timeout
/// of 2 s (an extension every second: 4 per message), then acked.
fn b5_run(endpoint: &str, settings: Settings) -> B5Run {
    const MESSAGES: usize = 50;
    const HOLD: Duration = Duration::from_secs(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let counter = CountRequests::default();
    let client = server_client(endpoint, &counter);
    let setup = server_client(endpoint, &CountRequests::default());
    rt.block_on(async {
        let url = new_queue(&setup, "b5").await;
        for first in (0..MESSAGES).step_by(10) {
            send_ten(&setup, &url, first).await;
        }
        let consumer = settings(
            Consumer::builder(client, url.clone()).visibility_timeout(Duration::from_secs(2)),
        )
        .build()
        .unwrap();
        let seen = Arc::new(Mutex::new(std::collections::HashMap::new()));
        let twice = Arc::new(AtomicUsize::new(0));
        let acked = Arc::new(AtomicUsize::new(0));
        let all_acked = Arc::new(tokio::sync::Notify::new());
        let handler = {
            let (seen, twice, acked, all_acked) = (
                seen.clone(),
                twice.clone(),
                acked.clone(),
                all_acked.clone(),
            );
            move |d: Delivery| {
                let (seen, twice, acked, all_acked) = (
                    seen.clone(),
                    twice.clone(),
                    acked.clone(),
                    all_acked.clone(),
                );
                async move {
                    let first = seen
                        .lock()
                        .unwrap()
                        .insert(d.message_id().to_owned(), d.received_at());
                    if let Some(first) = first {
                        twice.fetch_add(1, SeqCst);
                        eprintln!(
                            "      seen twice: {} (receive count {}), {:?} after its first receive",
                            d.message_id(),
                            d.receive_count(),
                            d.received_at() - first
                        );
                    }
                    sleep(HOLD).await;
                    d.ack().await?;
                    if acked.fetch_add(1, SeqCst) + 1 == MESSAGES {
                        all_acked.notify_one();
                    }
                    Ok::<_, sqs_consumer::Error>(())
                }
            }
        };
        // Every message takes 5 s; two waves of them at most, bounded at a minute.
        let done = tokio::time::timeout(Duration::from_secs(60), all_acked.notified());
        let mut timed_out = false;
        consumer
            .run_until(handler, async {
                timed_out = done.await.is_err();
            })
            .await
            .unwrap();
        let stats = consumer.stats();
        let requests = counter
            .0
            .lock()
            .unwrap()
            .get("ChangeMessageVisibilityBatch")
            .copied()
            .unwrap_or(0);
        B5Run {
            timed_out,
            requests_per_message: requests as f64 / MESSAGES as f64,
            entries_per_message: (stats.extended + stats.extension_failures) as f64
                / MESSAGES as f64,
            failed: stats.extension_failures,
            seen_twice: twice.load(SeqCst),
            lost: stats.lost,
        }
    })
}

fn b5(endpoint: &str) {
    let runs_per_variant = server_runs();
    println!(
        "B5  test server ({}), 50 messages held 5 s each at visibility 2 s, then acked \
         (medians of {runs_per_variant} runs; floor 0.40 extension requests, 4.0 entries per message):",
        server_name()
    );
    let variants: [(&str, Settings); 2] = [
        ("max_in_flight(50)", |b| b.max_in_flight(50)),
        ("default settings", |b| b),
    ];
    for (name, settings) in variants {
        let (runs, timed_out): (Vec<B5Run>, Vec<B5Run>) = (0..runs_per_variant)
            .map(|_| b5_run(endpoint, settings))
            .partition(|r| !r.timed_out);
        if !timed_out.is_empty() {
            println!(
                "    {name}: {} of {runs_per_variant} runs timed out (not every message acked \
                 within a minute) and are left out",
                timed_out.len()
            );
        }
        if runs.is_empty() {
            println!("    {name}: n/a (every run timed out)");
            continue;
        }
        println!(
            "    {name}: {:.2} extension requests per message, {:.2} entries per message; \
             failed extension attempts {}, messages seen twice {}, lost {} (all runs)",
            median(runs.iter().map(|r| r.requests_per_message).collect()),
            median(runs.iter().map(|r| r.entries_per_message).collect()),
            runs.iter().map(|r| r.failed).sum::<u64>(),
            runs.iter().map(|r| r.seen_twice).sum::<usize>(),
            runs.iter().map(|r| r.lost).sum::<u64>(),
        );
        println!(
            "      runs: {}",
            runs.iter()
                .map(|r| format!(
                    "{:.2} req/msg, {:.2} entries/msg",
                    r.requests_per_message, r.entries_per_message
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}
