use super::*;
use crate::builder::queues::KeeperPlacement;
use crate::flow::in_flight_limit::InFlightLimit;
use crate::memory::MemoryQueue;
use crate::retry_policy::RetryPolicy;
use crate::test_support::seconds;

fn builder() -> ConsumerBuilder {
    Consumer::in_memory(&MemoryQueue::new())
}

fn refused(b: ConsumerBuilder, field: &str, allowed: &str) {
    refused_value(b, field, allowed);
}

/// As [`refused`], returning the value the error quotes.
fn refused_value(b: ConsumerBuilder, field: &str, allowed: &str) -> String {
    match b.build() {
        Err(Error::InvalidConfig {
            field: f,
            allowed: a,
            got,
        }) => {
            assert_eq!(f, field);
            assert!(a.contains(allowed), "{a:?} should mention {allowed:?}");
            got
        }
        other => panic!("expected InvalidConfig for {field}, got {other:?}"),
    }
}

#[test]
fn defaults_build() {
    let c = builder().build().expect("defaults are valid");
    let s = c.receive_settings();
    assert_eq!(s.visibility_timeout, None);
    assert_eq!(s.wait_time, Duration::from_secs(20));
    assert_eq!(s.receive_batch_size, 10);
    assert_eq!(s.max_in_flight, 40);
}

#[test]
fn bounds_are_accepted() {
    let lowest = (
        1,
        0,
        1,
        1,
        Duration::from_millis(100),
        Duration::from_nanos(1),
        1,
    );
    let highest = (
        43_200,
        20,
        10,
        120_000,
        Duration::from_secs(300),
        Duration::from_secs(43_200),
        64,
    );
    for (v, w, b, m, request, handler, receives) in [lowest, highest] {
        let c = builder()
            .visibility_timeout(Duration::from_secs(v))
            .wait_time(Duration::from_secs(w))
            .receive_batch_size(b)
            .max_in_flight(m)
            .request_timeout(request)
            .handler_timeout(handler)
            .max_concurrent_receives(receives)
            .shared_in_flight_limit(&InFlightLimit::new(m))
            .build()
            .expect("bounds are valid");
        let settings = c.receive_settings();
        assert_eq!(settings.visibility_timeout, Some(seconds(v)));
        assert_eq!(settings.max_concurrent_receives, receives);
        assert_eq!(
            settings
                .shared_in_flight_limit
                .as_ref()
                .map(InFlightLimit::max),
            Some(m)
        );
    }
}

#[test]
fn adaptive_visibility_bounds_are_visibility_timeouts_in_order() {
    let secs = Duration::from_secs;
    let field = "adaptive_visibility";
    for (min, max) in [
        (Duration::ZERO, secs(10)),
        (secs(1), secs(43_201)),
        (Duration::from_millis(1500), secs(10)),
    ] {
        refused(builder().adaptive_visibility(min, max), field, "1..=43200");
    }
    refused(
        builder().adaptive_visibility(secs(20), secs(10)),
        field,
        "min <= max",
    );
    for (min, max) in [(1, 1), (1, 43_200), (10, 120)] {
        let c = builder()
            .adaptive_visibility(secs(min), secs(max))
            .build()
            .expect("bounds are valid");
        let adaptive = c.receive_settings().adaptive.clone().expect("adaptive");
        let estimate = |start| adaptive.visibility_timeout(seconds(start)).secs();
        assert_eq!(estimate(0), min as u32);
        assert_eq!(estimate(u64::MAX), max as u32);
    }
    assert!(builder()
        .build()
        .unwrap()
        .receive_settings()
        .adaptive
        .is_none());
}

