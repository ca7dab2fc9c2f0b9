//! Records analysed per second by `report` (parse + every figure + verdicts),
//! on one core. Goal: ≥ 1 million records/s.
//!
//! Time is the benchmark thread's own CPU time
//! (`stagetrace_test_support::ThreadCpu`), so the figure is per core
//! even on a loaded machine.

#![allow(missing_docs, clippy::unwrap_used)]

#[path = "../tests/support/gen.rs"]
mod gen;

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use stagetrace_analyze::analysis::{analyze, AnalyzeOptions};
use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_test_support::ThreadCpu;

fn bench(c: &mut Criterion<ThreadCpu>) {
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
    config = Criterion::default().with_measurement(ThreadCpu::millions("M records/s per core"));
    targets = bench
}
criterion_main!(benches);
