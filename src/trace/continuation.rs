//! Trace continuation (feature `opentelemetry`): the `delivery` span's parent set from the
//! producer's trace context, through `tracing-opentelemetry`.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::trace::parent::TraceParent;

/// Makes `parent` (a remote span) the parent of `span`, which must not have been entered
/// yet. Without a `tracing-opentelemetry` layer in the subscriber (of this crate's version)
/// there is nothing to set, and nothing happens.
pub(crate) fn continue_trace(span: &Span, parent: &TraceParent) {
    let Some(context) = remote_context(parent) else {
        return;
    };
    // The only errors: no OpenTelemetry layer, a disabled span, one already started. None
    // of them is the message's fault, nor anything to report per delivery.
    let _ = span.set_parent(context);
}

/// An OpenTelemetry context whose span is the producer's.
fn remote_context(parent: &TraceParent) -> Option<Context> {
    let trace_id = TraceId::from_hex(&parent.trace_id).ok()?;
    let span_id = SpanId::from_hex(&parent.span_id).ok()?;
    let flags = if parent.sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    // A `tracestate` that does not parse is dropped; the trace itself is still joined.
    let state = parent
        .trace_state
        .as_deref()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let context = SpanContext::new(trace_id, span_id, flags, true, state);
    Some(Context::new().with_remote_span_context(context))
}
