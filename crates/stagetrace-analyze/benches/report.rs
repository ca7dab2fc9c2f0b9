//! Records analysed per second by `report` (parse + every figure + verdicts),
//! on one core. Goal: ≥ 1 million records/s.
//!
//! Time is the benchmark thread's own CPU time (Linux
//! `/proc/thread-self/schedstat`), so the figure is per core even on a
//! loaded machine; elsewhere it falls back to wall time.

#![allow(missing_docs, clippy::unwrap_used)]

#[path = "../tests/support/gen.rs"]
mod gen;

use std::hint::black_box;
use std::path::Path;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use stagetrace_analyze::analysis::{analyze, AnalyzeOptions};
use stagetrace_analyze::load::{Dataset, LoadOptions};

/// On-CPU time of the calling thread, in ns.
struct CpuTime;

fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| {
            use std::sync::OnceLock;
            static T0: OnceLock<std::time::Instant> = OnceLock::new();
            T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
        })
}

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, i: u64) -> u64 {
        thread_cpu_ns().saturating_sub(i)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = if typical >= 1e9 {
            (1e9, "s cpu")
        } else if typical >= 1e6 {
            (1e6, "ms cpu")
        } else if typical >= 1e3 {
            (1e3, "µs cpu")
        } else {
            (1.0, "ns cpu")
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }
    fn scale_throughputs(&self, _typical: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        let per = match t {
            Throughput::Elements(n) | Throughput::ElementsAndBytes { elements: n, .. } => *n as f64,
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) => *n as f64,
            Throughput::Bits(n) => *n as f64,
        };
        values.iter_mut().for_each(|v| *v = per * 1e9 / *v / 1e6);
        "M records/s per core"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn bench(c: &mut Criterion<CpuTime>) {
    let n = 200_000usize;
    let run = gen::lines(&gen::Scenario {
        seed: 1,
        calls: n,
        warmup: 0,
        transport_tail: Some((0.01, 15.0)),
        dispatch_spikes: Some((2.0, 12.0)),
        ..gen::Scenario::default()
    });
    let idle = gen::lines(&gen::Scenario {
        seed: 2,
        calls: n,
        warmup: 0,
        ..gen::Scenario::default()
    });
    let mut g = c.benchmark_group("report");
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(10);
    g.bench_function("parse_only", |b| {
        b.iter(|| {
            let ds =
                Dataset::load_reader(run.as_bytes(), Path::new("bench"), LoadOptions::default())
                    .unwrap();
            black_box(ds.len())
        })
    });
    g.bench_function("parse_and_analyze", |b| {
        b.iter(|| {
            let ds =
                Dataset::load_reader(run.as_bytes(), Path::new("bench"), LoadOptions::default())
                    .unwrap();
            let a = analyze(&ds, None, &AnalyzeOptions::default());
            black_box(a.report.verdicts.len())
        })
    });
    // With a baseline of the same size: twice the records parsed, plus the shape tests.
    g.throughput(Throughput::Elements(2 * n as u64));
    g.bench_function("parse_and_analyze_with_baseline", |b| {
        b.iter(|| {
            let ds =
                Dataset::load_reader(run.as_bytes(), Path::new("bench"), LoadOptions::default())
                    .unwrap();
            let base =
                Dataset::load_reader(idle.as_bytes(), Path::new("idle"), LoadOptions::default())
                    .unwrap();
            let a = analyze(&ds, Some(&base), &AnalyzeOptions::default());
            black_box(a.report.verdicts.len())
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = bench
}
criterion_main!(benches);
