//! W5: throughput at a network round trip. Every request takes a round trip (5, 20 or 50 ms),
//! so what bounds a consumer is how many `max_in_flight` slots it keeps busy: a slot is taken
//! from the receive request that may bring its message until the delivery's ack is sent (not
//! answered), one round trip at least, so the limit is `max_in_flight / round trip` messages
//! a second with instant handlers.
//!
//! W4, beside it: what a quiet queue costs, receives in a minute (paused clock): on a queue
//! empty all along, and in the minute after a burst was drained (the receives under way when
//! it ended wait out their long polls, then one at a time).
//!
//! W5i: the same at 20 ms, without and with `idempotency(MemoryStore)` in turn.
//!
//! ```text
//! cargo bench --bench round_trip                                   # MemoryQueue, 5, 20, 50 ms
//! cargo bench --bench round_trip -- idempotency                    # W5i alone
//! scripts/round-trip-bench.sh                                      # LocalStack through a
//!                                                                  # proxy delaying 20 ms, and
//!                                                                  # fanferro beside it
//! ```
//!
//! Each line: an instant-ack handler on a 2-thread runtime, the whole backlog queued first,
//! messages a second to the last ack (median of the runs), requests per message, the
//! fraction of the limit reached, and what the slots did: on average over the run, how many
//! receives were under way (slots reserved by receives, over 10) and how many deliveries were
//! held (with an instant ack, each is waiting for its delete's answer); and the ramp, receives
//! under way in the first 100 ms.

use std::time::Duration;

use sqs_consumer::idempotency::MemoryStore;
use sqs_consumer::memory::{Action, RequestCounts};
use sqs_consumer::{Consumer, ConsumerBuilder, Delivery, MemoryQueue, Stats};
use tokio::time::Instant;

mod common;
use common::{
    median, new_queue, plain_client, send_ten, server_client, server_cpu_time, server_name,
    server_runs, two_threads, wanted, CountRequests,
};

/// The settings a line runs with.
#[derive(Debug, Clone, Copy)]
enum Settings {
    Default,
    /// `max_in_flight(200)`, nothing else.
    Slots200,
    /// The defaults, and `idempotency(MemoryStore::new())`.
    Idempotency,
}

impl Settings {
    fn slots(self) -> usize {
        match self {
            Settings::Default | Settings::Idempotency => 40,
            Settings::Slots200 => 200,
        }
    }

    fn apply(self, builder: ConsumerBuilder) -> ConsumerBuilder {
        match self {
            Settings::Default => builder,
            Settings::Slots200 => builder.max_in_flight(200),
            Settings::Idempotency => builder.idempotency(MemoryStore::new()),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Settings::Default => "default settings (40 slots)",
            Settings::Slots200 => "max_in_flight(200)",
            Settings::Idempotency => "default settings, idempotency(MemoryStore)",
        }
    }
}

/// How often the slots are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(2);

/// What the slots did over one run.
#[derive(Debug, Default, Clone)]
struct Slots {
    /// Average receives under way (slots reserved, over 10).
    receives: f64,
    /// Average deliveries held.
    held: f64,
    /// Receives under way at 0, 20, ... 100 ms.
    ramp: Vec<f64>,
}

/// One run's figures.
struct Run {
    per_second: f64,
    requests_per_message: f64,
    breakdown: String,
    slots: Slots,
    /// On a test server: a receive's round trip as measured before the run (the delay, the
    /// server's own time and the proxy's), and the server's CPU time per message.
    measured: Option<(Duration, Option<Duration>)>,
}

/// Samples the consumer's slots every [`SAMPLE_EVERY`] until it is dropped.
async fn sample(stats: impl Fn() -> Stats, into: &mut Vec<(Duration, u64, u64)>) {
    let start = Instant::now();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    loop {
        tick.tick().await;
        let s = stats();
        into.push((start.elapsed(), s.reserved, s.in_flight));
    }
}

fn summarise(samples: &[(Duration, u64, u64)]) -> Slots {
    let n = samples.len().max(1) as f64;
    let receives = samples.iter().map(|s| s.1 as f64 / 10.0).sum::<f64>() / n;
    let held = samples.iter().map(|s| s.2 as f64).sum::<f64>() / n;
    let ramp = (0..=5)
        .map(|i| {
            let at = Duration::from_millis(20 * i);
            samples
                .iter()
                .find(|s| s.0 >= at)
                .map_or(0.0, |s| s.1 as f64 / 10.0)
        })
        .collect();
    Slots {
        receives,
        held,
        ramp,
    }
}

