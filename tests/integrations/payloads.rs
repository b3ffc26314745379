//! Payloads in S3, as Amazon's Extended Client libraries store them (feature `s3`): pointers
//! written exactly as the Java and Python libraries write them, read before the handler with
//! the lease kept; unreadable payloads kept from every handler; the object deleted only after
//! the SQS delete; a graceful stop during a download. Each scenario runs twice: on
//! `MemoryQueue` with an S3 in the test's memory behind the real SDK (`fake_s3`: no server,
//! so a plain `cargo test` runs the whole payload path), and on the test server's queue with
//! its S3 (moto serves it on the SQS port; LocalStack runs it beside SQS). Both on the real
//! clock.
#![cfg(feature = "s3")]

use crate::common;
use crate::fake_s3;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::MessageAttributeValue;
use common::faults::{FaultProxy, Faults};
use common::{eventually, secs, Kind, TestQueue};
use fake_s3::{Disturb, FakeS3};
use futures::StreamExt;
use sqs_consumer::memory::Action;
use sqs_consumer::{AckMode, Batch, BoxError, ConsumerBuilder, Delivery, RetryPolicy};

/// Runs `name(kind)` on `MemoryQueue` with the fake S3 (`memory`), and on the server's queue
/// with the server's S3 (`server`, ignored without one).
macro_rules! with_s3 {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(Kind::Memory).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
            async fn server() {
                require_server!(concat!(stringify!($name), "::server"));
                super::$name(Kind::Server).await;
            }
        }
    )*};
}

/// Runs `name(s3)` on `MemoryQueue` (its faults and counts), with the fake S3 (`fake`) and
/// with the server's S3 (`server_s3`, ignored without a server).
macro_rules! with_either_s3 {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fake() {
                super::$name(S3::new(Kind::Memory)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
            async fn server_s3() {
                require_server!(concat!(stringify!($name), "::server_s3"));
                super::$name(S3::new(Kind::Server)).await;
            }
        }
    )*};
}

const CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";
const REPACKAGED: &str = "awsv2.repackaged.software.amazon.payloadoffloading.PayloadS3Pointer";

/// An S3 client of the test server (or a proxy in front of it), path-style as local servers
/// need.
fn s3_client(endpoint: &str) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// The S3 a scenario reads payloads from.
#[derive(Clone)]
enum S3 {
    /// The fake in the test's memory.
    Fake(FakeS3),
    /// The test server's.
    Server(aws_sdk_s3::Client),
}

impl S3 {
    /// The fake for `MemoryQueue`, the server's S3 for the server's queue.
    fn new(kind: Kind) -> Self {
        match kind {
            Kind::Memory => S3::Fake(FakeS3::default()),
            Kind::Server => S3::Server(s3_client(&common::server_endpoint())),
        }
    }

    /// The client the consumer reads through.
    fn client(&self) -> aws_sdk_s3::Client {
        match self {
            S3::Fake(fake) => fake.client(),
            S3::Server(client) => client.clone(),
        }
    }

    async fn new_bucket(&self) -> String {
        self.new_bucket_named(common::unique_name("payloads")).await
    }

    async fn new_bucket_named(&self, bucket: String) -> String {
        match self {
            S3::Fake(fake) => fake.create_bucket(&bucket),
            S3::Server(s3) => {
                s3.create_bucket()
                    .bucket(&bucket)
                    .send()
                    .await
                    .expect("CreateBucket");
            }
        }
        bucket
    }

    async fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        match self {
            S3::Fake(fake) => fake.put(bucket, key, body),
            S3::Server(s3) => {
                s3.put_object()
                    .bucket(bucket)
                    .key(key)
                    .body(body.to_vec().into())
                    .send()
                    .await
                    .expect("PutObject");
            }
        }
    }

    async fn exists(&self, bucket: &str, key: &str) -> bool {
        match self {
            S3::Fake(fake) => fake.exists(bucket, key),
            S3::Server(s3) => s3
                .head_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await
                .is_ok(),
        }
    }

    /// A client whose requests of `actions` are disturbed (by the fake itself, or by a proxy
    /// in front of the server), with the count of requests by action.
    async fn disturbed(&self, actions: &'static [&'static str], disturb: Disturb) -> Disturbed {
        match self {
            S3::Fake(fake) => {
                fake.disturb(actions, disturb);
                Disturbed::Fake(fake.clone())
            }
            S3::Server(_) => {
                let endpoint = common::server_endpoint();
                Disturbed::Proxy(s3_proxy(&endpoint, actions, disturb).await)
            }
        }
    }
}

impl S3 {
    /// A client whose requests are counted, none disturbed.
    async fn counted(&self) -> Disturbed {
        match self {
            S3::Fake(fake) => Disturbed::Fake(fake.clone()),
            S3::Server(_) => {
                let endpoint = common::server_endpoint();
                Disturbed::Proxy(FaultProxy::start(&endpoint, Faults::none(), 1).await)
            }
        }
    }
}

