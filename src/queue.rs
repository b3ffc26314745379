//! The internal seam: the few SQS calls the crate makes, for `aws_sdk_sqs::Client` and for
//! [`MemoryQueue`].

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use std::collections::HashSet;

use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry,
    DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName, QueueAttributeName,
};

use crate::error::{classify_code, Error, ErrorKind};
use crate::memory::{BatchResult, MemoryQueue};

/// Where messages come from.
#[derive(Clone)]
pub(crate) enum Queue {
    Sqs {
        client: aws_sdk_sqs::Client,
        url: Arc<str>,
    },
    Memory(MemoryQueue),
}

/// How long a request may go unanswered (beyond a long poll's wait) before it counts as a
/// transient failure. The SDK sets no such limit by default, and a server that never
/// answers would otherwise hold a receive's slots, or a batch's callers, for ever.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

async fn within<T>(
    limit: Duration,
    operation: &'static str,
    call: impl std::future::Future<Output = T>,
) -> Result<T, Error> {
    tokio::time::timeout(limit, call)
        .await
        .map_err(|elapsed| Error::Sqs {
            operation,
            code: None,
            message: format!("no answer within {limit:?}"),
            kind: ErrorKind::Retryable,
            source: Box::new(elapsed),
        })
}

/// One `ReceiveMessage` request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Receive {
    pub(crate) max_messages: u32,
    pub(crate) wait: Duration,
    /// The visibility timeout to ask for; `None` uses the queue's own.
    pub(crate) visibility: Option<u32>,
}

impl Queue {
    /// `true` for a FIFO queue (its URL or name ends in `.fifo`).
    pub(crate) fn is_fifo(&self) -> bool {
        match self {
            Queue::Sqs { url, .. } => url.trim_end_matches('/').ends_with(".fifo"),
            Queue::Memory(q) => q.is_fifo(),
        }
    }

    /// A description for logs and errors.
    pub(crate) fn describe(&self) -> String {
        match self {
            Queue::Sqs { url, .. } => url.to_string(),
            Queue::Memory(q) => format!("memory:{}", q.name()),
        }
    }

    pub(crate) async fn receive(&self, req: Receive) -> Result<Vec<Message>, Error> {
        match self {
            Queue::Sqs { client, url } => {
                let mut call = client
                    .receive_message()
                    .queue_url(url.as_ref())
                    .max_number_of_messages(to_i32(req.max_messages))
                    .wait_time_seconds(to_i32(req.wait.as_secs()))
                    .message_system_attribute_names(MessageSystemAttributeName::All)
                    .message_attribute_names("All");
                if let Some(v) = req.visibility {
                    call = call.visibility_timeout(to_i32(v));
                }
                let out = within(req.wait + REQUEST_TIMEOUT, "ReceiveMessage", call.send())
                    .await?
                    .map_err(|e| sdk_error("ReceiveMessage", e))?;
                Ok(out.messages.unwrap_or_default())
            }
            Queue::Memory(q) => {
                q.receive_with_visibility(req.max_messages, req.wait, req.visibility)
                    .await
            }
        }
    }

    pub(crate) async fn delete(&self, receipt: &str) -> Result<(), Error> {
        match self {
            Queue::Sqs { client, url } => client
                .delete_message()
                .queue_url(url.as_ref())
                .receipt_handle(receipt)
                .send()
                .await
                .map(drop)
                .map_err(|e| sdk_error("DeleteMessage", e)),
            Queue::Memory(q) => {
                q.round_trip().await;
                q.delete(receipt)
            }
        }
    }

    pub(crate) async fn change_visibility(&self, receipt: &str, secs: u32) -> Result<(), Error> {
        match self {
            Queue::Sqs { client, url } => client
                .change_message_visibility()
                .queue_url(url.as_ref())
                .receipt_handle(receipt)
                .visibility_timeout(to_i32(secs))
                .send()
                .await
                .map(drop)
                .map_err(|e| sdk_error("ChangeMessageVisibility", e)),
            Queue::Memory(q) => {
                q.round_trip().await;
                q.change_visibility(receipt, secs)
            }
        }
    }

