//! The crate's one error type.

use std::fmt;
use std::time::Duration;

use crate::readable::Secs;

/// A boxed error that can cross task boundaries; what handlers return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in this crate.
///
/// Match on the variant when you need details, or use the predicates
/// ([`Error::is_lost`], [`Error::is_retryable`], [`Error::is_fatal`]) when you only need to
/// decide what to do next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A builder setting (or an argument) is outside its allowed range.
    #[error("invalid setting `{field}`: {got} is not allowed ({allowed})")]
    InvalidConfig {
        /// The setting or argument, as named in the API (`visibility_timeout`, …).
        field: &'static str,
        /// The value that was given.
        got: String,
        /// What is allowed, e.g. `whole seconds in 0..=43200`.
        allowed: &'static str,
    },

    /// The delivery is no longer ours: its visibility timeout lapsed, or SQS no longer
    /// accepts its receipt handle. The message may already be with another consumer.
    #[error("delivery of message {message_id} was lost: {reason}")]
    Lost {
        /// The SQS message id.
        message_id: String,
        /// Why the delivery was lost.
        reason: LostReason,
        /// The failed call that found the loss, or that failed after it (an ack's delete
        /// during an outage, say), if one did.
        #[source]
        source: Option<BoxError>,
    },

    /// `release_after` asked for a visibility that would end past the 12-hour limit SQS
    /// counts from the receive. SQS would refuse it, so the crate refuses it locally.
    #[error(
        "release_after({}) for message {message_id} would end past the 12-hour limit counted \
         from the receive; at most {} is possible now",
        Secs(*requested),
        Secs(*allowed)
    )]
    PastHardDeadline {
        /// The SQS message id.
        message_id: String,
        /// The delay asked for.
        requested: Duration,
        /// The longest delay SQS would still accept (whole seconds).
        allowed: Duration,
    },

    /// A message body did not decode as what was asked for (with feature `json`:
    /// [`Delivery::json`](crate::Delivery), `Delivery::sns`). The message is not touched:
    /// settle it, or let it fail, as for any other error of your handler.
    #[error("message {message_id}: not {expected}: {source}")]
    Decode {
        /// The SQS message id (or, for an SNS notification's message, SNS's).
        message_id: String,
        /// What was expected, with the type's name and no module path: ``JSON for `Order` ``,
        /// `an SNS notification envelope`, ``JSON for `Order` in the SNS notification's
        /// `Message` ``.
        expected: String,
        /// Why it did not decode: the decoder's error, or the envelope field that is missing.
        #[source]
        source: BoxError,
    },

    /// `build` could not start the thread the consumer's keeper and settle calls run on (see
    /// [`isolated_keeper`](crate::ConsumerBuilder::isolated_keeper)): the operating system
    /// refused a thread, or its runtime's I/O driver.
    #[error("could not start the consumer's keeper thread: {source}")]
    KeeperThread {
        /// Why.
        #[source]
        source: std::io::Error,
    },

    /// A message's payload in S3 (an Extended Client pointer, feature `s3`) could not be read:
    /// the object is missing or forbidden, the pointer is malformed, the size is over
    /// `max_payload_bytes` or not what the message declares, or S3 kept failing. The handler
    /// never sees such a delivery: it meets the retry policy.
    #[error("message {message_id}: its payload (bucket {bucket:?}, key {key:?}) could not be read: {reason}")]
    Payload {
        /// The SQS message id.
        message_id: String,
        /// The bucket the pointer names (empty if the pointer could not be read).
        bucket: String,
        /// The key the pointer names (empty if the pointer could not be read).
        key: String,
        /// What went wrong.
        reason: String,
        /// Retryable (S3 was unavailable, throttled or slow) or fatal (trying again reads
        /// the same answer).
        kind: ErrorKind,
        /// The S3 error, or the pointer's fault.
        #[source]
        source: BoxError,
    },

    /// The Lambda runtime (feature `lambda`) could not serve invocations: the process does
    /// not run in AWS Lambda (`AWS_LAMBDA_RUNTIME_API` is not set), or the Lambda Runtime API
    /// failed.
    #[cfg(feature = "lambda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
    #[error("the Lambda runtime stopped: {reason}")]
    LambdaRuntime {
        /// What went wrong.
        reason: String,
        /// The runtime's error, if it gave one.
        #[source]
        source: Option<BoxError>,
    },

    /// An AWS Lambda event (feature `lambda`) that a partial batch response cannot answer
    /// truthfully: no records, a record that is not SQS's, one without a message id, receipt
    /// handle or queue ARN, or a queue whose records cannot be kept hidden (its consumer
    /// cannot be built, or its visibility timeout read). The invocation answers with this
    /// error before any record is handled, and Lambda retries the whole batch.
    #[cfg(feature = "lambda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
    #[error("the Lambda event cannot be answered record by record: {reason}")]
    LambdaEvent {
        /// What is wrong with it.
        reason: String,
        /// The error that stopped its queue's consumer, if one did.
        #[source]
        source: Option<BoxError>,
    },

    /// The idempotency store (see [`ConsumerBuilder::idempotency`](crate::ConsumerBuilder::idempotency))
    /// kept failing while the delivery's lease allowed, or failed in a way trying again
    /// cannot mend. The delivery was not marked done, so it is not acked: it meets the
    /// failure step, as a failing handler's does. Also what creating a store's table
    /// reports (`DynamoDbStore::create_table`, feature `dynamodb`).
    #[error("{}the idempotency store's {operation} failed: {source}", message_id.as_deref().map(|id| format!("message {id}: ")).unwrap_or_default())]
    Idempotency {
        /// The SQS message id, for a delivery's call.
        message_id: Option<String>,
        /// The store's call: `begin` or `complete` (or the database's own action).
        operation: &'static str,
        /// Retryable (the store was throttled, unreachable or slow) or fatal.
        kind: ErrorKind,
        /// The store's error.
        #[source]
        source: BoxError,
    },

    /// An SQS call (or the equivalent [`MemoryQueue`](crate::MemoryQueue) call) failed.
    #[error("SQS {operation} failed{}: {message}", code.as_deref().map(|c| format!(" with {c}")).unwrap_or_default())]
    Sqs {
        /// The action, e.g. `ReceiveMessage`.
        operation: &'static str,
        /// The SQS error code, when the service sent one (`QueueDoesNotExist`, …).
        code: Option<String>,
        /// A short human-readable description.
        message: String,
        /// How the crate treats the failure.
        kind: ErrorKind,
        /// The underlying SDK (or in-memory queue) error.
        #[source]
        source: BoxError,
    },
}

