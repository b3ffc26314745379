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
mod tests;
