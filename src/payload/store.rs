//! The S3 calls behind payloads (feature `s3`): reading an object within a size limit, and
//! deleting it. One attempt each (the SDK's own retries are off for them, as for the SQS
//! calls); each bounded in time. Errors come back classified: retryable when trying again may
//! help (throttling, 5xx, timeouts, a dropped connection), fatal when it would read the same
//! answer (no such key or bucket, access denied, a size over the limit or not as declared).

use std::future::Future;
use std::time::Duration;

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use crate::call_retries::{self, PAYLOAD_ATTEMPTS};
use crate::error::{with_causes, BoxError, ErrorKind};
use crate::payload::pointer::PayloadLocation;
use crate::readable::Secs;

/// The default limit on a payload's size: 64 MiB. Payloads are held whole in memory, one per
/// held delivery: with the default `max_in_flight` of 40, at most 2.5 GiB at once, whatever
/// producers declare.
pub(crate) const DEFAULT_MAX_PAYLOAD_BYTES: u64 = 64 * 1024 * 1024;

/// Where payloads are read from, and the rules for reading them.
#[derive(Debug, Clone)]
pub(crate) struct PayloadStore {
    client: aws_sdk_s3::Client,
    max_bytes: u64,
    delete_on_ack: bool,
    /// The buckets pointers may name; `None`: any.
    buckets: Option<Vec<String>>,
    /// How long a request may wait for its answer, or a download for its next bytes.
    request_timeout: Duration,
}

/// Why one try failed: what to say, how to treat it, and the cause.
#[derive(Debug)]
pub(crate) struct ObjectError {
    pub(crate) reason: String,
    pub(crate) kind: ErrorKind,
    pub(crate) source: BoxError,
}

impl ObjectError {
    fn fatal(reason: String) -> Self {
        Self {
            source: reason.clone().into(),
            reason,
            kind: ErrorKind::Fatal,
        }
    }

    fn retryable(reason: String, source: BoxError) -> Self {
        Self {
            reason,
            kind: ErrorKind::Retryable,
            source,
        }
    }
}

/// One attempt per call: the crate owns the retries.
fn one_attempt() -> aws_sdk_s3::config::Builder {
    aws_sdk_s3::config::Builder::new().retry_config(RetryConfig::disabled())
}

impl PayloadStore {
    pub(crate) fn new(
        client: aws_sdk_s3::Client,
        max_bytes: u64,
        delete_on_ack: bool,
        buckets: Option<Vec<String>>,
        request_timeout: Duration,
    ) -> Self {
        Self {
            client,
            max_bytes,
            delete_on_ack,
            buckets,
            request_timeout,
        }
    }

    pub(crate) fn deletes_on_ack(&self) -> bool {
        self.delete_on_ack
    }

    /// Reads the object at `location`, one try: the whole of it, as UTF-8, if it is exactly
    /// the declared size and within the limit. Refused without a request when the declared
    /// size is over the limit, before the download when the size S3 announces says it cannot
    /// be; stopped as soon as the bytes read exceed either.
    pub(crate) async fn read(&self, location: &PayloadLocation) -> Result<String, ObjectError> {
        let bucket = location.bucket();
        if let Some(allowed) = &self.buckets {
            if !allowed.iter().any(|b| b == bucket) {
                return Err(ObjectError::fatal(format!(
                    "the pointer names bucket {bucket:?}, not one of payload_buckets; not read"
                )));
            }
        }
        let declared = location.declared_size();
        if declared > self.max_bytes {
            return Err(ObjectError::fatal(format!(
                "the message declares {declared} bytes, over max_payload_bytes ({})",
                self.max_bytes
            )));
        }
        let call = self
            .client
            .get_object()
            .bucket(location.bucket())
            .key(location.key())
            .customize()
            .config_override(one_attempt())
            .send();
        let out = self.answer("GetObject", call).await?;
        if let Some(length) = out.content_length().and_then(|l| u64::try_from(l).ok()) {
            self.check_size(length, declared)?;
        }
        let mut body = out.body;
        let capacity = declared.min(self.max_bytes);
        let mut bytes = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
        loop {
            let next = tokio::time::timeout(self.request_timeout, body.next())
                .await
                .map_err(|elapsed| {
                    let reason = format!(
                        "GetObject: no data for {:?} after {} bytes",
                        self.request_timeout,
                        bytes.len()
                    );
                    ObjectError::retryable(reason, Box::new(elapsed))
                })?;
            match next {
                None => break,
                Some(Err(err)) => {
                    let reason = format!("GetObject: the download broke off: {err}");
                    return Err(ObjectError::retryable(reason, Box::new(err)));
                }
                Some(Ok(chunk)) => {
                    let read = (bytes.len() + chunk.len()) as u64;
                    // The declared size is within the limit (checked above), so past it
                    // is the first sign of either.
                    if read > declared {
                        self.check_size(read, declared)?;
                    }
                    bytes.extend_from_slice(&chunk);
                }
            }
        }
        let read = bytes.len() as u64;
        if read != declared {
            return Err(ObjectError::fatal(format!(
                "the object has {read} bytes, the message declares {declared}"
            )));
        }
        String::from_utf8(bytes).map_err(|err| {
            ObjectError::fatal(format!(
                "the payload is not UTF-8 (at byte {})",
                err.utf8_error().valid_up_to()
            ))
        })
    }

