//! App-thread cost of observing one call (a `call` span with the four stage
//! spans inside) with no layer, with `StageLayer`, and with
//! `tracing-opentelemetry` (default settings, SDK tracer provider with no
//! exporter); plus 100 spans that are not stages, with and without `StageLayer`.
//!
//! `cargo bench -p stagetrace --bench overhead -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs, clippy::unwrap_used)]

use criterion::{criterion_group, Criterion};
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

/// Takes an interest in every span, like an app's own fmt or log layer.
struct AppLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for AppLayer {}

/// The floor for any layer behind a per-layer filter: a layer that does
/// nothing, with a filter that enables the same five spans StageLayer's does.
/// What is left above it is StageLayer's own work.
fn floor() -> tracing::Dispatch {
    let layer = AppLayer.with_filter(tracing_subscriber::filter::filter_fn(|m| {
        matches!(
            m.name(),
            "call" | "capture" | "transport" | "infer" | "dispatch"
        )
    }));
    tracing::Dispatch::new(tracing_subscriber::registry().with(layer))
}

/// Benchmarks `f` under `dispatch`, then drops it. Only one dispatcher is
/// alive at a time, as in an app: several live dispatchers would make every
/// callsite's interest "sometimes" and tax every configuration.
fn bench_with(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    dispatch: tracing::Dispatch,
    f: fn(),
) {
    tracing::dispatcher::with_default(&dispatch, || {
        g.bench_function(name, |b| b.iter(f));
    });
}

fn call(c: &mut Criterion) {
    let mut g = c.benchmark_group("call");
    bench_with(
        &mut g,
        "bare_registry",
        tracing::Dispatch::new(tracing_subscriber::registry()),
        one_call,
    );
    let (layer, guard) = StageLayer::builder()
        .queue_capacity(1 << 16)
        .build()
        .unwrap();
    bench_with(
        &mut g,
        "stage_layer",
        tracing::Dispatch::new(tracing_subscriber::registry().with(layer)),
        one_call,
    );
    let s = guard.finish();
    bench_with(&mut g, "noop_filtered_layer", floor(), one_call);
    eprintln!(
        "stage_layer: {} calls summarised, {} dropped (queue full)",
        s.calls, s.queue_drops
    );
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("bench"));
    bench_with(
        &mut g,
        "tracing_opentelemetry",
        tracing::Dispatch::new(tracing_subscriber::registry().with(otel)),
        one_call,
    );
    g.finish();
}

fn other_spans(c: &mut Criterion) {
    let mut g = c.benchmark_group("100_non_stage_spans");
    // Another layer wants the spans (an app's fmt or log layer, the usual case):
    // what StageLayer adds to them.
    bench_with(
        &mut g,
        "app_layer",
        tracing::Dispatch::new(tracing_subscriber::registry().with(AppLayer)),
        hundred_other_spans,
    );
    let (layer, guard) = StageLayer::builder().build().unwrap();
    bench_with(
        &mut g,
        "app_layer+stage_layer",
        tracing::Dispatch::new(tracing_subscriber::registry().with(layer).with(AppLayer)),
        hundred_other_spans,
    );
    drop(guard);
    // Nobody but StageLayer: the spans are never created at all.
    bench_with(
        &mut g,
        "bare_registry",
        tracing::Dispatch::new(tracing_subscriber::registry()),
        hundred_other_spans,
    );
    let (layer, guard) = StageLayer::builder().build().unwrap();
    bench_with(
        &mut g,
        "stage_layer_alone",
        tracing::Dispatch::new(tracing_subscriber::registry().with(layer)),
        hundred_other_spans,
    );
    drop(guard);
    g.finish();
}

/// CPU time this thread has used, ns: unlike wall time, it leaves out the
/// time the thread waited for a core on a loaded machine.
fn thread_cpu_ns() -> f64 {
    stagetrace::host::thread_cpu_ns().unwrap_or(0) as f64
}

