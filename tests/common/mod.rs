//! Shared test harness: one queue API over `MemoryQueue` and a real SQS server (moto).
#![allow(dead_code, unreachable_pub)]

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};
use sqs_consumer::{Consumer, ConsumerBuilder, Delivery, Handler, MemoryQueue};
use tokio::time::sleep;
use tracing_subscriber::Layer as _;

#[cfg(feature = "dynamodb")]
pub mod dynamodb;
pub mod faults;
pub mod log_guard;
pub mod runtime_api;
pub mod sdk;

/// Runs each scenario `name(kind)` twice: on `MemoryQueue` (paused clock) and on the test
/// server (real time), as `name::memory` and `name::server`. The server variant is ignored
/// unless ignored tests are asked for (see [`require_server!`]).
#[macro_export]
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[tokio::test(start_paused = true)]
            async fn memory() {
                super::$name(Kind::Memory).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
            async fn server() {
                $crate::require_server!(concat!(stringify!($name), "::server"));
                super::$name(Kind::Server).await;
            }
        }
    )*};
}

/// Fails the test at once, saying how to start one, when no test server is up.
///
/// Every test that calls it is `#[ignore]`d with the reason "needs an SQS-compatible
/// server", so that a plain `cargo test` lists it as ignored rather than passed; the test
/// command (`scripts/test.sh`) starts a server and runs them with `--include-ignored`.
#[macro_export]
macro_rules! require_server {
    ($test:expr) => {
        $crate::common::server_endpoint_for($test)
    };
}

/// `SQS_TEST_ENDPOINT`, the test server's address; panics naming `test` when it is unset.
pub fn server_endpoint_for(test: &str) -> String {
    std::env::var("SQS_TEST_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "{test} needs an SQS-compatible server and SQS_TEST_ENDPOINT is not set: run it \
             with scripts/with-sqs-server.sh cargo test -- --ignored (moto), or the whole \
             suite with scripts/test.sh"
        )
    })
}

/// Where a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `MemoryQueue`, on tokio's paused clock.
    Memory,
    /// The SQS-compatible test server at `SQS_TEST_ENDPOINT`, in real time.
    Server,
}

/// Which implementation of SQS answers a test: `MemoryQueue`, or the server the test command
/// started (it names it in `SQS_TEST_SERVER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implementation {
    Memory,
    Moto,
    LocalStack,
}

/// The implementation behind `kind`.
pub fn implementation(kind: Kind) -> Implementation {
    match kind {
        Kind::Memory => Implementation::Memory,
        Kind::Server => match std::env::var("SQS_TEST_SERVER").as_deref() {
            Ok("moto") => Implementation::Moto,
            Ok("localstack") => Implementation::LocalStack,
            other => panic!(
                "SQS_TEST_SERVER is {other:?}: the scripts that start a test server set it to \
                 `moto` or `localstack`"
            ),
        },
    }
}

/// A queue under test, and a raw client to look at it from outside the consumer.
#[derive(Clone)]
pub enum TestQueue {
    Memory(MemoryQueue),
    Server {
        client: aws_sdk_sqs::Client,
        url: String,
    },
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A standard in-memory queue with the given visibility timeout.
pub fn memory_queue(visibility: u64) -> MemoryQueue {
    MemoryQueue::builder()
        .visibility_timeout(secs(visibility))
        .build()
        .unwrap()
}

/// A FIFO in-memory queue with content-based deduplication.
pub fn memory_fifo(visibility: u64) -> MemoryQueue {
    MemoryQueue::builder()
        .fifo(true)
        .content_based_deduplication(true)
        .visibility_timeout(secs(visibility))
        .build()
        .unwrap()
}

/// A client for the test server the test command started.
pub fn server_client() -> aws_sdk_sqs::Client {
    client_for(&server_endpoint())
}

/// The test server's address, `http://127.0.0.1:port`.
pub fn server_endpoint() -> String {
    std::env::var("SQS_TEST_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "SQS_TEST_ENDPOINT is not set: these tests need the local SQS server that \
             `scripts/test.sh` (the README's test command) installs and starts"
        )
    })
}

