//! App-thread cost of one observed call with OTLP export on (the exporter
//! pointed at a closed port, so every export fails) versus local summaries
//! only; plus the cost of handing one record to the exporter.
//!
//! `cargo bench -p stagetrace-otlp --bench app_thread -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs, clippy::unwrap_used)]

use std::time::Duration;

use criterion::{criterion_group, Criterion};
use stagetrace::record::{SpanTime, Timeline};
use stagetrace::{CallRecord, Figure, ServerTiming, StageLayer, StageSpanExt};
use stagetrace_otlp::OtlpExporter;
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
    }
    Criterion::default().configure_from_args().final_summary();
}
