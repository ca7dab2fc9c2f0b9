//! App-thread cost of one observed call with OTLP export on (the exporter
//! pointed at a closed port, so every export fails) versus local summaries
//! only; with the fleet set-up (files, OTLP metrics and tail-sampled traces)
//! versus local files only; plus the cost of handing one record to the
//! exporter. The fleet comparison is in the app thread's own CPU time
//! (criterion's samples, then paired interleaved rounds). With `--bench`,
//! also the bytes one robot sends a minute at 30 Hz, tail-sampled versus
//! every call as a trace, and as metrics.
//!
//! `cargo bench -p stagetrace-otlp --bench app_thread -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs, clippy::unwrap_used)]

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use stagetrace::record::{SpanTime, Timeline};
use stagetrace::{record::CallRecord, ServerTiming, StageLayer, StageSpanExt};
use stagetrace_otlp::{OtlpExporter, OtlpMetrics, TailSampling};
use stagetrace_schema::Figure;
use tracing::info_span;
use tracing_subscriber::prelude::*;

#[path = "support/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::{thread_cpu_ns, ThreadCpu};

/// One control cycle as an instrumented client makes it: capture, a
/// transport span that sends its traceparent and gets the server's timing
/// back, dispatch.
#[inline(never)]
fn one_call() {
    let _call = info_span!("call").entered();
    info_span!("capture").in_scope(|| std::hint::black_box(1));
    let transport = info_span!("transport");
    transport.in_scope(|| {
        std::hint::black_box(transport.trace_parent());
    });
    transport.record_server_timing(ServerTiming {
        recv_unix_ns: Some(now_unix_ns()),
        total_ns: Some(1_000),
        infer_ns: Some(800),
        ..ServerTiming::default()
    });
    drop(transport);
    info_span!("dispatch").in_scope(|| std::hint::black_box(4));
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn closed_port_exporter() -> OtlpExporter {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    OtlpExporter::builder()
        .endpoint(format!("http://127.0.0.1:{port}"))
        .timeout(Duration::from_millis(500))
        .shutdown_timeout(Duration::from_millis(100))
        .build()
        .unwrap()
}

fn app_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("app_thread_per_call");
    g.bench_function("otlp_to_closed_port", |b| {
        let exporter = closed_port_exporter();
        let (layer, guard) = StageLayer::builder()
            .queue_capacity(1 << 16)
            .sink(Box::new(exporter.clone()))
            .build()
            .unwrap();
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            b.iter(one_call)
        });
        let s = guard.finish();
        eprintln!(
            "otlp on: {} calls summarised, {} dropped at the layer queue; {}",
            s.calls,
            s.queue_drops,
            exporter.stats()
        );
    });
    g.bench_function("local_summaries_only", |b| {
        let (layer, guard) = StageLayer::builder()
            .queue_capacity(1 << 16)
            .build()
            .unwrap();
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            b.iter(one_call)
        });
        let s = guard.finish();
        eprintln!(
            "local only: {} calls summarised, {} dropped at the layer queue",
            s.calls, s.queue_drops
        );
    });
    g.finish();
}

/// One robot's observer as built for the fleet comparison: files only, or
/// files plus OTLP metrics and tail-sampled traces (both to a closed port,
/// so every export fails fast and nothing waits on a collector).
struct Observer {
    dispatch: tracing::Dispatch,
    /// Calls the worker has handed to the sinks.
    seen: Arc<AtomicU64>,
    /// Calls made under `dispatch`.
    made: Cell<u64>,
    guard: stagetrace::FlushGuard,
    metrics: Option<OtlpMetrics>,
    traces: Option<OtlpExporter>,
    _dir: tempfile::TempDir,
}

