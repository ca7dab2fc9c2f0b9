//! App-thread cost of observing one call (a `call` span with the four stage
//! spans inside) with no layer, with `StageLayer`, and with
//! `tracing-opentelemetry` (default settings, SDK tracer provider with no
//! exporter); plus 100 spans that are not stages, with and without `StageLayer`.
//!
//! `cargo bench -p stagetrace --bench overhead -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs, clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, Criterion};
use opentelemetry::trace::TracerProvider as _;
use stagetrace::StageLayer;
use tracing::info_span;
use tracing_subscriber::prelude::*;

/// One control cycle's spans, as an instrumented app creates them.
#[inline(never)]
fn one_call() {
    let _call = info_span!("call").entered();
    info_span!("capture").in_scope(|| std::hint::black_box(1));
    info_span!("transport").in_scope(|| std::hint::black_box(2));
    info_span!("infer").in_scope(|| std::hint::black_box(3));
    info_span!("dispatch").in_scope(|| std::hint::black_box(4));
}

/// Spans stagetrace does not care about (an app's own instrumentation).
#[inline(never)]
fn hundred_other_spans() {
    for i in 0..100 {
        info_span!("handle_message").in_scope(|| std::hint::black_box(i));
    }
}

fn call(c: &mut Criterion) {
    let mut g = c.benchmark_group("call");
    g.bench_function("bare_registry", |b| {
        tracing::subscriber::with_default(tracing_subscriber::registry(), || b.iter(one_call));
    });
    g.bench_function("stage_layer", |b| {
        let (layer, guard) = StageLayer::builder().queue_capacity(1 << 16).build().unwrap();
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            b.iter(one_call)
        });
        let s = guard.finish();
        eprintln!("stage_layer: {} calls summarised, {} dropped (queue full)", s.calls, s.queue_drops);
    });
    g.bench_function("tracing_opentelemetry", |b| {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let tracer = provider.tracer("bench");
        let otel = tracing_opentelemetry::layer().with_tracer(tracer);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(otel), || {
            b.iter(one_call)
        });
    });
    g.finish();
}

fn other_spans(c: &mut Criterion) {
    let mut g = c.benchmark_group("100_non_stage_spans");
    g.bench_function("bare_registry", |b| {
        tracing::subscriber::with_default(tracing_subscriber::registry(), || {
            b.iter(hundred_other_spans)
        });
    });
    g.bench_function("stage_layer", |b| {
        let (layer, guard) = StageLayer::builder().build().unwrap();
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            b.iter(hundred_other_spans)
        });
        drop(guard);
    });
    g.finish();
}

criterion_group!(benches, call, other_spans);
criterion_main!(benches);
