//! The soak: worker processes consuming one queue of the test server through a
//! fault-injecting proxy, while a producer sends at a steady rate and, every few seconds, a
//! worker is killed (SIGKILL) or stopped (SIGTERM, then started again), the proxy fails
//! every call for a while (an outage), or holds every answer (a delay storm). At the end it
//! checks that nothing was lost (every message sent was handled, the queue is empty), that
//! no ack returned `Ok` for a message another worker received before that ack returned (a
//! stale ack), and that a worker running the whole time kept its heap flat: the least it held
//! in each minute within 10 % of the least in its first minute after a 60 s warm-up (its
//! resident size is reported too).
//!
//! With `SOAK_IDEMPOTENCY=dynamodb` (feature `dynamodb`; `scripts/soak.sh --idempotency`) the
//! workers share a `DynamoDbStore` on the test command's DynamoDB, and each handler makes its
//! effect (prints it) just before its ack, unless its delivery is lost by then. The soak then
//! also reports the effects made twice, each explained by a worker killed between its effect
//! and its ack (whose done mark would have come next) or not, and the DynamoDB requests per
//! message; it fails on an effect made twice that a kill does not explain.
//!
//! `scripts/soak.sh [--idempotency] [SECONDS]` runs it on both test servers; one server:
//! `SOAK_SECS=600 scripts/with-sqs-server.sh cargo bench --bench soak`. Exits non-zero on a
//! lost message, a stale `Ok`, a queue left with messages or a heap that grew. Settings: `SOAK_SECS` (600),
//! `SOAK_WORKERS` (4), `SOAK_RATE` (messages per second, 30), `SOAK_IDEMPOTENCY`.

mod common;

#[path = "../tests/common/faults.rs"]
#[allow(dead_code, unreachable_pub)]
mod faults;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use faults::{Fault, FaultProxy, Faults};
use sqs_consumer::{BoxError, Consumer, Delivery};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::{sleep, Instant};

/// The queue's visibility timeout, seconds: short, so that every fault meets a deadline.
const T: u64 = 3;
/// How often a chaos event comes.
const EVERY: Duration = Duration::from_secs(12);
/// How long an outage lasts: longer than the visibility timeout.
const OUTAGE: Duration = Duration::from_secs(8);
/// A delay storm: every answer held this long, for this long.
const STORM: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(1));
/// Memory is read after this warm-up: one round of every chaos event and then some (the
/// first storm comes at 48 s).
const WARM_UP: Duration = Duration::from_secs(60);
/// How far a long-lived worker's heap floor (the least it held in a minute) may rise above
/// its first minute's after the warm-up and still count as flat. The floor, not the resident
/// size: the allocator keeps the high-water mark of every outage's and storm's backlog, so
/// the resident size steps up with the largest backlog yet, while a leak raises the floor.
const MEMORY_GROWTH_PERCENT: u64 = 10;

#[global_allocator]
static ALLOC: common::CountingAlloc = common::CountingAlloc;

/// Every SQS call a worker makes.
const ACTIONS: &[&str] = &[
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "GetQueueAttributes",
];

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if args.first().map(String::as_str) == Some("worker") {
        runtime.block_on(worker(
            &args[1],
            &args[2],
            &args[3],
            args.get(4).map(String::as_str),
        ));
        return;
    }
    let Ok(endpoint) = std::env::var("SQS_TEST_ENDPOINT") else {
        eprintln!("soak: needs a test server (scripts/soak.sh starts both in turn)");
        std::process::exit(2);
    };
    let clean = runtime.block_on(coordinate(&endpoint));
    std::process::exit(if clean { 0 } else { 1 });
}

/// Milliseconds since the Unix epoch: the one clock the processes share.
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---- a worker ----

