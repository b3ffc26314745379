//! The handler model at its edges, on an SQS-compatible server: what a stop or a pause does
//! to the long polls under way, and what `AckMode::OnSuccess` does with a delivery its
//! handler dropped.
//!
//! ```text
//! scripts/with-sqs-server.sh cargo bench --bench edges     # moto
//! scripts/with-localstack.sh cargo bench --bench edges     # LocalStack
//! ```
//!
//! Each scenario prints one line of figures:
//! - stop: a consumer (wait time 5 s) is in a long poll of an empty queue (visibility 30 s)
//!   when its `run_until` signal comes; 10 messages are sent right after the signal. Then:
//!   acked by the stopping run, hidden and visible 1 s after the stop, and the receive counts
//!   the next receives see (within the wait time plus 1 s).
//! - pause: the same with `pause()` instead of the signal: handled, hidden and visible once
//!   the wait time plus 1 s has passed.
//! - stop latency: 20 stops, each with a 5 s poll under way, the signal 0.3 s to 4.1 s into it;
//!   median and worst from the signal to `run_until` returning.
//! - drop in handler: `AckMode::OnSuccess`, visibility 2 s, one message; the handler drops
//!   its delivery at once and returns `Ok` 6 s later. Handler calls, `acked`, messages left.
//! - batch drop: the same with `run_batch`, 10 messages, 3 of each batch dropped.
//! - visibility 0: whether `build()` accepts a visibility timeout of 0.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use aws_sdk_sqs::Client;
use sqs_consumer::{AckMode, Batch, Consumer, Delivery};
use tokio::time::{sleep, Instant};

mod common;

const WAIT: Duration = Duration::from_secs(5);

fn client(endpoint: &str) -> Client {
    common::plain_client(endpoint)
}

async fn new_queue(client: &Client, name: &str, visibility: u32) -> String {
    let name = format!("edges-{name}-{}", std::process::id());
    client
        .create_queue()
        .queue_name(name)
        .attributes(
            QueueAttributeName::VisibilityTimeout,
            visibility.to_string(),
        )
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .expect("a queue URL")
}

async fn send(client: &Client, url: &str, n: usize) {
    for i in 0..n {
        client
            .send_message()
            .queue_url(url)
            .message_body(format!("m{i}"))
            .send()
            .await
            .expect("SendMessage");
    }
}

/// The receive counts of every message received (and deleted) within `limit`.
async fn drain(client: &Client, url: &str, limit: Duration) -> Vec<u32> {
    let start = Instant::now();
    let mut seen = Vec::new();
    while start.elapsed() < limit {
        for m in common::receive_and_delete(client, url).await {
            let count = m
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            seen.push(count);
        }
    }
    seen.sort_unstable();
    seen
}

fn acking(
    handled: &Arc<AtomicUsize>,
) -> impl Fn(Delivery) -> futures::future::BoxFuture<'static, Result<(), sqs_consumer::Error>>
       + Send
       + Sync
       + 'static {
    let handled = handled.clone();
    move |d: Delivery| {
        handled.fetch_add(1, Ordering::SeqCst);
        Box::pin(d.ack())
    }
}

async fn stop(client: &Client) {
    let url = new_queue(client, "stop", 30).await;
    let consumer = Consumer::builder(client.clone(), url.clone())
        .wait_time(WAIT)
        .build()
        .expect("valid settings");
    let handled = Arc::new(AtomicUsize::new(0));
    let signal = sleep(Duration::from_millis(300));
    let sender = {
        let (client, url) = (client.clone(), url.clone());
        async move {
            sleep(Duration::from_millis(300)).await;
            send(&client, &url, 10).await;
        }
    };
    let (result, ()) = tokio::join!(consumer.run_until(acking(&handled), signal), sender);
    result.expect("run_until");
    sleep(Duration::from_secs(1)).await;
    let (visible, hidden) = common::counts(client, &url).await;
    let next = drain(client, &url, WAIT + Duration::from_secs(1)).await;
    println!(
        "stop:  acked by the stopping run {}, 1 s after the stop: hidden {hidden}, visible \
         {visible}; next receives within {:?}: {} messages, receive counts {next:?}",
        consumer.stats().acked,
        WAIT + Duration::from_secs(1),
        next.len(),
    );
}

