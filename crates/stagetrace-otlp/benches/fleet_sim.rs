//! A fleet on one machine: N robots (default 100) at
//! 30 Hz each, in this one process, each with its own `StageLayer`, its own
//! `OtlpMetrics` and tail-sampled `OtlpExporter` and its own resource
//! (`service.instance.id = robot-NNN`, a `host.name` per ten robots),
//! pushing into one real Prometheus (OTLP receiver, native histograms) and
//! one real Jaeger, both started from `target/tools`. It prints, for the
//! measured period after a warm-up:
//!
//! - the robots' achieved rate and their late ticks (a tick started more
//!   than a period late), calls dropped or lost on the way;
//! - the CPU time of the threads that observe and export (the stagetrace
//!   worker, the trace export thread, the SDK's metrics reader, the HTTP
//!   clients' runtimes) per robot, next to the robots' own app threads;
//! - bytes sent per robot per minute per signal (counted by a loopback proxy
//!   in front of each backend);
//! - each backend's CPU seconds and memory (`/proc/<pid>`) and what it
//!   ingested: Prometheus's `prometheus_tsdb_head_samples_appended_total`
//!   and head series, Jaeger's own `otelcol_receiver_accepted_spans_total`.
//!
//! A bench with `harness = false` rather than an xtask command: it needs the
//! release build of the exporters it measures and the test harness that
//! starts Prometheus and Jaeger (`tests/common`), both of which a bench of
//! this crate has. `cargo test --benches` (no `--bench` flag) only says how
//! to run it.
//!
//! ```text
//! cargo xtask prometheus && cargo xtask jaeger   # once: target/tools/
//! cargo bench -p stagetrace-otlp --bench fleet_sim -- --robots 100 --hz 30 --secs 60
//! ```
//!
//! Flags: `--robots N`, `--hz F`, `--secs S` (measured), `--warmup S`,
//! `--metrics-interval S` (default 15), `--files` (each robot also writes
//! its records, as a real robot would).
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stdout)]

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "support/procfs.rs"]
mod procfs;
#[path = "support/proxy.rs"]
mod proxy;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::jaeger::Jaeger;
use common::prometheus::Prometheus;
use proxy::CountingProxy;
use stagetrace::{ServerTiming, StageLayer, StageSpanExt};
use stagetrace_otlp::{
    ExportStats, MetricsStats, OtlpExporter, OtlpMetrics, SampleStats, TailSampling,
};
use tracing::info_span;
use tracing_subscriber::prelude::*;

struct Args {
    robots: usize,
    hz: f64,
    secs: f64,
    warmup: f64,
    metrics_interval: f64,
    files: bool,
}

impl Args {
    fn parse() -> Args {
        let mut a = Args {
            robots: 100,
            hz: 30.0,
            secs: 60.0,
            warmup: 5.0,
            metrics_interval: 15.0,
            files: false,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let mut num = |what: &str| -> f64 {
                it.next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{what} needs a number"))
            };
            match flag.as_str() {
                "--robots" => a.robots = num("--robots") as usize,
                "--hz" => a.hz = num("--hz"),
                "--secs" => a.secs = num("--secs"),
                "--warmup" => a.warmup = num("--warmup"),
                "--metrics-interval" => a.metrics_interval = num("--metrics-interval"),
                "--files" => a.files = true,
                _ => {} // cargo's own (--bench) and criterion-style flags
            }
        }
        assert!(
            a.robots > 0 && a.hz > 0.0 && a.secs > 0.0,
            "robots, hz and secs must be > 0"
        );
        a
    }
}

/// What every robot thread shares with the main thread.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    calls: AtomicU64,
    late_ticks: AtomicU64,
    /// Robots whose layer and exporters are up.
    ready: AtomicU64,
}

/// One robot's totals at its end.
struct RobotEnd {
    calls: u64,
    late: u64,
    secs: f64,
    queue_drops: u64,
    traces: ExportStats,
    sampled: Option<SampleStats>,
    metrics: MetricsStats,
}