/// One worker process: consumes through the proxy until SIGTERM, printing a line per
/// delivery once its ack returned (`D id body receive_count request_ms done_ms outcome`),
/// and its resident memory and live heap every 5 s (`M id rss_kib heap_kib`). With an idempotency table (`table`),
/// it records in it, prints its effect before each ack (`E id body`) and a line per store
/// call (`R id call`).
async fn worker(endpoint: &str, url: &str, id: &str, table: Option<&str>) {
    let builder = Consumer::builder(common::plain_client(endpoint), url)
        .visibility_timeout(Duration::from_secs(T))
        .wait_time(Duration::from_secs(1))
        .shutdown_timeout(Duration::from_secs(5));
    let effects = table.is_some();
    #[cfg(feature = "dynamodb")]
    let builder = match table {
        Some(table) => builder.idempotency(idempotent::Printing::new(id, table)),
        None => builder,
    };
    #[cfg(not(feature = "dynamodb"))]
    assert!(table.is_none(), "SOAK_IDEMPOTENCY needs feature dynamodb");
    let consumer = builder.build().expect("a consumer");
    let me = id.to_owned();
    let handler = move |d: Delivery| {
        let id = me.clone();
        async move {
            let (body, count) = (d.body().to_owned(), d.receive_count());
            println!("H {id} {body} {count}");
            // The request's instant on the shared clock: the receive began no earlier.
            let request_ms = wall_ms().saturating_sub(d.received_at().elapsed().as_millis() as u64);
            let answered_ms = wall_ms();
            // 0 to 4 s of work, from the body: some hold the message past its timeout.
            let work = body
                .bytes()
                .fold(7u64, |h, b| h.wrapping_mul(31) ^ u64::from(b))
                % 4000;
            sleep(Duration::from_millis(work)).await;
            let deadline_ms = wall_ms()
                + d.deadline()
                    .saturating_duration_since(Instant::now())
                    .as_millis() as u64;
            if effects {
                // The effect, unless the lease was lost meanwhile (the guide's advice): the
                // message's next receive makes it then.
                if d.is_lost() {
                    println!("X {id} {body} {count}");
                    return Ok(());
                }
                println!("E {id} {body}");
            }
            let ack_ms = wall_ms();
            let outcome = match d.ack().await {
                Ok(()) => "ok",
                Err(err) if err.is_lost() => "lost",
                Err(_) => "failed",
            };
            println!("D {id} {body} {count} {request_ms} {} {outcome} {answered_ms} {ack_ms} {deadline_ms}", wall_ms());
            Ok::<(), BoxError>(())
        }
    };
    let memory = {
        let id = id.to_owned();
        tokio::spawn(async move {
            loop {
                println!("M {id} {} {}", rss_kib(), common::live_bytes() / 1024);
                sleep(Duration::from_secs(5)).await;
            }
        })
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    let stopped = async move {
        term.recv().await;
    };
    let result = consumer.run_until(handler, stopped).await;
    memory.abort();
    println!("S {id} {:?} {result:?}", consumer.stats());
}

/// This process's resident memory, KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

// ---- the coordinator ----

/// What the workers printed, in order.
type Lines = Arc<Mutex<Vec<String>>>;

/// A running worker process and the lines it prints.
struct Worker {
    id: String,
    child: Child,
}

fn start_worker(id: String, proxy: &str, url: &str, table: Option<&str>, lines: &Lines) -> Worker {
    let exe = std::env::current_exe().expect("this bench's path");
    let mut child = Command::new(exe)
        .args(["worker", proxy, url, &id])
        .args(table)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("a worker process");
    let stdout = child.stdout.take().expect("its stdout");
    let lines = lines.clone();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            lines.lock().unwrap().push(line);
        }
    });
    Worker { id, child }
}

/// Sends SIGTERM to `worker` (by its PID) and waits for it to end, at most 30 s.
async fn stop_worker(worker: &mut Worker) {
    if let Some(pid) = worker.child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    if tokio::time::timeout(Duration::from_secs(30), worker.child.wait())
        .await
        .is_err()
    {
        eprintln!(
            "soak: worker {} did not stop within 30 s; killed",
            worker.id
        );
        let _ = worker.child.kill().await;
    }
}

/// The chaos events, in turn.
#[derive(Debug, Default)]
struct Chaos {
    kills: u64,
    terms: u64,
    outages: u64,
    storms: u64,
}

