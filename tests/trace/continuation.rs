//! Trace continuation: the `delivery` span's parent is the producer's span, from a W3C
//! `traceparent` or from X-Ray's `AWSTraceHeader`, so a handler's own span joins the
//! producer's trace with no code of the handler's (feature `opentelemetry`), or with the
//! three lines of an `on_delivery_span` hook (without it: how a user of another
//! `tracing-opentelemetry` version does it). Spans go to an in-memory exporter, on
//! `MemoryQueue` and on the test server. The span a handler sees is printed (`--nocapture`).

use crate::common;

use std::sync::{Arc, Mutex, OnceLock};

use common::{eventually, secs, Kind, TestQueue};
use opentelemetry::trace::{SpanId, SpanKind, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use sqs_consumer::{Delivery, TraceCarrier};

on_both!(
    the_delivery_span_joins_the_producers_trace_from_either_carrier,
    the_delivery_span_hook_sees_each_delivery_span_with_its_producers_context,
);

#[cfg(all(feature = "opentelemetry", feature = "json"))]
#[allow(dead_code)]
#[path = "../../examples/trace.rs"]
mod trace_example;

/// The trace example: its handler's span is in the producer's trace, under the `delivery`
/// span, under the producer's span, and it says so with the ids the exporter holds.
#[cfg(all(feature = "opentelemetry", feature = "json"))]
#[tokio::test(start_paused = true)]
async fn the_trace_example_prints_where_its_span_landed() {
    let spans = &exported().spans;
    let mut out = Vec::new();
    let message_id = trace_example::run(&mut out, spans)
        .await
        .expect("the example runs");
    let finished = spans.get_finished_spans().unwrap();
    let delivery = span_with(&finished, "messaging.message.id", &message_id).expect("exported");
    let charge = finished
        .iter()
        .find(|s| s.name == "charge" && s.parent_span_id == delivery.span_context.span_id())
        .expect("the handler's span, under the delivery span");
    assert_eq!(
        charge.span_context.trace_id(),
        TraceId::from_hex(W3C_TRACE).unwrap()
    );
    assert_eq!(delivery.parent_span_id, SpanId::from_hex(W3C_SPAN).unwrap());
    assert_eq!(
        String::from_utf8(out).unwrap().trim_end(),
        format!(
            "order 7 (Order Placed from com.example.orders): span `charge` in trace \
             {W3C_TRACE}, under `process orders` (Consumer), under the producer's span \
             {W3C_SPAN}"
        )
    );
}

/// The W3C producer: trace and span.
const W3C_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const W3C_SPAN: &str = "b7ad6b7169203331";
/// The X-Ray producer: its trace id's two parts, and its segment.
const X_RAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
const X_RAY_TRACE: &str = "5759e988bd862e3fe1be46a994272793";
const X_RAY_SPAN: &str = "53995c3f42cd8ad8";

/// The exporter every span of this test binary goes to.
struct Exported {
    spans: InMemorySpanExporter,
    /// Kept alive: dropping the provider shuts its exporter down.
    _provider: SdkTracerProvider,
}

static EXPORTED: OnceLock<Exported> = OnceLock::new();

/// The layer that exports this binary's spans, made once, before its first test.
pub(crate) fn exporting_layer(
) -> impl tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync {
    let spans = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let tracer = provider.tracer("trace-continuation-test");
    let _ = EXPORTED.set(Exported {
        spans,
        _provider: provider,
    });
    tracing_opentelemetry::layer().with_tracer(tracer)
}

fn exported() -> &'static Exported {
    EXPORTED.get().expect("installed before the first test")
}

/// What a handler saw: the message's form (its body's first word), its id, and where its
/// trace context came from.
type Handled = (String, String, Option<TraceCarrier>);

/// The span whose attribute `key` is `value`, once exported.
fn span_with(spans: &[SpanData], key: &str, value: &str) -> Option<SpanData> {
    spans
        .iter()
        .find(|s| {
            s.attributes
                .iter()
                .any(|kv| kv.key.as_str() == key && kv.value.as_str() == value)
        })
        .cloned()
}