#[test]
fn out_of_range_settings_are_refused() {
    let vis = "1..=43200";
    refused(
        builder().visibility_timeout(Duration::ZERO),
        "visibility_timeout",
        vis,
    );
    refused(
        builder().visibility_timeout(Duration::from_secs(43_201)),
        "visibility_timeout",
        vis,
    );
    refused(
        builder().visibility_timeout(Duration::from_millis(1500)),
        "visibility_timeout",
        vis,
    );
    refused(
        builder().wait_time(Duration::from_secs(21)),
        "wait_time",
        "0..=20",
    );
    refused(
        builder().wait_time(Duration::from_millis(100)),
        "wait_time",
        "0..=20",
    );
    refused(
        builder().receive_batch_size(0),
        "receive_batch_size",
        "1..=10",
    );
    refused(
        builder().receive_batch_size(11),
        "receive_batch_size",
        "1..=10",
    );
    refused(builder().max_in_flight(0), "max_in_flight", "1..=120000");
    refused(
        builder().max_in_flight(120_001),
        "max_in_flight",
        "1..=120000",
    );
    for t in [Duration::from_millis(99), Duration::from_secs(301)] {
        refused(
            builder().request_timeout(t),
            "request_timeout",
            "100 ms..=300 s",
        );
    }
    for t in [Duration::ZERO, Duration::from_millis(999)] {
        refused(builder().give_up_after(t), "give_up_after", "at least 1 s");
    }
    for t in [Duration::from_secs(1), Duration::MAX] {
        assert!(builder().give_up_after(t).build().is_ok(), "{t:?}");
    }
    for t in [Duration::ZERO, Duration::from_secs(43_201)] {
        refused(
            builder().handler_timeout(t),
            "handler_timeout",
            "more than 0 and at most 43200 s",
        );
    }
    refused(
        builder().message_attribute_names(["tenant", "AWS.secret"]),
        "message_attribute_names",
        "`All`",
    );
    for n in [0, 120_001] {
        refused(
            builder().shared_in_flight_limit(&InFlightLimit::new(n)),
            "shared_in_flight_limit",
            "1..=120000",
        );
    }
    for rate in [0.0, -1.0, 0.0009, 100_000.5, f64::NAN, f64::INFINITY] {
        refused(
            builder().max_receive_rate(rate),
            "max_receive_rate",
            "0.001..=100000",
        );
        refused(
            builder().shared_rate_limit(&RateLimit::new(rate)),
            "shared_rate_limit",
            "0.001..=100000",
        );
    }
    refused(builder().max_batch(0), "max_batch", "1..=10000");
    refused(
        builder().max_in_flight(20_000).max_batch(10_001),
        "max_batch",
        "1..=10000",
    );
    refused(
        builder().max_batch(41),
        "max_batch",
        "at most max_in_flight",
    );
    refused(
        builder().batch_window(Duration::from_millis(300_001)),
        "batch_window",
        "0..=300 s",
    );
    let fifo = || Consumer::in_memory(&MemoryQueue::builder().fifo(true).build().unwrap());
    refused(
        fifo().batch_window(Duration::from_secs(1)),
        "batch_window",
        "FIFO",
    );
    refused(fifo().max_batch(5), "max_batch", "FIFO");
    assert!(fifo().max_batch(10).build().is_ok());
    assert!(builder()
        .max_in_flight(10_000)
        .max_batch(10_000)
        .batch_window(Duration::from_secs(300))
        .build()
        .is_ok());
    for rate in [0.001, 50.0, 100_000.0] {
        let built = builder()
            .max_receive_rate(rate)
            .shared_rate_limit(&RateLimit::new(rate))
            .build();
        assert!(built.is_ok(), "{rate}: {built:?}");
    }
    refused(
        builder().message_attribute_names([""]),
        "message_attribute_names",
        "1 to 256",
    );
    refused(
        builder()
            .message_system_attribute_names([MessageSystemAttributeName::from("NoSuchAttribute")]),
        "message_system_attribute_names",
        "names SQS knows",
    );
    for n in [0, 65] {
        refused(
            builder().max_concurrent_receives(n),
            "max_concurrent_receives",
            "1..=64",
        );
    }
    for (base, max) in [(60_000, 1_000), (500, 60_000), (1_000, 43_201_000)] {
        let policy = RetryPolicy::backoff(Duration::from_millis(base), Duration::from_millis(max));
        refused(
            builder().retry_policy(policy),
            "retry_policy",
            "1 s <= base <= max <= 43200 s",
        );
    }
}

#[test]
fn the_consumer_asks_for_the_system_attributes_it_needs() {
    use MessageSystemAttributeName as A;
    let c = builder()
        .message_system_attribute_names([A::SequenceNumber])
        .build()
        .unwrap();
    assert_eq!(
        c.receive_settings().system_attribute_names,
        [
            A::SequenceNumber,
            A::ApproximateReceiveCount,
            A::MessageGroupId,
            A::AwsTraceHeader,
            A::SentTimestamp
        ]
    );
    let c = builder()
        .message_system_attribute_names([A::All, A::SentTimestamp])
        .build()
        .unwrap();
    assert_eq!(c.receive_settings().system_attribute_names, [A::All]);
    let c = builder()
        .message_attribute_names(Vec::<String>::new())
        .build()
        .unwrap();
    assert_eq!(
        c.receive_settings().message_attribute_names,
        TRACE_ATTRIBUTES,
        "an empty list asks for no message attribute (but a trace context's)"
    );
}

/// What feature `opentelemetry` adds to a list of message attributes.
const TRACE_ATTRIBUTES: &[&str] = if cfg!(feature = "opentelemetry") {
    &["traceparent", "tracestate"]
} else {
    &[]
};

