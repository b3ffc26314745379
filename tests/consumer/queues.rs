//! Where the messages come from and how far behind the consumer is: a queue given by name or
//! ARN (one `GetQueueUrl`), a name that does not exist, the queue's backlog, and each
//! message's age. On `MemoryQueue` where it applies and on the test server.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use common::{secs, Kind, TestQueue};
use sqs_consumer::{Consumer, ErrorKind};

/// The operations a client sent, in order, recorded by an interceptor.
#[derive(Debug, Clone, Default)]
struct Sent(Arc<Mutex<Vec<String>>>);

impl Sent {
    fn count(&self, operation: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|o| *o == operation)
            .count()
    }
}

impl Intercept for Sent {
    fn name(&self) -> &'static str {
        "Sent"
    }

    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        if let Some(metadata) = cfg.load::<Metadata>() {
            self.0.lock().unwrap().push(metadata.name().to_owned());
        }
        Ok(())
    }
}

/// A client of the test server whose requests are recorded in `sent`.
fn recording_client(sent: &Sent) -> aws_sdk_sqs::Client {
    let config = common::server_client()
        .config()
        .to_builder()
        .interceptor(sent.clone())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

async fn queue_name_and_arn(client: &aws_sdk_sqs::Client, url: &str) -> (String, String) {
    let arn = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("a QueueArn");
    let name = arn.rsplit(':').next().unwrap().to_owned();
    (name, arn)
}

/// A queue given by name, and one given by ARN, is found with one `GetQueueUrl` (however
/// often its URL or backlog is asked for), its messages are consumed, and the consumer shows
/// the URL from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn a_queue_given_by_name_or_arn_costs_one_get_queue_url() {
    require_server!("a_queue_given_by_name_or_arn_costs_one_get_queue_url");
    let q = TestQueue::new(Kind::Server, 30).await;
    let TestQueue::Server { client, url } = &q else {
        unreachable!()
    };
    let (name, arn) = queue_name_and_arn(client, url).await;
    for given in [name, arn] {
        q.send("by name").await;
        let sent = Sent::default();
        let consumer = Consumer::builder(recording_client(&sent), given.clone())
            .wait_time(secs(1))
            .build()
            .unwrap();
        let d = common::take_one(&consumer).await;
        assert_eq!(d.body(), "by name");
        d.ack().await.unwrap();
        assert_eq!(consumer.queue_url().await.unwrap(), *url, "{given}");
        assert_eq!(consumer.backlog().await.unwrap().visible, 0);
        assert!(
            format!("{consumer:?}").contains(url.as_str()),
            "{consumer:?}"
        );
        assert_eq!(sent.count("GetQueueUrl"), 1, "{given}: {:?}", sent.0);
        assert_eq!(
            sent.count("GetQueueAttributes"),
            1 + 1,
            "visibility + backlog"
        );
    }
}

/// A name that does not exist ends `run` with a fatal error naming it, after one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn a_queue_name_that_does_not_exist_is_an_error_naming_it() {
    require_server!("a_queue_name_that_does_not_exist_is_an_error_naming_it");
    let sent = Sent::default();
    let name = common::unique_name("missing");
    let consumer = Consumer::builder(recording_client(&sent), name.clone())
        .build()
        .unwrap();
    let run = consumer.run(|d: sqs_consumer::Delivery| d.ack());
    let err = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("run ends at once")
        .expect_err("no such queue");
    assert_eq!(err.kind(), ErrorKind::Fatal, "{err}");
    assert!(err.to_string().contains(&name), "{err}");
    assert_eq!(*sent.0.lock().unwrap(), ["GetQueueUrl"]);
    let err = consumer.queue_url().await.unwrap_err();
    assert!(err.is_fatal() && err.to_string().contains(&name), "{err}");
}

/// `backlog` reports visible, in-flight and delayed messages, with one request.
async fn the_backlog_counts_visible_in_flight_and_delayed(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    q.send_many("m", 3).await;
    q.send_delayed("later", secs(600)).await;
    let held = q.receive_up_to(1, Duration::ZERO).await;
    assert_eq!(held.len(), 1);
    let consumer = q.consumer().build().unwrap();
    let backlog = consumer.backlog().await.unwrap();
    assert_eq!(
        (backlog.visible, backlog.in_flight, backlog.delayed),
        (2, 1, 1),
        "{backlog:?}"
    );
    if let TestQueue::Memory(memory) = &q {
        let requests = memory.requests();
        assert_eq!(
            requests.requests(sqs_consumer::memory::Action::GetQueueAttributes),
            1
        );
    }
}

/// Every delivery knows when its message was sent, even when the user's selection of system
/// attributes leaves `SentTimestamp` out; its age grows with the time it waited.
async fn a_delivery_knows_when_its_message_was_sent(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    let before = SystemTime::now() - Duration::from_secs(1);
    q.send("aged").await;
    // The message waits at least this long (wall clock) before it is received.
    let waited = Duration::from_millis(1500);
    std::thread::sleep(waited);
    let consumer = q
        .consumer()
        .wait_time(secs(1))
        .message_system_attribute_names([MessageSystemAttributeName::ApproximateReceiveCount])
        .build()
        .unwrap();
    let d = common::take_one(&consumer).await;
    let sent = d.sent_at().expect("SentTimestamp is always asked for");
    assert!(sent >= before && sent <= SystemTime::now(), "{sent:?}");
    let age = d.age().unwrap();
    // The server's clock is this machine's: the age is at least the wait, and not hours.
    assert!(age >= waited - Duration::from_millis(5), "{age:?}");
    assert!(age < Duration::from_secs(600), "{age:?}");
    d.ack().await.unwrap();
}