/// How a failed SQS call is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Transient: throttling, 5xx, timeouts, dropped connections. Retried with back-off.
    Retryable,
    /// The receipt handle is no longer valid, or the message is no longer in flight.
    Lost(LostReason),
    /// Retrying cannot help: the queue does not exist, access is denied, the request is
    /// invalid. `run` returns such an error at once.
    Fatal,
}

/// Why a delivery was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// SQS answered `ReceiptHandleIsInvalid`: the message was received again elsewhere, or
    /// deleted.
    ReceiptHandleInvalid,
    /// SQS answered `MessageNotInflight`: the visibility timeout had already lapsed.
    NotInFlight,
    /// The visibility deadline passed without a successful extension (the extension calls
    /// kept failing).
    ExtensionFailed,
    /// The 12-hour limit counted from the receive was reached and the last extension lapsed.
    HardDeadline,
    /// The visibility deadline passed while an ack (or release) was under way and before
    /// SQS answered it: the delete may have reached SQS after the message went to another
    /// consumer, so its success proves nothing.
    LapsedBeforeAnswer,
    /// The idempotency store holds the message's key for a later receive of it: the message
    /// was handed out again after this delivery's visibility lapsed, and that receive owns
    /// its work now (see [`ConsumerBuilder::idempotency`](crate::ConsumerBuilder::idempotency)).
    KeyTaken,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::ReceiptHandleInvalid => "the receipt handle is no longer valid",
            LostReason::NotInFlight => "the message was no longer in flight",
            LostReason::ExtensionFailed => {
                "the visibility timeout lapsed before an extension succeeded"
            }
            LostReason::HardDeadline => {
                "the 12-hour visibility limit counted from the receive was reached"
            }
            LostReason::LapsedBeforeAnswer => {
                "the visibility timeout lapsed before SQS answered the ack"
            }
            LostReason::KeyTaken => "the idempotency store holds its key for a later receive",
        })
    }
}

impl Error {
    /// `true` when the delivery is lost: the message may be redelivered to someone else.
    /// Exactly when [`kind`](Error::kind) is `ErrorKind::Lost(_)`.
    pub fn is_lost(&self) -> bool {
        matches!(self.kind(), ErrorKind::Lost(_))
    }