async fn coordinate(endpoint: &str) -> bool {
    let secs = env_u64("SOAK_SECS", 600);
    let workers_n = env_u64("SOAK_WORKERS", 4).max(2) as usize;
    let rate = env_u64("SOAK_RATE", 30).max(1);
    let server = std::env::var("SQS_TEST_SERVER").unwrap_or_else(|_| "server".into());
    let direct = common::plain_client(endpoint);
    let name = format!("soak-{}-{}", std::process::id(), wall_ms());
    let url = direct
        .create_queue()
        .queue_name(&name)
        .attributes(QueueAttributeName::VisibilityTimeout, T.to_string())
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .expect("a queue URL")
        .to_owned();
    let proxy = FaultProxy::start(
        endpoint,
        Faults {
            internal_error: 0.05,
            throttle: 0.0,
            reset_before: 0.01,
            drop_after: 0.01,
            delay: 0.03,
            delay_for: Duration::from_secs(1),
            actions: ACTIONS,
        },
        0x50a4,
    )
    .await;
    let table = idempotency_table().await;
    let table = table.as_deref();
    let lines = Lines::default();
    let mut workers: Vec<Worker> = (0..workers_n)
        .map(|i| start_worker(format!("w{i}"), &proxy.endpoint, &url, table, &lines))
        .collect();
    let started = Instant::now();
    println!(
        "soak ({server}): {secs} s, {workers_n} workers, {rate} messages/s, T = {T} s; chaos \
         every {EVERY:?}: SIGKILL, an outage of {OUTAGE:?}, SIGTERM, a storm of {:?} holding \
         every answer {:?}",
        STORM.0, STORM.1
    );

    let sent = Arc::new(Mutex::new(Vec::<String>::new()));
    let producing = {
        let (direct, url, sent) = (direct.clone(), url.clone(), sent.clone());
        let until = started + Duration::from_secs(secs);
        tokio::spawn(produce(direct, url, sent, rate, until))
    };

    let mut chaos = Chaos::default();
    let mut killed = BTreeSet::new();
    let mut generation = 1;
    let mut turn = 0u64;
    while started.elapsed() + EVERY <= Duration::from_secs(secs) {
        sleep(EVERY).await;
        // Worker 0 runs the whole time: its memory is the one watched.
        let victim = 1 + (turn / 4) as usize % (workers_n - 1);
        match turn % 4 {
            0 => {
                let _ = workers[victim].child.kill().await;
                killed.insert(workers[victim].id.clone());
                chaos.kills += 1;
            }
            1 => {
                proxy.outage(ACTIONS, OUTAGE);
                chaos.outages += 1;
            }
            2 => {
                stop_worker(&mut workers[victim]).await;
                chaos.terms += 1;
            }
            _ => {
                proxy.storm(ACTIONS, STORM.0, STORM.1);
                chaos.storms += 1;
            }
        }
        if matches!(turn % 4, 0 | 2) {
            let id = format!("w{victim}.{generation}");
            generation += 1;
            workers[victim] = start_worker(id, &proxy.endpoint, &url, table, &lines);
        }
        turn += 1;
    }
    producing.await.expect("the producer");
    let production_ended = started.elapsed();

    // The workers finish what is queued, then stop.
    let drained = wait_until_empty(&direct, &url, Duration::from_secs(120)).await;
    for worker in &mut workers {
        stop_worker(worker).await;
    }
    sleep(Duration::from_millis(500)).await;
    // What is left (a lease lapsing as the workers stopped) is taken directly, and counted.
    let leftovers = take_leftovers(&direct, &url).await;
    let (visible, hidden) = common::counts(&direct, &url).await;

    let lines = lines.lock().unwrap().clone();
    if let Ok(path) = std::env::var("SOAK_KEEP_LINES") {
        let _ = std::fs::write(path, lines.join("\n"));
    }
    let sent = sent.lock().unwrap().clone();
    let report = Report::new(&lines, &sent, &leftovers);
    let log = proxy.log();
    println!(
        "soak ({server}): produced for {production_ended:.0?}; {} sent, {} handled, {} lost; \
         {} deliveries ({} acked ok, {} ack lost, {} ack failed), {} messages handled more \
         than once: {}; {} left over after the stop (taken directly); queue at the end: {} \
         visible, {} hidden; drained: {drained}",
        sent.len(),
        report.handled,
        report.lost.len(),
        report.deliveries,
        report.outcomes.get("ok").copied().unwrap_or(0),
        report.outcomes.get("lost").copied().unwrap_or(0),
        report.outcomes.get("failed").copied().unwrap_or(0),
        report.repeated,
        report.repeats_why(),
        leftovers.len(),
        visible,
        hidden,
    );
    println!(
        "soak ({server}): stale Ok {} (the message received again, at a higher receive count \
         and a timeout or more after the Ok's receive, before the Ok returned); server \
         duplicates {} (handed out again within a timeout of the receive, while held); Ok \
         acks redelivered afterwards {}",
        report.stale.len(),
        report.duplicates,
        report.after_ok.len(),
    );
    for stale in report.stale.iter().take(5) {
        println!("  stale: {stale}");
    }
    println!(
        "soak ({server}): chaos {chaos:?}; proxy requests {}, injected 500 {}, reset {}, \
         dropped after {}, delayed {}",
        log.requests.values().sum::<u64>(),
        log.count(Fault::InternalError),
        log.count(Fault::ResetBefore),
        log.count(Fault::DropAfter),
        log.count(Fault::Delay),
    );
    let effects_clean = match table {
        Some(table) => report_effects(&server, table, &lines, &killed, sent.len()),
        None => true,
    };
    let (memory, flat) = report.memory("w0");
    println!(
        "soak ({server}): worker w0's memory (every 5 s after {WARM_UP:?}): {memory}; heap \
         flat (no floor {MEMORY_GROWTH_PERCENT} % above the first): {flat}"
    );
    report.lost.is_empty()
        && report.stale.is_empty()
        && visible + hidden == 0
        && flat
        && effects_clean
}

