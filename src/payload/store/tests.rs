use aws_sdk_s3::operation::get_object::GetObjectOutput;
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_mocks::{mock, mock_client, RuleMode};
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;

use super::*;

fn location(declared_size: u64) -> PayloadLocation {
    location_in("b", declared_size)
}

fn location_in(bucket: &str, declared_size: u64) -> PayloadLocation {
    let pointer = format!(
        r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{{"s3BucketName":"{bucket}","s3Key":"k"}}]"#
    );
    let size = aws_sdk_sqs::types::MessageAttributeValue::builder()
        .data_type("Number")
        .string_value(declared_size.to_string())
        .build()
        .unwrap();
    let message = aws_sdk_sqs::types::Message::builder()
        .body(pointer)
        .message_attributes("ExtendedPayloadSize", size)
        .build();
    crate::payload::pointer::find(&message).unwrap().unwrap().0
}

fn s3_error(status: u16, code: &str) -> aws_sdk_s3::config::http::HttpResponse {
    let body = format!("<Error><Code>{code}</Code><Message>test</Message></Error>");
    aws_sdk_s3::config::http::HttpResponse::new(
        StatusCode::try_from(status).unwrap(),
        SdkBody::from(body),
    )
}

fn store(rule: &aws_smithy_mocks::Rule, max_bytes: u64) -> PayloadStore {
    let client = mock_client!(aws_sdk_s3, RuleMode::MatchAny, [rule]);
    PayloadStore::new(client, max_bytes, false, None, Duration::from_secs(10))
}

#[tokio::test]
async fn a_pointer_to_a_bucket_not_listed_is_refused_without_a_request() {
    let rule = mock!(aws_sdk_s3::Client::get_object).then_output(|| {
        GetObjectOutput::builder()
            .body(ByteStream::from_static(b"fine"))
            .build()
    });
    let client = mock_client!(aws_sdk_s3, RuleMode::MatchAny, [&rule]);
    let listed = |buckets: &[&str]| {
        let buckets = Some(buckets.iter().map(|b| b.to_string()).collect());
        PayloadStore::new(client.clone(), 100, false, buckets, Duration::from_secs(10))
    };
    let err = listed(&["other", "bb"])
        .read(&location(4))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Fatal);
    assert!(
        err.reason
            .contains("bucket \"b\", not one of payload_buckets"),
        "{}",
        err.reason
    );
    assert_eq!(rule.num_calls(), 0, "never read");
    assert_eq!(
        listed(&["other", "b"]).read(&location(4)).await.unwrap(),
        "fine"
    );
    assert_eq!(rule.num_calls(), 1);
}

/// Only a bucket named exactly as a listed one is read: not one whose name begins, ends
/// with or lies inside a listed one, nor one that a listed name begins with.
#[tokio::test]
async fn a_bucket_whose_name_merely_resembles_a_listed_one_is_refused() {
    let rule = mock!(aws_sdk_s3::Client::get_object).then_output(|| {
        GetObjectOutput::builder()
            .body(ByteStream::from_static(b"fine"))
            .build()
    });
    let client = mock_client!(aws_sdk_s3, RuleMode::MatchAny, [&rule]);
    let buckets = Some(vec!["orders-payloads".to_owned()]);
    let store = PayloadStore::new(client, 100, false, buckets, Duration::from_secs(10));
    for bucket in [
        "orders-payloads-evil",
        "evil-orders-payloads",
        "x-orders-payloads-y",
        "orders-payload",
        "orders",
    ] {
        let err = store.read(&location_in(bucket, 4)).await.unwrap_err();
        assert!(
            err.reason.contains("not one of payload_buckets"),
            "{bucket}: {}",
            err.reason
        );
    }
    assert_eq!(rule.num_calls(), 0, "never read");
    let read = store.read(&location_in("orders-payloads", 4)).await;
    assert_eq!(read.unwrap(), "fine");
}