/// Runs `consumer` with an instant-ack handler until it has acked `messages`; messages a
/// second to the last ack, and the slots sampled meanwhile. The run is dropped then: its
/// receives still waiting on the emptied queue are not part of the figure.
async fn consume(consumer: &Consumer, messages: u64) -> (f64, Slots) {
    let start = Instant::now();
    let mut samples = Vec::new();
    let done = async {
        while consumer.stats().acked < messages {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        start.elapsed()
    };
    let elapsed = tokio::select! {
        elapsed = done => elapsed,
        end = consumer.run(|d: Delivery| d.ack()) => panic!("the run ended: {end:?}"),
        () = sample(|| consumer.stats(), &mut samples) => unreachable!(),
    };
    (messages as f64 / elapsed.as_secs_f64(), summarise(&samples))
}

fn memory_run(latency: Duration, settings: Settings, messages: u64) -> Run {
    let rt = two_threads();
    rt.block_on(async {
        let q = MemoryQueue::builder().latency(latency).build().unwrap();
        for i in 0..messages {
            q.send(format!("message {i}")).unwrap();
        }
        let consumer = settings.apply(Consumer::in_memory(&q)).build().unwrap();
        let (per_second, slots) = consume(&consumer, messages).await;
        let counts = q.requests();
        Run {
            per_second,
            requests_per_message: sqs_requests(&counts) as f64 / messages as f64,
            breakdown: breakdown(&counts, messages),
            slots,
            measured: None,
        }
    })
}

/// The consumer's requests: every one but the bench's own sends.
fn sqs_requests(counts: &RequestCounts) -> u64 {
    counts.total() - counts.requests(Action::SendMessage)
}

fn breakdown(counts: &RequestCounts, messages: u64) -> String {
    [
        ("receive", Action::ReceiveMessage),
        ("delete", Action::DeleteMessageBatch),
        ("visibility", Action::ChangeMessageVisibilityBatch),
    ]
    .iter()
    .map(|(name, action)| {
        format!(
            "{name} {:.3}",
            counts.requests(*action) as f64 / messages as f64
        )
    })
    .collect::<Vec<_>>()
    .join(", ")
}

/// The limit a round trip sets: each slot busy one round trip per message (its receive).
fn limit(slots: usize, round_trip: Duration) -> f64 {
    slots as f64 / round_trip.as_secs_f64()
}

fn report(label: &str, round_trip: Duration, slots: usize, runs: &[Run]) {
    let rate = median(runs.iter().map(|r| r.per_second).collect());
    let rpm = median(runs.iter().map(|r| r.requests_per_message).collect());
    let mid = runs
        .iter()
        .find(|r| r.per_second == rate)
        .unwrap_or(&runs[0]);
    let limit = limit(slots, round_trip);
    println!(
        "    {label}: {rate:.0} messages/s, {:.0} % of the limit {limit:.0}; {rpm:.3} requests per \
         message ({}); runs {}",
        100.0 * rate / limit,
        mid.breakdown,
        runs.iter()
            .map(|r| format!("{:.0}", r.per_second))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "      on average {:.1} receives under way, {:.1} deliveries held; receives under way at \
         0, 20, .. 100 ms: {}",
        mid.slots.receives,
        mid.slots.held,
        mid.slots
            .ramp
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// The limit at the round trip each run measured, and the server's CPU per message.
fn report_measured(slots: usize, runs: &[Run]) {
    let measured: Vec<_> = runs.iter().filter_map(|r| r.measured).collect();
    if measured.is_empty() {
        return;
    }
    let round_trip = median(measured.iter().map(|m| m.0.as_secs_f64()).collect());
    let fraction = median(
        runs.iter()
            .filter_map(|r| Some(r.per_second / limit(slots, r.measured?.0)))
            .collect(),
    );
    let server: Vec<f64> = measured
        .iter()
        .filter_map(|m| m.1.map(|d| d.as_secs_f64() * 1e3))
        .collect();
    let server = if server.is_empty() {
        "n/a".to_owned()
    } else {
        format!("{:.3} ms", median(server))
    };
    println!(
        "      a receive's round trip as measured {:.1} ms: {:.0} % of the limit at it ({:.0}); \
         server CPU per message {server}",
        round_trip * 1e3,
        100.0 * fraction,
        limit(slots, Duration::from_secs_f64(round_trip))
    );
}

fn memory() {
    const RUNS: usize = 3;
    println!(
        "W5  MemoryQueue, every request one round trip, instant ack, the backlog queued first, \
         2 threads, median of {RUNS}:"
    );
    for ms in [5, 20, 50] {
        let round_trip = Duration::from_millis(ms);
        for settings in [Settings::Default, Settings::Slots200] {
            let slots = settings.slots();
            // 5 s of messages at the limit: the start (reading the queue's visibility timeout,
            // the receives under way growing to what the slots fill) is a few round trips.
            let messages = (5.0 * limit(slots, round_trip)) as u64;
            let runs: Vec<Run> = (0..RUNS)
                .map(|_| memory_run(round_trip, settings, messages))
                .collect();
            report(
                &format!("{ms} ms, {}, {messages} messages", settings.label()),
                round_trip,
                slots,
                &runs,
            );
        }
    }
}

/// W5i: what the idempotency machinery costs at a 20 ms round trip, with a store that answers
/// at once (`MemoryStore`): runs without and with it taken in turn, the ratio of the medians.
fn idempotency() {
    const RUNS: usize = 7;
    let round_trip = Duration::from_millis(20);
    let messages = (5.0 * limit(40, round_trip)) as u64;
    println!(
        "W5i MemoryQueue, 20 ms a request, default settings, {messages} messages, without and \
         with idempotency(MemoryStore) in turn, median of {RUNS} each:"
    );
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        without.push(memory_run(round_trip, Settings::Default, messages));
        with.push(memory_run(round_trip, Settings::Idempotency, messages));
    }
    let rate = |runs: &[Run]| median(runs.iter().map(|r| r.per_second).collect());
    let (a, b) = (rate(&without), rate(&with));
    println!(
        "    without {a:.0} messages/s, with {b:.0}: {:.3} of it (runs without {}; with {})",
        b / a,
        without
            .iter()
            .map(|r| format!("{:.0}", r.per_second))
            .collect::<Vec<_>>()
            .join(", "),
        with.iter()
            .map(|r| format!("{:.0}", r.per_second))
            .collect::<Vec<_>>()
            .join(", "),
    );
}

/// Messages queued for each run on the test server.
const SERVER_MESSAGES: usize = 2_000;

/// One run on the test server at `endpoint` (the delaying proxy), the queue filled straight
/// at `upstream`.
fn server_run(endpoint: &str, upstream: &str, settings: Settings) -> Run {
    let rt = two_threads();
    rt.block_on(async {
        let filler = plain_client(upstream);
        let url = new_queue(&filler, "w5").await;
        let fill = (0..8).map(|task| {
            let (filler, url) = (filler.clone(), url.clone());
            async move {
                for first in (task * 10..SERVER_MESSAGES).step_by(80) {
                    send_ten(&filler, &url, first).await;
                }
            }
        });
        futures_util::future::join_all(fill).await;
        let round_trip = measure_round_trip(endpoint, &url).await;
        let counter = CountRequests::default();
        let client = server_client(endpoint, &counter);
        let consumer = settings
            .apply(Consumer::builder(client, url.clone()))
            .build()
            .unwrap();
        let server_before = server_cpu_time();
        let (per_second, slots) = consume(&consumer, SERVER_MESSAGES as u64).await;
        let server_cpu = server_cpu_time()
            .zip(server_before)
            .map(|(after, before)| after.saturating_sub(before) / SERVER_MESSAGES as u32);
        let counts = counter.0.lock().unwrap().clone();
        let messages = SERVER_MESSAGES as f64;
        let requests: u64 = counts.values().sum();
        let breakdown = counts
            .iter()
            .map(|(op, n)| format!("{op} {:.3}", *n as f64 / messages))
            .collect::<Vec<_>>()
            .join(", ");
        // The run's receives still waiting on the emptied queue go with its runtime.
        let _ = filler.delete_queue().queue_url(url).send().await;
        Run {
            per_second,
            requests_per_message: requests as f64 / messages,
            breakdown,
            slots,
            measured: Some((round_trip, server_cpu)),
        }
    })
}

/// A full receive's round trip through `endpoint` (the delaying proxy), the median of 10 one
/// after the other; they leave the messages visible.
async fn measure_round_trip(endpoint: &str, url: &str) -> Duration {
    let client = plain_client(endpoint);
    let mut times = Vec::new();
    for _ in 0..10 {
        let start = Instant::now();
        let call = client.receive_message().queue_url(url);
        let answer = call.max_number_of_messages(10).visibility_timeout(0);
        answer.send().await.unwrap();
        times.push(start.elapsed().as_secs_f64());
    }
    Duration::from_secs_f64(median(times))
}

/// W5 on the test server through a proxy that delays every request by `W5_DELAY_MS`.
fn server(endpoint: &str) {
    let Ok(upstream) = std::env::var("SQS_UPSTREAM") else {
        println!("W5 server: skipped (run scripts/round-trip-bench.sh)");
        return;
    };
    let delay: u64 = std::env::var("W5_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let round_trip = Duration::from_millis(delay);
    let runs = server_runs();
    println!(
        "W5  test server ({}) through a proxy delaying every request {delay} ms, instant ack, \
         {SERVER_MESSAGES} messages queued first, 2 threads, median of {runs}:",
        server_name()
    );
    for settings in [Settings::Default, Settings::Slots200] {
        let runs: Vec<Run> = (0..runs)
            .map(|_| server_run(endpoint, &upstream, settings))
            .collect();
        report(settings.label(), round_trip, settings.slots(), &runs);
        report_measured(settings.slots(), &runs);
        // One line per run, for the script's summary beside the peer's.
        for r in &runs {
            let server_ms = r.measured.and_then(|m| m.1).map_or("null".to_owned(), |d| {
                format!("{:.4}", d.as_secs_f64() * 1e3)
            });
            println!(
                "      {{\"consumer\": \"sqs-consumer, {}\", \"per_second\": {:.1}, \
                 \"requests_per_message\": {:.4}, \"server_cpu_ms\": {server_ms}}}",
                settings.label(),
                r.per_second,
                r.requests_per_message
            );
        }
    }
}

/// Receives in a minute of a quiet queue, with `settings`: from the start on an empty queue,
/// or from the last ack of a burst of 2,000 (requests 20 ms); and the receives under way at
/// its start (each of them ends with an empty answer in it).
fn quiet_minute(settings: Settings, burst: bool) -> (u64, u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let q = MemoryQueue::builder()
            .latency(Duration::from_millis(20))
            .build()
            .unwrap();
        let messages = if burst { 2_000 } else { 0 };
        for i in 0..messages {
            q.send(format!("message {i}")).unwrap();
        }
        let consumer = settings.apply(Consumer::in_memory(&q)).build().unwrap();
        let minute = async {
            while consumer.stats().acked < messages {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let under_way = consumer.stats().reserved.div_ceil(10);
            let before = q.requests().requests(Action::ReceiveMessage);
            tokio::time::sleep(Duration::from_secs(60)).await;
            let sent = q.requests().requests(Action::ReceiveMessage) - before;
            (sent, under_way)
        };
        tokio::select! {
            receives = minute => receives,
            end = consumer.run(|d: Delivery| d.ack()) => panic!("the run ended: {end:?}"),
        }
    })
}

fn quiet() {
    println!("W4  MemoryQueue, requests 20 ms, paused clock: receives in a quiet minute");
    for settings in [Settings::Default, Settings::Slots200] {
        let (idle, _) = quiet_minute(settings, false);
        let (after, under_way) = quiet_minute(settings, true);
        println!(
            "    {}: {idle} sent on an empty queue; after a burst of 2,000: {under_way} under \
             way at its last ack, each answered empty, then {after} sent in the minute",
            settings.label(),
        );
    }
}

fn main() {
    let wants = wanted();
    if wants("memory") {
        memory();
    }
    if wants("idempotency") {
        idempotency();
    }
    if wants("quiet") {
        quiet();
    }
    if wants("server") {
        match std::env::var("SQS_TEST_ENDPOINT") {
            Ok(endpoint) => server(&endpoint),
            Err(_) => println!("W5 server: skipped (run scripts/round-trip-bench.sh)"),
        }
    }
}