impl Observer {
    fn new(fleet: bool) -> Observer {
        let dir = tempfile::tempdir().unwrap();
        let mut builder = StageLayer::builder()
            .queue_capacity(1 << 16)
            .output_dir(dir.path());
        let seen = Arc::new(AtomicU64::new(0));
        builder = builder.sink(Box::new(Seen(Arc::clone(&seen))));
        let (mut metrics, mut traces) = (None, None);
        if fleet {
            let port = closed_port();
            let t = OtlpExporter::builder()
                .endpoint(format!("http://127.0.0.1:{port}"))
                .timeout(Duration::from_millis(500))
                .shutdown_timeout(Duration::from_millis(100))
                .tail_sampling(TailSampling::new())
                .build()
                .unwrap();
            let m = OtlpMetrics::builder()
                .endpoint(format!("http://127.0.0.1:{port}"))
                .timeout(Duration::from_millis(500))
                .export_interval(Duration::from_secs(1))
                .build()
                .unwrap();
            builder = builder.sink(Box::new(m.clone())).sink(Box::new(t.clone()));
            (metrics, traces) = (Some(m), Some(t));
        }
        let (layer, guard) = builder.build().unwrap();
        Observer {
            dispatch: tracing::Dispatch::new(tracing_subscriber::registry().with(layer)),
            seen,
            made: Cell::new(0),
            guard,
            metrics,
            traces,
            _dir: dir,
        }
    }

    /// Makes `n` calls: the app thread's CPU ns for them. The calls go in
    /// chunks of at most `CHUNK`, each measured alone and followed by a
    /// wait until the worker has taken them, so that every call finds room
    /// in the queue, as a control loop's do: flat out, the fleet worker
    /// falls behind, the queue fills and the calls it drops take a shorter
    /// path, which is an overload's cost, not the observer's.
    fn calls(&self, n: u64) -> u64 {
        const CHUNK: u64 = 4096;
        let mut ns = 0;
        let mut left = n;
        while left > 0 {
            let k = left.min(CHUNK);
            ns += tracing::dispatcher::with_default(&self.dispatch, || {
                let t = thread_cpu_ns();
                for _ in 0..k {
                    one_call();
                }
                thread_cpu_ns().saturating_sub(t)
            });
            self.made.set(self.made.get() + k);
            left -= k;
            self.settle();
        }
        ns
    }

    /// Waits until the worker has taken every call made (or has taken none
    /// for 200 ms: it dropped some after all, which `finish` reports).
    fn settle(&self) {
        let (mut last, mut since) = (self.seen.load(Ordering::Relaxed), Instant::now());
        while last < self.made.get() && since.elapsed() < Duration::from_millis(200) {
            std::thread::sleep(Duration::from_millis(1));
            let now = self.seen.load(Ordering::Relaxed);
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
    }

    fn finish(self, name: &str) {
        drop(self.dispatch);
        let s = self.guard.finish();
        eprintln!(
            "{name}: {} calls, {} dropped at the layer queue; sampling {:?}",
            s.calls,
            s.queue_drops,
            self.traces.map(|t| t.sample_stats())
        );
        if let Some(m) = self.metrics {
            m.shutdown();
        }
    }
}

/// The app thread's cost per call with the fleet set-up (files,
/// OTLP metrics, tail-sampled traces) against local files only, in the app
/// thread's own CPU time. The app thread does the same work in both: the
/// layer ends a call by pushing one `Msg` on its queue, and the histograms,
/// the sampling decision and the export all run on the worker and exporter
/// threads. What wall time adds on 2 shared cores is those threads taking
/// the core (criterion drives calls flat out, so the worker has about a
/// million calls a second to record), not app-thread work.
fn app_thread_fleet(c: &mut Criterion<ThreadCpu>) {
    let mut g = c.benchmark_group("app_thread_fleet");
    let mut per_call = [Vec::new(), Vec::new()];
    for (i, (name, fleet)) in [
        ("files_metrics_and_sampled_traces", true),
        ("files_only", false),
    ]
    .into_iter()
    .enumerate()
    {
        let obs = Observer::new(fleet);
        let samples = &mut per_call[i];
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let ns = obs.calls(iters);
                samples.push(ns as f64 / iters as f64);
                ns
            })
        });
        obs.finish(name);
    }
    g.finish();
    // Criterion's own samples of this run: the last 100 of each (warm-up
    // left out), median per call.
    let [fleet, files] = per_call.map(|v| median(v[v.len().saturating_sub(100)..].to_vec()));
    println!(
        "\napp_thread_fleet (criterion, app-thread CPU): fleet {fleet:.0} ns/call, files only \
         {files:.0} ns/call, ratio {:.3} (goal <= 1.1)",
        fleet / files
    );
}

/// Counts the calls the worker handed to the sinks.
struct Seen(Arc<AtomicU64>);