/// An S3 some of whose requests are disturbed.
enum Disturbed {
    Fake(FakeS3),
    Proxy(FaultProxy),
}

impl Disturbed {
    fn client(&self) -> aws_sdk_s3::Client {
        match self {
            Disturbed::Fake(fake) => fake.client(),
            Disturbed::Proxy(proxy) => s3_client(&proxy.endpoint),
        }
    }

    /// Requests of `action` so far.
    fn requests(&self, action: &str) -> usize {
        match self {
            Disturbed::Fake(fake) => fake.requests(action),
            Disturbed::Proxy(proxy) => {
                let requests = proxy.log().requests.get(action).copied().unwrap_or(0);
                usize::try_from(requests).unwrap_or(usize::MAX)
            }
        }
    }
}

/// A proxy in front of the test server that disturbs every request of `actions`.
async fn s3_proxy(
    endpoint: &str,
    actions: &'static [&'static str],
    disturb: Disturb,
) -> FaultProxy {
    let (internal_error, delay, delay_for) = match disturb {
        Disturb::Fail => (1.0, 0.0, Duration::ZERO),
        Disturb::Hold(hold) => (0.0, 1.0, hold),
    };
    let faults = Faults {
        internal_error,
        throttle: 0.0,
        reset_before: 0.0,
        drop_after: 0.0,
        delay,
        delay_for,
        actions,
    };
    FaultProxy::start(endpoint, faults, 7).await
}

/// How a producer library writes its pointer.
#[derive(Debug, Clone, Copy)]
enum Producer {
    /// Java (`amazon-sqs-java-extended-client-lib`): compact JSON, `ExtendedPayloadSize`.
    Java,
    /// Java 2.x repackaged inside another jar: a longer class name.
    JavaRepackaged,
    /// Python (`amazon-sqs-python-extended-client`): `json.dumps`, with spaces.
    Python,
    /// Older producers: the legacy attribute name `SQSLargePayloadSize`.
    Legacy,
}