/// With `SOAK_IDEMPOTENCY=dynamodb`: a new table on the test command's DynamoDB, for the
/// workers' `DynamoDbStore`.
async fn idempotency_table() -> Option<String> {
    match std::env::var("SOAK_IDEMPOTENCY").ok()?.as_str() {
        #[cfg(feature = "dynamodb")]
        "dynamodb" => {
            let table = format!("soak-{}-{}", std::process::id(), wall_ms());
            let client = idempotent::client();
            sqs_consumer::idempotency::DynamoDbStore::create_table(&client, &table)
                .await
                .expect("the idempotency table");
            Some(table)
        }
        other => panic!("SOAK_IDEMPOTENCY={other}: only `dynamodb` (with feature dynamodb)"),
    }
}

/// The effects the handlers made (`E` lines), per message: those made twice, each explained
/// by a kill between the earlier effect and its ack or not; and the store's requests per
/// message sent. Returns whether every double effect is explained.
fn report_effects(
    server: &str,
    table: &str,
    lines: &[String],
    killed: &BTreeSet<String>,
    sent: usize,
) -> bool {
    let mut effects: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut acked: BTreeSet<(&str, &str)> = BTreeSet::new();
    let (mut requests, mut skipped_lost) = (BTreeMap::<&str, u64>::new(), 0u64);
    for line in lines {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["E", worker, body] => effects.entry(body).or_default().push(worker),
            ["D", worker, body, ..] => {
                acked.insert((worker, body));
            }
            ["R", _, call] => *requests.entry(call).or_insert(0) += 1,
            ["X", ..] => skipped_lost += 1,
            _ => {}
        }
    }
    let (mut by_kill, mut unexplained) = (0u64, Vec::new());
    for (body, workers) in &effects {
        for (i, later) in workers.iter().enumerate().skip(1) {
            let earlier = workers[i - 1];
            if killed.contains(earlier) && !acked.contains(&(earlier, *body)) {
                by_kill += 1;
            } else {
                unexplained.push(format!("{body}: by {earlier}, then by {later}"));
            }
        }
    }
    let made = effects.len();
    let total: u64 = requests.values().sum();
    println!(
        "soak ({server}): idempotency (DynamoDbStore, table {table}): {made} messages' effects \
         made, {} made twice or more: {by_kill} after a kill between the effect and its ack, \
         {} not explained; {skipped_lost} effects skipped because the lease was lost; {total} \
         store requests, {:.2} per message sent ({})",
        by_kill + unexplained.len() as u64,
        unexplained.len(),
        total as f64 / sent.max(1) as f64,
        requests
            .iter()
            .map(|(call, n)| format!("{call} {:.2}", *n as f64 / sent.max(1) as f64))
            .collect::<Vec<_>>()
            .join(", "),
    );
    for line in unexplained.iter().take(10) {
        println!("  twice: {line}");
    }
    unexplained.is_empty()
}