#[tokio::test]
async fn s3_errors_are_fatal_unless_throttling_or_5xx() {
    for (status, code, kind) in [
        (404, "NoSuchKey", ErrorKind::Fatal),
        (404, "NoSuchBucket", ErrorKind::Fatal),
        (403, "AccessDenied", ErrorKind::Fatal),
        (400, "InvalidObjectState", ErrorKind::Fatal),
        (503, "SlowDown", ErrorKind::Retryable),
        (500, "InternalError", ErrorKind::Retryable),
        (429, "TooManyRequests", ErrorKind::Retryable),
        (400, "RequestTimeout", ErrorKind::Retryable),
    ] {
        let rule = mock!(aws_sdk_s3::Client::get_object)
            .then_http_response(move || s3_error(status, code));
        let err = store(&rule, 100).read(&location(5)).await.unwrap_err();
        assert_eq!(err.kind, kind, "{status} {code}: {}", err.reason);
        assert!(err.reason.contains(code), "{}", err.reason);
        assert_eq!(rule.num_calls(), 1, "one attempt per call");
    }
}

/// A request that could not be built or sent would fail the same way again: fatal. A
/// failure to reach S3 may pass: retryable.
#[test]
fn requests_not_built_or_not_sent_are_fatal_and_s3_out_of_reach_retryable() {
    use aws_sdk_s3::operation::get_object::GetObjectError;
    use aws_smithy_runtime_api::client::result::ConnectorError;

    type Failure = SdkError<GetObjectError, aws_sdk_s3::config::http::HttpResponse>;
    for (err, kind, says) in [
        (
            Failure::construction_failure("no region"),
            ErrorKind::Fatal,
            "could not be built",
        ),
        (
            Failure::dispatch_failure(ConnectorError::user("a bad endpoint".into())),
            ErrorKind::Fatal,
            "could not be sent",
        ),
        (
            Failure::dispatch_failure(ConnectorError::io("connection refused".into())),
            ErrorKind::Retryable,
            "GetObject failed",
        ),
        (
            Failure::timeout_error("no answer"),
            ErrorKind::Retryable,
            "GetObject failed",
        ),
    ] {
        let err = classify("GetObject", err);
        assert_eq!(err.kind, kind, "{}", err.reason);
        assert!(err.reason.contains(says), "{}", err.reason);
    }
}

#[tokio::test]
async fn sizes_over_the_limit_or_not_as_declared_and_bodies_not_utf8_are_refused() {
    let answer = |body: &'static [u8], length: Option<i64>| {
        mock!(aws_sdk_s3::Client::get_object).then_output(move || {
            GetObjectOutput::builder()
                .body(ByteStream::from_static(body))
                .set_content_length(length)
                .build()
        })
    };
    // (object, announced length, declared size, limit) -> what is said.
    for (body, length, declared, limit, says) in [
        (&b"12345"[..], Some(5), 10, 100, "declares 10"),
        (&b"12345"[..], None, 10, 100, "declares 10"),
        (&b"1234567890"[..], None, 5, 100, "declares 5"),
        // Declared within the limit, found over it: by S3's length, or as it downloads.
        (&b"1234567890"[..], Some(10), 5, 8, "over max_payload_bytes"),
        (&b"1234567890"[..], None, 5, 8, "over max_payload_bytes"),
        (&b"\xff\xfe"[..], Some(2), 2, 100, "not UTF-8"),
    ] {
        let rule = answer(body, length);
        let err = store(&rule, limit)
            .read(&location(declared))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Fatal);
        assert!(err.reason.contains(says), "{says}: {}", err.reason);
    }
    let rule = answer(b"fine", Some(4));
    assert_eq!(store(&rule, 4).read(&location(4)).await.unwrap(), "fine");
    // A declared size over the limit: refused without a request.
    let rule = answer(b"fine", Some(4));
    let err = store(&rule, 100).read(&location(101)).await.unwrap_err();
    assert!(
        err.reason
            .contains("declares 101 bytes, over max_payload_bytes"),
        "{}",
        err.reason
    );
    assert_eq!(rule.num_calls(), 0);
}
