//! App-thread cost of observing one call (a `call` span with the four stage
//! spans inside) with no layer, with `StageLayer` (plain, as `build()` makes
//! it, and behind its per-layer filter, as `build_filtered()` does), and with
//! `tracing-opentelemetry` (default settings, SDK tracer provider with no
//! exporter); plus 100 spans that are not stages, with and without `StageLayer`.
//! After the criterion groups, `--bench` prints the overhead table with the
//! goals of `docs/stages.md` §8, "Overhead" (paired rounds, app-thread CPU
//! time), each marked `ok` or `MISSED`.
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
    for (name, attach) in [
        ("stage_layer", Attach::Plain),
        ("stage_layer_filtered", Attach::Filtered),
    ] {
        let (dispatch, guard) = attach.dispatch(false, false);
        bench_with(&mut g, name, dispatch, one_call);
        let s = guard.finish();
        eprintln!(
            "{name}: {} calls summarised, {} dropped (queue full)",
            s.calls, s.queue_drops
        );
    }
    bench_with(&mut g, "noop_layer", Attach::Plain.floor(), one_call);
    bench_with(&mut g, "noop_filtered_layer", floor(), one_call);
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
    bench_with(
        &mut g,
        "bare_registry",
        tracing::Dispatch::new(tracing_subscriber::registry()),
        hundred_other_spans,
    );
    for (name, attach) in [
        ("stage_layer", Attach::Plain),
        ("stage_layer_filtered", Attach::Filtered),
    ] {
        let (dispatch, guard) = attach.dispatch(true, false);
        bench_with(
            &mut g,
            &format!("app_layer+{name}"),
            dispatch,
            hundred_other_spans,
        );
        drop(guard);
        // StageLayer alone: plain, the registry creates the spans; filtered,
        // they are disabled at their callsites.
        let (dispatch, guard) = attach.dispatch(false, false);
        bench_with(
            &mut g,
            &format!("{name}_alone"),
            dispatch,
            hundred_other_spans,
        );
        drop(guard);
    }
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

/// One way of attaching StageLayer, as the bench compares them.
#[derive(Clone, Copy)]
enum Attach {
    /// `build_filtered()`: behind its per-layer filter.
    Filtered,
    /// `build()`: a plain layer that sees every span.
    Plain,
}

impl Attach {
    /// A fresh StageLayer attached this way, with `app` (an app layer that
    /// wants every span) outside it when asked; `host`: the per-call host
    /// figures on (off: the layer's own work alone).
    fn dispatch(self, app: bool, host: bool) -> (tracing::Dispatch, stagetrace::FlushGuard) {
        let builder = StageLayer::builder()
            .queue_capacity(1 << 16)
            .host_figures(host);
        match self {
            Attach::Filtered => {
                let (layer, guard) = builder.build_filtered().unwrap();
                (stack(layer, app), guard)
            }
            Attach::Plain => {
                let (layer, guard) = builder.build().unwrap();
                (stack(layer, app), guard)
            }
        }
    }

    /// The floor for a layer attached this way: one that does nothing with
    /// the same spans.
    fn floor(self) -> tracing::Dispatch {
        match self {
            Attach::Filtered => floor(),
            Attach::Plain => tracing::Dispatch::new(tracing_subscriber::registry().with(AppLayer)),
        }
    }
}

/// `layer` on the registry, with the app's own layer outside it when `app`.
fn stack<L>(layer: L, app: bool) -> tracing::Dispatch
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    let registry = tracing_subscriber::registry().with(layer);
    if app {
        tracing::Dispatch::new(registry.with(AppLayer))
    } else {
        tracing::Dispatch::new(registry)
    }
}

/// The ratios of one way of attaching StageLayer, medians over paired rounds.
struct Ratios {
    call_ns: f64,
    over_bare: f64,
    over_floor: f64,
    over_otel: f64,
    app_spans: f64,
    alone_spans: f64,
    observer_p50_us: Option<f64>,
    queue_drops: u64,
    /// App-thread CPU ns the host figures add to a call (the call's two
    /// samples, and a run-wait read at the open and close of its capture
    /// and dispatch spans).
    host_added_ns: f64,
    /// One call with the host figures on / off.
    host_ratio: f64,
}