    /// `true` when trying the same call again later may succeed. Exactly when
    /// [`kind`](Error::kind) is `ErrorKind::Retryable`.
    pub fn is_retryable(&self) -> bool {
        self.kind() == ErrorKind::Retryable
    }

    /// `true` when retrying cannot help (bad configuration, missing queue, access denied).
    /// Exactly when [`kind`](Error::kind) is `ErrorKind::Fatal`.
    pub fn is_fatal(&self) -> bool {
        self.kind() == ErrorKind::Fatal
    }

    /// How the error is treated: lost, retryable or fatal, as the predicates say. Every error
    /// is one of the three: a refused `release_after` ([`Error::PastHardDeadline`]), a body
    /// that did not decode ([`Error::Decode`]) and a keeper thread that could not start
    /// ([`Error::KeeperThread`]) are fatal, since the same call fails the same way again.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Sqs { kind, .. }
            | Error::Payload { kind, .. }
            | Error::Idempotency { kind, .. } => *kind,
            Error::Lost { reason, .. } => ErrorKind::Lost(*reason),
            Error::InvalidConfig { .. }
            | Error::PastHardDeadline { .. }
            | Error::Decode { .. }
            | Error::KeeperThread { .. } => ErrorKind::Fatal,
            #[cfg(feature = "lambda")]
            Error::LambdaRuntime { .. } => ErrorKind::Fatal,
            // As its queue's error says (a read that may work next time), else fatal: the
            // same event fails the same way.
            #[cfg(feature = "lambda")]
            Error::LambdaEvent { source, .. } => source
                .as_deref()
                .and_then(|s| s.downcast_ref::<Error>())
                .map_or(ErrorKind::Fatal, Error::kind),
        }
    }

    /// The SQS error code, when the failure came from SQS with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Sqs { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// A call whose answer never came because the task making it stopped with its runtime:
    /// whether it took effect is unknown, so it may be tried again.
    pub(crate) fn runtime_gone(operation: &'static str) -> Self {
        Error::Sqs {
            operation,
            code: None,
            message: "the task making the call stopped before answering (its runtime shut down)"
                .into(),
            kind: ErrorKind::Retryable,
            source: "task gone".into(),
        }
    }

    pub(crate) fn invalid(
        field: &'static str,
        got: impl fmt::Debug,
        allowed: &'static str,
    ) -> Self {
        Error::InvalidConfig {
            field,
            got: format!("{got:?}"),
            allowed,
        }
    }
}

/// An error and every `source()` under it, for logs: `top: cause: root cause`.
pub(crate) struct Chain<'a>(&'a (dyn std::error::Error + 'static));

/// `err` and its whole chain of sources, displayed on one line.
pub(crate) fn chain<'a>(err: &'a (dyn std::error::Error + 'static)) -> Chain<'a> {
    Chain(err)
}

/// `what`, then the chain of `err`'s causes on one line: each cause's own text, never an
/// SDK error's `Debug` output (which carries the whole request and response, headers
/// included).
pub(crate) fn with_causes(what: &str, err: &(dyn std::error::Error + 'static)) -> String {
    format!("{what}: {}", chain(err))
}

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = one_line(&self.0.to_string()).into_owned();
        f.write_str(&shorten_handles(&shown))?;
        if answered_by_sqs(self.0) {
            return Ok(());
        }
        let mut source = self.0.source();
        while let Some(err) = source {
            let text = one_line(&err.to_string()).into_owned();
            // A wrapper often repeats its sources' texts (an SQS error's message carries the
            // SDK error's causes): show each once.
            if !shown.contains(&text) {
                write!(f, ": {}", shorten_handles(&text))?;
                shown.push_str(&text);
            }
            if answered_by_sqs(err) {
                break;
            }
            source = err.source();
        }
        Ok(())
    }
}

/// `text` on one line: a log line is one line, whatever an error's text holds (the SDK's
/// credentials chain lists each provider it tried on a line of its own). Each line break goes,
/// with the indentation after it: a line that ends with `:` runs on after a space, any other
/// after `; `.
fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['\n', '\r']) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !out.is_empty() {
            out.push_str(if out.ends_with(':') { " " } else { "; " });
        }
        out.push_str(line);
    }
    std::borrow::Cow::Owned(out)
}

/// An SQS error with SQS's own code: its text says all there is (the operation, the code,
/// SQS's message); the SDK errors under it only repeat that in their `Debug` form.
fn answered_by_sqs(err: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        err.downcast_ref::<Error>(),
        Some(Error::Sqs { code: Some(_), .. })
    )
}