/// A client of the SQS-compatible server (or proxy) at `endpoint`, with the SDK's default
/// retry setting (which the consumer overrides for its own calls: one attempt each).
pub fn client_for(endpoint: &str) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .endpoint_url(endpoint)
        .interceptor(SecretsSeen)
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// Registers with the leak guard every body a client sends and every body and receipt
/// handle it receives.
#[derive(Debug)]
struct SecretsSeen;

impl aws_smithy_runtime_api::client::interceptors::Intercept for SecretsSeen {
    fn name(&self) -> &'static str {
        "SecretsSeen"
    }

    fn read_before_execution(
        &self,
        ctx: &aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef<'_>,
        _: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        use aws_sdk_sqs::operation::{
            send_message::SendMessageInput, send_message_batch::SendMessageBatchInput,
        };
        let input = ctx.input();
        if let Some(body) = input
            .downcast_ref::<SendMessageInput>()
            .and_then(|i| i.message_body())
        {
            log_guard::secret(body);
        }
        if let Some(batch) = input.downcast_ref::<SendMessageBatchInput>() {
            batch
                .entries()
                .iter()
                .for_each(|e| log_guard::secret(e.message_body()));
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        ctx: &aws_smithy_runtime_api::client::interceptors::context::AfterDeserializationInterceptorContextRef<'_>,
        _: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        _: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
        let Ok(out) = ctx.output_or_error() else {
            return Ok(());
        };
        for m in out
            .downcast_ref::<ReceiveMessageOutput>()
            .map_or(&[][..], |o| o.messages())
        {
            m.body()
                .into_iter()
                .chain(m.receipt_handle())
                .for_each(log_guard::secret);
        }
        Ok(())
    }
}

/// The sizes of the non-empty `ReceiveMessage` answers a client got, recorded by an
/// interceptor.
#[derive(Debug, Clone, Default)]
pub struct ReceiveSizes(pub Arc<Mutex<Vec<usize>>>);

impl aws_smithy_runtime_api::client::interceptors::Intercept for ReceiveSizes {
    fn name(&self) -> &'static str {
        "ReceiveSizes"
    }

    fn read_after_deserialization(
        &self,
        ctx: &aws_smithy_runtime_api::client::interceptors::context::AfterDeserializationInterceptorContextRef<'_>,
        _: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        _: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        if let Ok(out) = ctx.output_or_error() {
            if let Some(out) =
                out.downcast_ref::<aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput>()
            {
                let n = out.messages().len();
                if n > 0 {
                    self.0.lock().unwrap().push(n);
                }
            }
        }
        Ok(())
    }
}

