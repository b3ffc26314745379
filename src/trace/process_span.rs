//! The span of a consumer's "process" operation, named and filled in as OpenTelemetry's
//! semantic conventions for messaging (version 1.45.0) say: one place for the `delivery` and
//! `batch` spans' common fields.

/// `tracing::info_span!(name, <the conventions' fields for queue>, <more fields>)`:
/// `otel.name` is `process <queue>`, `otel.kind` `consumer`, `messaging.system` `aws_sqs`,
/// the operation `process`, and the destination the queue's name (never its URL, which
/// carries the account id).
macro_rules! process_span {
    ($name:literal, $queue:expr, $($fields:tt)*) => {{
        let queue: &str = $queue;
        tracing::info_span!(
            $name,
            otel.name = %format_args!("process {queue}"),
            otel.kind = "consumer",
            messaging.system = "aws_sqs",
            messaging.operation.type = "process",
            messaging.operation.name = "process",
            messaging.destination.name = queue,
            $($fields)*
        )
    }};
}

pub(crate) use process_span;