/// Where each robot sends its two signals.
#[derive(Clone)]
struct Endpoints {
    metrics: String,
    traces: String,
}

/// One control cycle, as the app_thread bench's but with time in it:
/// capture 2 ms, a transport of 6 ms (every 150th call 8 ms more: the spike
/// tail sampling must keep) whose server timing says 4 ms of inference,
/// dispatch 1 ms. About 9 ms of a 33 ms period, asleep.
fn one_call(seq: u64) {
    let _call = info_span!("call", seq).entered();
    info_span!("capture").in_scope(|| std::thread::sleep(Duration::from_millis(2)));
    let transport = info_span!("transport");
    transport.in_scope(|| {
        std::hint::black_box(transport.trace_parent());
        let extra = if seq % 150 == 149 { 8 } else { 0 };
        std::thread::sleep(Duration::from_millis(6 + extra));
    });
    transport.record_server_timing(ServerTiming {
        recv_unix_ns: Some(now_unix_ns().saturating_sub(4_500_000)),
        total_ns: Some(4_500_000),
        infer_ns: Some(4_000_000),
        ..ServerTiming::default()
    });
    drop(transport);
    info_span!("dispatch").in_scope(|| std::thread::sleep(Duration::from_millis(1)));
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn robot(i: usize, args: &Args, ends: &Endpoints, shared: &Shared) -> RobotEnd {
    let id = format!("robot-{i:03}");
    let host = format!("sim-host-{}", i / 10);
    let metrics = OtlpMetrics::builder()
        .endpoint(ends.metrics.clone())
        .service_name("fleet-sim")
        .resource_attribute("service.instance.id", id.clone())
        .resource_attribute("host.name", host.clone())
        .export_interval(Duration::from_secs_f64(args.metrics_interval))
        .build()
        .unwrap();
    let traces = OtlpExporter::builder()
        .endpoint(ends.traces.clone())
        .service_name("fleet-sim")
        .resource_attribute("service.instance.id", id.clone())
        .resource_attribute("host.name", host)
        .tail_sampling(TailSampling::new().seed(i as u64))
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut builder = StageLayer::builder()
        .sink(Box::new(metrics.clone()))
        .sink(Box::new(traces.clone()));
    if args.files {
        builder = builder.output_dir(dir.path());
    }
    let (layer, guard) = builder.build().unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    shared.ready.fetch_add(1, Ordering::Relaxed);
    let period = Duration::from_secs_f64(1.0 / args.hz);
    // Robots start spread over one period, as independent machines would.
    let start = Instant::now() + period.mul_f64(i as f64 / args.robots as f64);
    let (mut calls, mut late, mut next) = (0u64, 0u64, start);
    tracing::dispatcher::with_default(&dispatch, || {
        while !shared.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else if now - next > period {
                // A whole period behind: this tick is late, the rate is not kept.
                late += 1;
                shared.late_ticks.fetch_add(1, Ordering::Relaxed);
            }
            one_call(calls);
            calls += 1;
            shared.calls.fetch_add(1, Ordering::Relaxed);
            next += period;
        }
    });
    let secs = start.elapsed().as_secs_f64();
    drop(dispatch);
    let summary = guard.finish();
    let sampled = traces.sample_stats();
    RobotEnd {
        calls,
        late,
        secs,
        queue_drops: summary.queue_drops,
        traces: traces.shutdown(),
        sampled,
        metrics: metrics.shutdown(),
    }
}

/// The group a thread's CPU time is counted in, from its (15-byte) name.
fn group(name: &str) -> &'static str {
    if name.starts_with("robot-") {
        "robot app threads"
    } else if name.starts_with("stagetrace-work") {
        "stagetrace worker (records, summaries, histograms, sampling)"
    } else if name.starts_with("stagetrace-otlp") {
        "trace export thread (spans, batches)"
    } else if name.starts_with("OpenTelemetry") {
        "metrics reader (SDK: collect, encode)"
    } else if name.starts_with("reqwest") {
        "HTTP clients (reqwest runtimes: send)"
    } else if name.starts_with("sim-proxy") {
        "byte-counting proxy (not the robots')"
    } else {
        "other (main, progress)"
    }
}

