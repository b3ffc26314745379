//! A handler's span joins the producer's trace with no code of the handler's (feature
//! `opentelemetry`), and an EventBridge event is read for its `detail` (feature `json`). No
//! AWS account needed: an in-memory queue, spans exported to memory and printed.
//!
//! The message is an EventBridge event sent with a W3C `traceparent` (trace
//! `0af7651916cd43dd8448eb211c80319c`, span `b7ad6b7169203331`), as an instrumented producer
//! would send it. The handler opens a span `charge`; the example prints where it landed:
//!
//! ```text
//! cargo run --example trace --features opentelemetry,json
//! order 7 (Order Placed from com.example.orders): span `charge` in trace 0af7651916cd43dd8448eb211c80319c, under `process orders` (Consumer), under the producer's span b7ad6b7169203331
//! ```
//!
//! `tests/trace/continuation.rs` runs it and checks every id against the exported spans.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use sqs_consumer::memory::SendOptions;
use sqs_consumer::{BoxError, Consumer, Delivery, MemoryQueue};
use tracing_subscriber::layer::SubscriberExt;

/// The event's `detail`.
#[derive(Debug, serde::Deserialize)]
struct OrderPlaced {
    id: u64,
}

/// The example itself: handles one message, then writes where its span landed to `out`,
/// read from `spans` (the exporter the subscriber's OpenTelemetry layer writes to).
pub async fn run(
    out: &mut impl std::io::Write,
    spans: &InMemorySpanExporter,
) -> Result<String, BoxError> {
    let queue = MemoryQueue::builder().name("orders").build()?;
    let event = r#"{"version": "0", "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": "Order Placed", "source": "com.example.orders",
        "account": "111122223333", "time": "2026-11-30T12:00:00Z", "region": "us-west-1",
        "resources": [], "detail": {"id": 7}}"#;
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let options = SendOptions::new().message_attribute("traceparent", traceparent);
    let message_id = queue.send_with(event, options)?;

    let consumer = Consumer::in_memory(&queue)
        .wait_time(Duration::from_secs(1))
        .build()?;
    let summary = Arc::new(Mutex::new(String::new()));
    let written = summary.clone();
    let handler = move |delivery: Delivery| {
        let written = written.clone();
        async move {
            let event = delivery.eventbridge::<OrderPlaced>()?;
            tracing::info_span!("charge", order = event.detail.id).in_scope(|| {
                tracing::info!("charging");
            });
            *written.lock().unwrap_or_else(|e| e.into_inner()) = format!(
                "order {} ({} from {})",
                event.detail.id, event.detail_type, event.source
            );
            delivery.ack().await
        }
    };
    let drained = async {
        while !queue.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    consumer.run_until(handler, drained).await?;

    // The `delivery` span ends once its lease is gone, soon after the ack.
    for _ in 0..600 {
        let finished = spans.get_finished_spans()?;
        let id_of = |key: &str, value: &str| {
            finished.iter().find(|s| {
                s.attributes
                    .iter()
                    .any(|kv| kv.key.as_str() == key && kv.value.as_str() == value)
            })
        };
        let delivery = id_of("messaging.message.id", &message_id);
        let charge = finished.iter().find(|s| {
            s.name == "charge"
                && delivery.is_some_and(|d| s.parent_span_id == d.span_context.span_id())
        });
        if let (Some(delivery), Some(charge)) = (delivery, charge) {
            let summary = summary.lock().unwrap_or_else(|e| e.into_inner()).clone();
            writeln!(
                out,
                "{summary}: span `charge` in trace {}, under `{}` ({:?}), under the producer's span {}",
                charge.span_context.trace_id(),
                delivery.name,
                delivery.span_kind,
                delivery.parent_span_id
            )?;
            return Ok(message_id);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("the spans were not exported".into())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let spans = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("example")))
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr));
    tracing::subscriber::set_global_default(subscriber)?;
    run(&mut std::io::stdout(), &spans).await?;
    Ok(())
}
