//! Durations as people read them in logs: `30s`, `17.2s`, `250ms`, `5m 0s`, `never`; not
//! `17.239871s`, nor a duration of `u64::MAX` seconds. (Instants are logged as the time left
//! until them, in this form: an `Instant`'s `Debug` means nothing to a reader.)

use std::fmt;
use std::time::Duration;

/// A duration for a log line: whole seconds without decimals (`30s`), one decimal below a
/// minute (`17.2s`), milliseconds below a second (`250ms`), minutes and seconds from a minute
/// (`5m 0s`), and `never` for one too long to mean anything (over a year: "no limit").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Secs(pub(crate) Duration);

/// A count and what it counts, in the singular (one) or the plural (any other number):
/// `1 receive`, `3 receives`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Count(
    pub(crate) usize,
    pub(crate) &'static str,
    pub(crate) &'static str,
);

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Count(n, one, many) = *self;
        write!(f, "{n} {}", if n == 1 { one } else { many })
    }
}

/// Durations past this read as `never`.
const NEVER: Duration = Duration::from_secs(365 * 24 * 3600);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d > NEVER {
            return f.write_str("never");
        }
        let ms = d.as_millis();
        if ms < 1000 {
            return write!(f, "{ms}ms");
        }
        let secs = d.as_secs();
        if secs >= 60 {
            return write!(f, "{}m {}s", secs / 60, secs % 60);
        }
        // Tenths, rounded to the nearest; a whole number shows no decimal.
        let tenths = (ms + 50) / 100;
        if tenths.is_multiple_of(10) {
            write!(f, "{}s", tenths / 10)
        } else {
            write!(f, "{}.{}s", tenths / 10, tenths % 10)
        }
    }
}

#[cfg(test)]
mod tests;