/// One reading of everything measured over time.
struct Reading {
    at: Instant,
    threads: std::collections::HashMap<u32, (String, u64)>,
    metric_bytes: u64,
    trace_bytes: u64,
    prom_cpu: f64,
    jaeger_cpu: f64,
    prom_samples: f64,
    jaeger_spans: f64,
}

fn read(prom: &Prometheus, jaeger: &Jaeger, mp: &CountingProxy, tp: &CountingProxy) -> Reading {
    let pt = prom.metrics_text();
    Reading {
        at: Instant::now(),
        threads: procfs::threads(),
        metric_bytes: mp.sent(),
        trace_bytes: tp.sent(),
        prom_cpu: prom
            .pid()
            .and_then(procfs::process_cpu_s)
            .unwrap_or(f64::NAN),
        jaeger_cpu: jaeger
            .pid()
            .and_then(procfs::process_cpu_s)
            .unwrap_or(f64::NAN),
        // Absent until the first sample arrives.
        prom_samples: procfs::metric_sum(&pt, "prometheus_tsdb_head_samples_appended_total")
            .unwrap_or(0.0),
        jaeger_spans: procfs::metric_sum(
            &jaeger.metrics_text(),
            "otelcol_receiver_accepted_spans_total",
        )
        .unwrap_or(0.0),
    }
}

/// Points the harness at `target/tools/<name>` when its variable is unset.
fn default_bin(var: &str, name: &str) {
    if std::env::var_os(var).is_none_or(|v| v.is_empty()) {
        let bin = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/tools")
            .join(name);
        assert!(
            bin.exists(),
            "{} not found: run `cargo xtask {name}` first (or set {var})",
            bin.display()
        );
        std::env::set_var(var, bin);
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("fleet_sim: run it with `cargo bench -p stagetrace-otlp --bench fleet_sim`");
        return;
    }
    let args = Args::parse();
    default_bin("STAGETRACE_PROMETHEUS_BIN", "prometheus");
    default_bin("STAGETRACE_JAEGER_BIN", "jaeger");
    let prom = Prometheus::start_or_skip("fleet_sim").unwrap();
    let jaeger = Jaeger::start_or_skip("fleet_sim").unwrap();
    let (mp, tp) = (
        CountingProxy::start(prom.port),
        CountingProxy::start(jaeger.otlp_http),
    );
    let ends = Endpoints {
        metrics: format!("http://127.0.0.1:{}/api/v1/otlp", mp.port),
        traces: format!("http://127.0.0.1:{}", tp.port),
    };
    println!(
        "fleet_sim: {} robots at {} Hz, metrics every {} s + tail-sampled traces{}; warm-up {} s, \
         measured {} s (Prometheus :{}, Jaeger :{})",
        args.robots,
        args.hz,
        args.metrics_interval,
        if args.files { " + files" } else { "" },
        args.warmup,
        args.secs,
        prom.port,
        jaeger.query_http
    );
    let args = Arc::new(args);
    let shared = Arc::new(Shared::default());
    let robots: Vec<_> = (0..args.robots)
        .map(|i| {
            let (args, ends, shared) = (Arc::clone(&args), ends.clone(), Arc::clone(&shared));
            std::thread::Builder::new()
                .name(format!("robot-{i:03}"))
                .spawn(move || robot(i, &args, &ends, &shared))
                .unwrap()
        })
        .collect();
    while shared.ready.load(Ordering::Relaxed) < args.robots as u64 {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs_f64(args.warmup));
    let r0 = read(&prom, &jaeger, &mp, &tp);
    let calls0 = shared.calls.load(Ordering::Relaxed);
    let late0 = shared.late_ticks.load(Ordering::Relaxed);
    let mut last = (r0.at, calls0);
    while r0.at.elapsed().as_secs_f64() < args.secs {
        std::thread::sleep(Duration::from_secs_f64(
            5.0_f64
                .min(args.secs - r0.at.elapsed().as_secs_f64())
                .max(0.0),
        ));
        let r = read(&prom, &jaeger, &mp, &tp);
        let calls = shared.calls.load(Ordering::Relaxed);
        let hz = (calls - last.1) as f64
            / r.at.duration_since(last.0).as_secs_f64()
            / args.robots as f64;
        last = (r.at, calls);
        println!(
            "  {:>5.1} s: {:.2} Hz per robot, {} late ticks since the start, sent {:.0} kB metrics / {:.0} kB traces, \
             Prometheus {:.0} samples, Jaeger {:.0} spans",
            r.at.duration_since(r0.at).as_secs_f64(),
            hz,
            shared.late_ticks.load(Ordering::Relaxed),
            (r.metric_bytes - r0.metric_bytes) as f64 / 1e3,
            (r.trace_bytes - r0.trace_bytes) as f64 / 1e3,
            r.prom_samples - r0.prom_samples,
            r.jaeger_spans - r0.jaeger_spans,
        );
    }
    let r1 = read(&prom, &jaeger, &mp, &tp);
    let calls1 = shared.calls.load(Ordering::Relaxed);
    let late_in_window = shared.late_ticks.load(Ordering::Relaxed) - late0;
    shared.stop.store(true, Ordering::Relaxed);
    let ends: Vec<RobotEnd> = robots.into_iter().map(|h| h.join().unwrap()).collect();
    report(
        &args,
        &r0,
        &r1,
        calls1 - calls0,
        late_in_window,
        &ends,
        &prom,
        &jaeger,
    );
}