/// Tokens at least this long that look like a receipt handle are shortened in error texts.
/// A handle is hundreds of characters; message ids (36) and error codes stay whole.
const HANDLE_LEN: usize = 48;

/// `text` with every receipt handle in it cut to its first 8 characters.
///
/// SQS quotes the whole handle in some answers (AWS and LocalStack: "Value <handle> for
/// parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available
/// ..."), and a receipt handle lets whoever reads it delete or release the message: errors and
/// logs show only its start, as `Delivery`'s `Debug` does.
pub(crate) fn shorten_handles(text: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    match shorten_quoted_handle(text) {
        Cow::Borrowed(text) => shorten_long_tokens(text),
        Cow::Owned(text) => Cow::Owned(shorten_long_tokens(&text).into_owned()),
    }
}

/// The handle SQS quotes in "Value <handle> for parameter ReceiptHandle is invalid", cut to
/// its first 8 characters whatever its length: `MemoryQueue`'s handles are shorter than
/// [`HANDLE_LEN`], and not made of base64 alone.
fn shorten_quoted_handle(text: &str) -> std::borrow::Cow<'_, str> {
    const BEFORE: &str = "Value ";
    const AFTER: &str = " for parameter ReceiptHandle";
    let Some(end) = text.find(AFTER) else {
        return std::borrow::Cow::Borrowed(text);
    };
    let start = text[..end]
        .rfind(BEFORE)
        .map_or(end, |at| at + BEFORE.len());
    let handle = &text[start..end];
    if handle.chars().count() <= 8 || handle.contains(' ') {
        return std::borrow::Cow::Borrowed(text);
    }
    let cut: String = handle.chars().take(8).collect();
    std::borrow::Cow::Owned(format!("{}{cut}…{}", &text[..start], &text[end..]))
}

/// `text` with every token that looks like a receipt handle (long, base64) cut to its first
/// 8 characters.
fn shorten_long_tokens(text: &str) -> std::borrow::Cow<'_, str> {
    let handle_char = |c: char| c.is_ascii_alphanumeric() || "+/=_-".contains(c);
    let long = |token: &str| token.len() >= HANDLE_LEN && token.chars().all(handle_char);
    if !text.split(|c: char| !handle_char(c)).any(long) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(handle_char) {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(|c: char| !handle_char(c)).unwrap_or(rest.len());
        let token = &rest[..end];
        if long(token) {
            out.push_str(&token[..8]);
            out.push('…');
        } else {
            out.push_str(token);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

impl Error {
    /// This error and its whole chain of sources, for logs.
    pub(crate) fn chain(&self) -> Chain<'_> {
        Chain(self)
    }
}

/// One error shared by several callers (the entries of a failed batch request).
#[derive(Debug)]
struct SharedError(std::sync::Arc<Error>);

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

impl Error {
    /// A copy of `shared` for one of the callers it concerns: the same variant data, with
    /// the original as its source.
    pub(crate) fn replicate(shared: &std::sync::Arc<Error>) -> Error {
        let source = Box::new(SharedError(shared.clone()));
        match &**shared {
            Error::Sqs {
                operation,
                code,
                message,
                kind,
                ..
            } => Error::Sqs {
                operation,
                code: code.clone(),
                message: message.clone(),
                kind: *kind,
                source,
            },
            other => Error::Sqs {
                operation: "batch",
                code: other.code().map(str::to_owned),
                message: other.to_string(),
                kind: other.kind(),
                source,
            },
        }
    }
}

/// What an SQS error means to the crate. Public callers see it as an [`ErrorKind`]; the
/// keeper also tells a refused visibility apart from other fatal errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Lost(LostReason),
    Retryable,
    Fatal,
    /// SQS refused the visibility asked for (past its 12-hour limit by its own clock, or out
    /// of range): asking again cannot help. Fatal to every caller but the keeper, which
    /// keeps the delivery until its current deadline.
    VisibilityRefused,
}

impl Class {
    pub(crate) fn kind(self) -> ErrorKind {
        match self {
            Class::Lost(reason) => ErrorKind::Lost(reason),
            Class::Retryable => ErrorKind::Retryable,
            Class::Fatal | Class::VisibilityRefused => ErrorKind::Fatal,
        }
    }
}

/// One row of the classification table.
struct Rule {
    /// The code's short form: after the last `.`, without an `Exception` suffix (the JSON
    /// protocol and the query-compatible header spell codes differently).
    code: &'static str,
    /// Where SQS uses one code for different things: text its message contains.
    reason: Option<&'static str>,
    class: Class,
}