/// The message attributes a consumer built by `builder`, given `names`, asks for.
fn asked_for(builder: ConsumerBuilder, names: &[&str]) -> Vec<String> {
    builder
        .message_attribute_names(names.iter().copied())
        .build()
        .unwrap()
        .receive_settings()
        .message_attribute_names
        .clone()
}

#[test]
fn a_narrowed_list_still_asks_for_the_trace_context_with_opentelemetry() {
    let names = |given: &[&str]| asked_for(builder(), given);
    let mut expected = vec!["tenant"];
    expected.extend(TRACE_ATTRIBUTES);
    assert_eq!(names(&["tenant"]), expected);
    let mut given_one = names(&["tracestate", "tenant"]);
    let asked = given_one.len();
    given_one.sort_unstable();
    given_one.dedup();
    assert_eq!(given_one.len(), asked, "each name asked for once");
    assert_eq!(names(&["All"]), ["All"]);
    assert_eq!(names(&[".*"]), [".*"]);
}

/// A client of a real SQS endpoint (us-east-1) that these tests never call.
fn sqs_client() -> aws_sdk_sqs::Client {
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}

#[cfg(feature = "s3")]
fn s3() -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

#[cfg(feature = "s3")]
#[test]
fn payload_settings_are_checked_and_pointers_are_always_recognisable() {
    for max in [0, (2 << 30) + 1] {
        refused(
            builder().s3_payloads(s3()).max_payload_bytes(max),
            "max_payload_bytes",
            "1..=2147483648 (2 GiB)",
        );
    }
    refused(
        builder().delete_payload_on_ack(true),
        "delete_payload_on_ack",
        "only with s3_payloads",
    );
    refused(
        builder().payload_buckets(["payloads"]),
        "payload_buckets",
        "only with s3_payloads",
    );
    refused(
        builder().s3_payloads(s3()),
        "payload_buckets",
        "any_payload_bucket()",
    );
    let no_buckets: [&str; 0] = [];
    for bad in [
        &no_buckets[..],
        &["ab"],
        &["Payloads"],
        &["-payloads"],
        &["payloads."],
        &["pay_loads"],
        &["ok-bucket", &"x".repeat(64)],
    ] {
        refused(
            builder()
                .s3_payloads(s3())
                .payload_buckets(bad.iter().copied()),
            "payload_buckets",
            "3 to 63 of a-z 0-9 . -",
        );
    }
    for good in [&["abc"][..], &["my.payloads-2", &"x".repeat(63)]] {
        builder()
            .s3_payloads(s3())
            .payload_buckets(good.iter().copied())
            .build()
            .expect("valid bucket names");
    }
    builder()
        .s3_payloads(s3())
        .any_payload_bucket()
        .build()
        .expect("any bucket, knowingly");
    for max in [1, 2 << 30] {
        builder()
            .s3_payloads(s3())
            .payload_buckets(["payloads"])
            .max_payload_bytes(max)
            .delete_payload_on_ack(true)
            .build()
            .expect("bounds are valid");
    }
    let names = |given: &[&str]| asked_for(builder().s3_payloads(s3()).any_payload_bucket(), given);
    let both = ["ExtendedPayloadSize", "SQSLargePayloadSize"];
    let with_trace = |names: &[&'static str]| -> Vec<&'static str> {
        let mut names = names.to_vec();
        names.extend(TRACE_ATTRIBUTES);
        names
    };
    assert_eq!(names(&[]), with_trace(&both));
    assert_eq!(
        names(&["tenant"]),
        with_trace(&["tenant", both[0], both[1]])
    );
    assert_eq!(names(&["All"]), ["All"]);
    assert_eq!(names(&[".*"]), [".*"]);
    let without = builder()
        .message_attribute_names(["tenant"])
        .build()
        .unwrap();
    assert_eq!(
        without.receive_settings().message_attribute_names,
        with_trace(&["tenant"])
    );
}

#[tokio::test]
async fn a_malformed_queue_or_an_arn_of_another_region_is_refused() {
    let client = sqs_client();
    for bad in [
        "my queue",
        "",
        "https://",
        "arn:aws:sqs:us-east-1:42:orders",
    ] {
        refused(Consumer::builder(client.clone(), bad), "queue", "1 to 80");
    }
    refused(
        Consumer::builder(client.clone(), "arn:aws:sqs:eu-west-1:123456789012:orders"),
        "queue",
        "the client's region",
    );
    for good in [
        "orders",
        "orders.fifo",
        "arn:aws:sqs:us-east-1:123456789012:orders",
        "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
    ] {
        let consumer = Consumer::builder(client.clone(), good)
            .build()
            .unwrap_or_else(|e| panic!("{good}: {e}"));
        assert!(format!("{consumer:?}").contains(good), "{consumer:?}");
    }
}

#[tokio::test]
async fn the_keepers_own_client_shares_the_queues_round_trip() {
    let client = sqs_client();
    let source = Source::Sqs {
        client,
        queue: "orders".into(),
    };
    let (queue, keeper_queue) = queues(source, None, KeeperPlacement::Default).unwrap();
    let keeper_queue = keeper_queue.expect("the keeper has connections of its own");
    // What the receive loop's calls teach bounds the keeper's batches' waits.
    assert!(keeper_queue.shares_round_trip_with(&queue));
}

#[tokio::test]
async fn a_dead_letter_queue_is_checked_and_asks_for_what_its_copy_needs() {
    let client = sqs_client();
    let sqs = |queue: &str| Consumer::builder(client.clone(), queue);
    let (memory, failed) = (MemoryQueue::new(), MemoryQueue::new());
    for after_receives in [0, 1001] {
        refused(
            sqs("orders").dead_letter("orders-dlq", after_receives),
            "dead_letter",
            "after_receives in 1..=1000",
        );
    }
    refused(
        sqs("orders").dead_letter("bad name", 3),
        "dead_letter",
        "1 to 80",
    );
    refused(
        sqs("orders").dead_letter("arn:aws:sqs:eu-west-1:123456789012:dlq", 3),
        "dead_letter",
        "the client's region",
    );
    // The error quotes the queue as it was given (`Debug`, as every refused value).
    let got = refused_value(
        sqs("orders").dead_letter(&failed, 3),
        "dead_letter",
        "a queue URL",
    );
    assert_eq!(got, format!("{:?}", failed.name()));
    let got = refused_value(
        Consumer::in_memory(&memory).dead_letter("orders-dlq", 3),
        "dead_letter",
        "a MemoryQueue for a MemoryQueue consumer",
    );
    assert_eq!(got, r#""orders-dlq""#);
    let got = refused_value(
        sqs("orders").dead_letter("orders", 3),
        "dead_letter",
        "other than",
    );
    assert_eq!(got, r#""orders""#);
    let got = refused_value(
        Consumer::in_memory(&memory).dead_letter(&memory, 3),
        "dead_letter",
        "other than",
    );
    assert_eq!(got, format!("{:?}", memory.name()));
    refused(
        sqs("orders.fifo").dead_letter("dlq", 3),
        "dead_letter",
        "FIFO",
    );
    refused(
        sqs("orders").dead_letter("dlq.fifo", 3),
        "dead_letter",
        "FIFO",
    );
    for after_receives in [1, 1000] {
        sqs("orders.fifo")
            .dead_letter("dlq.fifo", after_receives)
            .build()
            .expect("in range, same kind");
    }

    use MessageSystemAttributeName as A;
    let c = Consumer::in_memory(&memory)
        .message_attribute_names(["tenant"])
        .message_system_attribute_names([A::SentTimestamp])
        .dead_letter(&failed, 3)
        .build()
        .unwrap();
    let settings = c.receive_settings();
    assert_eq!(
        settings.message_attribute_names,
        ["All"],
        "the copy keeps all"
    );
    assert!(settings
        .system_attribute_names
        .contains(&A::ApproximateFirstReceiveTimestamp));
}

/// The former names are the new ones under another name: they set the same settings and are
/// refused with the new field's name.
#[test]
#[allow(deprecated)]
fn the_former_names_set_what_the_new_ones_set() {
    use crate::flow::rate_limit::RateLimit;
    let (limit, rate) = (InFlightLimit::new(7), RateLimit::new(3.0));
    let former = ConsumerBuilder::batch_size(builder(), 4);
    let former = ConsumerBuilder::in_flight_limit(former, &limit);
    let former = ConsumerBuilder::rate_limit(former, &rate).build().unwrap();
    let former = former.receive_settings();
    assert_eq!(former.receive_batch_size, 4);
    assert_eq!(
        former
            .shared_in_flight_limit
            .as_ref()
            .map(InFlightLimit::max),
        Some(7)
    );
    assert!(!former.rate_limits.is_empty(), "the shared rate is set");
    refused(
        ConsumerBuilder::batch_size(builder(), 11),
        "receive_batch_size",
        "1..=10",
    );
    refused(
        ConsumerBuilder::rate_limit(builder(), &RateLimit::new(0.0)),
        "shared_rate_limit",
        "0.001..=100000",
    );
}
