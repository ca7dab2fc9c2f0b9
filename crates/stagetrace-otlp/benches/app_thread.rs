//! App-thread cost of one observed call with OTLP export on (the exporter
//! pointed at a closed port, so every export fails) versus local summaries
//! only; with the fleet set-up (files, OTLP metrics and tail-sampled traces)
//! versus local files only; plus the cost of handing one record to the
//! exporter. With `--bench`, also the bytes one robot sends a minute at
//! 30 Hz, tail-sampled versus every call as a trace, and as metrics.
//!
//! `cargo bench -p stagetrace-otlp --bench app_thread -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs, clippy::unwrap_used)]

use std::time::Duration;

use criterion::{criterion_group, Criterion};
use stagetrace::record::{SpanTime, Timeline};
use stagetrace::{CallRecord, Figure, ServerTiming, StageLayer, StageSpanExt};
use stagetrace_otlp::{OtlpExporter, OtlpMetrics, TailSampling};
use tracing::info_span;
use tracing_subscriber::prelude::*;

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

    // Issue 12: the fleet set-up against local files only, in one group.
    let mut g = c.benchmark_group("app_thread_fleet");
    g.bench_function("files_metrics_and_sampled_traces", |b| {
        let dir = tempfile::tempdir().unwrap();
        let port = closed_port();
        let traces = OtlpExporter::builder()
            .endpoint(format!("http://127.0.0.1:{port}"))
            .timeout(Duration::from_millis(500))
            .shutdown_timeout(Duration::from_millis(100))
            .tail_sampling(TailSampling::new())
            .build()
            .unwrap();
        let metrics = OtlpMetrics::builder()
            .endpoint(format!("http://127.0.0.1:{port}"))
            .timeout(Duration::from_millis(500))
            .export_interval(Duration::from_secs(1))
            .build()
            .unwrap();
        let (layer, guard) = StageLayer::builder()
            .queue_capacity(1 << 16)
            .output_dir(dir.path())
            .sink(Box::new(metrics.clone()))
            .sink(Box::new(traces.clone()))
            .build()
            .unwrap();
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            b.iter(one_call)
        });
        let s = guard.finish();
        eprintln!(
            "fleet: {} calls, {} dropped at the layer queue; {:?}",
            s.calls,
            s.queue_drops,
            traces.sample_stats()
        );
        metrics.shutdown();
    });
    g.bench_function("files_only", |b| {
        let dir = tempfile::tempdir().unwrap();
        let (layer, guard) = StageLayer::builder()
            .queue_capacity(1 << 16)
            .output_dir(dir.path())
            .build()
            .unwrap();
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            b.iter(one_call)
        });
        let s = guard.finish();
        eprintln!("files only: {} calls, {} dropped", s.calls, s.queue_drops);
    });
    g.finish();
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
    use std::sync::atomic::{AtomicU64, Ordering};
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
    use stagetrace::RecordSink;
    use std::sync::atomic::Ordering;
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

fn main() {
    benches();
    // `cargo bench` passes --bench; `cargo test --benches` does not.
    if std::env::args().any(|a| a == "--bench") {
        sparse_hand_over();
        bytes_per_robot_minute();
    }
    Criterion::default().configure_from_args().final_summary();
}
