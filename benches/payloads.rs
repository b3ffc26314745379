//! Payloads in S3 (feature `s3`), on the test server's SQS and S3:
//!
//! ```text
//! scripts/with-sqs-server.sh cargo bench --features s3 --bench payloads    # moto
//! scripts/with-localstack.sh cargo bench --features s3 --bench payloads    # LocalStack
//! ```
//!
//! - P1, receive to handler: 10 messages whose 5 MiB payloads are in S3, handled one at a time
//!   (`max_in_flight(1)`): the time from just before the `ReceiveMessage` request
//!   (`Delivery::received_at`) to the handler's first line. Beside it, the same for ordinary
//!   messages (the receive alone), and one `GetObject` of the same object by the SDK alone (the
//!   floor for the download). Medians of `BENCH_RUNS` runs (3 by default) of the per-run
//!   medians.
//! - P2, memory per held payload: 20 deliveries with 1 MiB payloads held at once: bytes
//!   allocated and not freed while they are held, against the consumer idle before (its
//!   clients warm), per delivery, and that less the payload itself; then what is still held
//!   200 ms after they were acked (the payload goes with its delivery).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::MessageAttributeValue;
use sqs_consumer::{Consumer, Delivery};
use tokio::time::Instant;

mod common;

#[global_allocator]
static ALLOC: common::CountingAlloc = common::CountingAlloc;

const MIB: usize = 1024 * 1024;

fn main() {
    let Ok(endpoint) = std::env::var("SQS_TEST_ENDPOINT") else {
        println!("payloads: skipped (run it under scripts/with-sqs-server.sh)");
        return;
    };
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let bench = Bench::new(&endpoint).await;
        let (mut payload, mut plain, mut sdk) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            payload.push(bench.receive_to_handler(5 * MIB).await);
            plain.push(bench.receive_to_handler(0).await);
            sdk.push(bench.sdk_get(5 * MIB).await);
        }
        println!(
            "P1 receive to handler, 5 MiB payload: {:.1} ms (runs {}); ordinary message: {:.1} ms; \
             GetObject by the SDK alone: {:.1} ms",
            median(&payload),
            payload.iter().map(|v| format!("{v:.1}")).collect::<Vec<_>>().join(", "),
            median(&plain),
            median(&sdk),
        );
        let (mut held, mut left) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let (h, l) = bench.memory_per_held_payload(20, MIB).await;
            held.push(h);
            left.push(l);
        }
        let per = median(&held);
        println!(
            "P2 memory per held 1 MiB payload: {per:.0} bytes, {:.0} beyond the payload (runs {}); \
             still held per delivery 200 ms after the acks: {:.0} bytes",
            per - MIB as f64,
            held.iter().map(|v| format!("{v:.0}")).collect::<Vec<_>>().join(", "),
            median(&left),
        );
    });
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Bench {
    sqs: aws_sdk_sqs::Client,
    s3: aws_sdk_s3::Client,
    bucket: String,
}

