//! The integrations, on `MemoryQueue` and on the test server where a server is involved:
//! typed bodies and SNS envelopes (feature `json`), `Consumer::from_env` (feature
//! `from-env`), one in-flight budget for several consumers, trace context in the `delivery`
//! span, a run's receive loop on the runtime's workers, and metrics (feature `metrics`). Figures are printed
//! (`cargo test --test integrations -- --nocapture`). Payloads in S3 are in `payloads`
//! (feature `s3`).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
#[cfg(feature = "s3")]
mod fake_s3;
mod payloads;

guard_logs!();

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{secs, Kind, TestQueue};
use sqs_consumer::{Consumer, Delivery, InFlightLimit};
use tokio::time::{sleep, Instant};
use tracing::Instrument;

on_both!(
    three_consumers_sharing_a_limit_never_hold_more_and_a_quiet_queue_is_not_starved,
    the_delivery_span_records_the_trace_context,
);

#[cfg(feature = "json")]
on_both!(
    sns_envelopes_and_json_bodies_decode_and_bad_ones_are_refused,
    eventbridge_events_and_every_envelope_unwrap_to_the_same_value,
);

#[cfg(feature = "metrics")]
on_both!(metrics_label_the_queue_by_its_name);

async fn three_consumers_sharing_a_limit_never_hold_more_and_a_quiet_queue_is_not_starved(
    kind: Kind,
) {
    const LIMIT: usize = 8;
    const EACH: usize = 120;
    const HOLD: Duration = Duration::from_millis(300);
    let limit = InFlightLimit::new(LIMIT);
    let (busy_a, busy_b, quiet) = (
        TestQueue::new(kind, 30).await,
        TestQueue::new(kind, 30).await,
        TestQueue::new(kind, 30).await,
    );
    busy_a.send_many("a", EACH).await;
    busy_b.send_many("b", EACH).await;
    let consumers: Vec<Consumer> = [&busy_a, &busy_b, &quiet]
        .iter()
        .map(|q| {
            q.consumer()
                .wait_time(secs(1))
                .shared_in_flight_limit(&limit)
                .build()
                .unwrap()
        })
        .collect();
    let quiet_handled = Arc::new(Mutex::new(None::<Instant>));
    let handler = |quiet_handled: Arc<Mutex<Option<Instant>>>| {
        move |d: Delivery| {
            let quiet_handled = quiet_handled.clone();
            async move {
                if d.body() == "quiet" {
                    *quiet_handled.lock().unwrap() = Some(Instant::now());
                } else {
                    sleep(HOLD).await;
                }
                d.ack().await
            }
        }
    };
    let most = Arc::new(Mutex::new(0usize));
    let samples = Arc::new(Mutex::new(0usize));
    // Sampled all along, every 5 ms: the deliveries held by the three together.
    let sample = {
        let (most, samples) = (most.clone(), samples.clone());
        let consumers = &consumers;
        let limit = &limit;
        async move {
            loop {
                let held: u64 = consumers.iter().map(|c| c.stats().in_flight).sum();
                assert!(held as usize <= LIMIT, "{held} held at once");
                assert!(limit.in_use() <= LIMIT);
                {
                    let mut most = most.lock().unwrap();
                    *most = (*most).max(held as usize);
                }
                *samples.lock().unwrap() += 1;
                sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let check = async {
        // Let the busy queues take the whole budget.
        let start = Instant::now();
        while limit.in_use() < LIMIT {
            assert!(start.elapsed() < secs(30), "the budget never filled");
            sleep(Duration::from_millis(10)).await;
        }
        sleep(secs(1)).await;
        quiet.send("quiet").await;
        let sent = Instant::now();
        loop {
            if let Some(at) = *quiet_handled.lock().unwrap() {
                break at - sent;
            }
            assert!(
                sent.elapsed() < secs(30),
                "the quiet queue's message was starved"
            );
            sleep(Duration::from_millis(5)).await;
        }
    };
    let runs = futures::future::join_all(
        consumers
            .iter()
            .map(|c| c.run(handler(quiet_handled.clone()))),
    );
    let took = tokio::select! {
        results = runs => panic!("a run ended: {results:?}"),
        () = sample => unreachable!("the sampler never ends"),
        took = check => took,
    };
    let samples = *samples.lock().unwrap();
    // Within one receive of a slot coming free: the busy handlers free one every few tens of
    // milliseconds, and the quiet consumer's next receive is then under way (its long poll
    // answers as soon as the message is there).
    // Starved, it would wait for the busy queues to drain (2 * EACH * HOLD / LIMIT = 9 s).
    let starved = HOLD * (2 * EACH / LIMIT) as u32;
    assert!(
        took < starved / 3,
        "the quiet queue's message waited {took:?}"
    );
    common::report(&format!(
        "shared_in_flight_limit ({kind:?}): at most {} of {LIMIT} held across three consumers in \
         {samples} samples; the quiet queue's message handled {took:.1?} after it was sent, \
         the other two saturated",
        most.lock().unwrap()
    ));
}

/// A run awaited on a thread that is no worker of its runtime (as `#[tokio::main]`'s future
/// is) receives on one of the workers, in the caller's span.
#[test]
fn a_runs_receive_loop_runs_on_a_worker_in_the_callers_span() {
    let logs = common::global_logs();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("run-worker")
        .enable_all()
        .build()
        .unwrap();
    let span = tracing::info_span!("caller", run = "awaited off the workers");
    rt.block_on(common::run_until_one_acked("loop-on-a-worker").instrument(span));
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("consumer started") && l.contains("loop-on-a-worker"))
        .unwrap_or_else(|| panic!("no start logged: {text}"));
    assert!(line.contains("run-worker"), "{line}");
    assert!(
        line.contains("caller{run=\"awaited off the workers\"}"),
        "{line}"
    );
}

async fn the_delivery_span_records_the_trace_context(kind: Kind) {
    let logs = common::global_logs();
    const X_RAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1";
    const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let q = TestQueue::new(kind, 30).await;
    q.send_traced("traced", X_RAY, TRACEPARENT).await;
    let consumer = q.consumer().wait_time(secs(1)).build().unwrap();
    let d = common::take_one(&consumer).await;
    let id = d.message_id().to_owned();
    d.ack().await.unwrap(); // logs "acked" at debug, inside the delivery span
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains(&id) && l.contains("acked"))
        .unwrap_or_else(|| panic!("no log line for {id}"));
    assert!(
        line.contains(&format!("aws_trace_header={X_RAY}")),
        "{line}"
    );
    assert!(
        line.contains(&format!("traceparent={TRACEPARENT}")),
        "{line}"
    );
    // OpenTelemetry's names for a consumer's "process" span (semantic conventions 1.45.0),
    // the queue named by its name alone: never by its URL, which carries the account id.
    for field in [
        "otel.kind=\"consumer\"",
        "messaging.system=\"aws_sqs\"",
        "messaging.operation.type=\"process\"",
        "messaging.operation.name=\"process\"",
        &format!("messaging.destination.name=\"{}\"", q.short_name()),
        &format!("messaging.message.id=\"{id}\""),
        &format!("otel.name=process {}", q.short_name()),
    ] {
        assert!(line.contains(field), "no {field}: {line}");
    }
    if let Some(url) = q.url() {
        let account = url.rsplit('/').nth(1).unwrap_or(url);
        assert!(
            !line.contains(account),
            "the account id in the span: {line}"
        );
    }
    // And the message's age at the receive, in whole milliseconds.
    let age = line
        .split("age_ms=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|ms| ms.parse::<u64>().ok());
    assert!(age.is_some_and(|ms| ms < 600_000), "no age_ms: {line}");
}

#[cfg(feature = "json")]
async fn sns_envelopes_and_json_bodies_decode_and_bad_ones_are_refused(kind: Kind) {
    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Order {
        id: u64,
        items: Vec<String>,
    }
    /// An envelope with the fields SNS sends, around `message`.
    fn envelope(message: &str, drop_field: Option<&str>) -> String {
        let mut fields = serde_json::json!({
            "Type": "Notification",
            "MessageId": "da41e39f-ea4d-435a-b922-c6aae3915ebe",
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
            "Subject": "new order",
            "Message": message,
            "Timestamp": "2026-11-30T12:00:00.000Z",
            "SignatureVersion": "1",
            "Signature": "EXAMPLEpH+..",
            "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000.pem",
            "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
            "MessageAttributes": {
                "tenant": {"Type": "String", "Value": "acme"},
                "priority": {"Type": "Number", "Value": "2"}
            }
        });
        if let (Some(name), Some(map)) = (drop_field, fields.as_object_mut()) {
            map.remove(name);
        }
        fields.to_string()
    }
    let q = TestQueue::new(kind, 30).await;
    let order = r#"{"id": 7, "items": ["book", "pen"]}"#;
    q.send(&envelope(order, None)).await;
    q.send(&envelope(order, Some("TopicArn"))).await;
    q.send(order).await; // raw message delivery
    q.send("not json").await;
    let consumer = q.consumer().wait_time(secs(1)).build().unwrap();
    let mut taker = common::Taker::start(consumer);
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        let d = taker.next(secs(30)).await;
        let outcome = match d.sns() {
            Ok(n) => {
                assert_eq!(n.topic_arn, "arn:aws:sns:us-east-1:123456789012:orders");
                assert_eq!(n.subject.as_deref(), Some("new order"));
                assert_eq!(n.message_attributes["tenant"].value, "acme");
                assert_eq!(n.message_attributes["priority"].data_type, "Number");
                let decoded: Order = n.json().unwrap();
                assert_eq!(decoded.items, ["book", "pen"]);
                "envelope".to_owned()
            }
            Err(sqs_consumer::Error::Decode {
                expected, source, ..
            }) => {
                assert_eq!(expected, "an SNS notification envelope");
                let why = source.to_string();
                if why.contains("`TopicArn`") {
                    "missing TopicArn".to_owned()
                } else if why.contains("raw message delivery") {
                    // The body is the order itself: json() reads it.
                    let raw: Order = d.json().unwrap();
                    assert_eq!(raw.id, 7);
                    "raw".to_owned()
                } else {
                    match d.json::<Order>() {
                        Err(sqs_consumer::Error::Decode { expected, .. }) => {
                            assert!(expected.contains("Order"), "{expected}");
                            "not json".to_owned()
                        }
                        other => panic!("{other:?}"),
                    }
                }
            }
            Err(other) => panic!("not a decode error: {other}"),
        };
        outcomes.push(outcome);
        d.ack().await.unwrap();
    }
    outcomes.sort();
    assert_eq!(
        outcomes,
        ["envelope", "missing TopicArn", "not json", "raw"]
    );
}

#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn metrics_go_through_the_facade() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let q = common::memory_queue(30);
    for i in 0..5 {
        q.send(format!("m{i}")).unwrap();
    }
    // The consumer takes its metric handles from the recorder installed when it is built.
    let consumer = metrics::with_local_recorder(&recorder, || {
        Consumer::in_memory(&q)
            .visibility_timeout(secs(10))
            .build()
            .unwrap()
    });
    let handler = |d: Delivery| async move {
        sleep(secs(6)).await; // one extension each, at 5 s
        if d.body() == "m4" {
            return Err("failed on purpose".into());
        }
        d.ack().await?;
        Ok::<(), sqs_consumer::BoxError>(())
    };
    common::run_while(
        &consumer,
        handler,
        common::eventually("handled", Duration::from_secs(100), || {
            consumer.stats().acked == 4 && consumer.stats().handler_errors == 1
        }),
    )
    .await;
    let snapshot = snapshotter.snapshot().into_hashmap();
    let value = |name: &str| {
        snapshot
            .iter()
            .find(|(key, _)| key.key().name() == name)
            .map(|(key, (_, _, value))| {
                let labels: Vec<String> = key
                    .key()
                    .labels()
                    .map(|l| format!("{} = {}", l.key(), l.value()))
                    .collect();
                (labels, value)
            })
            .unwrap_or_else(|| panic!("no metric {name}"))
    };
    let counter = |name: &str| match value(name).1 {
        DebugValue::Counter(n) => *n,
        other => panic!("{name}: {other:?}"),
    };
    let histogram = |name: &str| match value(name).1 {
        DebugValue::Histogram(v) => v.len(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(counter("sqs_consumer_received_total"), 5);
    assert_eq!(counter("sqs_consumer_acked_total"), 4);
    assert_eq!(counter("sqs_consumer_extended_total"), 5);
    assert_eq!(counter("sqs_consumer_handler_errors_total"), 1);
    assert_eq!(histogram("sqs_consumer_handler_duration_seconds"), 5);
    assert_eq!(histogram("sqs_consumer_extension_lateness_seconds"), 5);
    assert!(histogram("sqs_consumer_receive_batch_size") >= 1);
    assert_eq!(
        histogram("sqs_consumer_message_age_seconds"),
        5,
        "one per message"
    );
    match value("sqs_consumer_visibility_timeout_seconds").1 {
        DebugValue::Gauge(t) => assert_eq!(t.into_inner(), 10.0, "the timeout in force"),
        other => panic!("the visibility timeout: {other:?}"),
    }
    let (labels, _) = value("sqs_consumer_acked_total");
    assert_eq!(labels, [format!("queue = {}", q.name())]);
}

/// How receives fare goes through the facade too: the failures, the current run of them,
/// and when SQS last answered, in Unix seconds (0 before the first answer).
#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn receive_health_goes_through_the_facade() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use sqs_consumer::memory::Action;

    /// The three, as they stand (the snapshot takes each value, so it is read once).
    fn health(snapshotter: &Snapshotter) -> [f64; 3] {
        let snapshot = snapshotter.snapshot().into_hashmap();
        let value = |name: &str| match snapshot.iter().find(|(key, _)| key.key().name() == name) {
            Some((_, (_, _, DebugValue::Counter(n)))) => *n as f64,
            Some((_, (_, _, DebugValue::Gauge(g)))) => g.into_inner(),
            other => panic!("{name}: {other:?}"),
        };
        [
            "sqs_consumer_receive_failures_total",
            "sqs_consumer_consecutive_receive_failures",
            "sqs_consumer_last_receive_timestamp_seconds",
        ]
        .map(value)
    }
    let unix_now = || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.unwrap().as_secs_f64()
    };
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let q = common::memory_queue(30);
    q.fail_next(Action::ReceiveMessage, "InternalError", 3);
    q.send("after the failures").unwrap();
    let consumer =
        metrics::with_local_recorder(&recorder, || Consumer::in_memory(&q).build().unwrap());
    let before = unix_now();
    let during = common::run_while(&consumer, |d: Delivery| d.ack(), async {
        common::eventually("3 failures", secs(100), || {
            consumer.stats().consecutive_receive_failures == 3
        })
        .await;
        let during = health(&snapshotter);
        common::eventually("the ack", secs(100), || consumer.stats().acked == 1).await;
        during
    })
    .await;
    assert_eq!(
        during,
        [3.0, 3.0, 0.0],
        "during the failures, before any answer"
    );
    let [failures, consecutive, answered] = health(&snapshotter);
    assert_eq!((failures, consecutive), (0.0, 0.0), "no failure since");
    assert!(
        (before..=unix_now()).contains(&answered),
        "last answer at {answered}, the run from {before}"
    );
}

