//! Flow control on the test server:
//!
//! ```text
//! scripts/with-sqs-server.sh cargo bench --bench flow    # moto
//! scripts/with-localstack.sh cargo bench --bench flow    # LocalStack
//! ```
//!
//! - F1, a receive rate: 2,000 messages queued, `max_receive_rate(50.0)`, an instant-ack
//!   handler, 20 s from the first message handled: messages handled in those 20 s per second
//!   (and from the 11th message on, past the first burst), the longest time from a receive's
//!   answer arriving (seen by an interceptor on the client) to the handler's first line, and
//!   requests per message by action. Medians of `BENCH_RUNS` runs (3 by default).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use sqs_consumer::{Consumer, Delivery};
use tokio::time::Instant;

mod common;

fn main() {
    let Ok(endpoint) = std::env::var("SQS_TEST_ENDPOINT") else {
        println!("flow: skipped (run it under scripts/with-sqs-server.sh)");
        return;
    };
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
        .clamp(1, 10);
    f1(&endpoint, runs);
}

/// Requests per operation, and when each message's receive answer arrived.
#[derive(Debug, Default, Clone)]
struct Wire {
    requests: Arc<Mutex<BTreeMap<String, u64>>>,
    arrived: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Intercept for Wire {
    fn name(&self) -> &'static str {
        "Wire"
    }

    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(m) = cfg.load::<Metadata>() {
            *self
                .requests
                .lock()
                .unwrap()
                .entry(m.name().to_owned())
                .or_default() += 1;
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        ctx: &AfterDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let now = Instant::now();
        if let Ok(out) = ctx.output_or_error() {
            if let Some(out) =
                out.downcast_ref::<aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput>()
            {
                let mut arrived = self.arrived.lock().unwrap();
                for m in out.messages() {
                    arrived.insert(m.message_id().unwrap_or_default().to_owned(), now);
                }
            }
        }
        Ok(())
    }
}

fn client(endpoint: &str, wire: Option<&Wire>) -> aws_sdk_sqs::Client {
    let mut config = common::server_config(endpoint);
    if let Some(wire) = wire {
        config = config.interceptor(wire.clone());
    }
    aws_sdk_sqs::Client::from_conf(config.build())
}

static QUEUES: AtomicUsize = AtomicUsize::new(0);

async fn queue_with(setup: &aws_sdk_sqs::Client, messages: usize) -> String {
    let name = format!(
        "bench-flow-{}-{}",
        std::process::id(),
        QUEUES.fetch_add(1, SeqCst)
    );
    let url = setup
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    for first in (0..messages).step_by(10) {
        let mut call = setup.send_message_batch().queue_url(&url);
        for i in first..(first + 10).min(messages) {
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
    url
}

/// One F1 run's figures.
struct F1Run {
    per_second: f64,
    steady_per_second: f64,
    longest_wait: Duration,
    requests: BTreeMap<String, f64>,
}

const F1_QUEUED: usize = 2_000;
const F1_RATE: f64 = 50.0;
const F1_WINDOW: Duration = Duration::from_secs(20);

fn f1_run(endpoint: &str) -> F1Run {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let setup = client(endpoint, None);
        let url = queue_with(&setup, F1_QUEUED).await;
        let wire = Wire::default();
        let consumer = Consumer::builder(client(endpoint, Some(&wire)), url.clone())
            .visibility_timeout(Duration::from_secs(30))
            .max_receive_rate(F1_RATE)
            .build()
            .unwrap();
        let handled: Arc<Mutex<Vec<(Instant, Duration)>>> = Arc::default();
        let first = Arc::new(tokio::sync::Notify::new());
        let handler = {
            let (handled, first, arrived) = (handled.clone(), first.clone(), wire.arrived.clone());
            move |d: Delivery| {
                let (handled, first, arrived) = (handled.clone(), first.clone(), arrived.clone());
                async move {
                    let now = Instant::now();
                    let came = arrived.lock().unwrap().get(d.message_id()).copied();
                    let wait = came.map_or(Duration::MAX, |came| now - came);
                    let count = {
                        let mut handled = handled.lock().unwrap();
                        handled.push((now, wait));
                        handled.len()
                    };
                    if count == 1 {
                        first.notify_one();
                    }
                    d.ack().await
                }
            }
        };
        let signal = async {
            first.notified().await;
            tokio::time::sleep(F1_WINDOW).await;
        };
        consumer.run_until(handler, signal).await.unwrap();
        let handled = handled.lock().unwrap().clone();
        let start = handled[0].0;
        let within: Vec<_> = handled
            .iter()
            .filter(|h| h.0 - start <= F1_WINDOW)
            .collect();
        let after_burst = &within[10..];
        let steady = (after_burst.len() - 1) as f64
            / (after_burst[after_burst.len() - 1].0 - after_burst[0].0).as_secs_f64();
        let requests = wire.requests.lock().unwrap().clone();
        let _ = setup.delete_queue().queue_url(&url).send().await;
        F1Run {
            per_second: within.len() as f64 / F1_WINDOW.as_secs_f64(),
            steady_per_second: steady,
            longest_wait: handled.iter().map(|h| h.1).max().unwrap_or_default(),
            requests: requests
                .into_iter()
                .filter(|(op, _)| op != "GetQueueUrl" && op != "GetQueueAttributes")
                .map(|(op, n)| (op, n as f64 / handled.len() as f64))
                .collect(),
        }
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn f1(endpoint: &str, runs: usize) {
    let server = std::env::var("SQS_TEST_SERVER").unwrap_or_else(|_| "unnamed".to_owned());
    println!(
        "F1  test server ({server}), {F1_QUEUED} messages queued, max_receive_rate({F1_RATE}), \
         instant ack, {}s from the first message (medians of {runs} runs):",
        F1_WINDOW.as_secs()
    );
    let runs: Vec<F1Run> = (0..runs).map(|_| f1_run(endpoint)).collect();
    let list = |f: &dyn Fn(&F1Run) -> f64, precision: usize| {
        let values: Vec<f64> = runs.iter().map(f).collect();
        let each = values
            .iter()
            .map(|v| format!("{v:.precision$}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!("{:.precision$} (runs {each})", median(values))
    };
    println!(
        "    messages/s over the window: {}",
        list(&|r| r.per_second, 2)
    );
    println!(
        "    messages/s past the first burst: {}",
        list(&|r| r.steady_per_second, 2)
    );
    println!(
        "    longest from a receive's answer to its handler: {} ms",
        list(&|r| r.longest_wait.as_secs_f64() * 1000.0, 1)
    );
    let ops: Vec<String> = runs[0].requests.keys().cloned().collect();
    let per_op: Vec<String> = ops
        .iter()
        .map(|op| {
            let v = list(&|r| r.requests.get(op).copied().unwrap_or(0.0), 3);
            format!("{op} {v}")
        })
        .collect();
    println!(
        "    requests per message: {} (total {})",
        per_op.join("; "),
        list(&|r| r.requests.values().sum(), 3)
    );
}