async fn pause(client: &Client) {
    let url = new_queue(client, "pause", 30).await;
    let consumer = Arc::new(
        Consumer::builder(client.clone(), url.clone())
            .wait_time(WAIT)
            .build()
            .expect("valid settings"),
    );
    let handled = Arc::new(AtomicUsize::new(0));
    let running = {
        let (consumer, handler) = (consumer.clone(), acking(&handled));
        tokio::spawn(async move { consumer.run(handler).await })
    };
    sleep(Duration::from_millis(300)).await;
    consumer.pause();
    send(client, &url, 10).await;
    sleep(WAIT + Duration::from_secs(1)).await;
    let (visible, hidden) = common::counts(client, &url).await;
    println!(
        "pause: after the wait time + 1 s: handled {}, hidden {hidden}, visible {visible}",
        handled.load(Ordering::SeqCst)
    );
    running.abort();
}

async fn stop_latency(client: &Client) {
    let mut latencies = Vec::new();
    for run in 0..20u64 {
        let url = new_queue(client, &format!("latency-{run}"), 30).await;
        let consumer = Consumer::builder(client.clone(), url)
            .wait_time(WAIT)
            .build()
            .expect("valid settings");
        let into_poll = Duration::from_millis(300 + run * 200);
        let signalled = std::sync::Mutex::new(None::<Instant>);
        let signal = async {
            sleep(into_poll).await;
            *signalled.lock().unwrap() = Some(Instant::now());
        };
        consumer
            .run_until(|d: Delivery| d.ack(), signal)
            .await
            .expect("run_until");
        let at = signalled.lock().unwrap().expect("signalled");
        latencies.push(at.elapsed());
    }
    latencies.sort();
    println!(
        "stop latency with a {WAIT:?} poll under way (20 stops): median {:.3} s, worst {:.3} s",
        latencies[latencies.len() / 2].as_secs_f64(),
        latencies[latencies.len() - 1].as_secs_f64()
    );
}

async fn drop_in_handler(client: &Client) {
    let url = new_queue(client, "drop", 2).await;
    send(client, &url, 1).await;
    let consumer = Consumer::builder(client.clone(), url.clone())
        .wait_time(Duration::from_secs(1))
        .ack_mode(AckMode::OnSuccess)
        .build()
        .expect("valid settings");
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let handler = move |d: Delivery| {
        c.fetch_add(1, Ordering::SeqCst);
        drop(d);
        async {
            sleep(Duration::from_secs(6)).await;
            Ok::<(), sqs_consumer::BoxError>(())
        }
    };
    consumer
        .run_until(handler, sleep(Duration::from_secs(7)))
        .await
        .expect("run_until");
    let (visible, hidden) = common::counts(client, &url).await;
    println!(
        "drop in handler: handler calls {} for 1 message, acked {}, lost {}, left on the queue {}",
        calls.load(Ordering::SeqCst),
        consumer.stats().acked,
        consumer.stats().lost,
        visible + hidden
    );
}

async fn batch_drop(client: &Client) {
    let url = new_queue(client, "batch", 2).await;
    send(client, &url, 10).await;
    let consumer = Consumer::builder(client.clone(), url.clone())
        .wait_time(Duration::from_secs(1))
        .ack_mode(AckMode::OnSuccess)
        .build()
        .expect("valid settings");
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let handler = move |batch: Batch| {
        c.fetch_add(batch.len(), Ordering::SeqCst);
        let kept: Vec<Delivery> = batch
            .into_iter()
            .enumerate()
            .filter_map(|(i, d)| (i % 3 != 0).then_some(d))
            .collect();
        async move {
            sleep(Duration::from_secs(6)).await;
            drop(kept);
            Ok::<(), sqs_consumer::BoxError>(())
        }
    };
    consumer
        .run_batch_until(handler, sleep(Duration::from_secs(7)))
        .await
        .expect("run_batch_until");
    let (visible, hidden) = common::counts(client, &url).await;
    println!(
        "batch drop: deliveries handed out {} for 10 messages, acked {}, deleted {}",
        calls.load(Ordering::SeqCst),
        consumer.stats().acked,
        10 - (visible + hidden)
    );
}

fn main() {
    let Ok(endpoint) = std::env::var("SQS_TEST_ENDPOINT") else {
        println!("edges: set SQS_TEST_ENDPOINT (scripts/with-sqs-server.sh does) to run");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let client = client(&endpoint);
        println!(
            "edges on {}",
            std::env::var("SQS_TEST_SERVER").unwrap_or_default()
        );
        stop(&client).await;
        pause(&client).await;
        drop_in_handler(&client).await;
        batch_drop(&client).await;
        stop_latency(&client).await;
        let zero = Consumer::builder(client.clone(), "http://127.0.0.1:1/q")
            .visibility_timeout(Duration::ZERO)
            .build();
        println!(
            "visibility 0: {}",
            zero.map_or_else(|err| format!("refused: {err}"), |_| "accepted".to_owned())
        );
    });
}