    /// `DeleteMessageBatch` of (`id`, receipt handle) entries: each entry's result, or the
    /// whole request's error.
    pub(crate) async fn delete_batch(&self, entries: &[(String, String)]) -> BatchResult {
        match self {
            Queue::Sqs { client, url } => {
                let mut call = client.delete_message_batch().queue_url(url.as_ref());
                for (id, receipt) in entries {
                    let entry = DeleteMessageBatchRequestEntry::builder()
                        .id(id)
                        .receipt_handle(receipt)
                        .build()
                        .map_err(|e| build_error("DeleteMessageBatch", e))?;
                    call = call.entries(entry);
                }
                let out = within(REQUEST_TIMEOUT, "DeleteMessageBatch", call.send())
                    .await?
                    .map_err(|e| sdk_error("DeleteMessageBatch", e))?;
                let ok = out.successful().iter().map(|e| e.id());
                Ok(entry_results(
                    "DeleteMessageBatch",
                    entries.iter().map(|(id, _)| id),
                    ok,
                    out.failed(),
                ))
            }
            Queue::Memory(q) => {
                q.round_trip().await;
                q.delete_batch(entries)
            }
        }
    }

    /// `ChangeMessageVisibilityBatch` of (`id`, receipt handle, seconds) entries.
    pub(crate) async fn change_visibility_batch(
        &self,
        entries: &[(String, String, u32)],
    ) -> BatchResult {
        match self {
            Queue::Sqs { client, url } => {
                let mut call = client
                    .change_message_visibility_batch()
                    .queue_url(url.as_ref());
                for (id, receipt, secs) in entries {
                    let entry = ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(id)
                        .receipt_handle(receipt)
                        .visibility_timeout(to_i32(*secs))
                        .build()
                        .map_err(|e| build_error("ChangeMessageVisibilityBatch", e))?;
                    call = call.entries(entry);
                }
                let out = within(REQUEST_TIMEOUT, "ChangeMessageVisibilityBatch", call.send())
                    .await?
                    .map_err(|e| sdk_error("ChangeMessageVisibilityBatch", e))?;
                let ok = out.successful().iter().map(|e| e.id());
                Ok(entry_results(
                    "ChangeMessageVisibilityBatch",
                    entries.iter().map(|(id, _, _)| id),
                    ok,
                    out.failed(),
                ))
            }
            Queue::Memory(q) => {
                q.round_trip().await;
                q.change_visibility_batch(entries)
            }
        }
    }

    /// The queue's `VisibilityTimeout` attribute, in seconds.
    pub(crate) async fn visibility_timeout(&self) -> Result<u32, Error> {
        match self {
            Queue::Sqs { client, url } => {
                let out = client
                    .get_queue_attributes()
                    .queue_url(url.as_ref())
                    .attribute_names(QueueAttributeName::VisibilityTimeout)
                    .send()
                    .await
                    .map_err(|e| sdk_error("GetQueueAttributes", e))?;
                let value = out
                    .attributes()
                    .and_then(|a| a.get(&QueueAttributeName::VisibilityTimeout))
                    .and_then(|v| v.parse::<u32>().ok());
                value.ok_or_else(|| Error::Sqs {
                    operation: "GetQueueAttributes",
                    code: None,
                    message: "the answer has no valid VisibilityTimeout attribute".into(),
                    kind: ErrorKind::Fatal,
                    source: "missing VisibilityTimeout attribute".into(),
                })
            }
            Queue::Memory(q) => q.visibility_timeout_secs(),
        }
    }
}

