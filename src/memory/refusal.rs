//! How the in-memory queue refuses a call: SQS's error code and message, classified and
//! shortened as the SDK path reports a server's.

use std::fmt;

use crate::error::{classify_code, shorten_handles, Error};
use crate::memory::counts::Action;

/// The error a [`MemoryQueue`](crate::MemoryQueue) call fails with; the source of an
/// [`Error::Sqs`].
#[derive(Debug)]
struct MemoryQueueError {
    code: String,
    message: String,
}

impl fmt::Display for MemoryQueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for MemoryQueueError {}

/// The queue refuses a call of `action` with an SQS error `code`; a receipt handle its
/// message quotes is cut to its start, as the SDK path cuts those of a server's answers.
pub(crate) fn refuse(action: Action, code: &str, message: &str) -> Error {
    let message = &*shorten_handles(message);
    Error::Sqs {
        operation: action.name(),
        code: Some(code.to_owned()),
        message: message.to_owned(),
        kind: classify_code(code, None, message),
        source: Box::new(MemoryQueueError {
            code: code.to_owned(),
            message: message.to_owned(),
        }),
    }
}

/// A receipt handle that is not its message's latest (another receive has handed it out
/// since), refused as SQS refuses it.
pub(crate) fn invalid_receipt(action: Action) -> Error {
    refuse(
        action,
        "ReceiptHandleIsInvalid",
        "the receipt handle is not the message's latest",
    )
}