#[allow(clippy::too_many_arguments)]
fn report(
    args: &Args,
    r0: &Reading,
    r1: &Reading,
    calls: u64,
    late_ticks: u64,
    ends: &[RobotEnd],
    prom: &Prometheus,
    jaeger: &Jaeger,
) {
    let n = args.robots as f64;
    let secs = r1.at.duration_since(r0.at).as_secs_f64();
    let per_robot_min = |bytes: u64| bytes as f64 / n / (secs / 60.0);
    println!(
        "\nfleet_sim: {} robots, measured {:.1} s",
        args.robots, secs
    );
    let rates: Vec<f64> = ends.iter().map(|e| e.calls as f64 / e.secs).collect();
    let (min, max) = rates
        .iter()
        .fold((f64::MAX, 0.0_f64), |(a, b), r| (a.min(*r), b.max(*r)));
    println!(
        "  rate: {:.3} Hz per robot in the measured period (goal {}); over each robot's run \
         min {min:.3} / max {max:.3} Hz; late ticks (a period or more behind): {late_ticks} in \
         the period, {} in all, on {} robots",
        calls as f64 / secs / n,
        args.hz,
        ends.iter().map(|e| e.late).sum::<u64>(),
        ends.iter().filter(|e| e.late > 0).count()
    );
    let sum = |f: &dyn Fn(&RobotEnd) -> u64| ends.iter().map(f).sum::<u64>();
    println!(
        "  losses: {} calls dropped at the layer queue; traces: {} dropped (exporter queue full), \
         {} failed, {} abandoned at shutdown; metrics: {} failed exports of {}",
        sum(&|e| e.queue_drops),
        sum(&|e| e.traces.dropped_records),
        sum(&|e| e.traces.failed_records),
        sum(&|e| e.traces.abandoned_records),
        sum(&|e| e.metrics.failed_exports),
        sum(&|e| e.metrics.exports + e.metrics.failed_exports),
    );
    let kept = sum(&|e| e.sampled.as_ref().map_or(0, |s| s.kept));
    let judged = kept + sum(&|e| e.sampled.as_ref().map_or(0, |s| s.dropped));
    println!(
        "  tail sampling: kept {kept} of {judged} calls ({:.2} %), {} spans exported",
        100.0 * kept as f64 / judged.max(1) as f64,
        sum(&|e| e.traces.exported_spans)
    );
    println!("  CPU per robot (thread CPU time in the measured period / robots):");
    let groups = procfs::cpu_by_group(&r0.threads, &r1.threads, group);
    let mut observer = 0.0;
    for (g, s, threads) in &groups {
        if !g.starts_with("robot") && !g.starts_with("byte") && !g.starts_with("other") {
            observer += s;
        }
        println!(
            "    {g:<62} {:>8.3} ms/s per robot ({:.2} % of a core), {threads} threads",
            s / secs / n * 1e3,
            s / secs / n * 100.0
        );
    }
    println!(
        "    = observer and exporters off the app thread: {:.3} ms/s per robot ({:.2} % of a core), \
         {:.1} µs per call; {:.2} cores for the fleet",
        observer / secs / n * 1e3,
        observer / secs / n * 100.0,
        observer / calls.max(1) as f64 * 1e6,
        observer / secs
    );
    println!(
        "  bytes sent per robot per minute: metrics {:.0} B, traces {:.0} B (HTTP requests as sent)",
        per_robot_min(r1.metric_bytes - r0.metric_bytes),
        per_robot_min(r1.trace_bytes - r0.trace_bytes)
    );
    // The backends after the robots' last exports (shutdown flushed them).
    std::thread::sleep(Duration::from_secs(2));
    let pt = prom.metrics_text();
    let m = |name: &str| procfs::metric_sum(&pt, name).unwrap_or(f64::NAN);
    let mw = |name: &str, label: &str| procfs::metric_sum_where(&pt, name, label).unwrap_or(0.0);
    let (p_rss, p_hwm) = prom
        .pid()
        .and_then(procfs::process_rss_mib)
        .unwrap_or((f64::NAN, f64::NAN));
    println!(
        "  Prometheus: {:.2} CPU s in the measured period ({:.2} % of a core), RSS {p_rss:.0} MiB \
         (peak {p_hwm:.0} MiB); {:.0} samples appended in the period ({:.0}/s; in all: {:.0} float, \
         {:.0} histogram), {:.0} head series",
        r1.prom_cpu - r0.prom_cpu,
        (r1.prom_cpu - r0.prom_cpu) / secs * 100.0,
        r1.prom_samples - r0.prom_samples,
        (r1.prom_samples - r0.prom_samples) / secs,
        mw("prometheus_tsdb_head_samples_appended_total", "type=\"float\""),
        mw("prometheus_tsdb_head_samples_appended_total", "type=\"histogram\""),
        m("prometheus_tsdb_head_series"),
    );
    let jt = jaeger.metrics_text();
    let j = |name: &str| procfs::metric_sum(&jt, name).unwrap_or(0.0);
    let (j_rss, j_hwm) = jaeger
        .pid()
        .and_then(procfs::process_rss_mib)
        .unwrap_or((f64::NAN, f64::NAN));
    println!(
        "  Jaeger: {:.2} CPU s in the measured period ({:.2} % of a core), RSS {j_rss:.0} MiB \
         (peak {j_hwm:.0} MiB); {:.0} spans accepted in the period ({:.1}/s); in all {:.0} accepted, \
         {:.0} refused, {:.0} stored (exporter sent), {:.0} failed",
        r1.jaeger_cpu - r0.jaeger_cpu,
        (r1.jaeger_cpu - r0.jaeger_cpu) / secs * 100.0,
        r1.jaeger_spans - r0.jaeger_spans,
        (r1.jaeger_spans - r0.jaeger_spans) / secs,
        j("otelcol_receiver_accepted_spans_total"),
        j("otelcol_receiver_refused_spans_total"),
        j("otelcol_exporter_sent_spans_total"),
        j("otelcol_exporter_send_failed_spans_total"),
    );
}