/// Matches a batch answer to the entries sent; an entry the answer does not mention failed
/// (retryably).
fn entry_results<'a>(
    operation: &'static str,
    sent: impl Iterator<Item = &'a String>,
    successful: impl Iterator<Item = &'a str>,
    failed: &[BatchResultErrorEntry],
) -> Vec<(String, Result<(), Error>)> {
    let ok: HashSet<&str> = successful.collect();
    sent.map(|id| {
        let result = if ok.contains(id.as_str()) {
            Ok(())
        } else if let Some(f) = failed.iter().find(|f| f.id() == id) {
            let status = if f.sender_fault() { 400 } else { 500 };
            let message = f.message().unwrap_or("batch entry failed").to_owned();
            Err(Error::Sqs {
                operation,
                code: Some(f.code().to_owned()),
                kind: classify_code(f.code(), Some(status)),
                source: message.clone().into(),
                message,
            })
        } else {
            Err(Error::Sqs {
                operation,
                code: None,
                message: "the answer does not mention this entry".into(),
                kind: ErrorKind::Retryable,
                source: "entry missing from the batch answer".into(),
            })
        };
        (id.clone(), result)
    })
    .collect()
}

fn build_error(operation: &'static str, err: aws_sdk_sqs::error::BuildError) -> Error {
    Error::Sqs {
        operation,
        code: None,
        message: format!("the request could not be built: {err}"),
        kind: ErrorKind::Fatal,
        source: Box::new(err),
    }
}

/// Failures of the client's own setup, which the SDK reports as failures to send: no
/// credentials or a broken credentials configuration (fatal: retrying will not make them
/// appear), a credentials provider that failed or timed out this time (retryable), and an
/// endpoint that cannot be resolved, such as a missing region (fatal).
fn setup_failure(err: &(dyn std::error::Error + 'static)) -> Option<(ErrorKind, &'static str)> {
    use aws_credential_types::provider::error::CredentialsError;
    let mut source = err.source();
    while let Some(e) = source {
        if let Some(credentials) = e.downcast_ref::<CredentialsError>() {
            return Some(match credentials {
                CredentialsError::CredentialsNotLoaded(_) => {
                    (ErrorKind::Fatal, "no AWS credentials were found")
                }
                CredentialsError::InvalidConfiguration(_) => (
                    ErrorKind::Fatal,
                    "the AWS credentials configuration is invalid",
                ),
                _ => (ErrorKind::Retryable, "the AWS credentials provider failed"),
            });
        }
        if e.is::<aws_smithy_http::endpoint::ResolveEndpointError>() {
            return Some((
                ErrorKind::Fatal,
                "the SQS endpoint could not be resolved (is a region set?)",
            ));
        }
        source = e.source();
    }
    None
}

fn to_i32(v: impl TryInto<i32>) -> i32 {
    v.try_into().unwrap_or(i32::MAX)
}

/// Turns an SDK error into the crate's error, classified as lost, retryable or fatal.
pub(crate) fn sdk_error<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let (code, message, kind) = match &err {
        SdkError::ServiceError(service) => {
            let status = Some(service.raw().status().as_u16());
            let code = service.err().code().map(str::to_owned);
            let kind = match &code {
                Some(c) => classify_code(c, status),
                None => classify_code("", status),
            };
            let message = service
                .err()
                .message()
                .map(str::to_owned)
                .unwrap_or_else(|| service.err().to_string());
            (code, message, kind)
        }
        SdkError::TimeoutError(_) => (None, "the request timed out".into(), ErrorKind::Retryable),
        SdkError::DispatchFailure(failure) => {
            let (kind, what) = match setup_failure(&err) {
                Some(setup) => setup,
                None if failure.is_user() => (ErrorKind::Fatal, "the request could not be sent"),
                None => (ErrorKind::Retryable, "the request could not be sent"),
            };
            let message = format!("{what}: {}", aws_sdk_sqs::error::DisplayErrorContext(&err));
            (None, message, kind)
        }
        SdkError::ResponseError(_) => (
            None,
            "the response could not be read".into(),
            ErrorKind::Retryable,
        ),
        SdkError::ConstructionFailure(_) => (
            None,
            format!(
                "the request could not be built: {}",
                aws_sdk_sqs::error::DisplayErrorContext(&err)
            ),
            ErrorKind::Fatal,
        ),
        _ => (None, err.to_string(), ErrorKind::Retryable),
    };
    Error::Sqs {
        operation,
        code,
        message,
        kind,
        source: Box::new(err),
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}
