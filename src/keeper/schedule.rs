//! The extension schedule, a pure function of a lease's deadline, its timeout and the
//! 12-hour limit: each extension halfway through the timeout, leaving the other half for the
//! call (and its retries) to reach the queue; the last one cut to end just before the limit.

use std::time::Duration;

use tokio::time::Instant;

use crate::limits::VisibilityTimeout;

/// One planned `ChangeMessageVisibility` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extension {
    /// When to send the call.
    pub(crate) at: Instant,
    /// The visibility timeout to ask for, counted from the call; less than the lease's when
    /// the 12-hour limit cuts the extension short (the last one).
    pub(crate) visibility_timeout: VisibilityTimeout,
}

/// Plans the next extension of a delivery whose visibility currently ends at `deadline`.
///
/// `visibility_timeout` is the lease's, `T`, and `limit` the latest instant an
/// extension may end at (receive + 12 h - [`CAP_MARGIN`](crate::limits::CAP_MARGIN)).
/// Returns `None` when no further extension is possible or useful: `T = 0`, or the limit
/// leaves nothing to gain.
pub(crate) fn next_extension(
    deadline: Instant,
    visibility_timeout: VisibilityTimeout,
    limit: Instant,
) -> Option<Extension> {
    if visibility_timeout.is_zero() {
        return None;
    }
    let t = visibility_timeout.duration();
    let at = deadline.checked_sub(t / 2)?;
    if at >= limit {
        return None;
    }
    let room = VisibilityTimeout::at_most_max((limit - at).as_secs());
    if room >= visibility_timeout {
        return Some(Extension {
            at,
            visibility_timeout,
        });
    }
    if room.is_zero() {
        return None;
    }
    // The limit cuts this extension short. Send it a moment later than usual, so that it ends
    // exactly at the limit, unless that would eat too far into the time left for retries.
    let exact = limit - room.duration();
    let at = if exact <= at + t / 4 { exact } else { at };
    if at + room.duration() <= deadline {
        return None;
    }
    Some(Extension {
        at,
        visibility_timeout: room,
    })
}

/// Extensions due within this much after a round's start go out with it, a little early, so
/// that deliveries received apart share requests; never more than an eighth of the timeout,
/// so a round sent early gains (nearly) a whole timeout still.
pub(crate) const COALESCE_WINDOW: Duration = Duration::from_millis(250);

/// When the previous extension was due, sent and answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Previous {
    pub(crate) due: Instant,
    pub(crate) sent: Instant,
    pub(crate) answered: Instant,
}

/// When the extension after the `previous` one is due, given `ext`, the plan halfway through
/// the new timeout (counted from the call, as SQS counts it).
///
/// Half a timeout after the previous one was due (or sent, if later) plus its round trip,
/// as if it had been sent on time; never more than the coalescing window (an eighth of the
/// timeout, at most) past the plan, so three eighths of a timeout or more are left before
/// the deadline. A round sent early to share a request thus does not pull every later round
/// of its deliveries earlier, and rounds move on by their round trips: a delivery whose
/// handler acks it after a whole number of half timeouts is acked before its next round,
/// instead of being extended once more just before.
pub(crate) fn next_due(
    ext: &Extension,
    visibility_timeout: VisibilityTimeout,
    previous: Previous,
) -> Instant {
    let Previous {
        due,
        sent,
        answered,
    } = previous;
    let t = visibility_timeout.duration();
    if ext.visibility_timeout < visibility_timeout {
        return ext.at; // the last one, timed to end at the 12-hour limit
    }
    let latest = ext.at + (t / 8).min(COALESCE_WINDOW);
    let round_trip = answered.saturating_duration_since(sent);
    (due.max(sent) + round_trip + t / 2).clamp(ext.at, latest)
}

#[cfg(test)]
mod tests;
