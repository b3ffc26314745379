//! SQS's limits, and the validators that hold settings and arguments to them.
//!
//! Every number here is SQS's own (see the SQS developer guide's quotas); every validator
//! names the field it checks and what is allowed, so a refusal reads like the API's own.

use std::ops::RangeInclusive;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;

/// The largest visibility timeout SQS accepts, in seconds (12 hours).
pub(crate) const MAX_VISIBILITY_SECS: u32 = 43_200;

/// SQS's limit on how long a message may stay hidden, counted from the receive.
pub(crate) const HARD_LIMIT: Duration = Duration::from_secs(MAX_VISIBILITY_SECS as u64);

/// How far before the 12-hour limit the last extension ends.
///
/// SQS applies a `ChangeMessageVisibility` from the moment the call reaches it, which is a
/// little later than the moment we send it; SQS's own guide suggests 43,195 s rather than
/// 43,200 s for the same reason.
pub(crate) const CAP_MARGIN: Duration = Duration::from_secs(5);

/// How long a call to SQS may take to get there or back, as the crate allows for it at a
/// visibility timeout of `timeout`: a quarter of it, at most 1 s. No extension is sent later
/// than this before the deadline (SQS answers one that reaches it after the deadline with
/// success and does nothing), and a receive's answer is taken to have left SQS this long
/// before it arrived (SQS starts the timeout when it hands the message out).
pub(crate) fn call_margin(timeout: Duration) -> Duration {
    (timeout / 4).min(Duration::from_secs(1))
}

/// The longest long poll (`WaitTimeSeconds`), in seconds.
pub(crate) const MAX_WAIT_SECS: u64 = 20;

/// The most messages one receive returns, and the most entries one batch request takes.
pub(crate) const MAX_BATCH: usize = 10;

/// The longest delay SQS allows on a queue or a message, in seconds (15 minutes).
pub(crate) const MAX_DELAY_SECS: u64 = 900;

/// A redrive policy's `maxReceiveCount`.
pub(crate) const RECEIVE_COUNTS: RangeInclusive<u32> = 1..=1000;

/// SQS's approximate in-flight quota for a standard queue: more held deliveries cannot be.
pub(crate) const MAX_IN_FLIGHT: usize = 120_000;

/// The latest instant an extension of a delivery received at `received_at` may end at:
/// receive + 12 h - [`CAP_MARGIN`].
pub(crate) fn extension_limit(received_at: Instant) -> Instant {
    received_at + HARD_LIMIT - CAP_MARGIN
}

/// The whole seconds in `d`, or `None` if it has a fraction of a second.
pub(crate) fn whole_secs(d: Duration) -> Option<u64> {
    (d.subsec_nanos() == 0).then_some(d.as_secs())
}

/// `d` rounded up to whole seconds.
pub(crate) fn secs_rounded_up(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// A visibility timeout in SQS's terms: whole seconds in 0..=43200 (12 hours). The one type
/// the seconds a message stays hidden have, from the builder (or the queue's attribute) to
/// the wire: a receive's timeout, a lease's, an extension's, a release's delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct VisibilityTimeout(u16);

impl VisibilityTimeout {
    /// 0: visible again at once (a release).
    pub(crate) const ZERO: Self = Self(0);

    /// 12 hours, the most SQS accepts.
    pub(crate) const MAX: Self = Self(MAX_VISIBILITY_SECS as u16);

    /// A setting or argument `d`, refused unless whole seconds in 0..=43200.
    pub(crate) fn of(field: &'static str, d: Duration) -> Result<Self, Error> {
        whole_secs(d)
            .filter(|s| *s <= u64::from(MAX_VISIBILITY_SECS))
            .map(Self::at_most_max)
            .ok_or_else(|| Error::invalid(field, d, "whole seconds in 0..=43200 (12 hours)"))
    }

    /// A consumer's visibility timeout: whole seconds in 1..=43200. SQS accepts 0, but a
    /// message received with it is visible to every other receive at once, so its delivery
    /// could never be kept (nor acked safely).
    pub(crate) fn of_consumer(field: &'static str, d: Duration) -> Result<Self, Error> {
        Self::of(field, d)
            .ok()
            .filter(|t| *t > Self::ZERO)
            .ok_or_else(|| Error::invalid(field, d, "whole seconds in 1..=43200 (12 hours)"))
    }

    /// `secs` seconds, or 12 hours if more: for seconds the crate computes (a delay, the room
    /// left before the 12-hour limit) or a queue's attribute, which SQS keeps in range.
    pub(crate) fn at_most_max(secs: u64) -> Self {
        Self(u16::try_from(secs.min(u64::from(MAX_VISIBILITY_SECS))).unwrap_or(u16::MAX))
    }

    /// The seconds.
    pub(crate) fn secs(self) -> u32 {
        u32::from(self.0)
    }

    /// As a `Duration`.
    pub(crate) fn duration(self) -> Duration {
        Duration::from_secs(u64::from(self.0))
    }

    /// As SQS's API takes it (`VisibilityTimeout`, an `i32`).
    pub(crate) fn wire(self) -> i32 {
        i32::from(self.0)
    }

    /// `true` for 0.
    pub(crate) fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl std::fmt::Display for VisibilityTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A long-poll wait: whole seconds in 0..=20.
pub(crate) fn wait_time(field: &'static str, d: Duration) -> Result<Duration, Error> {
    match whole_secs(d) {
        Some(s) if s <= MAX_WAIT_SECS => Ok(d),
        _ => Err(Error::invalid(field, d, "whole seconds in 0..=20")),
    }
}

/// A delay (`DelaySeconds`): whole seconds in 0..=900.
pub(crate) fn delay(field: &'static str, d: Duration) -> Result<Duration, Error> {
    match whole_secs(d) {
        Some(s) if s <= MAX_DELAY_SECS => Ok(d),
        _ => Err(Error::invalid(field, d, "whole seconds in 0..=900")),
    }
}

/// The longest message attribute name.
const MAX_ATTRIBUTE_NAME: usize = 256;

/// An entry of `MessageAttributeNames`: `All` or `.*` (every attribute), a name, or
/// `prefix.*` (every attribute whose name starts with `prefix.`). A name is 1 to 256 letters,
/// digits, `_`, `-` and `.`, neither starting nor ending with `.`, without `..`, and not
/// starting with `AWS.` or `Amazon.` in any case.
pub(crate) fn message_attribute_name(field: &'static str, entry: &str) -> Result<(), Error> {
    const ALLOWED: &str = "`All`, `.*`, or a name (1 to 256 of A-Z a-z 0-9 _ - ., not \
                           starting or ending with `.`, no `..`, not starting with `AWS.` or \
                           `Amazon.`), optionally followed by `.*`";
    if entry == "All" || entry == ".*" {
        return Ok(());
    }
    let name = entry.strip_suffix(".*").unwrap_or(entry);
    let lower = name.to_ascii_lowercase();
    let valid = (1..=MAX_ATTRIBUTE_NAME).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.");
    if valid {
        Ok(())
    } else {
        Err(Error::invalid(field, entry, ALLOWED))
    }
}

/// `value` if it lies in `range`; otherwise an error naming `field` and `allowed`.
pub(crate) fn in_range<T>(
    field: &'static str,
    value: T,
    range: RangeInclusive<T>,
    allowed: &'static str,
) -> Result<T, Error>
where
    T: PartialOrd + std::fmt::Debug,
{
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(Error::invalid(field, value, allowed))
    }
}

#[cfg(test)]
mod tests;