impl Bench {
    async fn new(endpoint: &str) -> Self {
        let sqs = common::plain_client(endpoint);
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::Config::builder()
                .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
                .region(aws_sdk_s3::config::Region::new("us-east-1"))
                .credentials_provider(aws_sdk_s3::config::Credentials::new(
                    "test", "test", None, None, "bench",
                ))
                .endpoint_url(endpoint)
                .force_path_style(true)
                .build(),
        );
        let bucket = format!("bench-payloads-{}", std::process::id());
        s3.create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("CreateBucket");
        Self { sqs, s3, bucket }
    }

    async fn queue(&self) -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "bench-payloads-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        self.sqs
            .create_queue()
            .queue_name(name)
            .send()
            .await
            .expect("CreateQueue")
            .queue_url
            .expect("a queue URL")
    }

    /// Puts a `size`-byte object and returns its key.
    async fn object(&self, size: usize) -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        let key = format!("p-{}", N.fetch_add(1, Ordering::Relaxed));
        self.s3
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .body(vec![b'x'; size].into())
            .send()
            .await
            .expect("PutObject");
        key
    }

    /// Sends `n` messages: pointers to `size`-byte objects, or ordinary ones for size 0.
    async fn send(&self, url: &str, n: usize, size: usize) {
        for i in 0..n {
            let mut call = self.sqs.send_message().queue_url(url);
            if size == 0 {
                call = call.message_body(format!("ordinary {i}"));
            } else {
                let key = self.object(size).await;
                let pointer = format!(
                    r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{{"s3BucketName":"{}","s3Key":"{key}"}}]"#,
                    self.bucket
                );
                let attribute = MessageAttributeValue::builder()
                    .data_type("Number")
                    .string_value(size.to_string())
                    .build()
                    .expect("an attribute");
                call = call
                    .message_body(pointer)
                    .message_attributes("ExtendedPayloadSize", attribute);
            }
            call.send().await.expect("SendMessage");
        }
    }

    fn consumer(&self, url: &str, max_in_flight: usize) -> Consumer {
        Consumer::builder(self.sqs.clone(), url)
            .wait_time(Duration::from_secs(1))
            .max_in_flight(max_in_flight)
            .s3_payloads(self.s3.clone())
            .payload_buckets([self.bucket.as_str()])
            .build()
            .expect("a consumer")
    }

    /// The median, in ms, of receive-to-handler times over 10 messages handled one at a time.
    async fn receive_to_handler(&self, size: usize) -> f64 {
        const N: usize = 10;
        let url = self.queue().await;
        self.send(&url, N, size).await;
        let consumer = self.consumer(&url, 1);
        let times: Arc<Mutex<Vec<f64>>> = Arc::default();
        let seen = times.clone();
        let handler = move |d: Delivery| {
            let elapsed = d.received_at().elapsed();
            let seen = seen.clone();
            async move {
                if size > 0 {
                    assert_eq!(d.body().len(), size, "the payload, read whole");
                }
                seen.lock().unwrap().push(elapsed.as_secs_f64() * 1000.0);
                d.ack().await
            }
        };
        let done = async {
            let start = Instant::now();
            while times.lock().unwrap().len() < N && start.elapsed() < Duration::from_secs(300) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            result = consumer.run(handler) => panic!("run ended: {result:?}"),
            () = done => {}
        }
        let times = times.lock().unwrap().clone();
        assert_eq!(times.len(), N, "every message handled within 300 s");
        median(&times)
    }

    /// One `GetObject` of a `size`-byte object by the SDK alone, whole body read, in ms.
    async fn sdk_get(&self, size: usize) -> f64 {
        let key = self.object(size).await;
        let start = Instant::now();
        let out = self
            .s3
            .get_object()
            .bucket(&self.bucket)
            .key(&key)
            .send()
            .await
            .expect("GetObject");
        let bytes = out.body.collect().await.expect("the body").into_bytes();
        assert_eq!(bytes.len(), size);
        start.elapsed().as_secs_f64() * 1000.0
    }

    /// Bytes held per delivery of a `size`-byte payload, `n` held at once, and per delivery
    /// still held 200 ms after they were all acked: both against the consumer idle before,
    /// once its clients were warm.
    async fn memory_per_held_payload(&self, n: usize, size: usize) -> (f64, f64) {
        let url = self.queue().await;
        let consumer = self.consumer(&url, n);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Delivery>();
        let handler = move |d: Delivery| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(d);
                Ok::<(), sqs_consumer::Error>(())
            }
        };
        let measured = async {
            // Warm up: as many payloads through at once, so that the clients' connections
            // (one per download under way) and pools exist before.
            self.send(&url, n, size).await;
            for d in next(&mut rx, n).await {
                d.ack().await.expect("ack");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let before = common::live_bytes() as f64;
            self.send(&url, n, size).await;
            let held = next(&mut rx, n).await;
            assert!(held.iter().all(|d| d.body().len() == size));
            let holding = common::live_bytes() as f64;
            for d in held {
                d.ack().await.expect("ack");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            let after = common::live_bytes() as f64;
            ((holding - before) / n as f64, (after - before) / n as f64)
        };
        tokio::select! {
            result = consumer.run(handler) => panic!("run ended: {result:?}"),
            per = measured => per,
        }
    }
}

/// The next `count` deliveries the handler passed on.
async fn next(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Delivery>,
    count: usize,
) -> Vec<Delivery> {
    let mut held = Vec::with_capacity(count);
    while held.len() < count {
        match tokio::time::timeout(Duration::from_secs(120), rx.recv()).await {
            Ok(Some(d)) => held.push(d),
            _ => panic!("only {} of {count} deliveries within 120 s", held.len()),
        }
    }
    held
}