/// The workers' idempotency store: `DynamoDbStore` on the test command's DynamoDB, printing
/// a line per call (`R id call`) for the requests per message.
#[cfg(feature = "dynamodb")]
mod idempotent {
    use std::time::Duration;

    use sqs_consumer::idempotency::{
        Begun, DynamoDbStore, Hold, Key, Owner, Ownership, Store, StoreFuture,
    };

    /// A client for `DYNAMODB_TEST_ENDPOINT` (the test command's DynamoDB).
    pub fn client() -> aws_sdk_dynamodb::Client {
        let endpoint = std::env::var("DYNAMODB_TEST_ENDPOINT")
            .expect("SOAK_IDEMPOTENCY needs DYNAMODB_TEST_ENDPOINT (scripts/soak.sh sets it)");
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "soak",
            ))
            .endpoint_url(endpoint)
            .build();
        aws_sdk_dynamodb::Client::from_conf(config)
    }

    #[derive(Debug)]
    pub struct Printing {
        id: String,
        store: DynamoDbStore,
    }

    impl Printing {
        pub fn new(id: &str, table: &str) -> Self {
            Self {
                id: id.to_owned(),
                store: DynamoDbStore::new(client(), table),
            }
        }

        fn note(&self, call: &str) {
            println!("R {} {call}", self.id);
        }
    }

    impl Store for Printing {
        fn begin<'a>(
            &'a self,
            key: &'a Key,
            owner: &'a Owner,
            hold: Hold,
        ) -> StoreFuture<'a, Begun> {
            self.note("begin");
            self.store.begin(key, owner, hold)
        }

        fn extend<'a>(
            &'a self,
            key: &'a Key,
            owner: &'a Owner,
            hold: Hold,
        ) -> StoreFuture<'a, Ownership> {
            self.note("extend");
            self.store.extend(key, owner, hold)
        }

        fn complete<'a>(
            &'a self,
            key: &'a Key,
            owner: &'a Owner,
            keep_for: Duration,
        ) -> StoreFuture<'a, Ownership> {
            self.note("complete");
            self.store.complete(key, owner, keep_for)
        }

        fn abandon<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> StoreFuture<'a, ()> {
            self.note("abandon");
            self.store.abandon(key, owner)
        }
    }
}

/// Sends `rate` messages a second (batches of up to 10, every 100 ms) until `until`.
async fn produce(
    client: aws_sdk_sqs::Client,
    url: String,
    sent: Arc<Mutex<Vec<String>>>,
    rate: u64,
    until: Instant,
) {
    let mut seq = 0u64;
    let mut due = 0f64;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while Instant::now() < until {
        tick.tick().await;
        due += rate as f64 / 10.0;
        while due >= 1.0 {
            let n = (due as u64).min(10);
            due -= n as f64;
            let bodies: Vec<String> = (0..n).map(|i| format!("m{:07}", seq + i)).collect();
            seq += n;
            let entries = bodies.iter().enumerate().map(|(i, body)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .build()
                    .expect("an entry")
            });
            match client
                .send_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries.collect()))
                .send()
                .await
            {
                Ok(out) if out.failed().is_empty() => sent.lock().unwrap().extend(bodies),
                Ok(out) => eprintln!("soak: {} sends failed", out.failed().len()),
                Err(err) => eprintln!("soak: a send failed: {err}"),
            }
        }
    }
}