/// Messages waiting or in flight on the server.
pub async fn left_on_server(client: &aws_sdk_sqs::Client, url: &str) -> u64 {
    let attrs = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(
            aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        )
        .send()
        .await
        .unwrap();
    let get = |name| {
        attrs
            .attributes()
            .and_then(|a| a.get(&name))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        + get(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
}

/// A fresh standard queue on the test server holding `messages` messages, bodies `m0`,
/// `m1`, ...; returns its URL.
pub async fn server_queue_with(client: &aws_sdk_sqs::Client, messages: usize) -> String {
    let url = client
        .create_queue()
        .queue_name(unique_name("loaded"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    send_batches(client, &url, "m", messages).await;
    url
}

/// Sends `n` messages to the server queue at `url`, bodies `{prefix}0`, `{prefix}1`, ..., ten
/// at a time.
pub async fn send_batches(client: &aws_sdk_sqs::Client, url: &str, prefix: &str, n: usize) {
    for chunk in 0..n.div_ceil(10) {
        let mut call = client.send_message_batch().queue_url(url);
        for i in chunk * 10..(chunk * 10 + 10).min(n) {
            call = call.entries(
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(format!("{prefix}{i}"))
                    .build()
                    .unwrap(),
            );
        }
        call.send().await.expect("SendMessageBatch");
    }
}

/// Prints a test's figures so they show in the test command's output even when the test
/// passes (the test harness captures `println!`, not direct writes to stderr).
pub fn report(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

pub fn unique_name(prefix: &str) -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{prefix}-{:012x}", h.finish() & 0xffff_ffff_ffff)
}

impl TestQueue {
    /// A fresh standard queue with the given visibility timeout.
    pub async fn new(kind: Kind, visibility: u64) -> Self {
        Self::create(kind, visibility, None).await
    }

    /// A fresh FIFO queue with content-based deduplication.
    pub async fn new_fifo(kind: Kind, visibility: u64) -> Self {
        match kind {
            Kind::Memory => TestQueue::Memory(memory_fifo(visibility)),
            Kind::Server => {
                let client = server_client();
                let out = client
                    .create_queue()
                    .queue_name(format!("{}.fifo", unique_name("fifo")))
                    .attributes(QueueAttributeName::FifoQueue, "true")
                    .attributes(QueueAttributeName::ContentBasedDeduplication, "true")
                    .attributes(
                        QueueAttributeName::VisibilityTimeout,
                        visibility.to_string(),
                    )
                    .send()
                    .await
                    .expect("CreateQueue (FIFO) on the test server");
                TestQueue::Server {
                    client,
                    url: out.queue_url.expect("a queue URL"),
                }
            }
        }
    }

    /// Sends to a FIFO message group.
    pub async fn send_to_group(&self, body: &str, group: &str) {
        match self {
            TestQueue::Memory(q) => {
                q.send_with(
                    body,
                    sqs_consumer::memory::SendOptions::new().group_id(group),
                )
                .unwrap();
            }
            TestQueue::Server { client, url } => {
                client
                    .send_message()
                    .queue_url(url)
                    .message_body(body)
                    .message_group_id(group)
                    .send()
                    .await
                    .expect("SendMessage (FIFO)");
            }
        }
    }

    /// A fresh queue whose messages move to a fresh dead-letter queue after
    /// `max_receive_count` receives; returns (source, dead-letter queue).
    pub async fn with_dead_letter(
        kind: Kind,
        visibility: u64,
        max_receive_count: u32,
    ) -> (Self, Self) {
        let dlq = Self::create(kind, 30, None).await;
        let source = Self::create(kind, visibility, Some((&dlq, max_receive_count))).await;
        (source, dlq)
    }

    async fn create(kind: Kind, visibility: u64, dlq: Option<(&TestQueue, u32)>) -> Self {
        match kind {
            Kind::Memory => {
                let mut b = MemoryQueue::builder().visibility_timeout(secs(visibility));
                if let Some((TestQueue::Memory(d), max)) = dlq {
                    b = b.dead_letter_queue(d, max);
                }
                TestQueue::Memory(b.build().unwrap())
            }
            Kind::Server => {
                let client = server_client();
                let mut call = client
                    .create_queue()
                    .queue_name(unique_name("test"))
                    .attributes(
                        QueueAttributeName::VisibilityTimeout,
                        visibility.to_string(),
                    );
                if let Some((d, max)) = dlq {
                    let arn = d.arn().await;
                    let policy =
                        format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"{max}"}}"#);
                    call = call.attributes(QueueAttributeName::RedrivePolicy, policy);
                }
                let out = call.send().await.expect("CreateQueue on the test server");
                TestQueue::Server {
                    client,
                    url: out.queue_url.expect("a queue URL"),
                }
            }
        }
    }

    /// The queue's ARN (a memory queue's name).
    pub async fn arn(&self) -> String {
        match self {
            TestQueue::Memory(q) => q.name().to_owned(),
            TestQueue::Server { client, url } => {
                let out = client
                    .get_queue_attributes()
                    .queue_url(url)
                    .attribute_names(QueueAttributeName::QueueArn)
                    .send()
                    .await
                    .expect("GetQueueAttributes");
                out.attributes().unwrap()[&QueueAttributeName::QueueArn].clone()
            }
        }
    }

    /// A consumer builder for this queue whose non-empty receives are recorded in `sizes` (on
    /// the server; `MemoryQueue` counts them itself: see `non_empty_receives`).
    pub fn consumer_recording(&self, sizes: &ReceiveSizes) -> ConsumerBuilder {
        match self {
            TestQueue::Memory(q) => Consumer::in_memory(q),
            TestQueue::Server { client, url } => {
                let config = client
                    .config()
                    .to_builder()
                    .interceptor(sizes.clone())
                    .build();
                Consumer::builder(aws_sdk_sqs::Client::from_conf(config), url.clone())
            }
        }
    }

    /// Receives that brought messages, as far as this side can tell.
    pub fn non_empty_receives(&self, sizes: &ReceiveSizes) -> usize {
        match self {
            TestQueue::Memory(q) => q.requests().non_empty_receives() as usize,
            TestQueue::Server { .. } => sizes.0.lock().unwrap().len(),
        }
    }

    /// This queue, as a consumer's dead-letter step names it.
    pub fn as_dead_letter(&self) -> sqs_consumer::DeadLetterQueue {
        match self {
            TestQueue::Memory(q) => q.into(),
            TestQueue::Server { url, .. } => url.into(),
        }
    }

    /// The queue's URL, on a server.
    pub fn url(&self) -> Option<&str> {
        match self {
            TestQueue::Memory(_) => None,
            TestQueue::Server { url, .. } => Some(url),
        }
    }

    /// The queue's name: a memory queue's own, a server queue's URL's last segment.
    pub fn short_name(&self) -> &str {
        match self {
            TestQueue::Memory(q) => q.name(),
            TestQueue::Server { url, .. } => url.rsplit('/').next().unwrap_or(url),
        }
    }

    /// A consumer builder for this queue.
    pub fn consumer(&self) -> ConsumerBuilder {
        match self {
            TestQueue::Memory(q) => Consumer::in_memory(q),
            TestQueue::Server { client, url } => Consumer::builder(client.clone(), url.clone()),
        }
    }

    pub async fn send(&self, body: &str) {
        match self {
            TestQueue::Memory(q) => {
                log_guard::secret(body);
                q.send(body).unwrap();
            }
            TestQueue::Server { client, url } => {
                client
                    .send_message()
                    .queue_url(url)
                    .message_body(body)
                    .send()
                    .await
                    .expect("SendMessage");
            }
        }
    }

    /// Sends a message hidden for `delay` after the send.
    pub async fn send_delayed(&self, body: &str, delay: Duration) {
        match self {
            TestQueue::Memory(q) => {
                let options = sqs_consumer::memory::SendOptions::new().delay(delay);
                q.send_with(body, options).unwrap();
            }
            TestQueue::Server { client, url } => {
                client
                    .send_message()
                    .queue_url(url)
                    .message_body(body)
                    .delay_seconds(delay.as_secs() as i32)
                    .send()
                    .await
                    .expect("SendMessage (delayed)");
            }
        }
    }

    /// Sends `n` messages, bodies `{prefix}0`, `{prefix}1`, ...
    pub async fn send_many(&self, prefix: &str, n: usize) {
        match self {
            TestQueue::Memory(q) => {
                for i in 0..n {
                    let body = format!("{prefix}{i}");
                    log_guard::secret(&body);
                    q.send(body).unwrap();
                }
            }
            TestQueue::Server { client, url } => send_batches(client, url, prefix, n).await,
        }
    }

    /// Sends a message carrying trace context: an X-Ray header (the `AWSTraceHeader` system
    /// attribute) and a W3C `traceparent` message attribute.
    pub async fn send_traced(&self, body: &str, x_ray: &str, traceparent: &str) {
        self.send_with_trace(body, Some(x_ray), &[("traceparent", traceparent)])
            .await;
    }

    /// Sends a message with an X-Ray header (the `AWSTraceHeader` system attribute), if
    /// given, and string message attributes.
    pub async fn send_with_trace(
        &self,
        body: &str,
        x_ray: Option<&str>,
        attributes: &[(&str, &str)],
    ) {
        match self {
            TestQueue::Memory(q) => {
                let mut options = sqs_consumer::memory::SendOptions::new();
                if let Some(x_ray) = x_ray {
                    options = options.aws_trace_header(x_ray);
                }
                for (name, value) in attributes {
                    options = options.message_attribute(*name, *value);
                }
                q.send_with(body, options).unwrap();
            }
            TestQueue::Server { client, url } => {
                use aws_sdk_sqs::types::{
                    MessageAttributeValue, MessageSystemAttributeNameForSends,
                    MessageSystemAttributeValue,
                };
                let mut call = client.send_message().queue_url(url).message_body(body);
                if let Some(x_ray) = x_ray {
                    call = call.message_system_attributes(
                        MessageSystemAttributeNameForSends::AwsTraceHeader,
                        MessageSystemAttributeValue::builder()
                            .data_type("String")
                            .string_value(x_ray)
                            .build()
                            .unwrap(),
                    );
                }
                for (name, value) in attributes {
                    call = call.message_attributes(
                        *name,
                        MessageAttributeValue::builder()
                            .data_type("String")
                            .string_value(*value)
                            .build()
                            .unwrap(),
                    );
                }
                call.send().await.expect("SendMessage");
            }
        }
    }

    /// Sends a message with string message attributes.
    pub async fn send_with_attributes(&self, body: &str, attributes: &[(&str, &str)]) {
        self.send_with_trace(body, None, attributes).await;
    }

    /// (visible, hidden) messages, as the queue reports them.
    pub async fn counts(&self) -> (u64, u64) {
        match self {
            TestQueue::Memory(q) => (q.visible_len() as u64, q.in_flight_len() as u64),
            TestQueue::Server { client, url } => {
                let attrs = client
                    .get_queue_attributes()
                    .queue_url(url)
                    .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
                    .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                    .send()
                    .await
                    .expect("GetQueueAttributes");
                let get = |name| {
                    attrs
                        .attributes()
                        .and_then(|a| a.get(&name))
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                (
                    get(QueueAttributeName::ApproximateNumberOfMessages),
                    get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
                )
            }
        }
    }

    /// A receive from outside the consumer (another consumer, as far as SQS knows).
    pub async fn receive_raw(&self, wait: Duration) -> Vec<Message> {
        self.receive_up_to(10, wait).await
    }

    /// The same, of at most `max` messages.
    pub async fn receive_up_to(&self, max: u32, wait: Duration) -> Vec<Message> {
        match self {
            TestQueue::Memory(q) => q.receive(max, wait).await.unwrap(),
            TestQueue::Server { client, url } => client
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(max as i32)
                .wait_time_seconds(wait.as_secs() as i32)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .send()
                .await
                .expect("ReceiveMessage")
                .messages
                .unwrap_or_default(),
        }
    }

    /// A delete from outside the consumer (another process holding the receipt handle).
    pub async fn delete_raw(&self, receipt_handle: &str) {
        match self {
            TestQueue::Memory(q) => q.delete(receipt_handle).unwrap(),
            TestQueue::Server { client, url } => {
                client
                    .delete_message()
                    .queue_url(url)
                    .receipt_handle(receipt_handle)
                    .send()
                    .await
                    .expect("DeleteMessage");
            }
        }
    }

    /// Receives from outside until a message comes, for at most `limit`; returns it and how
    /// long that took.
    pub async fn wait_for_message(&self, limit: Duration) -> Option<(Message, Duration)> {
        let start = tokio::time::Instant::now();
        while start.elapsed() < limit {
            let wait = (limit - start.elapsed()).min(secs(1));
            let mut got = self.receive_raw(Duration::from_secs(wait.as_secs())).await;
            if let Some(m) = got.pop() {
                return Some((m, start.elapsed()));
            }
            if wait < secs(1) {
                sleep(Duration::from_millis(100)).await;
            }
        }
        None
    }
}

pub fn receive_count(m: &Message) -> u32 {
    m.attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Runs the consumer until `until` completes; the consumer must not stop first.
///
/// A handler that panicked fails the test (an assert in a handler is caught by the consumer,
/// which carries on): use [`run_while_expecting_panics`] where a handler panics on purpose.
pub async fn run_while<F: Future>(
    consumer: &Consumer,
    handler: impl Handler,
    until: F,
) -> F::Output {
    let out = run_while_expecting_panics(consumer, handler, until).await;
    assert_eq!(
        consumer.stats().handler_panics,
        0,
        "a handler panicked (an assert in it failed?): see its message above"
    );
    out
}

/// [`run_while`], for a test whose handlers panic on purpose.
pub async fn run_while_expecting_panics<F: Future>(
    consumer: &Consumer,
    handler: impl Handler,
    until: F,
) -> F::Output {
    tokio::select! {
        result = consumer.run(handler) => panic!("run ended early: {result:?}"),
        out = until => out,
    }
}

/// Takes one delivery from a consumer, then stops the consumer; the delivery (and its
/// keeper) lives on in the caller.
pub async fn take_one(consumer: &Consumer) -> Delivery {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Delivery>();
    let handler = move |d: Delivery| {
        let tx = tx.clone();
        async move { tx.send(d).map_err(|_| "test ended") }
    };
    // Bounded: on the paused clock an idle runtime jumps to the bound at once, so a consumer
    // that never hands anything out fails here instead of hanging the test.
    let first = tokio::time::timeout(Duration::from_secs(1000), rx.recv());
    run_while(consumer, handler, first)
        .await
        .expect("a delivery within 1000 s")
        .expect("a delivery")
}

/// A consumer running in the background that hands every delivery to the test.
pub struct Taker {
    deliveries: tokio::sync::mpsc::UnboundedReceiver<Delivery>,
    run: tokio::task::JoinHandle<Result<(), sqs_consumer::Error>>,
}

impl Taker {
    pub fn start(consumer: Consumer) -> Self {
        Self::start_shared(Arc::new(consumer))
    }

    /// The same, for a consumer the test keeps using (to pause it, say).
    pub fn start_shared(consumer: Arc<Consumer>) -> Self {
        let (tx, deliveries) = tokio::sync::mpsc::unbounded_channel::<Delivery>();
        let handler = move |d: Delivery| {
            let tx = tx.clone();
            async move { tx.send(d).map_err(|_| "test ended") }
        };
        let run = tokio::spawn(async move { consumer.run(handler).await });
        Self { deliveries, run }
    }

    /// The next delivery, within `limit`. A run that ended (it runs until a fatal error) fails
    /// the test here, with its result.
    pub async fn next(&mut self, limit: Duration) -> Delivery {
        tokio::select! {
            biased;
            d = self.deliveries.recv() => match d {
                Some(d) => d,
                // The handler went with the run.
                None => panic!("the consumer's run ended: {:?}", (&mut self.run).await),
            },
            ended = &mut self.run => panic!("the consumer's run ended: {ended:?}"),
            () = sleep(limit) => panic!("no delivery within {limit:?}"),
        }
    }
}

impl Drop for Taker {
    fn drop(&mut self) {
        self.run.abort();
    }
}

/// Waits (bounded) until `cond` holds.
pub async fn eventually(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = tokio::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return;
        }
        sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {limit:?} waiting for: {what}");
}

/// Sends one message to a new `MemoryQueue` named `name`, and runs a consumer of it until
/// that message is acked (its polls last 1 s, so the stop waits at most that).
pub async fn run_until_one_acked(name: &str) {
    let q = MemoryQueue::builder().name(name).build().unwrap();
    q.send("job").unwrap();
    let consumer = Consumer::in_memory(&q).wait_time(secs(1)).build().unwrap();
    let acked = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let acked = acked.clone();
        move |d: Delivery| {
            let acked = acked.clone();
            async move {
                d.ack().await?;
                acked.notify_one();
                Ok::<_, sqs_consumer::Error>(())
            }
        }
    };
    consumer.run_until(handler, acked.notified()).await.unwrap();
}

/// A buffer log lines are written to.
#[derive(Clone)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::Write::write(&mut *self.0.lock().unwrap(), buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Lines as the suite reads them: no colours, thread names shown.
fn lines_to<S>(buffer: Buffer) -> impl tracing_subscriber::Layer<S> + Send + Sync
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(move || buffer.clone())
        .with_ansi(false)
        .with_thread_names(true)
}

/// A subscriber that writes every log line (debug and up, no colours) to the returned
/// buffer, through the leak guard.
pub fn buffered_subscriber() -> (Arc<Mutex<Vec<u8>>>, impl tracing::Subscriber + Send + Sync) {
    use tracing_subscriber::layer::SubscriberExt;
    let logs = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry()
        .with(log_guard::layer())
        .with(
            lines_to(Buffer(logs.clone()))
                .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
        );
    (logs, subscriber)
}

/// Installs, before the binary's first test, the global subscriber every test binary of the
/// suite has: the leak guard ([`log_guard`]) and the buffer [`global_logs`] reads.
/// `guard_logs!(layer)` adds a layer of the binary's own (its spans' exporter, say).
/// `tests/trace/logs.rs` checks that every test binary invokes it.
#[macro_export]
macro_rules! guard_logs {
    () => {
        $crate::guard_logs!(tracing_subscriber::layer::Identity::new());
    };
    ($extra:expr) => {
        #[ctor::ctor(unsafe)]
        fn install_the_global_subscriber() {
            $crate::common::install_global_subscriber($extra);
        }
    };
}

/// Whether [`global_logs`] was asked for: until then the global buffer takes nothing.
static CAPTURING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn global_buffer() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(Arc::default)
}