/// Through the real SDK, answered by mocks (no server): a consumer of the queue `given`,
/// whose `GetQueueUrl` answers `resolve` counts, takes one message and acks it; every receive
/// must go to the mocked queue's URL, which `queue_url` gives before and after.
async fn one_message_through_mocks(given: &str, resolve: &aws_smithy_mocks::Rule) -> Consumer {
    use aws_sdk_sqs::Client;
    use aws_smithy_mocks::mock;
    use common::sdk::{deletes, mocked, receive_once, URL};

    let (logs, _guard) = common::capture_logs();
    let (receive, delete) = (receive_once(), deletes());
    let elsewhere = mock!(Client::receive_message)
        .match_requests(|r| r.queue_url() != Some(URL))
        .then_output(|| panic!("a receive went to another URL than the queue's"));
    let client = mocked(&[&elsewhere, resolve, &receive, &delete]);
    let consumer = Consumer::builder(client, given)
        .visibility_timeout(secs(10))
        .build()
        .unwrap();
    assert_eq!(consumer.queue_url().await.unwrap(), URL, "{given}");
    let d = common::take_one(&consumer).await;
    d.span().in_scope(|| tracing::info!("in the delivery span"));
    d.ack().await.unwrap();
    assert_eq!(consumer.queue_url().await.unwrap(), URL, "{given}");
    assert_eq!(delete.num_calls(), 1, "{given}");
    // The span names the queue by its name alone, however it was given.
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let line = logs.lines().find(|l| l.contains("in the delivery span"));
    assert!(
        line.is_some_and(|l| l.contains("messaging.destination.name=\"jobs\"")),
        "{given}: {line:?}"
    );
    consumer
}

/// A name is resolved with one `GetQueueUrl` for that name, every call after it goes to the
/// URL it answered, and the URL is asked for once however often the consumer needs it.
#[tokio::test(start_paused = true)]
async fn a_name_is_resolved_once_and_its_url_used_for_every_call() {
    use aws_sdk_sqs::operation::get_queue_url::GetQueueUrlOutput;
    use aws_smithy_mocks::mock;
    use common::sdk::URL;

    let resolve = mock!(aws_sdk_sqs::Client::get_queue_url)
        .match_requests(|r| {
            r.queue_name() == Some("jobs") && r.queue_owner_aws_account_id() == Some("123456789012")
        })
        .then_output(|| GetQueueUrlOutput::builder().queue_url(URL).build());
    let arn = "arn:aws:sqs:us-east-1:123456789012:jobs";
    let consumer = one_message_through_mocks(arn, &resolve).await;
    assert!(format!("{consumer:?}").contains(URL), "{consumer:?}");
    assert_eq!(resolve.num_calls(), 1);
}

/// A queue given by URL is used as it is: every call goes to that URL, and no `GetQueueUrl`
/// is ever made.
#[tokio::test(start_paused = true)]
async fn a_queue_given_by_url_is_used_as_given_without_get_queue_url() {
    use aws_sdk_sqs::operation::get_queue_url::GetQueueUrlOutput;
    use aws_smithy_mocks::mock;
    use common::sdk::URL;

    let resolve = mock!(aws_sdk_sqs::Client::get_queue_url)
        .then_output(|| GetQueueUrlOutput::builder().queue_url(URL).build());
    one_message_through_mocks(URL, &resolve).await;
    assert_eq!(resolve.num_calls(), 0);
}

/// A name that does not exist ends `run` at once with a fatal error naming it, after one
/// `GetQueueUrl` (mocked: no server).
#[tokio::test(start_paused = true)]
async fn a_missing_name_ends_run_after_one_request_naming_it() {
    use aws_sdk_sqs::Client;
    use aws_smithy_mocks::mock;
    use common::sdk::{mocked, sqs_error};

    let resolve = mock!(Client::get_queue_url)
        .then_http_response(|| sqs_error(400, "AWS.SimpleQueueService.NonExistentQueue"));
    let consumer = Consumer::builder(mocked(&[&resolve]), "no-such-jobs")
        .build()
        .unwrap();
    let err = consumer
        .run(|d: sqs_consumer::Delivery| d.ack())
        .await
        .expect_err("no such queue");
    assert!(err.is_fatal(), "{err}");
    assert!(err.to_string().contains("`no-such-jobs`"), "{err}");
    assert_eq!(resolve.num_calls(), 1);
}

/// `backlog` maps SQS's three counts to their fields (mocked: no server).
#[tokio::test(start_paused = true)]
async fn the_backlog_maps_each_count_to_its_field() {
    use aws_sdk_sqs::operation::get_queue_attributes::GetQueueAttributesOutput;
    use aws_sdk_sqs::Client;
    use aws_smithy_mocks::mock;
    use common::sdk::{mocked, URL};
    use QueueAttributeName as A;

    let attributes = mock!(Client::get_queue_attributes).then_output(|| {
        GetQueueAttributesOutput::builder()
            .attributes(A::ApproximateNumberOfMessages, "7")
            .attributes(A::ApproximateNumberOfMessagesNotVisible, "5")
            .attributes(A::ApproximateNumberOfMessagesDelayed, "3")
            .build()
    });
    let consumer = Consumer::builder(mocked(&[&attributes]), URL)
        .build()
        .unwrap();
    let backlog = consumer.backlog().await.unwrap();
    assert_eq!(
        (backlog.visible, backlog.in_flight, backlog.delayed),
        (7, 5, 3)
    );
    assert_eq!(attributes.num_calls(), 1);
}

on_both!(
    the_backlog_counts_visible_in_flight_and_delayed,
    a_delivery_knows_when_its_message_was_sent,
);