impl Producer {
    fn pointer(self, bucket: &str, key: &str) -> String {
        match self {
            Producer::Java | Producer::Legacy => {
                format!(r#"["{CLASS}",{{"s3BucketName":"{bucket}","s3Key":"{key}"}}]"#)
            }
            Producer::JavaRepackaged => {
                format!(r#"["{REPACKAGED}",{{"s3BucketName":"{bucket}","s3Key":"{key}"}}]"#)
            }
            Producer::Python => {
                format!(r#"["{CLASS}", {{"s3BucketName": "{bucket}", "s3Key": "{key}"}}]"#)
            }
        }
    }

    fn size_attribute(self) -> &'static str {
        match self {
            Producer::Legacy => "SQSLargePayloadSize",
            _ => "ExtendedPayloadSize",
        }
    }
}

/// Sends the pointer `producer` would write for `bucket`/`key`, declaring `size` bytes (the
/// reserved attribute is a Number on the server; `MemoryQueue` keeps every attribute as a
/// String).
async fn send_pointer(q: &TestQueue, producer: Producer, bucket: &str, key: &str, size: u64) {
    let body = producer.pointer(bucket, key);
    send_raw(q, &body, producer.size_attribute(), &size.to_string()).await;
}

/// A body that is no pointer, sent with the size attribute a pointer carries. None of the
/// crate's own texts holds it, so the leak guard tells it apart from the error it causes.
const NOT_A_POINTER: &str = "plain words where a pointer goes";

async fn send_not_a_pointer(q: &TestQueue) {
    send_raw(q, NOT_A_POINTER, "ExtendedPayloadSize", "3").await;
}

async fn send_raw(q: &TestQueue, body: &str, attribute: &str, value: &str) {
    match q {
        TestQueue::Memory(_) => q.send_with_attributes(body, &[(attribute, value)]).await,
        TestQueue::Server { client, url } => {
            let size = MessageAttributeValue::builder()
                .data_type("Number")
                .string_value(value)
                .build()
                .unwrap();
            client
                .send_message()
                .queue_url(url)
                .message_body(body)
                .message_attributes(attribute, size)
                .send()
                .await
                .expect("SendMessage");
        }
    }
}

/// What handlers saw: each body, with its payload's bucket and key.
type Seen = Arc<Mutex<Vec<(String, Option<(String, String, u64)>)>>>;

fn recording(
    seen: &Seen,
) -> impl Fn(Delivery) -> futures::future::BoxFuture<'static, Result<(), sqs_consumer::Error>>
       + Send
       + Sync
       + 'static {
    let seen = seen.clone();
    move |d: Delivery| {
        let seen = seen.clone();
        Box::pin(async move {
            let location = d
                .payload_location()
                .map(|l| (l.bucket().to_owned(), l.key().to_owned(), l.declared_size()));
            seen.lock().unwrap().push((d.body().to_owned(), location));
            d.ack().await
        })
    }
}

/// A consumer of `q` reading payloads through `s3` from `bucket` only.
fn consumer_of(q: &TestQueue, s3: aws_sdk_s3::Client, bucket: &str) -> ConsumerBuilder {
    q.consumer()
        .wait_time(secs(1))
        .s3_payloads(s3)
        .payload_buckets([bucket])
}

/// Pointers as each library writes them are read before the handler: the body is the
/// payload, `payload_location` says where from, and the object stays (no delete by
/// default). An ordinary message beside them is untouched.
async fn pointers_as_the_java_and_python_libraries_write_them_are_read(kind: Kind) {
    let s3 = S3::new(kind);
    let bucket = s3.new_bucket().await;
    let q = TestQueue::new(kind, 30).await;
    let producers = [
        Producer::Java,
        Producer::JavaRepackaged,
        Producer::Python,
        Producer::Legacy,
    ];
    let mut expected = Vec::new();
    for (i, producer) in producers.into_iter().enumerate() {
        // Multi-byte UTF-8, so bytes and characters differ.
        let payload = format!("{producer:?} payload é✓ {}", "x".repeat(1000 * (i + 1)));
        let key = format!("{}/{i}", common::unique_name("k"));
        s3.put(&bucket, &key, payload.as_bytes()).await;
        send_pointer(&q, producer, &bucket, &key, payload.len() as u64).await;
        expected.push((
            payload.clone(),
            Some((bucket.clone(), key, payload.len() as u64)),
        ));
    }
    q.send("an ordinary message").await;
    expected.push(("an ordinary message".to_owned(), None));

    let consumer = consumer_of(&q, s3.client(), &bucket).build().unwrap();
    let seen = Seen::default();
    let all_seen = eventually("every message handled", secs(60), || {
        seen.lock().unwrap().len() == expected.len() && consumer.stats().acked == 5
    });
    common::run_while(&consumer, recording(&seen), all_seen).await;
    let mut got = seen.lock().unwrap().clone();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
    assert_eq!(consumer.stats().payload_failures, 0);
    for (_, location) in &expected {
        if let Some((bucket, key, _)) = location {
            assert!(
                s3.exists(bucket, key).await,
                "deleted without delete_payload_on_ack"
            );
        }
    }
}

/// A missing object, a size other than declared, a payload over the limit and a malformed
/// pointer reach no handler: each is counted, logged at `error` with its message id, bucket
/// and key, and meets the retry policy, so the queue's redrive takes it to the dead-letter
/// queue after its receives. A good payload beside them is handled.
async fn unreadable_payloads_reach_no_handler_and_meet_the_retry_policy(kind: Kind) {
    let s3 = S3::new(kind);
    let bucket = s3.new_bucket().await;
    let (q, dlq) = TestQueue::with_dead_letter(kind, 30, 2).await;
    s3.put(&bucket, "short", b"12345").await;
    s3.put(&bucket, "large", &[b'z'; 200]).await;
    s3.put(&bucket, "good", b"fine").await;
    send_pointer(&q, Producer::Java, &bucket, "missing", 10).await;
    send_pointer(&q, Producer::Java, &bucket, "short", 10).await;
    send_pointer(&q, Producer::Java, &bucket, "large", 200).await;
    send_not_a_pointer(&q).await;
    send_pointer(&q, Producer::Java, &bucket, "good", 4).await;

    // OnSuccess acks what a handler leaves: the deliveries no handler saw stay unacked.
    let consumer = consumer_of(&q, s3.client(), &bucket)
        .max_payload_bytes(100)
        .retry_policy(RetryPolicy::ReleaseNow)
        .ack_mode(AckMode::OnSuccess)
        .build()
        .unwrap();
    let seen = Seen::default();
    // Redrive moves a message at the receive after its second: the consumer runs until then.
    let parked = async {
        while dlq.counts().await.0 < 4 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let parked = tokio::time::timeout(secs(120), parked);
    common::run_while(&consumer, recording(&seen), parked)
        .await
        .expect("the four bad ones reach the dead-letter queue");
    assert!(
        consumer.stats().payload_failures >= 8,
        "{:?}",
        consumer.stats()
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        1,
        "only the good payload reached a handler: {seen:?}"
    );
    assert_eq!(seen[0].0, "fine");
    let stats = consumer.stats();
    assert_eq!((stats.acked, stats.handler_errors), (1, 0), "{stats:?}");
    let bodies: Vec<String> = dlq
        .receive_raw(Duration::ZERO)
        .await
        .iter()
        .map(|m| m.body().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(bodies.len(), 4, "{bodies:?}");
    assert!(bodies.iter().any(|b| b == NOT_A_POINTER), "{bodies:?}");
    for key in ["missing", "short", "large"] {
        assert!(
            bodies.iter().any(|b| b.contains(&format!("\"{key}\""))),
            "{key}: {bodies:?}"
        );
    }
}

/// The errors of unreadable payloads as logged: once each at `error`, naming the message,
/// bucket and key, and why (on `MemoryQueue`, its logs captured on this thread).
async fn an_unreadable_payload_is_logged_once_at_error_naming_message_bucket_and_key(s3: S3) {
    let (logs, _guard) = common::capture_logs();
    let bucket = s3.new_bucket().await;
    let q = TestQueue::new(Kind::Memory, 30).await;
    send_pointer(&q, Producer::Java, &bucket, "no-such-key", 10).await;
    let consumer = consumer_of(&q, s3.client(), &bucket).build().unwrap();
    // Counted just before it is logged, on a worker: the wait is for both.
    let failed = eventually("the payload failure counted and logged", secs(60), || {
        consumer.stats().payload_failures == 1
            && String::from_utf8_lossy(&logs.lock().unwrap()).contains("could not be read")
    });
    common::run_while(&consumer, recording(&Seen::default()), failed).await;
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let errors: Vec<&str> = logs.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "{logs}");
    assert_eq!(
        q.counts().await,
        (0, 1),
        "kept hidden: the default retry policy leaves it"
    );
    for what in [
        "message_id=",
        &bucket,
        "key=no-such-key",
        "NoSuchKey",
        "payload could not be read",
    ] {
        assert!(
            errors[0].contains(what),
            "{what} missing from {}",
            errors[0]
        );
    }
}

/// With `delete_payload_on_ack`, the object goes once the SQS delete succeeded, and stays
/// when it failed (`MemoryQueue` refuses the first delete).
async fn delete_on_ack_deletes_the_object_only_after_the_sqs_delete(s3: S3) {
    let bucket = s3.new_bucket().await;
    let q = TestQueue::new(Kind::Memory, 30).await;
    let TestQueue::Memory(memory) = &q else {
        unreachable!()
    };
    s3.put(&bucket, "kept", b"first").await;
    send_pointer(&q, Producer::Java, &bucket, "kept", 5).await;
    memory.fail_next(Action::DeleteMessageBatch, "AccessDenied", 1);
    let consumer = consumer_of(&q, s3.client(), &bucket)
        .delete_payload_on_ack(true)
        .build()
        .unwrap();
    let d = common::take_one(&consumer).await;
    assert_eq!(d.body(), "first");
    let err = d.ack().await.expect_err("the SQS delete is refused");
    assert!(err.is_fatal(), "{err}");
    // A queue of its own: the first message may be back on the first one.
    let q = TestQueue::new(Kind::Memory, 30).await;
    s3.put(&bucket, "deleted", b"second").await;
    send_pointer(&q, Producer::Java, &bucket, "deleted", 6).await;
    let consumer = consumer_of(&q, s3.client(), &bucket)
        .delete_payload_on_ack(true)
        .build()
        .unwrap();
    let d = common::take_one(&consumer).await;
    assert_eq!(d.body(), "second");
    d.ack().await.unwrap();
    let mut gone = false;
    for _ in 0..100 {
        if !s3.exists(&bucket, "deleted").await {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the object of the acked message was not deleted");
    assert!(
        s3.exists(&bucket, "kept").await,
        "deleted though its ack failed"
    );
    assert_eq!(consumer.stats().payload_delete_failures, 0);
}

/// A batch handler and a stream get payloads too: each delivery's payload is read before the
/// batch is handed out or the delivery yielded, and one that cannot be read is left out.
async fn batches_and_streams_get_payloads_too(kind: Kind) {
    let s3 = S3::new(kind);
    let bucket = s3.new_bucket().await;
    let q = TestQueue::new(kind, 30).await;
    for i in 0..3 {
        let key = format!("batch-{i}");
        s3.put(&bucket, &key, format!("payload {i}").as_bytes())
            .await;
        send_pointer(&q, Producer::Java, &bucket, &key, 9).await;
    }
    send_pointer(&q, Producer::Java, &bucket, "missing", 9).await;
    let consumer = consumer_of(&q, s3.client(), &bucket).build().unwrap();
    let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = bodies.clone();
    let handler = move |batch: Batch| {
        let seen = seen.clone();
        async move {
            seen.lock()
                .unwrap()
                .extend(batch.iter().map(|d| d.body().to_owned()));
            batch.ack_all().await
        }
    };
    let handled = eventually("the batches", secs(60), || {
        consumer.stats().acked == 3 && consumer.stats().payload_failures == 1
    });
    tokio::select! {
        result = consumer.run_batch(handler) => panic!("run_batch ended: {result:?}"),
        () = handled => {}
    }
    let mut got = bodies.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, ["payload 0", "payload 1", "payload 2"]);

    // The same through a stream.
    s3.put(&bucket, "streamed", b"by stream").await;
    send_pointer(&q, Producer::Python, &bucket, "streamed", 9).await;
    let consumer = consumer_of(&q, s3.client(), &bucket).build().unwrap();
    let mut stream = consumer.stream();
    let d = tokio::time::timeout(secs(60), stream.next())
        .await
        .expect("a delivery within 60 s")
        .expect("the stream goes on")
        .expect("no error");
    assert_eq!(d.body(), "by stream");
    assert_eq!(d.payload_location().map(|l| l.key()), Some("streamed"));
    d.ack().await.unwrap();
}

/// An object delete that keeps failing after an ack is tried 4 times, then counted and left:
/// the ack stands.
async fn a_failing_object_delete_is_tried_four_times_then_counted_and_left(s3: S3) {
    let bucket = s3.new_bucket().await;
    let q = TestQueue::new(Kind::Memory, 30).await;
    s3.put(&bucket, "stays", b"12345").await;
    send_pointer(&q, Producer::Java, &bucket, "stays", 5).await;
    let disturbed = s3.disturbed(&["DeleteObject"], Disturb::Fail).await;
    let consumer = consumer_of(&q, disturbed.client(), &bucket)
        .delete_payload_on_ack(true)
        .build()
        .unwrap();
    let d = common::take_one(&consumer).await;
    d.ack().await.expect("the ack stands");
    let counted = eventually("the failed delete counted", secs(60), || {
        consumer.stats().payload_delete_failures == 1
    });
    counted.await;
    assert_eq!(disturbed.requests("DeleteObject"), 4);
    assert!(s3.exists(&bucket, "stays").await);
    assert_eq!(consumer.stats().acked, 1);
}

/// A queue of `visibility` seconds holding one pointer (as Java writes it) to `key`, whose
/// object `body` is read through a proxy that answers every `GetObject` `hold` late; the
/// consumer's builder waits that long for a read (its request timeout twice the hold).
async fn a_pointer_read_late(
    kind: Kind,
    visibility: u64,
    (key, body): (&str, &str),
    hold: Duration,
) -> (TestQueue, Disturbed, ConsumerBuilder) {
    let s3 = S3::new(kind);
    let bucket = s3.new_bucket().await;
    let q = TestQueue::new(kind, visibility).await;
    s3.put(&bucket, key, body.as_bytes()).await;
    send_pointer(&q, Producer::Java, &bucket, key, body.len() as u64).await;
    let disturbed = s3.disturbed(&["GetObject"], Disturb::Hold(hold)).await;
    let builder = consumer_of(&q, disturbed.client(), &bucket).request_timeout(hold * 2);
    (q, disturbed, builder)
}

/// A download slower than the visibility timeout keeps the message hidden: a spy receiving
/// all the while gets nothing, and the handler gets the payload.
async fn a_slow_download_keeps_the_message_hidden(kind: Kind) {
    let visibility = 2;
    // Every object read is answered two visibility timeouts late.
    let hold = secs(2 * visibility);
    let (q, proxy, builder) =
        a_pointer_read_late(kind, visibility, ("slow", "worth the wait"), hold).await;
    let consumer = builder.build().unwrap();
    let seen = Seen::default();
    let spied = Arc::new(Mutex::new(0usize));
    let spy = {
        let (q, seen, spied) = (q.clone(), seen.clone(), spied.clone());
        let received = eventually("the receive", secs(30), || consumer.stats().received == 1);
        async move {
            received.await;
            while seen.lock().unwrap().is_empty() {
                let got = q.receive_up_to(10, Duration::ZERO).await;
                *spied.lock().unwrap() += got.len();
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    let limit = tokio::time::timeout(hold * 10, spy);
    common::run_while(&consumer, recording(&seen), limit)
        .await
        .expect("the payload reached the handler");
    assert_eq!(
        *spied.lock().unwrap(),
        0,
        "the message was visible during the download"
    );
    assert_eq!(seen.lock().unwrap()[0].0, "worth the wait");
    assert!(consumer.stats().extended >= 1, "{:?}", consumer.stats());
    assert_eq!(proxy.requests("GetObject"), 1);
}

/// S3 failing transiently is tried 4 times in all, then the delivery meets the retry policy
/// (kept hidden by default) without reaching a handler.
async fn a_failing_s3_is_tried_four_times_then_the_delivery_meets_the_retry_policy(s3: S3) {
    let bucket = s3.new_bucket().await;
    let q = TestQueue::new(Kind::Memory, 30).await;
    s3.put(&bucket, "flaky", b"never read").await;
    send_pointer(&q, Producer::Java, &bucket, "flaky", 10).await;
    let disturbed = s3.disturbed(&["GetObject"], Disturb::Fail).await;
    let consumer = consumer_of(&q, disturbed.client(), &bucket)
        .build()
        .unwrap();
    let seen = Seen::default();
    let failed = eventually("the payload failure", secs(60), || {
        consumer.stats().payload_failures == 1
    });
    common::run_while(&consumer, recording(&seen), failed).await;
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(disturbed.requests("GetObject"), 4);
    assert_eq!(
        q.counts().await,
        (0, 1),
        "kept hidden by the default retry policy"
    );
}

/// An SNS notification (without raw delivery) whose `Message` is a pointer: `sns()` gives the
/// payload as its message; the body stays the envelope.
#[cfg(feature = "json")]
async fn an_sns_envelope_around_a_pointer_gives_the_payload_as_its_message(s3: S3) {
    let bucket = s3.new_bucket().await;
    s3.put(&bucket, "order", br#"{"id": 7}"#).await;
    let envelope = serde_json::json!({
        "Type": "Notification",
        "MessageId": "sns-1",
        "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
        "Message": Producer::Java.pointer(&bucket, "order"),
        "Timestamp": "2026-12-01T00:00:00.000Z",
        "MessageAttributes": {"ExtendedPayloadSize": {"Type": "Number", "Value": "9"}}
    })
    .to_string();
    let q = TestQueue::new(Kind::Memory, 30).await;
    q.send(&envelope).await;
    let consumer = consumer_of(&q, s3.client(), &bucket).build().unwrap();
    let d = common::take_one(&consumer).await;
    assert_eq!(d.body(), envelope);
    assert_eq!(d.sns().unwrap().message, r#"{"id": 7}"#);
    #[derive(serde::Deserialize)]
    struct Order {
        id: u64,
    }
    assert_eq!(d.json_or_sns::<Order>().unwrap().id, 7);
    assert_eq!(d.payload_location().unwrap().key(), "order");
    d.ack().await.unwrap();
}

with_either_s3!(
    an_unreadable_payload_is_logged_once_at_error_naming_message_bucket_and_key,
    delete_on_ack_deletes_the_object_only_after_the_sqs_delete,
    a_failing_object_delete_is_tried_four_times_then_counted_and_left,
    a_failing_s3_is_tried_four_times_then_the_delivery_meets_the_retry_policy,
);

#[cfg(feature = "json")]
with_either_s3!(an_sns_envelope_around_a_pointer_gives_the_payload_as_its_message);

with_s3!(
    pointers_as_the_java_and_python_libraries_write_them_are_read,
    unreadable_payloads_reach_no_handler_and_meet_the_retry_policy,
    a_slow_download_keeps_the_message_hidden,
    batches_and_streams_get_payloads_too,
    a_dead_lettered_payload_keeps_its_pointer_not_the_payload,
    a_stop_during_a_download_waits_for_it_within_the_shutdown_timeout,
    a_download_outlasting_the_shutdown_timeout_is_released_not_handled,
    poison_payloads_meet_the_retry_policy_then_the_dead_letter_step,
);

#[cfg(feature = "lambda")]
with_s3!(a_lambda_records_payload_is_read_before_its_handler);

/// In AWS Lambda (feature `lambda`), a record's pointer is read before its handler as in a
/// worker, and the record is done once the handler acks it.
#[cfg(feature = "lambda")]
async fn a_lambda_records_payload_is_read_before_its_handler(kind: Kind) {
    use sqs_consumer::lambda::{self, Function};
    let s3 = S3::new(kind);
    let bucket = s3.new_bucket().await;
    s3.put(&bucket, "order", b"the order itself").await;
    let q = TestQueue::new(kind, 30).await;
    send_pointer(&q, Producer::Python, &bucket, "order", 16).await;
    let function = match &q {
        TestQueue::Memory(memory) => Function::in_memory(memory),
        TestQueue::Server { client, .. } => Function::new(client.clone()),
    };
    let (client, only) = (s3.client(), bucket.clone());
    let seen = Seen::default();
    let invocations = function
        .consumer(move |b| {
            b.s3_payloads(client.clone())
                .payload_buckets([only.clone()])
        })
        .handler(recording(&seen))
        .unwrap();
    let messages = q.receive_raw(secs(1)).await;
    assert_eq!(messages.len(), 1);
    let event = lambda::event(&q.arn().await, messages);
    let deadline = std::time::SystemTime::now() + secs(30);
    let response = invocations.invoke(event, deadline).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    let seen = seen.lock().unwrap().clone();
    let location = Some((bucket, "order".to_owned(), 16));
    assert_eq!(seen, [("the order itself".to_owned(), location)]);
}

/// By default a payload of 64 MiB is read whole, and a pointer declaring a byte more is
/// refused unread. The limit is the crate's own, so the fake S3 alone serves the 64 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_limit_reads_64_mib_and_refuses_a_byte_more_unread() {
    const LIMIT: usize = 64 * 1024 * 1024;
    let s3 = S3::new(Kind::Memory);
    let bucket = s3.new_bucket().await;
    let q = TestQueue::new(Kind::Memory, 30).await;
    s3.put(&bucket, "at-limit", &vec![b'a'; LIMIT]).await;
    s3.put(&bucket, "over", &vec![b'b'; LIMIT + 1]).await;
    send_pointer(&q, Producer::Java, &bucket, "at-limit", LIMIT as u64).await;
    send_pointer(&q, Producer::Java, &bucket, "over", LIMIT as u64 + 1).await;
    let counted = s3.counted().await;
    let consumer = consumer_of(&q, counted.client(), &bucket)
        .retry_policy(RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let seen = Seen::default();
    let both = eventually("the payload read and the other refused", secs(60), || {
        !seen.lock().unwrap().is_empty() && consumer.stats().payload_failures >= 1
    });
    common::run_while(&consumer, recording(&seen), both).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0.len(), LIMIT);
    assert_eq!(seen[0].1.as_ref().map(|l| l.1.as_str()), Some("at-limit"));
    assert_eq!(
        counted.requests("GetObject"),
        1,
        "the one over the limit was not read"
    );
}

/// An object served without its length (as an S3-compatible server may stream it) that
/// outgrows the size its message declares is refused as soon as its bytes do, not read to
/// the end: one chunk of 100, well within `max_payload_bytes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsized_download_stops_once_it_outgrows_the_declared_size() {
    let fake = FakeS3::default();
    fake.create_bucket("payloads");
    fake.put("payloads", "lying", &vec![b'x'; 100 * fake_s3::CHUNK]);
    fake.serve_unsized("payloads", "lying");
    let q = TestQueue::new(Kind::Memory, 30).await;
    send_pointer(&q, Producer::Java, "payloads", "lying", 10).await;
    let consumer = consumer_of(&q, fake.client(), "payloads")
        .retry_policy(RetryPolicy::backoff(secs(30), secs(30)))
        .build()
        .unwrap();
    let refused = eventually("the payload refused", secs(60), || {
        consumer.stats().payload_failures >= 1
    });
    common::run_while(&consumer, |d: Delivery| d.ack(), refused).await;
    assert_eq!(fake.requests("GetObject"), 1);
    assert_eq!(fake.chunks_taken(), 1, "chunks read of the object");
}

/// A graceful stop while a payload downloads lets the download end and the handler run
/// (within the shutdown timeout): the handler gets the payload, the message is deleted.
async fn a_stop_during_a_download_waits_for_it_within_the_shutdown_timeout(kind: Kind) {
    let hold = secs(2);
    let (q, proxy, builder) =
        a_pointer_read_late(kind, 30, ("held", "arrives after the stop"), hold).await;
    let consumer = builder.shutdown_timeout(hold * 5).build().unwrap();
    let seen = Seen::default();
    // The stop comes once the message is received, with its download held at the proxy.
    let signal = async {
        eventually("the receive", secs(30), || consumer.stats().received == 1).await;
        assert!(seen.lock().unwrap().is_empty(), "handled before the stop");
    };
    consumer.run_until(recording(&seen), signal).await.unwrap();
    assert_eq!(proxy.requests("GetObject"), 1);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, "arrives after the stop");
    assert_eq!(consumer.stats().acked, 1, "{:?}", consumer.stats());
    assert_eq!(q.counts().await, (0, 0), "the message was not deleted");
}

/// A download that outlasts the shutdown timeout does not hold the stop up: the run ends at
/// the timeout, no handler gets the message, and it is released (visible again at once, not
/// after its visibility timeout).
async fn a_download_outlasting_the_shutdown_timeout_is_released_not_handled(kind: Kind) {
    let visibility = 60;
    let shutdown = secs(1);
    // Held far past the shutdown timeout (and the poll the stop waits for, 1 s).
    let hold = secs(20);
    // The proxy lives to the end: dropped, it would stop serving the read.
    let (q, _proxy, builder) =
        a_pointer_read_late(kind, visibility, ("too-slow", "never handled"), hold).await;
    let consumer = builder.shutdown_timeout(shutdown).build().unwrap();
    let seen = Seen::default();
    let signal = eventually("the receive", secs(30), || consumer.stats().received == 1);
    let mut stopped_at = None;
    let signal = async {
        signal.await;
        stopped_at = Some(tokio::time::Instant::now());
    };
    consumer.run_until(recording(&seen), signal).await.unwrap();
    let took = stopped_at.expect("signalled").elapsed();
    // The stop takes the shutdown timeout, or the poll under way (1 s) if longer; half the
    // hold tells that from waiting for the download, with room for a busy machine.
    assert!(took < hold / 2, "the stop waited {took:?} for the download");
    assert!(seen.lock().unwrap().is_empty(), "a handler got it");
    assert_eq!(consumer.stats().released, 1, "{:?}", consumer.stats());
    // Visible again well within its visibility timeout: released, not left to lapse.
    let (message, _) = q
        .wait_for_message(secs(visibility / 2))
        .await
        .expect("the message was released");
    assert!(message.body().unwrap_or_default().contains("too-slow"));
}

/// A payload read from S3 whose handler fails moves to the dead-letter queue as the pointer it
/// came as (with its size attribute), not as the payload, and its object stays (the copy
/// points to it), even with `delete_payload_on_ack`.
async fn a_dead_lettered_payload_keeps_its_pointer_not_the_payload(kind: Kind) {
    let s3 = S3::new(kind);
    let bucket = s3.new_bucket().await;
    let (q, dlq) = (
        TestQueue::new(kind, 30).await,
        TestQueue::new(kind, 30).await,
    );
    let payload = "a large order ".repeat(100);
    s3.put(&bucket, "order", payload.as_bytes()).await;
    let size = payload.len() as u64;
    send_pointer(&q, Producer::Java, &bucket, "order", size).await;
    let consumer = consumer_of(&q, s3.client(), &bucket)
        .delete_payload_on_ack(true)
        .dead_letter(dlq.as_dead_letter(), 1)
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let seen = seen.clone();
        move |d: Delivery| {
            seen.lock().unwrap().push(d.body().to_owned());
            async { Err::<(), BoxError>("rejected".into()) }
        }
    };
    let moved = eventually("the move", secs(60), || consumer.stats().dead_lettered == 1);
    common::run_while(&consumer, handler, moved).await;
    assert_eq!(
        *seen.lock().unwrap(),
        [payload],
        "the handler saw the payload"
    );
    let copy = dlq.receive_raw(secs(1)).await;
    assert_eq!(copy.len(), 1);
    let pointer = Producer::Java.pointer(&bucket, "order");
    assert_eq!(
        copy[0].body(),
        Some(pointer.as_str()),
        "the pointer, not the payload"
    );
    let attributes = copy[0].message_attributes().unwrap();
    assert_eq!(
        attributes["ExtendedPayloadSize"].string_value(),
        Some(size.to_string().as_str())
    );
    assert!(attributes.contains_key("sqs-consumer.failure"));
    assert!(s3.exists(&bucket, "order").await, "the copy points to it");
}

/// Unreadable payloads meet the failure step a failing handler's delivery meets: the retry
/// policy with its back-off first, then, at the `dead_letter` step's receive count, the move
/// with the payload's error as the failure. A missing object, a declared size over the
/// limit, a malformed pointer and a pointer to a bucket not in `payload_buckets` (never
/// read, though its name begins with the listed one's) alike; no handler sees any of them,
/// and nothing loops.
async fn poison_payloads_meet_the_retry_policy_then_the_dead_letter_step(kind: Kind) {
    let s3 = S3::new(kind);
    let bucket = s3.new_bucket().await;
    let other = s3.new_bucket_named(format!("{bucket}-evil")).await;
    s3.put(&other, "secret", b"another tenant's").await;
    let (q, dlq) = (
        TestQueue::new(kind, 30).await,
        TestQueue::new(kind, 30).await,
    );
    send_pointer(&q, Producer::Java, &bucket, "missing", 10).await;
    send_pointer(&q, Producer::Java, &bucket, "large", 200).await;
    send_not_a_pointer(&q).await;
    send_pointer(&q, Producer::Java, &other, "secret", 16).await;
    // Counts the consumer's S3 requests.
    let counted = s3.counted().await;
    let consumer = consumer_of(&q, counted.client(), &bucket)
        .max_payload_bytes(100)
        .retry_policy(RetryPolicy::backoff(secs(1), secs(2)))
        .dead_letter(dlq.as_dead_letter(), 2)
        .build()
        .unwrap();
    let seen = Seen::default();
    let moved = eventually("four moves", secs(60), || {
        consumer.stats().dead_lettered == 4
    });
    let start = std::time::Instant::now();
    common::run_while(&consumer, recording(&seen), moved).await;
    let took = start.elapsed();
    let stats = consumer.stats();
    assert!(seen.lock().unwrap().is_empty(), "no handler saw one");
    assert_eq!(
        (stats.payload_failures, stats.handler_errors, stats.acked),
        (8, 0, 0),
        "each failed twice: the retry policy, then the move: {stats:?}"
    );
    assert!(
        (8..=10).contains(&stats.received),
        "received twice each, no loop: {stats:?}"
    );
    assert_eq!(
        counted.requests("GetObject"),
        2,
        "only the missing object was asked for, once per receive"
    );
    let mut copies = Vec::new();
    let wait = std::time::Instant::now();
    while copies.len() < 4 && wait.elapsed() < secs(10) {
        copies.extend(dlq.receive_raw(secs(1)).await);
    }
    let mut failures: Vec<(String, serde_json::Value)> = copies
        .iter()
        .map(|copy| {
            let failure = copy.message_attributes().unwrap()["sqs-consumer.failure"]
                .string_value()
                .unwrap();
            (
                copy.body().unwrap_or_default().to_owned(),
                serde_json::from_str(failure).unwrap(),
            )
        })
        .collect();
    failures.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(failures.len(), 4, "{failures:?}");
    for (body, failure) in &failures {
        assert_eq!(failure["receive_count"], 2, "{body}: {failure}");
        let error = failure["error"].as_str().unwrap_or_default();
        assert!(error.contains("could not be read"), "{body}: {error}");
    }
    let error_of = |needle: &str| {
        failures
            .iter()
            .find(|(body, _)| body.contains(needle))
            .map(|(_, f)| f["error"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_else(|| panic!("no copy of {needle}: {failures:?}"))
    };
    assert!(error_of("\"secret\"").contains("not one of payload_buckets"));
    assert!(error_of("\"large\"").contains("over max_payload_bytes"));
    common::report(&format!(
        "poison payloads ({kind:?}): 4 moved after {took:.2?}; {} receives, {} GetObject",
        stats.received,
        counted.requests("GetObject")
    ));
}