/// Four messages: one with a W3C `traceparent` (and `tracestate`), one with an X-Ray header
/// only, one whose `traceparent` is malformed (ignored with a debug line: its span starts a
/// trace of its own), one with a malformed `traceparent` and a good X-Ray header (the X-Ray
/// trace). Each handler opens a span of its own, which lands in the producer's trace under
/// the `delivery` span.
async fn the_delivery_span_joins_the_producers_trace_from_either_carrier(kind: Kind) {
    let exported = exported();
    // The debug lines of the malformed headers, from here on.
    let lines = common::global_logs();
    let q = TestQueue::new(kind, 30).await;
    let traceparent = format!("00-{W3C_TRACE}-{W3C_SPAN}-01");
    let tag = format!("{kind:?}");
    q.send_with_trace(
        &format!("w3c {tag}"),
        None,
        &[("traceparent", &traceparent), ("tracestate", "vendor=42")],
    )
    .await;
    q.send_with_trace(&format!("x-ray {tag}"), Some(X_RAY), &[])
        .await;
    q.send_with_trace(
        &format!("malformed {tag}"),
        None,
        &[("traceparent", "00-nonsense")],
    )
    .await;
    q.send_with_trace(
        &format!("fallback {tag}"),
        Some(X_RAY),
        &[("traceparent", "00-nonsense")],
    )
    .await;
    // A narrowed attribute list: the feature asks for the trace attributes all the same.
    #[cfg(feature = "opentelemetry")]
    let consumer = q.consumer().message_attribute_names(["tenant"]);
    // Without it, the hook a user of another `tracing-opentelemetry` version would write.
    #[cfg(not(feature = "opentelemetry"))]
    let consumer = q.consumer().on_delivery_span(|span, parent| {
        use opentelemetry::propagation::TextMapPropagator;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        if let Some(parent) = parent {
            let mut carrier =
                std::collections::HashMap::from([("traceparent".to_owned(), parent.traceparent())]);
            if let Some(state) = &parent.trace_state {
                carrier.insert("tracestate".to_owned(), state.clone());
            }
            let propagator = opentelemetry_sdk::propagation::TraceContextPropagator::new();
            span.set_parent(propagator.extract(&carrier)).unwrap();
        }
    });
    let consumer = consumer.wait_time(secs(1)).build().unwrap();
    let ids: Arc<Mutex<Vec<Handled>>> = Arc::default();
    let seen = ids.clone();
    let handler = move |d: Delivery| {
        let seen = seen.clone();
        async move {
            let form = d.body().split(' ').next().unwrap_or_default().to_owned();
            let carrier = d.trace_parent().map(|p| p.carrier);
            let id = d.message_id().to_owned();
            tracing::info_span!("work", form = form.as_str(), id = id.as_str()).in_scope(|| {
                tracing::info!("working");
            });
            seen.lock().unwrap().push((form, id, carrier));
            d.ack().await
        }
    };
    let done = eventually("all acked", secs(60), || consumer.stats().acked == 4);
    common::run_while(&consumer, handler, done).await;
    let ids = ids.lock().unwrap().clone();
    let id_of = |form: &str| {
        let (_, id, carrier) = ids.iter().find(|(f, ..)| f == form).expect("handled");
        (id.clone(), *carrier)
    };
    // The delivery spans close once their leases are gone.
    let spans_of = |form: &str| {
        let (id, _) = id_of(form);
        let spans = exported.spans.get_finished_spans().unwrap();
        let delivery = span_with(&spans, "messaging.message.id", &id)?;
        let work = span_with(&spans, "id", &id)?;
        Some((delivery, work))
    };
    eventually("every span exported", secs(30), || {
        ["w3c", "x-ray", "malformed", "fallback"]
            .iter()
            .all(|form| spans_of(form).is_some())
    })
    .await;

    for (form, trace, parent, carrier) in [
        ("w3c", W3C_TRACE, W3C_SPAN, TraceCarrier::W3c),
        ("x-ray", X_RAY_TRACE, X_RAY_SPAN, TraceCarrier::XRay),
        ("fallback", X_RAY_TRACE, X_RAY_SPAN, TraceCarrier::XRay),
    ] {
        let (delivery, work) = spans_of(form).unwrap();
        assert_eq!(id_of(form).1, Some(carrier), "{form}");
        assert_eq!(
            delivery.span_context.trace_id(),
            TraceId::from_hex(trace).unwrap(),
            "{form}"
        );
        assert_eq!(
            delivery.parent_span_id,
            SpanId::from_hex(parent).unwrap(),
            "{form}"
        );
        assert!(delivery.parent_span_is_remote, "{form}");
        assert_eq!(delivery.span_kind, SpanKind::Consumer, "{form}");
        assert_eq!(
            delivery.name,
            format!("process {}", q.short_name()),
            "{form}"
        );
        assert_eq!(
            work.span_context.trace_id(),
            delivery.span_context.trace_id()
        );
        assert_eq!(
            work.parent_span_id,
            delivery.span_context.span_id(),
            "{form}"
        );
        if form == "w3c" {
            let state = delivery.span_context.trace_state().header();
            assert_eq!(state, "vendor=42");
            common::report(&format!(
                "{kind:?}: a message sent in trace {W3C_TRACE} by span {W3C_SPAN}: the \
                 handler's span `work` is in trace {}, its parent {} (`{}`, kind {:?}), whose \
                 parent is {} (remote)",
                work.span_context.trace_id(),
                delivery.span_context.span_id(),
                delivery.name,
                delivery.span_kind,
                delivery.parent_span_id,
            ));
        }
    }
    let (delivery, work) = spans_of("malformed").unwrap();
    assert_eq!(id_of("malformed").1, None);
    assert_eq!(
        delivery.parent_span_id,
        SpanId::INVALID,
        "a trace of its own"
    );
    assert!(![W3C_TRACE, X_RAY_TRACE]
        .map(|t| TraceId::from_hex(t).unwrap())
        .contains(&delivery.span_context.trace_id()));
    assert_eq!(work.parent_span_id, delivery.span_context.span_id());
    let logs = String::from_utf8_lossy(&lines.lock().unwrap()).into_owned();
    let (malformed_id, _) = id_of("malformed");
    let line = logs
        .lines()
        .find(|l| l.contains("ignored a malformed trace header") && l.contains(&malformed_id))
        .unwrap_or_else(|| panic!("no debug line for {malformed_id}"));
    assert!(
        line.contains("DEBUG") && line.contains("header=\"traceparent\""),
        "{line}"
    );
}