impl stagetrace::sink::RecordSink for Seen {
    fn on_record(&mut self, _rec: &CallRecord) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The same ratio from paired, interleaved rounds (each set-up in turn, 3000
/// calls a round, both alive throughout, so both meet the same load):
/// the median of the rounds' ratios. Both dispatchers hold a `StageLayer`
/// and agree on every callsite's interest, so keeping them alive together
/// taxes neither.
fn paired_fleet_ratio() {
    let (fleet, files) = (Observer::new(true), Observer::new(false));
    let time = |obs: &Observer| obs.calls(3000) as f64 / 3000.0;
    let (mut a, mut b, mut r) = (vec![], vec![], vec![]);
    for round in 0..61 {
        // Alternate which goes first, so neither always runs on a cache the
        // other warmed.
        let (x, y) = if round % 2 == 0 {
            let x = time(&fleet);
            (x, time(&files))
        } else {
            let y = time(&files);
            (time(&fleet), y)
        };
        a.push(x);
        b.push(y);
        r.push(x / y);
    }
    println!(
        "app_thread_fleet (paired rounds, app-thread CPU): fleet {:.0} ns/call, files only {:.0} \
         ns/call, median round ratio {:.3} (goal <= 1.1)",
        median(a),
        median(b),
        median(r)
    );
    fleet.finish("paired fleet");
    files.finish("paired files only");
}

fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A collector that answers 200 to every OTLP/HTTP request and counts the
/// bytes it received (request line, headers and body).
fn counting_collector() -> (u16, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let bytes = std::sync::Arc::new(AtomicU64::new(0));
    let counted = std::sync::Arc::clone(&bytes);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counted = std::sync::Arc::clone(&counted);
            std::thread::spawn(move || {
                let mut w = stream.try_clone().unwrap();
                let mut r = BufReader::new(stream);
                loop {
                    let mut len = 0usize;
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    counted.fetch_add(line.len() as u64, Ordering::Relaxed);
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        counted.fetch_add(h.len() as u64, Ordering::Relaxed);
                        let t = h.trim_end();
                        if t.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = t.split_once(':') {
                            if k.eq_ignore_ascii_case("content-length") {
                                len = v.trim().parse().unwrap_or(0);
                            }
                        }
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    counted.fetch_add(len as u64, Ordering::Relaxed);
                    let _ = w.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
                    );
                }
            });
        }
    });
    (port, bytes)
}

/// One robot-minute at 30 Hz (1800 calls, one 40 ms spike every 150th)
/// exported as traces, every call or tail-sampled, and as metrics (four
/// exports, the interval of 15 s): the bytes the collector received.
fn bytes_per_robot_minute() {
    use stagetrace::sink::RecordSink;
    let t0 = now_unix_ns() - 70_000_000_000;
    let call = |seq: u64| {
        let extra = if seq % 150 == 149 { 40_000_000 } else { 0 };
        let start = t0 + seq * 33_333_333;
        let mut rec = CallRecord {
            seq,
            ts_unix_ns: start,
            kind: "infer".into(),
            timeline: Timeline {
                call_start_unix_ns: start,
                call_dur_ns: 20_000_000 + extra,
                capture: Some(SpanTime {
                    start_ns: 0,
                    dur_ns: 3_000_000,
                }),
                transport: Some(SpanTime {
                    start_ns: 3_000_000,
                    dur_ns: 12_000_000 + extra,
                }),
                uplink: Some(SpanTime {
                    start_ns: 3_000_000,
                    dur_ns: 2_000_000,
                }),
                downlink: Some(SpanTime {
                    start_ns: 13_000_000 + extra,
                    dur_ns: 2_000_000,
                }),
                dispatch: Some(SpanTime {
                    start_ns: 15_000_000 + extra,
                    dur_ns: 4_000_000,
                }),
                ..Timeline::default()
            },
            ..CallRecord::default()
        };
        for (f, ns) in [
            (Figure::Capture, 3_000_000),
            (Figure::Uplink, 2_000_000),
            (Figure::Queue, 1_000_000),
            (Figure::Infer, 7_000_000 + extra as i64),
            (Figure::Downlink, 2_000_000),
            (Figure::Dispatch, 4_000_000),
            (Figure::Roundtrip, 12_000_000 + extra as i64),
            (Figure::Server, 8_000_000 + extra as i64),
            (Figure::Net, 4_000_000),
            (Figure::E2e, 20_000_000 + extra as i64),
            (Figure::Gap, 1_000_000),
        ] {
            rec.set(f, ns);
        }
        rec
    };
    let traces = |sampling: Option<TailSampling>| {
        let (port, bytes) = counting_collector();
        let mut b = OtlpExporter::builder().endpoint(format!("http://127.0.0.1:{port}"));
        if let Some(s) = sampling {
            b = b.tail_sampling(s);
        }
        let exp = b.build().unwrap();
        for seq in 0..1800 {
            exp.export_call(&call(seq));
        }
        exp.flush(Duration::from_secs(30));
        let stats = exp.shutdown();
        (bytes.load(Ordering::Relaxed), stats.exported_records)
    };
    let (full, full_n) = traces(None);
    let (sampled, sampled_n) = traces(Some(TailSampling::new()));
    let (port, bytes) = counting_collector();
    let mut metrics = OtlpMetrics::builder()
        .endpoint(format!("http://127.0.0.1:{port}"))
        .build()
        .unwrap();
    for quarter in 0..4 {
        for seq in quarter * 450..(quarter + 1) * 450 {
            metrics.on_record(&call(seq));
        }
        metrics.flush();
    }
    metrics.shutdown();
    let metric_bytes = bytes.load(Ordering::Relaxed);
    println!(
        "\nbytes per robot-minute at 30 Hz: every call as a trace {full} B ({full_n} traces), \
         tail-sampled {sampled} B ({sampled_n} traces, {:.1} % of full); metrics every 15 s \
         {metric_bytes} B",
        100.0 * sampled as f64 / full as f64
    );
}

