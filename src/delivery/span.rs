//! The `delivery` span each message is handled in, and the producer's trace context it
//! carries: recorded as fields, and (feature `opentelemetry`, or an `on_delivery_span` hook)
//! made the span's parent.

use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use tracing::Span;

use crate::lease::context::Context;
use crate::trace::parent::{self as trace_parent, parse_x_ray, Malformed, TraceParent};
use crate::trace::process_span::process_span;

/// The `delivery` span: a "process" span as OpenTelemetry's conventions name one (see
/// `process_span!`), for one message.
pub(crate) fn delivery_span(
    ctx: &Context,
    message: &Message,
    receive_count: u32,
    age: Option<Duration>,
) -> Span {
    let span = process_span!(
        "delivery",
        ctx.short_queue_name(),
        messaging.message.id = message.message_id().unwrap_or_default(),
        receive_count,
        age_ms = age.map(|a| u64::try_from(a.as_millis()).unwrap_or(u64::MAX)),
        aws_trace_header = tracing::field::Empty,
        traceparent = tracing::field::Empty,
    );
    record_trace_context(&span, message);
    let joins = cfg!(feature = "opentelemetry") || ctx.span_hook().is_some();
    if joins && !span.is_disabled() {
        let parent = read_trace_parent(message, |header, why| {
            tracing::debug!(parent: &span, header, reason = %why, "ignored a malformed trace header");
        });
        #[cfg(feature = "opentelemetry")]
        if let Some(parent) = &parent {
            crate::trace::continuation::continue_trace(&span, parent);
        }
        if let Some(hook) = ctx.span_hook() {
            hook.call(&span, parent.as_ref());
        }
    }
    span
}

/// The producer's trace context: the W3C `traceparent` (with its `tracestate`) if well
/// formed, else X-Ray's `AWSTraceHeader` if well formed; `malformed` hears of each header
/// that is there and is not.
pub(crate) fn read_trace_parent(
    message: &Message,
    mut malformed: impl FnMut(&'static str, Malformed),
) -> Option<TraceParent> {
    let attribute = |name: &str| {
        message
            .message_attributes()
            .and_then(|a| a.get(name))
            .and_then(|v| v.string_value())
    };
    if let Some(header) = attribute("traceparent") {
        match trace_parent::parse_w3c(header, attribute("tracestate")) {
            Ok(parent) => return Some(parent),
            Err(why) => malformed("traceparent", why),
        }
    }
    let x_ray = message
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::AwsTraceHeader))?;
    parse_x_ray(x_ray)
        .map_err(|why| malformed("AWSTraceHeader", why))
        .ok()
}

/// Records the message's trace context in its span, when it carries one: the X-Ray header
/// SQS keeps as the `AWSTraceHeader` system attribute, and a W3C `traceparent` message
/// attribute (what OpenTelemetry propagators write).
fn record_trace_context(span: &Span, message: &Message) {
    if span.is_disabled() {
        return;
    }
    if let Some(header) = message
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::AwsTraceHeader))
    {
        span.record("aws_trace_header", tracing::field::display(header));
    }
    if let Some(parent) = message
        .message_attributes()
        .and_then(|a| a.get("traceparent"))
        .and_then(|v| v.string_value())
    {
        span.record("traceparent", tracing::field::display(parent));
    }
}
