//! The seam served by `aws_sdk_sqs::Client`: each call, its answer, and its errors mapped to
//! the crate's classes.
//!
//! Every call makes one attempt: the SDK's own retries are switched off for the crate's calls
//! (the user's client keeps its configuration for everything else), because each call path
//! of the crate retries on its own terms (see the guide's errors page, "Who retries, who times out").

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry,
    DeleteMessageBatchRequestEntry, Message, QueueAttributeName,
};
use futures_util::future::BoxFuture;
use tracing::instrument::WithSubscriber;
use tracing::Instrument;

use crate::error::{classify_code, shorten_handles, with_causes, Error, ErrorKind};
use crate::limits::VisibilityTimeout;
use crate::queue::backlog::Backlog;
use crate::queue::{BatchEntry, BatchResult, NewMessage, Receive, Transport};
use crate::queue_ref::QueueRef;

/// Drives `call` as a task of its own on the runtime it is awaited in, and waits for its
/// answer. Only receives go through it: they are what a run's loop asks all the time; the
/// loop's other calls come once (the queue's URL and timeout), and settles and extensions run
/// in tasks of their own already (the keeper's, a batcher's).
///
/// Polled where it is awaited, each step of a request (its socket registered, its connection
/// task spawned, each part of its answer) wakes the awaiting task; as a task, the request runs
/// where its I/O is handled, and whoever waits for it is woken once, with the answer. (It was
/// made for a receive loop awaited off the runtime's workers, where each of those wake-ups
/// was a thread woken; a run's loop is now a task on a worker itself, and there the two cost
/// the same CPU within noise.) Dropped, it aborts the task: the request is cancelled as it
/// would be if polled here.
async fn as_task<T, F>(operation: &'static str, call: F) -> Result<T, Error>
where
    F: Future<Output = Result<T, Error>> + Send + 'static,
    T: Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return call.await;
    };
    // In the caller's span, for the caller's subscriber (one set for its thread only, too):
    // the SDK's own events go where they went when the call was polled in place.
    let call = call.in_current_span().with_current_subscriber();
    let mut task = AbortOnDrop(runtime.spawn(call));
    match (&mut task.0).await {
        Ok(answer) => answer,
        // A panic in the call goes on where it is awaited, as it did when polled there.
        Err(ended) if ended.is_panic() => std::panic::resume_unwind(ended.into_panic()),
        // Only when the runtime shuts down: whoever waits goes with it.
        Err(ended) => Err(Error::Sqs {
            operation,
            code: None,
            message: "the runtime shut down before the answer came".to_owned(),
            kind: ErrorKind::Retryable,
            source: Box::new(ended),
        }),
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A queue given by URL, name or ARN, reached through `client`.
#[derive(Debug, Clone)]
pub(crate) struct SdkQueue {
    client: aws_sdk_sqs::Client,
    target: Arc<Target>,
}

/// The queue as given, and its URL once known: shared by every client's view of the queue
/// (the keeper's included), so one `GetQueueUrl` serves them all.
#[derive(Debug)]
struct Target {
    given: QueueRef,
    /// Set by `resolve` for a name or an ARN; a queue given by URL never needs it, since the
    /// URL is what it was given.
    url: OnceLock<Arc<str>>,
}

impl SdkQueue {
    pub(crate) fn new(client: aws_sdk_sqs::Client, queue: QueueRef) -> Self {
        Self {
            client,
            target: Arc::new(Target {
                given: queue,
                url: OnceLock::new(),
            }),
        }
    }

    /// The queue as given: URL, name or ARN.
    pub(crate) fn given(&self) -> &QueueRef {
        &self.target.given
    }

    /// The client's region, if its configuration names one.
    pub(crate) fn client_region(&self) -> Option<&str> {
        self.client.config().region().map(|r| r.as_ref())
    }

    /// The queue's URL: as given, or once a name or ARN is resolved; before that (no call is
    /// made then), the name or ARN.
    fn url(&self) -> &str {
        match self.target.url.get() {
            Some(url) => url,
            None => self.target.given.as_str(),
        }
    }

    /// The same queue through `client`.
    pub(crate) fn with_client(&self, client: aws_sdk_sqs::Client) -> Self {
        Self {
            client,
            target: self.target.clone(),
        }
    }

    /// The same queue through a new client with connections of its own, if one can be made:
    /// when the client's configuration names no HTTP client, the SDK gives each client it
    /// builds a new one of its default kind (a pool of its own). `None` when the
    /// configuration names one (a proxy, a private CA, a mock): sharing it would share its
    /// connections.
    pub(crate) fn with_own_connections(&self) -> Option<Self> {
        let config = self.client.config();
        if config.http_client().is_some() {
            return None;
        }
        let config = config.clone();
        // The configuration is that of a client that exists, so it passes the checks
        // `from_conf` panics on; should it not, the keeper stays on the caller's runtime.
        // (Unwind-safe: the configuration is a copy, dropped if it panics.)
        let build = std::panic::AssertUnwindSafe(move || aws_sdk_sqs::Client::from_conf(config));
        let client = std::panic::catch_unwind(build);
        client.ok().map(|client| self.with_client(client))
    }
}

/// One attempt per call: the crate owns the retries.
fn one_attempt() -> aws_sdk_sqs::config::Builder {
    aws_sdk_sqs::config::Builder::new().retry_config(RetryConfig::disabled())
}

impl Transport for SdkQueue {
    fn describe(&self) -> &str {
        self.url()
    }

    fn short_name(&self) -> &str {
        self.target.given.name()
    }

    fn is_fifo(&self) -> bool {
        self.target.given.is_fifo()
    }

    fn resolve(&self) -> BoxFuture<'_, Result<String, Error>> {
        Box::pin(async move {
            if let Some(url) = self.target.url.get() {
                return Ok(url.to_string());
            }
            let Some((name, owner)) = self.target.given.name_and_owner() else {
                return Ok(self.url().to_owned());
            };
            let out = self
                .client
                .get_queue_url()
                .queue_name(name)
                .set_queue_owner_aws_account_id(owner.map(str::to_owned))
                .customize()
                .config_override(one_attempt())
                .send()
                .await
                .map_err(|e| naming(sdk_error("GetQueueUrl", e), &self.target.given))?;
            let Some(url) = out.queue_url() else {
                return Err(Error::Sqs {
                    operation: "GetQueueUrl",
                    code: None,
                    message: format!("the answer for queue `{}` has no URL", self.target.given),
                    kind: ErrorKind::Retryable,
                    source: "missing QueueUrl".into(),
                });
            };
            let url = self.target.url.get_or_init(|| Arc::from(url));
            tracing::debug!(queue = %self.target.given, %url, "queue URL resolved");
            Ok(url.to_string())
        })
    }

    fn backlog(&self) -> BoxFuture<'_, Result<Backlog, Error>> {
        use QueueAttributeName as A;
        Box::pin(async move {
            let out = self
                .client
                .get_queue_attributes()
                .queue_url(self.url())
                .attribute_names(A::ApproximateNumberOfMessages)
                .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
                .attribute_names(A::ApproximateNumberOfMessagesDelayed)
                .customize()
                .config_override(one_attempt())
                .send()
                .await
                .map_err(|e| sdk_error("GetQueueAttributes", e))?;
            let count = |name: A| {
                out.attributes()
                    .and_then(|a| a.get(&name))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            Ok(Backlog::new(
                count(A::ApproximateNumberOfMessages),
                count(A::ApproximateNumberOfMessagesNotVisible),
                count(A::ApproximateNumberOfMessagesDelayed),
            ))
        })
    }

    fn receive<'a>(&'a self, req: Receive<'a>) -> BoxFuture<'a, Result<Vec<Message>, Error>> {
        Box::pin(async move {
            let mut call = self
                .client
                .receive_message()
                .queue_url(self.url())
                .max_number_of_messages(to_i32(req.max_messages))
                .wait_time_seconds(to_i32(req.wait.as_secs()))
                .set_message_system_attribute_names(Some(req.system_attribute_names.to_vec()))
                .set_message_attribute_names(Some(req.message_attribute_names.to_vec()));
            if let Some(v) = req.visibility_timeout {
                call = call.visibility_timeout(v.wire());
            }
            let send = call.customize().config_override(one_attempt()).send();
            let out = as_task("ReceiveMessage", async move {
                send.await.map_err(|e| sdk_error("ReceiveMessage", e))
            })
            .await?;
            Ok(out.messages.unwrap_or_default())
        })
    }

    fn send_message<'a>(&'a self, m: NewMessage<'a>) -> BoxFuture<'a, Result<String, Error>> {
        Box::pin(async move {
            let out = self
                .client
                .send_message()
                .queue_url(self.url())
                .message_body(m.body)
                .set_message_attributes(Some(m.attributes.clone()).filter(|a| !a.is_empty()))
                .set_message_group_id(m.group_id.map(str::to_owned))
                .set_message_deduplication_id(m.deduplication_id.map(str::to_owned))
                .customize()
                .config_override(one_attempt())
                .send()
                .await
                .map_err(|e| sdk_error("SendMessage", e))?;
            Ok(out.message_id().unwrap_or_default().to_owned())
        })
    }

    fn delete_batch<'a>(&'a self, entries: &'a [BatchEntry<'a>]) -> BoxFuture<'a, BatchResult> {
        const OPERATION: &str = "DeleteMessageBatch";
        Box::pin(async move {
            let mut call = self.client.delete_message_batch().queue_url(self.url());
            for e in entries {
                let entry = DeleteMessageBatchRequestEntry::builder()
                    .id(e.id)
                    .receipt_handle(e.receipt)
                    .build()
                    .map_err(|err| build_error(OPERATION, err))?;
                call = call.entries(entry);
            }
            let out = call
                .customize()
                .config_override(one_attempt())
                .send()
                .await
                .map_err(|e| sdk_error(OPERATION, e))?;
            let ok = out.successful().iter().map(|e| e.id());
            Ok(entry_results(OPERATION, entries, ok, out.failed()))
        })
    }

    fn change_visibility_batch<'a>(
        &'a self,
        entries: &'a [BatchEntry<'a>],
    ) -> BoxFuture<'a, BatchResult> {
        const OPERATION: &str = "ChangeMessageVisibilityBatch";
        Box::pin(async move {
            let mut call = self
                .client
                .change_message_visibility_batch()
                .queue_url(self.url());
            for e in entries {
                let entry = ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(e.id)
                    .receipt_handle(e.receipt)
                    .visibility_timeout(e.visibility_timeout.wire())
                    .build()
                    .map_err(|err| build_error(OPERATION, err))?;
                call = call.entries(entry);
            }
            let out = call
                .customize()
                .config_override(one_attempt())
                .send()
                .await
                .map_err(|e| sdk_error(OPERATION, e))?;
            let ok = out.successful().iter().map(|e| e.id());
            Ok(entry_results(OPERATION, entries, ok, out.failed()))
        })
    }

    fn visibility_timeout(&self) -> BoxFuture<'_, Result<VisibilityTimeout, Error>> {
        Box::pin(async move {
            let out = self
                .client
                .get_queue_attributes()
                .queue_url(self.url())
                .attribute_names(QueueAttributeName::VisibilityTimeout)
                .customize()
                .config_override(one_attempt())
                .send()
                .await
                .map_err(|e| sdk_error("GetQueueAttributes", e))?;
            let value = out
                .attributes()
                .and_then(|a| a.get(&QueueAttributeName::VisibilityTimeout))
                .and_then(|v| v.parse::<u64>().ok())
                .map(VisibilityTimeout::at_most_max);
            value.ok_or_else(|| Error::Sqs {
                operation: "GetQueueAttributes",
                code: None,
                message: "the answer has no valid VisibilityTimeout attribute".into(),
                kind: ErrorKind::Fatal,
                source: "missing VisibilityTimeout attribute".into(),
            })
        })
    }
}

