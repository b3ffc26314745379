//! How a consumer names its queue: a URL, a name, or an ARN, told apart and checked against
//! SQS's rules before anything is sent.

use std::fmt;

use crate::error::Error;

/// The longest queue name SQS accepts, `.fifo` included.
const MAX_NAME: usize = 80;

/// What a refusal of the queue argument says is allowed.
const ALLOWED: &str = "a queue URL (http:// or https://), a queue name (1 to 80 of A-Z a-z 0-9 \
                       _ -, `.fifo` at the end of a FIFO queue's name, counted in the 80), or \
                       an ARN `arn:<partition>:sqs:<region>:<12-digit account>:<name>`";

/// A queue as the builder was given it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum QueueRef {
    /// A queue URL, used as it is.
    Url(String),
    /// A queue name, resolved with `GetQueueUrl` in the client's account and region.
    Name(String),
    /// An ARN, resolved with `GetQueueUrl` for its name and account.
    Arn {
        /// The whole ARN, as given.
        arn: String,
        region: String,
        account: String,
        name: String,
    },
}

impl QueueRef {
    /// Tells a URL, a name and an ARN apart; anything else is refused, naming the rules.
    pub(crate) fn parse(given: &str) -> Result<Self, Error> {
        Self::parse_setting("queue", given)
    }

    /// As [`parse`](QueueRef::parse), for the queue of the setting `field`.
    pub(crate) fn parse_setting(field: &'static str, given: &str) -> Result<Self, Error> {
        if given.starts_with("https://") || given.starts_with("http://") {
            let host = given.split_once("://").map_or("", |(_, rest)| rest);
            return if host.is_empty() {
                Err(Error::invalid(field, given, ALLOWED))
            } else {
                Ok(QueueRef::Url(given.to_owned()))
            };
        }
        if given.starts_with("arn:") {
            return parse_arn(given).ok_or_else(|| Error::invalid(field, given, ALLOWED));
        }
        if is_queue_name(given) {
            Ok(QueueRef::Name(given.to_owned()))
        } else {
            Err(Error::invalid(field, given, ALLOWED))
        }
    }

    /// The queue as given: URL, name or ARN.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            QueueRef::Url(s) | QueueRef::Name(s) => s,
            QueueRef::Arn { arn, .. } => arn,
        }
    }

    /// The name to ask `GetQueueUrl` for, and the owner account (an ARN's).
    pub(crate) fn name_and_owner(&self) -> Option<(&str, Option<&str>)> {
        match self {
            QueueRef::Url(_) => None,
            QueueRef::Name(name) => Some((name, None)),
            QueueRef::Arn { name, account, .. } => Some((name, Some(account))),
        }
    }

    /// The queue's name: a URL's last path segment, a name as given, an ARN's last part.
    /// Unlike the URL and the ARN, it does not carry the account id, so it is what spans and
    /// metrics name the queue by.
    pub(crate) fn name(&self) -> &str {
        match self {
            QueueRef::Url(url) => url_queue_name(url),
            QueueRef::Name(name) | QueueRef::Arn { name, .. } => name,
        }
    }

    /// An ARN's region.
    pub(crate) fn region(&self) -> Option<&str> {
        match self {
            QueueRef::Arn { region, .. } => Some(region),
            _ => None,
        }
    }

    /// `true` for a FIFO queue: its URL, name or ARN ends in `.fifo`.
    pub(crate) fn is_fifo(&self) -> bool {
        self.as_str().trim_end_matches('/').ends_with(".fifo")
    }
}

impl fmt::Display for QueueRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// SQS's rule for queue names: 1 to 80 letters, digits, `_` and `-`; a FIFO queue's ends in
/// `.fifo`, counted in the 80.
fn is_queue_name(name: &str) -> bool {
    let base = name.strip_suffix(".fifo").unwrap_or(name);
    name.len() <= MAX_NAME
        && !base.is_empty()
        && base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The last non-empty path segment of a queue URL (`https://host/<account>/<name>`), without
/// a query; the whole URL if it has no path.
fn url_queue_name(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    // With the trailing slashes trimmed, what follows the last slash is never empty.
    match rest.trim_end_matches('/').rsplit_once('/') {
        Some((_, name)) => name,
        None => url,
    }
}

/// `arn:<partition>:sqs:<region>:<account>:<name>`.
fn parse_arn(arn: &str) -> Option<QueueRef> {
    let parts: Vec<&str> = arn.split(':').collect();
    let [_, partition, service, region, account, name] = parts.as_slice() else {
        return None;
    };
    let word = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let valid = word(partition)
        && *service == "sqs"
        && word(region)
        && account.len() == 12
        && account.chars().all(|c| c.is_ascii_digit())
        && is_queue_name(name);
    valid.then(|| QueueRef::Arn {
        arn: arn.to_owned(),
        region: (*region).to_owned(),
        account: (*account).to_owned(),
        name: (*name).to_owned(),
    })
}

#[cfg(test)]
mod tests;