/// See [`guard_logs!`].
pub fn install_global_subscriber(
    extra: impl tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
) {
    use tracing_subscriber::layer::SubscriberExt;
    let capturing = tracing_subscriber::filter::filter_fn(|meta| {
        CAPTURING.load(std::sync::atomic::Ordering::Relaxed)
            && *meta.level() <= tracing::Level::DEBUG
    });
    let subscriber = tracing_subscriber::registry()
        .with(extra)
        .with(log_guard::layer())
        .with(lines_to(Buffer(global_buffer().clone())).with_filter(capturing));
    tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
    log_guard::fail_at_exit_on_leaks();
}

/// The log lines (debug and up) of the whole test binary from the first call on (spans are
/// entered on any thread of a runtime). Tests that run on both runtimes at once share it,
/// where thread-scoped subscribers would race.
pub fn global_logs() -> &'static Arc<Mutex<Vec<u8>>> {
    CAPTURING.store(true, std::sync::atomic::Ordering::Relaxed);
    global_buffer()
}

/// The log lines written while the returned guard lives (this thread only).
pub fn capture_logs() -> (Arc<Mutex<Vec<u8>>>, tracing::subscriber::DefaultGuard) {
    let (logs, subscriber) = buffered_subscriber();
    (logs, tracing::subscriber::set_default(subscriber))
}

/// A child process that is killed (and reaped) when the guard goes, so that a test which
/// fails while its child runs leaves no process behind.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Runs `command` to its end, its output collected, within `limit`: past it the child is
/// killed and the test fails with what it printed so far.
pub fn output_within(command: &mut std::process::Command, limit: Duration) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = KillOnDrop(
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the command starts"),
    );
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read(Box::new(child.0.stdout.take().expect("piped")));
    let stderr = read(Box::new(child.0.stderr.take().expect("piped")));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("the child's status") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.0.kill();
            let _ = child.0.wait();
            let out = stdout.join().unwrap_or_default();
            panic!(
                "the child ran longer than {limit:?}; it printed:\n{}",
                String::from_utf8_lossy(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}