const fn rule(code: &'static str, class: Class) -> Rule {
    Rule {
        code,
        reason: None,
        class,
    }
}

/// Every SQS error code the crate knows, first match wins. Codes not listed are retryable on
/// 5xx, 408 and 429, and fatal on other 4xx answers, so a misconfiguration surfaces instead
/// of being retried for ever. See the guide's [errors](crate::guide::errors) page.
const RULES: &[Rule] = &[
    rule(
        "ReceiptHandleIsInvalid",
        Class::Lost(LostReason::ReceiptHandleInvalid),
    ),
    rule("MessageNotInflight", Class::Lost(LostReason::NotInFlight)),
    // What AWS answers an extension of a deleted message, or one whose receipt handle is no
    // longer the current one: the delivery is gone now.
    Rule {
        code: "InvalidParameterValue",
        reason: Some("does not exist or is not available"),
        class: Class::Lost(LostReason::ReceiptHandleInvalid),
    },
    // Otherwise (e.g. "Total VisibilityTimeout for the message is beyond the limit"): the
    // visibility itself is refused.
    rule("InvalidParameterValue", Class::VisibilityRefused),
    rule("RequestThrottled", Class::Retryable),
    rule("Throttling", Class::Retryable),
    rule("KmsThrottled", Class::Retryable),
    rule("OverLimit", Class::Retryable),
    rule("InternalError", Class::Retryable),
    rule("InternalFailure", Class::Retryable),
    rule("ServiceUnavailable", Class::Retryable),
    rule("RequestTimeout", Class::Retryable),
    rule("SlowDown", Class::Retryable),
    rule("QueueDoesNotExist", Class::Fatal),
    rule("NonExistentQueue", Class::Fatal),
    rule("AccessDenied", Class::Fatal),
    rule("InvalidClientTokenId", Class::Fatal),
    rule("UnrecognizedClient", Class::Fatal),
    rule("SignatureDoesNotMatch", Class::Fatal),
    rule("InvalidSecurity", Class::Fatal),
    rule("MissingAuthenticationToken", Class::Fatal),
    // The provider hands out fresh credentials on a later try (within `give_up_after`).
    rule("ExpiredToken", Class::Retryable),
    rule("KmsAccessDenied", Class::Fatal),
    rule("KmsDisabled", Class::Fatal),
    rule("KmsNotFound", Class::Fatal),
    rule("KmsInvalidState", Class::Fatal),
    rule("KmsInvalidKeyUsage", Class::Fatal),
    rule("KmsOptInRequired", Class::Fatal),
    rule("InvalidAddress", Class::Fatal),
    rule("InvalidAttributeName", Class::Fatal),
    rule("InvalidAttributeValue", Class::Fatal),
    rule("UnsupportedOperation", Class::Fatal),
    rule("MissingParameter", Class::Fatal),
    rule("InvalidParameterCombination", Class::Fatal),
    rule("InvalidAction", Class::Fatal),
    rule("ValidationError", Class::Fatal),
];

/// Classifies an SQS error (from the SDK, a batch entry, or the in-memory queue) by its
/// code, its HTTP status when known, and its message where the code alone is ambiguous.
pub(crate) fn classify(code: &str, status: Option<u16>, message: &str) -> Class {
    let short = code.rsplit('.').next().unwrap_or(code);
    let short = short.strip_suffix("Exception").unwrap_or(short);
    let known = RULES.iter().find(|r| {
        r.code == short
            && r.reason
                .is_none_or(|reason| message.to_ascii_lowercase().contains(reason))
    });
    match known {
        Some(r) => r.class,
        None => match status {
            Some(s) if (400..500).contains(&s) && s != 408 && s != 429 => Class::Fatal,
            _ => Class::Retryable,
        },
    }
}

/// The [`ErrorKind`] of an SQS error; see [`classify`].
pub(crate) fn classify_code(code: &str, status: Option<u16>, message: &str) -> ErrorKind {
    classify(code, status, message).kind()
}

impl Error {
    /// `true` when SQS refused the visibility an extension asked for (see
    /// [`Class::VisibilityRefused`]).
    pub(crate) fn refuses_visibility(&self) -> bool {
        match self {
            Error::Sqs {
                code: Some(code),
                message,
                ..
            } => classify(code, None, message) == Class::VisibilityRefused,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests;