async fn wait_until_empty(client: &aws_sdk_sqs::Client, url: &str, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if common::counts(client, url).await == (0, 0) {
            return true;
        }
        sleep(Duration::from_millis(500)).await;
    }
    false
}

/// Receives and deletes what is still in the queue (messages whose leases lapsed as their
/// workers stopped come back within a timeout), for at most 30 s: the bodies taken.
async fn take_leftovers(client: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let start = Instant::now();
    let mut taken = Vec::new();
    while start.elapsed() < Duration::from_secs(30) {
        let brought = common::receive_and_delete(client, url).await;
        taken.extend(
            brought
                .iter()
                .map(|m| m.body().unwrap_or_default().to_owned()),
        );
        if brought.is_empty() && common::counts(client, url).await == (0, 0) {
            break;
        }
    }
    taken
}

/// One delivery, as its worker printed it.
#[derive(Debug, Clone)]
struct Handled {
    worker: String,
    count: u32,
    request_ms: u64,
    done_ms: u64,
    /// When its handler started: the receive's answer had arrived.
    answered_ms: u64,
    outcome: String,
}

/// What the lines say.
struct Report {
    deliveries: usize,
    handled: usize,
    lost: Vec<String>,
    outcomes: BTreeMap<String, u64>,
    repeated: usize,
    /// Per kind of explanation, how many later deliveries it explains.
    why: BTreeMap<&'static str, u64>,
    stale: Vec<String>,
    duplicates: u64,
    after_ok: Vec<String>,
    /// Each worker's samples: resident KiB, heap KiB.
    memory: BTreeMap<String, Vec<(u64, u64)>>,
}

