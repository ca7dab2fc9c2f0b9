//! Sharing an app's tracing-opentelemetry trace context, without a
//! collector: the ids stagetrace sends in `traceparent` and writes to the
//! record are the OpenTelemetry layer's own, and a stack in the wrong order
//! falls back to ids of stagetrace's own without harm.

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use stagetrace::{FlushGuard, StageLayer, StageSpanExt, TraceParent};
use stagetrace_test_support::Collect;
use tracing::Subscriber;
use tracing_subscriber::layer::SubscriberExt;

/// One call; returns the `traceparent` the transport would have sent.
fn one_call() -> Option<TraceParent> {
    let _call = tracing::info_span!("call", kind = "infer").entered();
    tracing::info_span!("capture").in_scope(|| ());
    let transport = tracing::info_span!("transport");
    let tp = transport.in_scope(|| transport.trace_parent());
    tracing::info_span!("dispatch").in_scope(|| ());
    tp
}

/// `calls` calls under `subscriber`; returns the `traceparent` of each.
fn run_calls<S>(subscriber: S, calls: usize) -> Vec<TraceParent>
where
    S: Subscriber + Send + Sync + 'static,
{
    tracing::subscriber::with_default(subscriber, || {
        (0..calls).map(|_| one_call().unwrap()).collect()
    })
}

/// The stage layer with the tracing-opentelemetry hook, keeping its records.
fn shared_stages() -> (StageLayer, FlushGuard, Collect) {
    Collect::build(
        StageLayer::builder().share_trace_context(stagetrace_otlp::tracing_opentelemetry_context),
    )
}

/// An app's OpenTelemetry pipeline exporting to memory: what it exported,
/// and its provider.
fn in_memory_otel() -> (InMemorySpanExporter, SdkTracerProvider) {
    let spans = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    (spans, provider)
}

fn hex(b: &[u8]) -> String {
    stagetrace_wire::to_lc_hex(b)
}

#[test]
fn traceparent_and_record_carry_the_otel_layers_ids() {
    let (spans, provider) = in_memory_otel();
    let (stages, guard, kept) = shared_stages();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("app"));
    let tps = run_calls(tracing_subscriber::registry().with(otel).with(stages), 3);
    guard.finish();
    provider.force_flush().unwrap();
    let exported = spans.get_finished_spans().unwrap();
    let records = kept.records();
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
    let (_spans, provider) = in_memory_otel();
    let (stages, guard, kept) = shared_stages();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("app"));
    // The stage layer first: it sees each span before the OpenTelemetry
    // layer has given it a context.
    let tps = run_calls(tracing_subscriber::registry().with(stages).with(otel), 2);
    guard.finish();
    let records = kept.records();
    assert_eq!(records.len(), 2, "every call is still recorded");
    for (rec, tp) in records.iter().zip(&tps) {
        assert!(!rec.timeline.shared_context);
        assert_eq!(Some(hex(&tp.trace_id)), rec.trace_id, "own ids, consistent");
        assert_ne!(tp.parent_id, [0; 8]);
    }
}

#[test]
fn without_an_otel_layer_the_hook_finds_nothing() {
    let (stages, guard, kept) = shared_stages();
    let subscriber = tracing_subscriber::registry().with(stages);
    let tp = tracing::subscriber::with_default(subscriber, one_call).unwrap();
    guard.finish();
    let records = kept.records();
    assert_eq!(records.len(), 1);
    assert!(!records[0].timeline.shared_context);
    assert_eq!(Some(hex(&tp.trace_id)), records[0].trace_id);
}

#[test]
fn a_panicking_hook_does_not_reach_the_app() {
    fn bad_hook(
        _: &tracing::Dispatch,
        _: &tracing::span::Id,
        _: &'static str,
    ) -> Option<stagetrace::context::SharedIds> {
        panic!("a broken trace-context hook");
    }
    let (stages, guard, kept) = Collect::build(StageLayer::builder().share_trace_context(bad_hook));
    let subscriber = tracing_subscriber::registry().with(stages);
    let tp = tracing::subscriber::with_default(subscriber, one_call).unwrap();
    guard.finish();
    let records = kept.records();
    assert_eq!(records.len(), 1, "the call is still recorded");
    assert!(!records[0].timeline.shared_context);
    assert_eq!(Some(hex(&tp.trace_id)), records[0].trace_id);
}