/// Paired, interleaved rounds of app-thread CPU time: on a shared machine the
/// load changes from one criterion benchmark to the next and wall time counts
/// the waits for a core, so the ratios are taken round by round (each
/// configuration in turn, same load, CPU time) and the median round is reported.
/// All dispatchers here agree on every callsite's interest, so keeping them
/// alive together does not tax any of them.
fn paired(attach: Attach, otel: &tracing::Dispatch) -> Ratios {
    let rounds = 41;
    let (staged, guard) = attach.dispatch(false, false);
    let (hosted, host_guard) = attach.dispatch(false, true);
    let bare = tracing::Dispatch::new(tracing_subscriber::registry());
    let floor = attach.floor();
    let (mut s, mut rb, mut rf, mut ro) = (vec![], vec![], vec![], vec![]);
    let (mut rh, mut ah) = (vec![], vec![]);
    for _ in 0..rounds {
        let tb = time(&bare, one_call, 3000);
        let ts = time(&staged, one_call, 3000);
        let th = time(&hosted, one_call, 3000);
        let tf = time(&floor, one_call, 3000);
        let to = time(otel, one_call, 3000);
        s.push(ts);
        rb.push(ts / tb);
        rf.push(ts / tf);
        ro.push(ts / to);
        rh.push(th / ts);
        ah.push(th - ts);
    }
    drop((staged, floor, hosted));
    drop(host_guard);
    let summary = guard.finish();
    // The app's own spans next to an app layer that wants them.
    let (app_staged, guard) = attach.dispatch(true, false);
    let app = tracing::Dispatch::new(tracing_subscriber::registry().with(AppLayer));
    let mut ra = vec![];
    for _ in 0..rounds {
        let ta = time(&app, hundred_other_spans, 1000);
        let tas = time(&app_staged, hundred_other_spans, 1000);
        ra.push(tas / ta);
    }
    drop((app_staged, app, bare));
    drop(guard);
    Ratios {
        call_ns: median(s),
        over_bare: median(rb),
        over_floor: median(rf),
        over_otel: median(ro),
        app_spans: median(ra),
        alone_spans: f64::NAN,
        observer_p50_us: summary.observer_us.map(|q| q.p50),
        queue_drops: summary.queue_drops,
        host_added_ns: median(ah),
        host_ratio: median(rh),
    }
}

/// The overhead table: both ways of attaching StageLayer, the goals of
/// `docs/stages.md` §8 beside them.
fn overhead_table() {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let otel = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench"))),
    );
    let mut filtered = paired(Attach::Filtered, &otel);
    let mut plain = paired(Attach::Plain, &otel);
    let sparse_f = sparse_ratio(Attach::Filtered, &otel);
    let sparse_p = sparse_ratio(Attach::Plain, &otel);
    drop(otel);
    filtered.alone_spans = alone_ratio(Attach::Filtered);
    plain.alone_spans = alone_ratio(Attach::Plain);
    let (cold_p, cold_f) = (
        cold_observer_us(Attach::Plain),
        cold_observer_us(Attach::Filtered),
    );
    let rows: [Row; 10] = [
        Row::ns(
            "one call (5 spans), app-thread CPU ns",
            plain.call_ns,
            filtered.call_ns,
        ),
        Row::ratio(
            "one call / bare registry",
            plain.over_bare,
            filtered.over_bare,
            None,
        ),
        Row::ratio(
            "one call / the floor (a no-op layer seeing the same spans the same way)",
            plain.over_floor,
            filtered.over_floor,
            Some(1.3),
        ),
        Row::ratio(
            "one call / tracing-opentelemetry",
            plain.over_otel,
            filtered.over_otel,
            Some(0.25),
        ),
        Row::ratio(
            "100 app spans next to an app layer: with / without StageLayer",
            plain.app_spans,
            filtered.app_spans,
            Some(1.1),
        ),
        Row::ratio(
            "100 app spans, StageLayer the only layer / bare registry (each alone)",
            plain.alone_spans,
            filtered.alone_spans,
            None,
        ),
        Row::ratio(
            "one call every 2 ms (cold caches, wall) / tracing-opentelemetry",
            sparse_p,
            sparse_f,
            Some(0.3),
        ),
        Row::ratio(
            "one call, host figures on / off (the rows above: off)",
            plain.host_ratio,
            filtered.host_ratio,
            Some(2.0),
        ),
        Row {
            name: "host figures: app-thread CPU ns added per call (two samples, four stage reads)",
            plain: plain.host_added_ns,
            filtered: filtered.host_added_ns,
            unit: "",
            goal: Some(1500.0),
        },
        Row {
            name: "the default demo's shape (30 Hz, cold, host figures on): observer_us p50 as the layer reports it, ns",
            plain: cold_p * 1000.0,
            filtered: cold_f * 1000.0,
            unit: "",
            goal: Some(5000.0),
        },
    ];
    println!("\noverhead, paired rounds (app-thread CPU time, median of 41 rounds):");
    println!(
        "| figure | build() (plain layer, default) | build_filtered() (per-layer filter) | goal |"
    );
    println!("|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    for (name, r) in [("build()", &plain), ("build_filtered()", &filtered)] {
        println!(
            "{name}: observer's own cost per call as it reports itself p50 {:?} us, queue drops {}",
            r.observer_p50_us, r.queue_drops
        );
    }
}