/// Matches a batch answer to the entries sent, in their order; an entry the answer does not
/// mention failed (retryably).
fn entry_results<'a>(
    operation: &'static str,
    sent: &[BatchEntry<'_>],
    successful: impl Iterator<Item = &'a str>,
    failed: &[BatchResultErrorEntry],
) -> Vec<Result<(), Error>> {
    let ok: HashSet<&str> = successful.collect();
    sent.iter()
        .map(|entry| {
            if ok.contains(entry.id) {
                Ok(())
            } else if let Some(f) = failed.iter().find(|f| f.id() == entry.id) {
                // Each entry carries its own code; `SenderFault` is not trusted to classify
                // it (servers set it inconsistently), so no status goes with it.
                let message = shorten_handles(f.message().unwrap_or("batch entry failed"));
                Err(Error::Sqs {
                    operation,
                    code: Some(f.code().to_owned()),
                    kind: classify_code(f.code(), None, &message),
                    source: message.clone().into_owned().into(),
                    message: message.into_owned(),
                })
            } else {
                Err(Error::Sqs {
                    operation,
                    code: None,
                    message: "the answer does not mention this entry".into(),
                    kind: ErrorKind::Retryable,
                    source: "entry missing from the batch answer".into(),
                })
            }
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

/// `err`, its message saying which queue it was about.
fn naming(err: Error, queue: &QueueRef) -> Error {
    match err {
        Error::Sqs {
            operation,
            code,
            message,
            kind,
            source,
        } => Error::Sqs {
            operation,
            code,
            message: format!("queue `{queue}`: {message}"),
            kind,
            source,
        },
        other => other,
    }
}

/// Failures of the client's own setup, which the SDK reports as failures to send: no
/// credentials found, or a credentials provider that failed or timed out this time
/// (retryable, within the consumer's `give_up_after`: an instance's metadata service, a
/// pod identity agent or a token file may not be ready yet, and a provider that answers
/// "forbidden" is not told apart from one that has nothing), a broken credentials
/// configuration (fatal: retrying reads the same configuration), and an endpoint that cannot
/// be resolved, such as a missing region (fatal).
fn setup_failure(err: &(dyn std::error::Error + 'static)) -> Option<(ErrorKind, &'static str)> {
    use aws_credential_types::provider::error::CredentialsError;
    let mut source = err.source();
    while let Some(e) = source {
        if let Some(credentials) = e.downcast_ref::<CredentialsError>() {
            return Some(match credentials {
                CredentialsError::CredentialsNotLoaded(_) => {
                    (ErrorKind::Retryable, "no AWS credentials were found")
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
fn sdk_error<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let (code, message, kind) = match &err {
        SdkError::ServiceError(service) => {
            let status = Some(service.raw().status().as_u16());
            let code = service.err().code().map(str::to_owned);
            let message = match service.err().message() {
                Some(text) => shorten_handles(text).into_owned(),
                None => shorten_handles(&service.err().to_string()).into_owned(),
            };
            let kind = classify_code(code.as_deref().unwrap_or(""), status, &message);
            (code, message, kind)
        }
        SdkError::TimeoutError(_) => (None, "the request timed out".into(), ErrorKind::Retryable),
        SdkError::DispatchFailure(failure) => {
            let (kind, what) = match setup_failure(&err) {
                Some(setup) => setup,
                None if failure.is_user() => (ErrorKind::Fatal, "the request could not be sent"),
                None => (ErrorKind::Retryable, "the request could not be sent"),
            };
            (None, with_causes(what, &err), kind)
        }
        SdkError::ResponseError(_) => (
            None,
            with_causes("the response could not be read", &err),
            ErrorKind::Retryable,
        ),
        SdkError::ConstructionFailure(_) => (
            None,
            with_causes("the request could not be built", &err),
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

#[cfg(test)]
mod tests;