impl Report {
    fn new(lines: &[String], sent: &[String], leftovers: &[String]) -> Self {
        let mut by_body: BTreeMap<String, Vec<Handled>> = BTreeMap::new();
        let mut outcomes = BTreeMap::new();
        let mut memory: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
        // Messages a handler started on: a worker killed before its ack returned printed
        // no `D` line for them, but they were not lost.
        let mut started: BTreeSet<String> = BTreeSet::new();
        for line in lines {
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["D", worker, body, count, request_ms, done_ms, outcome, answered_ms, ..] => {
                    *outcomes.entry((*outcome).to_owned()).or_insert(0) += 1;
                    by_body
                        .entry((*body).to_owned())
                        .or_default()
                        .push(Handled {
                            worker: (*worker).to_owned(),
                            count: count.parse().unwrap_or(0),
                            request_ms: request_ms.parse().unwrap_or(0),
                            done_ms: done_ms.parse().unwrap_or(0),
                            answered_ms: answered_ms.parse().unwrap_or(0),
                            outcome: (*outcome).to_owned(),
                        });
                }
                ["H", _, body, _] => {
                    started.insert((*body).to_owned());
                }
                ["M", worker, rss, heap] => memory
                    .entry((*worker).to_owned())
                    .or_default()
                    .push((rss.parse().unwrap_or(0), heap.parse().unwrap_or(0))),
                _ => {}
            }
        }
        let seen: BTreeSet<&str> = by_body
            .keys()
            .chain(started.iter())
            .map(String::as_str)
            .chain(leftovers.iter().map(String::as_str))
            .collect();
        let lost = sent
            .iter()
            .filter(|b| !seen.contains(b.as_str()))
            .cloned()
            .collect();
        let mut report = Report {
            deliveries: by_body.values().map(Vec::len).sum(),
            handled: started.len(),
            lost,
            outcomes,
            repeated: by_body.values().filter(|d| d.len() > 1).count(),
            why: BTreeMap::new(),
            stale: Vec::new(),
            duplicates: 0,
            after_ok: Vec::new(),
            memory,
        };
        for (body, deliveries) in &mut by_body {
            deliveries.sort_by_key(|d| (d.count, d.request_ms));
            report.judge(body, deliveries);
        }
        report
    }

    /// Each Ok ack against every other delivery of the same message.
    fn judge(&mut self, body: &str, deliveries: &[Handled]) {
        for (i, a) in deliveries.iter().enumerate() {
            if i > 0 {
                let before = &deliveries[i - 1];
                let why = match before.outcome.as_str() {
                    _ if a.answered_ms < before.request_ms + T * 1000 => {
                        "the server handed it out twice"
                    }
                    "lost" => "the ack before said lost",
                    "failed" => "the ack before failed",
                    _ => "the ack before said ok",
                };
                *self.why.entry(why).or_insert(0) += 1;
            }
            if i == 0 && a.count > 1 {
                // A receive before it printed nothing: a worker killed or stopped with it,
                // or an answer the proxy dropped.
                *self
                    .why
                    .entry("an earlier receive ended unhandled")
                    .or_insert(0) += 1;
            }
            if a.outcome != "ok" {
                continue;
            }
            for b in deliveries.iter().filter(|b| !std::ptr::eq(*b, a)) {
                // Handed out before A's lease could have lapsed (a timeout after A's request):
                // the server gave a message held to two receives (moto's receives are not
                // atomic; SQS's standard queues may do it too, rarely). No lease can help.
                let while_held = b.answered_ms < a.request_ms + T * 1000;
                if b.count == a.count || (b.count > a.count && while_held) {
                    self.duplicates += 1;
                } else if b.count > a.count {
                    let line =
                        format!(
                        "{body}: {} acked ok at {} (receive {}, requested at {}); {} received it \
                         (receive {}) by a request at {}, its ack {}",
                        a.worker, a.done_ms, a.count, a.request_ms, b.worker, b.count,
                        b.request_ms, b.outcome
                    );
                    if b.request_ms < a.done_ms {
                        self.stale.push(line);
                    } else {
                        self.after_ok.push(line);
                    }
                }
            }
        }
    }

    fn repeats_why(&self) -> String {
        let parts: Vec<String> = self.why.iter().map(|(w, n)| format!("{n} {w}")).collect();
        parts.join(", ")
    }

    /// `worker`'s memory after the warm-up: its heap's floor each minute and its resident
    /// size (first, most, and one sample a minute); and whether the heap stayed flat, no
    /// minute's floor more than [`MEMORY_GROWTH_PERCENT`] above the first minute's.
    fn memory(&self, worker: &str) -> (String, bool) {
        let Some(samples) = self.memory.get(worker) else {
            return ("no samples".into(), false);
        };
        let skip = (WARM_UP.as_secs() / 5) as usize;
        let kept = samples.get(skip..).unwrap_or_default();
        // Whole minutes only: a last, short one has no floor to speak of.
        let floors: Vec<u64> = kept
            .chunks_exact(12)
            .filter_map(|minute| minute.iter().map(|&(_, heap)| heap).min())
            .collect();
        let (Some(&first_floor), Some(&first_rss)) = (floors.first(), kept.first().map(|(r, _)| r))
        else {
            return ("too few samples".into(), false);
        };
        let highest_floor = floors.iter().copied().max().unwrap_or(first_floor);
        let most_rss = kept.iter().map(|&(rss, _)| rss).max().unwrap_or(first_rss);
        let show = |v: &mut dyn Iterator<Item = u64>| {
            v.map(|n| n.to_string()).collect::<Vec<_>>().join(" ")
        };
        let text = format!(
            "heap floor each minute {} KiB; resident {first_rss} KiB at the start, {most_rss} at \
             most, each minute {} ({} samples)",
            show(&mut floors.iter().copied()),
            show(&mut kept.iter().step_by(12).map(|&(rss, _)| rss)),
            kept.len()
        );
        let flat = highest_floor * 100 <= first_floor * (100 + MEMORY_GROWTH_PERCENT);
        (text, flat)
    }
}
