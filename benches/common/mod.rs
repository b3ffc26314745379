//! What the server benches share: a client of the test server (whose requests may be counted),
//! a new queue per run, sending in batches, and how many runs a figure takes.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// Counts requests per operation, retries included.
#[derive(Debug, Default, Clone)]
pub struct CountRequests(pub Arc<Mutex<BTreeMap<String, u64>>>);

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
        count_operation(&self.0, cfg);
        Ok(())
    }
}

/// Counts answers per operation (whatever their status): beside [`CountRequests`], the
/// requests still waiting for theirs.
#[derive(Debug, Default, Clone)]
pub struct CountAnswers(pub Arc<Mutex<BTreeMap<String, u64>>>);

impl Intercept for CountAnswers {
    fn name(&self) -> &'static str {
        "CountAnswers"
    }

    fn read_before_deserialization(
        &self,
        _: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        count_operation(&self.0, cfg);
        Ok(())
    }
}

/// One more for the operation whose request `cfg` carries.
fn count_operation(counts: &Mutex<BTreeMap<String, u64>>, cfg: &ConfigBag) {
    if let Some(m) = cfg.load::<Metadata>() {
        *counts
            .lock()
            .unwrap()
            .entry(m.name().to_owned())
            .or_default() += 1;
    }
}

/// Sends messages `first..first + 10` in one batch.
pub async fn send_ten(client: &aws_sdk_sqs::Client, url: &str, first: usize) {
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

/// The settings of a client of the test server at `endpoint` (test credentials, no retries
/// changed), to add to or build.
pub fn server_config(endpoint: &str) -> aws_sdk_sqs::config::Builder {
    aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "bench",
        ))
        .endpoint_url(endpoint)
}

/// A client of the test server at `endpoint`.
pub fn plain_client(endpoint: &str) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(server_config(endpoint).build())
}

/// A client of the test server at `endpoint` whose requests `counter` counts.
pub fn server_client(endpoint: &str, counter: &CountRequests) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(server_config(endpoint).interceptor(counter.clone()).build())
}

/// Queues created so far: each run has its own.
static QUEUES: AtomicUsize = AtomicUsize::new(0);

/// A new queue on the test server for one run of `bench`; its URL.
pub async fn new_queue(client: &aws_sdk_sqs::Client, bench: &str) -> String {
    let name = format!(
        "bench-{bench}-{}-{}",
        std::process::id(),
        QUEUES.fetch_add(1, SeqCst)
    );
    let created = client.create_queue().queue_name(name).send().await;
    created.unwrap().queue_url.unwrap()
}

/// Runs per figure of the server benches: 3, or `BENCH_RUNS` (1 to profile one run).
pub fn server_runs() -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .clamp(1, 10)
}

/// The test server the benches run against, as the script that started it names it.
pub fn server_name() -> String {
    std::env::var("SQS_TEST_SERVER").unwrap_or_else(|_| "unnamed".to_owned())
}

/// (visible, hidden) as the queue reports them.
pub async fn counts(client: &aws_sdk_sqs::Client, url: &str) -> (u64, u64) {
    use aws_sdk_sqs::types::QueueAttributeName;
    let out = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("GetQueueAttributes");
    let get = |name| {
        out.attributes()
            .and_then(|a| a.get(&name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    )
}

/// One receive of up to 10 messages (a 1 s long poll, their receive counts asked for), each
/// deleted at once: what it brought.
pub async fn receive_and_delete(
    client: &aws_sdk_sqs::Client,
    url: &str,
) -> Vec<aws_sdk_sqs::types::Message> {
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    let out = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .expect("ReceiveMessage");
    for m in out.messages() {
        client
            .delete_message()
            .queue_url(url)
            .receipt_handle(m.receipt_handle().unwrap_or_default())
            .send()
            .await
            .expect("DeleteMessage");
    }
    out.messages.unwrap_or_default()
}

/// CPU time (user + system) from a /proc `stat` file.
pub fn cpu_time_in(path: &str) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports these in USER_HZ, 100 per second on every mainstream build.
    Some(std::time::Duration::from_millis(ticks * 10))
}

/// CPU time (user + system) the test server has used so far, when the script that started it
/// exported its PID (`SQS_TEST_SERVER_PID`).
pub fn server_cpu_time() -> Option<std::time::Duration> {
    let pid = std::env::var("SQS_TEST_SERVER_PID").ok()?;
    cpu_time_in(&format!("/proc/{pid}/stat"))
}

/// A runtime of 2 worker threads, as `#[tokio::main]` gives on these 2 cores.
pub fn two_threads() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Whether the bench named `name` is to run: every one when the command line names none.
pub fn wanted() -> impl Fn(&str) -> bool {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    move |name| args.is_empty() || args.iter().any(|a| a == name)
}

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Counts the bytes and blocks allocated and not yet freed: what a bench holds, without the
/// allocator's own overhead and fragmentation (which a resident size also shows). A bench
/// that reads it installs it:
/// `#[global_allocator] static ALLOC: common::CountingAlloc = common::CountingAlloc;`
pub struct CountingAlloc;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static LIVE_ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only add
// and subtract the sizes they were given.
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

/// The bytes allocated and not yet freed, with [`CountingAlloc`] installed.
pub fn live_bytes() -> usize {
    LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// The blocks allocated and not yet freed, with [`CountingAlloc`] installed.
pub fn live_allocs() -> usize {
    LIVE_ALLOCS.load(std::sync::atomic::Ordering::Relaxed)
}