/// One row of the overhead table: a figure for each way of attaching
/// StageLayer, and the goal it is held to (met: `ok`, missed: `MISSED`).
struct Row {
    name: &'static str,
    plain: f64,
    filtered: f64,
    /// `x` for ratios, empty for ns.
    unit: &'static str,
    /// At most this.
    goal: Option<f64>,
}

impl Row {
    fn ratio(name: &'static str, plain: f64, filtered: f64, goal: Option<f64>) -> Self {
        Row {
            name,
            plain,
            filtered,
            unit: "x",
            goal,
        }
    }

    fn ns(name: &'static str, plain: f64, filtered: f64) -> Self {
        Row {
            name,
            plain,
            filtered,
            unit: "",
            goal: None,
        }
    }
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cell = |v: f64| {
            let mark = match self.goal {
                Some(g) if v <= g => " ok",
                Some(_) => " MISSED",
                None => "",
            };
            match self.unit {
                "x" => format!("{v:.2}x{mark}"),
                _ => format!("{v:.0}{mark}"),
            }
        };
        let goal = match (self.goal, self.unit) {
            (Some(g), "x") => format!("<= {g}x"),
            (Some(g), _) => format!("<= {g}"),
            (None, _) => String::new(),
        };
        write!(
            f,
            "| {} | {} | {} | {goal} |",
            self.name,
            cell(self.plain),
            cell(self.filtered)
        )
    }
}

/// 100 of the app's spans with StageLayer the only layer, against the bare
/// registry creating them. Each configuration is the only dispatcher alive
/// while it runs: behind its filter StageLayer disables the spans at their
/// callsites, which a second dispatcher wanting them would undo (the
/// callsites' interest would become "sometimes" for both).
fn alone_ratio(attach: Attach) -> f64 {
    let ratios: Vec<f64> = (0..11)
        .map(|_| {
            let (alone, guard) = attach.dispatch(false, false);
            let tl = time(&alone, hundred_other_spans, 1000);
            drop(alone);
            drop(guard);
            let bare = tracing::Dispatch::new(tracing_subscriber::registry());
            let tb = time(&bare, hundred_other_spans, 1000);
            tl / tb
        })
        .collect();
    median(ratios)
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

/// The default demo's shape (`stagetrace demo`: 30 Hz, every call cold,
/// host figures on): 150 calls of the five spans every 33 ms, and the
/// observer's own cost per call as the layer reports it (`observer_us`
/// p50, the figure the demo prints), µs.
fn cold_observer_us(attach: Attach) -> f64 {
    let (staged, guard) = attach.dispatch(false, true);
    tracing::dispatcher::with_default(&staged, || {
        for _ in 0..150 {
            std::thread::sleep(std::time::Duration::from_millis(33));
            one_call();
        }
    });
    drop(staged);
    guard.finish().observer_us.map_or(f64::NAN, |q| q.p50)
}

/// One call every 2 ms (see [`sparse`]): StageLayer attached as `attach`
/// against tracing-opentelemetry, median over 5 paired rounds.
fn sparse_ratio(attach: Attach, otel: &tracing::Dispatch) -> f64 {
    let (staged, guard) = attach.dispatch(false, false);
    let ratios: Vec<f64> = (0..5)
        .map(|_| sparse(&staged, one_call, 200) / sparse(otel, one_call, 200))
        .collect();
    drop(staged);
    drop(guard);
    median(ratios)
}

/// One call timed without spans, as the Python package times it
/// (`stagetrace::direct`): three stages and a transport, then the call.
#[inline(never)]
fn one_direct_call(calls: &stagetrace::direct::DirectCalls) {
    use stagetrace::direct::{DirectTransport, Mark};
    let mut call = calls.start(None, None);
    for stage in [
        stagetrace::Stage::Capture,
        stagetrace::Stage::Infer,
        stagetrace::Stage::Dispatch,
    ] {
        let at = Mark::now();
        call.add_stage(stage, std::hint::black_box(at), false);
    }
    let transport = DirectTransport::start(None);
    call.add_transport(&transport, false);
    calls.submit(&call);
}

/// The direct path's cost, so a change to the call's state does not make
/// it slower unseen (the Python package has a bench of its own for the
/// Python-side figure).
fn direct(c: &mut Criterion) {
    let (layer, guard) = StageLayer::builder()
        .queue_capacity(1 << 16)
        .host_figures(false)
        .build()
        .unwrap();
    let calls = layer.direct_calls();
    let mut g = c.benchmark_group("direct");
    g.bench_function("one_call", |b| b.iter(|| one_direct_call(&calls)));
    g.finish();
    drop(layer);
    drop(guard);
}

criterion_group!(benches, call, other_spans, direct);

fn main() {
    benches();
    // `cargo bench` passes --bench; `cargo test --benches` does not.
    // `--profile-time` (under a profiler) runs the chosen benchmark only.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--profile-time") {
        overhead_table();
    }
    Criterion::default().configure_from_args().final_summary();
}
