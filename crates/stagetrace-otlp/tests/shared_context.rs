//! Sharing an app's tracing-opentelemetry trace context, without a
//! collector: the ids stagetrace sends in `traceparent` and writes to the
//! record are the OpenTelemetry layer's own, and a stack in the wrong order
//! falls back to ids of stagetrace's own without harm.

#![allow(missing_docs, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use stagetrace::{CallRecord, RecordSink, StageLayer, TraceParent};
use tracing_subscriber::layer::SubscriberExt;

#[derive(Clone, Default)]
struct Keep(Arc<Mutex<Vec<CallRecord>>>);

impl RecordSink for Keep {
    fn on_record(&mut self, rec: &CallRecord) {
        self.0.lock().unwrap().push(rec.clone());
    }
}

/// One call; returns the `traceparent` the transport would have sent.
fn one_call() -> Option<TraceParent> {
    let _call = tracing::info_span!("call", kind = "infer").entered();
    tracing::info_span!("capture").in_scope(|| ());
    let transport = tracing::info_span!("transport");
    let tp = transport.in_scope(|| stagetrace::trace_parent(&transport));
    tracing::info_span!("dispatch").in_scope(|| ());
    tp
}

fn hex(b: &[u8]) -> String {
    stagetrace::wire::to_lc_hex(b)
}

#[test]
fn traceparent_and_record_carry_the_otel_layers_ids() {
    let spans = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let kept = Keep::default();
    let (stages, guard) = StageLayer::builder()
        .share_trace_context(stagetrace_otlp::tracing_opentelemetry_context)
        .sink(Box::new(kept.clone()))
        .build()
        .unwrap();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("app"));
    let subscriber = tracing_subscriber::registry().with(otel).with(stages);
    let tps: Vec<TraceParent> = tracing::subscriber::with_default(subscriber, || {
        (0..3).map(|_| one_call().unwrap()).collect()
    });
    guard.finish();
    provider.force_flush().unwrap();
    let exported = spans.get_finished_spans().unwrap();
    let records = kept.0.lock().unwrap().clone();
    assert_eq!(records.len(), 3);
    for (rec, tp) in records.iter().zip(&tps) {
        assert!(rec.timeline.shared_context);
        let trace = rec.trace_id.clone().unwrap();
        assert_eq!(hex(&tp.trace_id), trace, "traceparent: the record's trace");
        let in_trace: Vec<_> = exported
            .iter()
            .filter(|s| hex(&s.span_context.trace_id().to_bytes()) == trace)
            .collect();
        let by = |name: &str| {
            let v: Vec<_> = in_trace.iter().filter(|s| s.name == name).collect();
            assert_eq!(v.len(), 1, "{name} in {trace}");
            *v[0]
        };
        let transport = by("transport");
        assert_eq!(
            hex(&tp.parent_id),
            hex(&transport.span_context.span_id().to_bytes()),
            "traceparent's parent is the app's transport span"
        );
        assert_eq!(
            rec.timeline.call_span_id.map(|b| hex(&b)),
            Some(hex(&by("call").span_context.span_id().to_bytes()))
        );
        let stage = transport
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "stagetrace.stage")
            .map(|kv| kv.value.to_string());
        assert_eq!(stage.as_deref(), Some("transport"));
    }
}

#[test]
fn a_stack_in_the_wrong_order_falls_back_to_own_ids() {
    let spans = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let kept = Keep::default();
    let (stages, guard) = StageLayer::builder()
        .share_trace_context(stagetrace_otlp::tracing_opentelemetry_context)
        .sink(Box::new(kept.clone()))
        .build()
        .unwrap();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("app"));
    // The stage layer first: it sees each span before the OpenTelemetry
    // layer has given it a context.
    let subscriber = tracing_subscriber::registry().with(stages).with(otel);
    let tps: Vec<TraceParent> = tracing::subscriber::with_default(subscriber, || {
        (0..2).map(|_| one_call().unwrap()).collect()
    });
    guard.finish();
    let records = kept.0.lock().unwrap().clone();
    assert_eq!(records.len(), 2, "every call is still recorded");
    for (rec, tp) in records.iter().zip(&tps) {
        assert!(!rec.timeline.shared_context);
        assert_eq!(Some(hex(&tp.trace_id)), rec.trace_id, "own ids, consistent");
        assert_ne!(tp.parent_id, [0; 8]);
    }
}

#[test]
fn without_an_otel_layer_the_hook_finds_nothing() {
    let kept = Keep::default();
    let (stages, guard) = StageLayer::builder()
        .share_trace_context(stagetrace_otlp::tracing_opentelemetry_context)
        .sink(Box::new(kept.clone()))
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(stages);
    let tp = tracing::subscriber::with_default(subscriber, one_call).unwrap();
    guard.finish();
    let records = kept.0.lock().unwrap().clone();
    assert_eq!(records.len(), 1);
    assert!(!records[0].timeline.shared_context);
    assert_eq!(Some(hex(&tp.trace_id)), records[0].trace_id);
}
