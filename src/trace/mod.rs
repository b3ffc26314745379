//! Tracing across services: the producer's trace context a message carries, a span's parent
//! set from it (feature `opentelemetry`), and the fields OpenTelemetry's messaging
//! conventions give a "process" span.

#[cfg(feature = "opentelemetry")]
pub(crate) mod continuation;
pub(crate) mod parent;
pub(crate) mod process_span;