fn hand_over(c: &mut Criterion) {
    let rec = CallRecord {
        seq: 1,
        ts_unix_ns: 1_764_000_000_000_000_000,
        kind: "infer".into(),
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        figures: [
            (Figure::E2e, 20_000_000),
            (Figure::Capture, 3_000_000),
            (Figure::Roundtrip, 12_000_000),
        ]
        .into_iter()
        .collect(),
        timeline: Timeline {
            call_start_unix_ns: 1_764_000_000_000_000_000,
            call_dur_ns: 20_000_000,
            capture: Some(SpanTime {
                start_ns: 0,
                dur_ns: 3_000_000,
            }),
            transport: Some(SpanTime {
                start_ns: 3_000_000,
                dur_ns: 12_000_000,
            }),
            ..Timeline::default()
        },
        ..CallRecord::default()
    };
    let exporter = closed_port_exporter();
    c.bench_function("otlp_export_call_hand_over", |b| {
        b.iter(|| std::hint::black_box(exporter.export_call(&rec)))
    });
    eprintln!("hand-over: {}", exporter.stats());
}

/// Median wall time of one `export_call` hand-over when calls come 2 ms
/// apart, as from a control loop or a policy server's request handlers: the
/// export thread is idle between them, and waking it must not cost the
/// caller a syscall.
fn sparse_hand_over() {
    let rec = CallRecord {
        seq: 1,
        figures: [(Figure::E2e, 20_000_000)].into_iter().collect(),
        ..CallRecord::default()
    };
    let exporter = closed_port_exporter();
    let mut v: Vec<f64> = (0..300)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            let t = std::time::Instant::now();
            std::hint::black_box(exporter.export_call(&rec));
            t.elapsed().as_nanos() as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    println!(
        "\nsparse hand-over (one export_call every 2 ms): median {:.0} ns, p90 {:.0} ns",
        v[v.len() / 2],
        v[v.len() * 9 / 10]
    );
}

criterion_group!(benches, app_thread, hand_over);
criterion_group! {
    name = fleet;
    config = Criterion::default().with_measurement(ThreadCpu::ELEMENTS);
    targets = app_thread_fleet
}

fn main() {
    benches();
    fleet();
    // `cargo bench` passes --bench; `cargo test --benches` does not.
    if std::env::args().any(|a| a == "--bench") {
        paired_fleet_ratio();
        sparse_hand_over();
        bytes_per_robot_minute();
    }
    Criterion::default().configure_from_args().final_summary();
}
