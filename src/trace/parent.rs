//! The producer's trace context a message carries: a W3C `traceparent` (and `tracestate`)
//! message attribute, or the X-Ray header SQS keeps as the `AWSTraceHeader` system attribute.

use std::fmt;
use std::sync::Arc;

use tracing::Span;

/// The trace a message's producer was in, read from the message, for a span of yours to
/// join it: [`Delivery::trace_parent`](crate::Delivery::trace_parent).
///
/// With feature `opentelemetry` the consumer makes it the `delivery` span's parent itself.
/// On another OpenTelemetry version, hand [`traceparent`](TraceParent::traceparent) to your
/// propagator and set the result as the parent of
/// [`Delivery::span`](crate::Delivery::span) (see the guide's integrations page).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceParent {
    /// The trace's id: 32 lowercase hex digits (an X-Ray trace id's two parts, run together).
    pub trace_id: String,
    /// The producer's span: 16 lowercase hex digits (X-Ray's `Parent`).
    pub span_id: String,
    /// The producer sampled the trace (W3C flag `01`, X-Ray `Sampled=1`).
    pub sampled: bool,
    /// The W3C `tracestate` attribute, when the message carries one with a `traceparent`.
    pub trace_state: Option<String>,
    /// Where it was read from.
    pub carrier: TraceCarrier,
}

/// Where a [`TraceParent`] was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceCarrier {
    /// The `traceparent` message attribute (W3C Trace Context), what OpenTelemetry's
    /// propagators write.
    W3c,
    /// The `AWSTraceHeader` system attribute (X-Ray's format), what SQS keeps for X-Ray.
    XRay,
}

impl TraceParent {
    /// The W3C `traceparent` header for it: `00-<trace id>-<span id>-<01 or 00>`.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id,
            self.span_id,
            u8::from(self.sampled)
        )
    }
}

/// What `ConsumerBuilder::on_delivery_span` was given: called with each `delivery` span
/// before the span is entered, and the message's trace parent.
#[derive(Clone)]
pub(crate) struct SpanHook(Arc<SpanHookFn>);

/// `on_delivery_span`'s function.
type SpanHookFn = dyn Fn(&Span, Option<&TraceParent>) + Send + Sync;

impl SpanHook {
    pub(crate) fn new(hook: impl Fn(&Span, Option<&TraceParent>) + Send + Sync + 'static) -> Self {
        Self(Arc::new(hook))
    }

    pub(crate) fn call(&self, span: &Span, parent: Option<&TraceParent>) {
        (self.0)(span, parent);
    }
}

impl fmt::Debug for SpanHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SpanHook")
    }
}

/// Why a header was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed(&'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// A W3C `traceparent` (and its `tracestate`), as W3C Trace Context (level 1) defines it:
/// `<version>-<trace id>-<parent id>-<flags>`, lowercase hex, ids not all zeros, version
/// `ff` invalid, and for version `00` nothing after the flags.
pub(crate) fn parse_w3c(header: &str, trace_state: Option<&str>) -> Result<TraceParent, Malformed> {
    let mut parts = header.trim().split('-');
    let version = parts.next().unwrap_or_default();
    let (trace_id, span_id, flags) = match (parts.next(), parts.next(), parts.next()) {
        (Some(t), Some(s), Some(f)) => (t, s, f),
        _ => return Err(Malformed("not <version>-<trace id>-<parent id>-<flags>")),
    };
    if !is_hex(version, 2) || version == "ff" {
        return Err(Malformed("the version is not two hex digits other than ff"));
    }
    if version == "00" && parts.next().is_some() {
        return Err(Malformed("version 00 has nothing after its flags"));
    }
    let flags = match is_hex(flags, 2) {
        true => u8::from_str_radix(flags, 16).map_err(|_| Malformed("the flags are not hex"))?,
        false => return Err(Malformed("the flags are not two hex digits")),
    };
    Ok(TraceParent {
        trace_id: id(
            trace_id,
            32,
            "the trace id is not 32 hex digits, not all zeros",
        )?,
        span_id: id(
            span_id,
            16,
            "the parent id is not 16 hex digits, not all zeros",
        )?,
        sampled: flags & 1 == 1,
        trace_state: trace_state
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        carrier: TraceCarrier::W3c,
    })
}

/// An X-Ray trace header: `Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=<0|1|?>`, its
/// fields in any order, others (`Lineage`, ...) ignored. Without `Parent` there is no span to
/// join.
pub(crate) fn parse_x_ray(header: &str) -> Result<TraceParent, Malformed> {
    let (mut root, mut parent, mut sampled) = (None, None, false);
    for field in header.split(';') {
        match field.trim().split_once('=') {
            Some(("Root", value)) => root = Some(value),
            Some(("Parent", value)) => parent = Some(value),
            Some(("Sampled", value)) => sampled = value == "1",
            _ => {}
        }
    }
    let root = root.ok_or(Malformed("no Root"))?;
    let trace_id = match root.split('-').collect::<Vec<_>>()[..] {
        ["1", time, unique] if is_hex(time, 8) && is_hex(unique, 24) => format!("{time}{unique}"),
        _ => return Err(Malformed("Root is not 1-<8 hex digits>-<24 hex digits>")),
    };
    let parent = parent.ok_or(Malformed("no Parent: no span to join"))?;
    Ok(TraceParent {
        trace_id: id(&trace_id, 32, "the trace id is all zeros")?,
        span_id: id(parent, 16, "Parent is not 16 hex digits, not all zeros")?,
        sampled,
        trace_state: None,
        carrier: TraceCarrier::XRay,
    })
}

/// `text`, lowercased, when it is `len` hex digits and not all zeros.
fn id(text: &str, len: usize, why: &'static str) -> Result<String, Malformed> {
    if is_hex(text, len) && text.bytes().any(|b| b != b'0') {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(Malformed(why))
    }
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests;