/// An EventBridge event as a rule delivers it to an SQS target (the example of EventBridge's
/// User Guide, "Amazon EventBridge events"), with `detail` as given.
#[cfg(feature = "json")]
fn eventbridge_event(detail: &str) -> String {
    format!(
        r#"{{"version": "0", "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
            "detail-type": "Order Placed", "source": "com.example.orders",
            "account": "111122223333", "time": "2026-11-30T12:00:00Z", "region": "us-west-1",
            "resources": [], "detail": {detail}}}"#
    )
}

/// An SNS notification with the fields SNS sends (as in
/// `sns_envelopes_and_json_bodies_decode_and_bad_ones_are_refused`), around `message`.
#[cfg(feature = "json")]
fn sns_notification(message: &str) -> String {
    serde_json::json!({
        "Type": "Notification",
        "MessageId": "da41e39f-ea4d-435a-b922-c6aae3915ebe",
        "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
        "Message": message,
        "Timestamp": "2026-11-30T12:00:00.000Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLEpH+..",
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000.pem",
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe"
    })
    .to_string()
}

/// `eventbridge::<T>()` reads an event's metadata and `detail`; `json_unwrapped::<T>()`
/// reads the same order from a raw body, an SNS notification, an EventBridge event and an
/// event inside a notification, and says which form it tried when the value is wrong.
#[cfg(feature = "json")]
async fn eventbridge_events_and_every_envelope_unwrap_to_the_same_value(kind: Kind) {
    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Order {
        id: u64,
    }
    let order = r#"{"id": 7}"#;
    let q = TestQueue::new(kind, 30).await;
    let forms = [
        ("raw", order.to_owned()),
        ("sns", sns_notification(order)),
        ("eventbridge", eventbridge_event(order)),
        (
            "eventbridge in sns",
            sns_notification(&eventbridge_event(order)),
        ),
        ("bad detail", eventbridge_event(r#"{"id": "seven"}"#)),
    ];
    for (_, body) in &forms {
        q.send(body).await;
    }
    let consumer = q.consumer().wait_time(secs(1)).build().unwrap();
    let mut taker = common::Taker::start(consumer);
    let mut seen = Vec::new();
    for _ in 0..forms.len() {
        let d = taker.next(secs(30)).await;
        let (form, _) = forms
            .iter()
            .find(|(_, body)| body.as_str() == d.body())
            .expect("a body that was sent");
        match d.json_unwrapped::<Order>() {
            Ok(decoded) => assert_eq!(decoded, Order { id: 7 }, "{form}"),
            Err(sqs_consumer::Error::Decode { expected, .. }) => {
                assert_eq!(*form, "bad detail");
                assert_eq!(
                    expected,
                    "JSON for `Order` in the EventBridge event's `detail`"
                );
            }
            Err(other) => panic!("{form}: {other}"),
        }
        if form.starts_with("eventbridge") && *form != "eventbridge in sns" {
            let event = d.eventbridge::<Order>().unwrap();
            assert_eq!(event.detail, Order { id: 7 });
            assert_eq!(
                (event.source.as_str(), event.detail_type.as_str()),
                ("com.example.orders", "Order Placed")
            );
            assert_eq!(event.id, "6a7e8feb-b491-4cf7-a9f1-bf3703467718");
            assert_eq!(event.time, "2026-11-30T12:00:00Z");
        }
        if *form == "raw" {
            let err = d.eventbridge::<Order>().unwrap_err().to_string();
            assert!(err.contains("sent to the queue directly"), "{err}");
        }
        seen.push(*form);
        d.ack().await.unwrap();
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        [
            "bad detail",
            "eventbridge",
            "eventbridge in sns",
            "raw",
            "sns"
        ]
    );
}

/// Metrics name the queue by its name, never by the URL the consumer was given (it carries
/// the account id).
#[cfg(feature = "metrics")]
async fn metrics_label_the_queue_by_its_name(kind: Kind) {
    use metrics_util::debugging::DebuggingRecorder;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let q = TestQueue::new(kind, 30).await;
    q.send("labelled").await;
    let consumer = metrics::with_local_recorder(&recorder, || {
        q.consumer().wait_time(secs(1)).build().unwrap()
    });
    let d = common::take_one(&consumer).await;
    d.ack().await.unwrap();
    let labels: Vec<String> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .flat_map(|(key, ..)| {
            let labels: Vec<String> = key.key().labels().map(|l| l.value().to_owned()).collect();
            labels
        })
        .collect();
    assert!(!labels.is_empty());
    assert!(labels.iter().all(|l| l == q.short_name()), "{labels:?}");
}

#[cfg(feature = "from-env")]
const FROM_ENV_QUEUE: &str = "SQS_CONSUMER_FROM_ENV_QUEUE";

/// The child process of `from_env_reaches_the_server_through_the_environment_alone`: a
/// consumer built with `Consumer::from_env`, in a process whose environment names the
/// server. Not a test on its own.
#[cfg(feature = "from-env")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of from_env_reaches_the_server_through_the_environment_alone"]
async fn from_env_child() {
    // The queue by name: resolved through the same environment.
    // Run on its own (the test command includes ignored tests) it has nothing to do.
    let Ok(name) = std::env::var(FROM_ENV_QUEUE) else {
        return;
    };
    let consumer = Consumer::from_env(name)
        .await
        .wait_time(secs(1))
        .build()
        .unwrap();
    let d = common::take_one(&consumer).await;
    println!("got {}", d.body());
    d.ack().await.unwrap();
    println!("acked");
}

#[cfg(feature = "from-env")]
#[test]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
fn from_env_reaches_the_server_through_the_environment_alone() {
    crate::require_server!("from_env_reaches_the_server_through_the_environment_alone");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = rt.block_on(async {
        let q = TestQueue::new(Kind::Server, 30).await;
        q.send("hello from the environment").await;
        match q {
            TestQueue::Server { url, .. } => url,
            TestQueue::Memory(_) => unreachable!(),
        }
    });
    let empty = std::env::temp_dir().join("sqs-consumer-no-aws-config");
    let output = common::output_within(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "from_env_child", "--ignored", "--nocapture"])
            .env(FROM_ENV_QUEUE, url.rsplit('/').next().unwrap())
            // The environment alone says where the server is and who we are.
            .env("AWS_ENDPOINT_URL_SQS", common::server_endpoint())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_CONFIG_FILE", &empty)
            .env("AWS_SHARED_CREDENTIALS_FILE", &empty)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_ENDPOINT_URL"),
        // The child receives one message from a local server: seconds.
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("got hello from the environment"),
        "{}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("acked"), "{stdout}");
    let left = rt.block_on(common::left_on_server(&common::server_client(), &url));
    assert_eq!(left, 0);
}