/// Run `f` `iters` times under `dispatch`: app-thread CPU ns per run.
fn time(dispatch: &tracing::Dispatch, f: fn(), iters: u32) -> f64 {
    tracing::dispatcher::with_default(dispatch, || {
        let t = thread_cpu_ns();
        for _ in 0..iters {
            f();
        }
        (thread_cpu_ns() - t) / f64::from(iters)
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Paired, interleaved rounds of app-thread CPU time: on a shared machine the
/// load changes from one criterion benchmark to the next and wall time counts
/// the waits for a core, so the ratios are taken round by round (each
/// configuration in turn, same load, CPU time) and the median round is reported.
/// All dispatchers here agree on every callsite's interest, so keeping them
/// alive together does not tax any of them.
fn paired_ratios() {
    let rounds = 41;
    // Calls: bare registry, StageLayer (filtered, as built; and unfiltered),
    // tracing-opentelemetry.
    let (layer, guard) = StageLayer::builder()
        .queue_capacity(1 << 16)
        .build()
        .unwrap();
    let staged = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let (layer, guard_u) = StageLayer::builder()
        .queue_capacity(1 << 16)
        .build_unfiltered::<tracing_subscriber::Registry>()
        .unwrap();
    let unfiltered = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let bare = tracing::Dispatch::new(tracing_subscriber::registry());
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let otel = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench"))),
    );
    let noop = floor();
    let (mut b, mut s, mut u, mut o, mut f) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut rs, mut ru, mut ro, mut rso, mut radd) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let tb = time(&bare, one_call, 3000);
        let ts = time(&staged, one_call, 3000);
        let tu = time(&unfiltered, one_call, 3000);
        let to = time(&otel, one_call, 3000);
        f.push(time(&noop, one_call, 3000));
        rs.push(ts / tb);
        ru.push(tu / tb);
        ro.push(to / tb);
        rso.push(ts / to);
        radd.push((ts - tb) / (to - tb));
        b.push(tb);
        s.push(ts);
        u.push(tu);
        o.push(to);
    }
    drop((staged, unfiltered, otel, bare, noop));
    let summary = guard.finish();
    drop(guard_u);

    // Non-stage spans: alone, and next to an app layer that wants them.
    let (layer, guard) = StageLayer::builder().build().unwrap();
    let app_staged =
        tracing::Dispatch::new(tracing_subscriber::registry().with(layer).with(AppLayer));
    let (layer, guard_u) = StageLayer::builder()
        .build_unfiltered::<tracing_subscriber::Registry>()
        .unwrap();
    let app_unfiltered =
        tracing::Dispatch::new(tracing_subscriber::registry().with(layer).with(AppLayer));
    let (layer, guard_u2) = StageLayer::builder()
        .build_unfiltered::<tracing_subscriber::Registry>()
        .unwrap();
    let unfiltered_alone = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let app = tracing::Dispatch::new(tracing_subscriber::registry().with(AppLayer));
    let bare = tracing::Dispatch::new(tracing_subscriber::registry());
    let (mut a, mut as_, mut au, mut rn, mut rnu, mut rua) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let ta = time(&app, hundred_other_spans, 100);
        let tas = time(&app_staged, hundred_other_spans, 100);
        let tau = time(&app_unfiltered, hundred_other_spans, 100);
        let tb = time(&bare, hundred_other_spans, 100);
        let tua = time(&unfiltered_alone, hundred_other_spans, 100);
        rn.push(tas / ta);
        rnu.push(tau / ta);
        rua.push(tua / tb);
        a.push(ta);
        as_.push(tas);
        au.push(tau);
    }
    drop((app_staged, app_unfiltered, unfiltered_alone));
    drop((guard, guard_u, guard_u2));

    println!("\npaired rounds, app-thread CPU time (median of {rounds}):");
    println!(
        "  one call (5 spans): bare registry {:.0} ns, StageLayer {:.0} ns, tracing-opentelemetry {:.0} ns",
        median(b),
        median(s),
        median(o)
    );
    println!(
        "  StageLayer / bare = {:.2}x, tracing-opentelemetry / bare = {:.2}x, StageLayer / tracing-opentelemetry = {:.2}x",
        median(rs),
        median(ro),
        median(rso)
    );
    println!(
        "  added over bare: StageLayer / tracing-opentelemetry = {:.2}x",
        median(radd)
    );
    println!(
        "  floor: a no-op layer behind a per-layer filter enabling the same spans {:.0} ns",
        median(f)
    );
    println!(
        "  100 non-stage spans next to an app layer: app layer {:.0} ns, + StageLayer {:.0} ns = {:.2}x",
        median(a),
        median(as_),
        median(rn)
    );
    println!(
        "  build_unfiltered(): one call {:.0} ns = {:.2}x bare; 100 non-stage spans next to an app layer {:.0} ns = {:.2}x, alone {:.2}x bare registry",
        median(u),
        median(ru),
        median(au),
        median(rnu),
        median(rua)
    );
    println!(
        "  observer's own cost per call, as it reports itself: {:?} us, queue drops {}",
        summary.observer_us, summary.queue_drops
    );
}

/// Median wall time of `f` when it runs once every 2 ms, as a control loop
/// calls it: between calls the thread sleeps and the caches go cold, so each
/// call pays cache misses a hot benchmark loop never sees.
fn sparse(dispatch: &tracing::Dispatch, f: fn(), calls: usize) -> f64 {
    tracing::dispatcher::with_default(dispatch, || {
        let mut v: Vec<f64> = (0..calls)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(2));
                let t = std::time::Instant::now();
                f();
                t.elapsed().as_nanos() as f64
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    })
}

/// The same configurations, called sparsely (see [`sparse`]).
fn sparse_ratios() {
    let (layer, guard) = StageLayer::builder().build().unwrap();
    let staged = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let bare = tracing::Dispatch::new(tracing_subscriber::registry());
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let otel = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench"))),
    );
    let (mut b, mut s, mut o) = (vec![], vec![], vec![]);
    for _ in 0..5 {
        b.push(sparse(&bare, one_call, 200));
        s.push(sparse(&staged, one_call, 200));
        o.push(sparse(&otel, one_call, 200));
    }
    drop((staged, bare, otel));
    let summary = guard.finish();
    let (b, s, o) = (median(b), median(s), median(o));
    println!("\none call every 2 ms (cold caches), median wall time per call:");
    println!(
        "  bare registry {:.0} ns, StageLayer {:.0} ns ({:.2}x bare), tracing-opentelemetry {:.0} ns; StageLayer / tracing-opentelemetry = {:.2}x",
        b,
        s,
        s / b,
        o,
        s / o
    );
    println!(
        "  observer's own cost per call, as it reports itself: {:?} us",
        summary.observer_us
    );
}

criterion_group!(benches, call, other_spans);

fn main() {
    benches();
    // `cargo bench` passes --bench; `cargo test --benches` does not.
    // `--profile-time` (under a profiler) runs the chosen benchmark only.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--profile-time") {
        paired_ratios();
        sparse_ratios();
    }
    Criterion::default().configure_from_args().final_summary();
}