/// What an `on_delivery_span` hook saw: the span's name and the producer's `traceparent`.
type HookCall = (Option<&'static str>, Option<String>);

/// The hook is called once per delivery, with its `delivery` span and the producer's trace
/// context if the message carries one, whether or not feature `opentelemetry` joins the
/// trace itself.
async fn the_delivery_span_hook_sees_each_delivery_span_with_its_producers_context(kind: Kind) {
    let q = TestQueue::new(kind, 30).await;
    let traceparent = format!("00-{W3C_TRACE}-{W3C_SPAN}-01");
    q.send_with_trace("traced", None, &[("traceparent", &traceparent)])
        .await;
    q.send_with_trace("untraced", None, &[]).await;
    let calls: Arc<Mutex<Vec<HookCall>>> = Arc::default();
    let seen = calls.clone();
    let consumer = q
        .consumer()
        .on_delivery_span(move |span, parent| {
            let name = span.metadata().map(|m| m.name());
            let parent = parent.map(sqs_consumer::TraceParent::traceparent);
            seen.lock().unwrap().push((name, parent));
        })
        .wait_time(secs(1))
        .build()
        .unwrap();
    let done = eventually("both acked", secs(60), || consumer.stats().acked == 2);
    common::run_while(&consumer, |d: Delivery| d.ack(), done).await;
    let mut calls = calls.lock().unwrap().clone();
    calls.sort();
    assert_eq!(
        calls,
        [
            (Some("delivery"), None),
            (Some("delivery"), Some(traceparent))
        ]
    );
}