    /// [`read`](PayloadStore::read), transient failures tried again: [`PAYLOAD_ATTEMPTS`]
    /// tries in all.
    pub(crate) async fn read_retrying(
        &self,
        location: &PayloadLocation,
    ) -> Result<String, ObjectError> {
        retrying("GetObject", || self.read(location)).await
    }

    /// [`delete`](PayloadStore::delete), transient failures tried again: [`PAYLOAD_ATTEMPTS`]
    /// tries in all.
    pub(crate) async fn delete_retrying(
        &self,
        location: &PayloadLocation,
    ) -> Result<(), ObjectError> {
        retrying("DeleteObject", || self.delete(location)).await
    }

    /// The answer to one `call` of `operation`: a retryable failure when none came within
    /// the request timeout, else the SDK's error classified.
    async fn answer<T, E>(
        &self,
        operation: &str,
        call: impl Future<Output = Result<T, SdkError<E, aws_sdk_s3::config::http::HttpResponse>>>,
    ) -> Result<T, ObjectError>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        match tokio::time::timeout(self.request_timeout, call).await {
            Ok(answer) => answer.map_err(|err| classify(operation, err)),
            Err(elapsed) => {
                let reason = format!(
                    "{operation}: no answer within {}",
                    Secs(self.request_timeout)
                );
                Err(ObjectError::retryable(reason, Box::new(elapsed)))
            }
        }
    }

    /// A size over the limit, or other than declared, is refused.
    fn check_size(&self, size: u64, declared: u64) -> Result<(), ObjectError> {
        if size > self.max_bytes {
            return Err(ObjectError::fatal(format!(
                "the object has {size} bytes or more, over max_payload_bytes ({})",
                self.max_bytes
            )));
        }
        if size != declared {
            return Err(ObjectError::fatal(format!(
                "the object has {size} bytes, the message declares {declared}"
            )));
        }
        Ok(())
    }

    /// Deletes the object at `location`, one try.
    pub(crate) async fn delete(&self, location: &PayloadLocation) -> Result<(), ObjectError> {
        let call = self
            .client
            .delete_object()
            .bucket(location.bucket())
            .key(location.key())
            .customize()
            .config_override(one_attempt())
            .send();
        self.answer("DeleteObject", call).await?;
        Ok(())
    }
}

/// `call`'s answer, its transient failures tried again after a back-off, [`PAYLOAD_ATTEMPTS`]
/// tries in all; a fatal failure at once.
async fn retrying<T, F>(operation: &str, mut call: impl FnMut() -> F) -> Result<T, ObjectError>
where
    F: Future<Output = Result<T, ObjectError>>,
{
    let mut backoff = call_retries::PAYLOAD.backoff();
    let mut tries = 1;
    loop {
        match call().await {
            Err(err) if err.kind == ErrorKind::Retryable && tries < PAYLOAD_ATTEMPTS => {
                let wait = backoff.next_delay();
                tracing::debug!(operation, error = %err.reason, tries, retry_in = %Secs(wait), "S3 call failed; retrying");
                tries += 1;
                tokio::time::sleep(wait).await;
            }
            done => return done,
        }
    }
}

/// An S3 error, classified: a service error is fatal unless throttling or 5xx; a failure to
/// reach S3 or to read its answer is retryable, except a request that could not be built.
fn classify<E>(
    operation: &str,
    err: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> ObjectError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let (kind, reason) = match &err {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let code = service.err().code().unwrap_or("no code").to_owned();
            let transient = status >= 500
                || status == 429
                || matches!(code.as_str(), "SlowDown" | "RequestTimeout" | "Throttling");
            let kind = if transient {
                ErrorKind::Retryable
            } else {
                ErrorKind::Fatal
            };
            (kind, format!("{operation} answered {status} {code}"))
        }
        SdkError::ConstructionFailure(_) => (
            ErrorKind::Fatal,
            with_causes(
                &format!("{operation}: the request could not be built"),
                &err,
            ),
        ),
        SdkError::DispatchFailure(failure) if failure.is_user() => (
            ErrorKind::Fatal,
            with_causes(&format!("{operation}: the request could not be sent"), &err),
        ),
        _ => (
            ErrorKind::Retryable,
            with_causes(&format!("{operation} failed"), &err),
        ),
    };
    ObjectError {
        reason,
        kind,
        source: Box::new(err),
    }
}

#[cfg(test)]
mod tests {
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
}
