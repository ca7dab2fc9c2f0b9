//! Numbers a user would check: injected stage costs, summary percentiles
//! against exact ones, warm-up exclusion, the files on disk.
#![allow(missing_docs, clippy::unwrap_used)]

use stagetrace_schema::Figure;
use std::time::{Duration, Instant};

use stagetrace::{Rotation, StageLayer};
use stagetrace_test_support::{read_records, read_summaries, run_collecting, spin_for, timing};
use tracing::info_span;
use tracing_subscriber::prelude::*;

const US: f64 = 0.001; // one microsecond, in ms: the record's resolution

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Checks a measured stage against the injected cost: never below it, never
/// above what the test itself saw around the span, and within 1 ms of the
/// injection unless the machine stalled the test thread itself for as long.
fn check(stage: &str, seq: u64, value: Option<f64>, injected: Duration, outer: Duration) {
    let v = value.unwrap_or_else(|| panic!("call {seq}: {stage} missing"));
    let (inj, out) = (ms(injected), ms(outer));
    assert!(
        v >= inj - US,
        "call {seq}: {stage} {v} ms < injected {inj} ms"
    );
    assert!(
        v <= out + US,
        "call {seq}: {stage} {v} ms > observed around the span {out} ms"
    );
    assert!(
        v - inj < 1.0 || out - inj >= 1.0,
        "call {seq}: {stage} {v} ms is more than 1 ms off the injected {inj} ms"
    );
}

#[test]
fn injected_stage_costs_are_measured_within_1ms() {
    let dir = tempfile::tempdir().unwrap();
    let builder = StageLayer::builder()
        .output_dir(dir.path())
        .rotation(Rotation::NEVER);
    let calls = 30u64;
    let mut truth = Vec::new();
    let (summary, sunk) = run_collecting(builder, || {
        for i in 0..calls {
            let cost = [
                Duration::from_micros(2_000 + 400 * (i % 5)),
                Duration::from_micros(4_000 + 700 * (i % 3)),
                Duration::from_micros(3_000 + 250 * (i % 4)),
                Duration::from_micros(800 + 100 * (i % 7)),
            ];
            let mut outer = [Duration::ZERO; 4];
            let call_start = Instant::now();
            let call = info_span!("call", seq = i, kind = "step").entered();
            let t = Instant::now();
            info_span!("capture").in_scope(|| spin_for(cost[0]));
            outer[0] = t.elapsed();
            let t = Instant::now();
            info_span!("transport").in_scope(|| spin_for(cost[1]));
            outer[1] = t.elapsed();
            let t = Instant::now();
            info_span!("infer").in_scope(|| spin_for(cost[2]));
            outer[2] = t.elapsed();
            let t = Instant::now();
            info_span!("dispatch").in_scope(|| spin_for(cost[3]));
            outer[3] = t.elapsed();
            drop(call);
            truth.push((cost, outer, call_start.elapsed()));
        }
    });

    let records = read_records(dir.path());
    assert_eq!(records.len() as u64, calls);
    assert_eq!(sunk.len(), records.len());
    for (file, sink) in records.iter().zip(&sunk) {
        assert_eq!(
            file.to_json_line(),
            sink.to_json_line(),
            "sink and file disagree"
        );
    }
    // The 1 ms checks' worst calls; a call whose thread the machine stalled
    // for 1 ms around the span is exempt, as in `check`.
    let over = |v: Option<f64>, inj: Duration, out: Duration| {
        let (inj, out) = (ms(inj), ms(out));
        (out - inj < 1.0).then_some(v? - inj)
    };
    let calls_truth = || records.iter().zip(&truth);
    let stages = [
        (0, "capture", Figure::Capture),
        (1, "roundtrip", Figure::Roundtrip),
        (2, "infer", Figure::Infer),
        (3, "dispatch", Figure::Dispatch),
    ];
    for (i, stage, f) in stages {
        let errs =
            calls_truth().filter_map(|(rec, (cost, outer, _))| over(rec.ms(f), cost[i], outer[i]));
        timing::worst(&format!("{stage} over injected (ms)"), errs, 1.0);
    }
    let e2e = calls_truth().filter_map(|(rec, (cost, _, e2e_outer))| {
        over(rec.ms(Figure::E2e), cost.iter().sum(), *e2e_outer)
    });
    timing::worst("e2e over injected (ms)", e2e, 1.0);
    let gaps = calls_truth().filter_map(|(rec, (cost, _, e2e_outer))| {
        let stalled = ms(*e2e_outer) - ms(cost.iter().sum()) >= 1.0;
        rec.ms(Figure::Gap).filter(|_| !stalled)
    });
    timing::worst("gap (ms)", gaps, 1.0);
    for (rec, (cost, outer, e2e_outer)) in records.iter().zip(&truth) {
        let seq = rec.seq;
        assert_eq!(rec.kind, "step");
        check("capture", seq, rec.ms(Figure::Capture), cost[0], outer[0]);
        check(
            "roundtrip",
            seq,
            rec.ms(Figure::Roundtrip),
            cost[1],
            outer[1],
        );
        check("infer", seq, rec.ms(Figure::Infer), cost[2], outer[2]);
        check("dispatch", seq, rec.ms(Figure::Dispatch), cost[3], outer[3]);
        let sum: Duration = cost.iter().sum();
        check("e2e", seq, rec.ms(Figure::E2e), sum, *e2e_outer);
        // No server timing: a black-box roundtrip, no split, no clock basis.
        assert!(
            rec.ms(Figure::Uplink).is_none()
                && rec.ms(Figure::Server).is_none()
                && rec.clock.is_none()
        );
        let stages = rec.ms(Figure::Capture).unwrap()
            + rec.ms(Figure::Roundtrip).unwrap()
            + rec.ms(Figure::Infer).unwrap()
            + rec.ms(Figure::Dispatch).unwrap();
        let gap = rec.ms(Figure::Gap).unwrap();
        assert!(
            (rec.ms(Figure::E2e).unwrap() - stages - gap).abs() <= 5.0 * US,
            "gap {gap} inconsistent"
        );
        assert!(
            gap < 1.0 || ms(*e2e_outer) - ms(sum) >= 1.0,
            "gap {gap} ms too large"
        );
        assert!(rec.get(Figure::Observer).map(|ns| ns as f64 / 1e3).unwrap() > 0.0);
        assert_eq!(rec.trace_id.as_deref().map(str::len), Some(32));
    }
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (0..calls).collect::<Vec<_>>());

    // Summary file: rolling windows, then the cumulative line we got back.
    let lines = read_summaries(dir.path());
    let last = lines.last().unwrap();
    assert_eq!(last.window, "cumulative");
    assert_eq!(*last, summary);
    assert!(lines[..lines.len() - 1]
        .iter()
        .all(|s| s.window == "rolling"));
    assert_eq!(summary.calls, calls);
    assert_eq!(summary.stages["capture"].count, calls);
    assert_eq!(summary.kinds["step"].calls, calls);
    assert_eq!(summary.queue_drops + summary.write_failures, 0);
}

/// HdrHistogram's rank: the value at `ceil(q·n)` of the sorted values.
fn exact_quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
    sorted[rank - 1]
}

#[test]
fn summary_percentiles_match_exact_percentiles_of_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let (layer, guard) = StageLayer::builder()
        .output_dir(dir.path())
        .warmup_calls(5)
        .window(Duration::from_millis(200))
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let calls = 1500u64;
    tracing::subscriber::with_default(subscriber, || {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for i in 0..calls {
            // xorshift: a spread of capture costs from 0 to ~600 µs, with a tail.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut us = x % 300;
            if i % 50 == 0 {
                us += 300 + x % 300;
            }
            let _call =
                info_span!("call", kind = if i % 2 == 0 { "even" } else { "odd" }).entered();
            info_span!("capture").in_scope(|| spin_for(Duration::from_micros(us)));
            info_span!("dispatch").in_scope(|| spin_for(Duration::from_micros(20)));
        }
    });
    let summary = guard.finish();
    let records = read_records(dir.path());
    assert_eq!(records.len() as u64, calls);

    // Warm-up: the first 5 calls are flagged and excluded.
    for r in &records {
        assert_eq!(r.warmup == Some(true), r.seq < 5, "seq {}", r.seq);
    }
    assert_eq!(summary.warmup_calls, 5);
    assert_eq!(summary.calls, calls - 5);

    let steady: Vec<_> = records.iter().filter(|r| r.warmup.is_none()).collect();
    for (name, get) in [
        (
            "capture",
            (|r: &stagetrace::record::CallRecord| r.ms(Figure::Capture).unwrap()) as fn(&_) -> f64,
        ),
        ("e2e", |r| r.ms(Figure::E2e).unwrap()),
        ("gap", |r| r.ms(Figure::Gap).unwrap()),
    ] {
        let mut v: Vec<f64> = steady.iter().map(|r| get(r)).collect();
        v.sort_by(f64::total_cmp);
        let s = summary.stages[name];
        assert_eq!(s.count, v.len() as u64);
        assert_eq!(s.min, v[0], "{name} min");
        assert_eq!(s.max, *v.last().unwrap(), "{name} max");
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!(
            (s.mean - mean).abs() <= US,
            "{name} mean {} vs {mean}",
            s.mean
        );
        for (q, got) in [(0.5, s.p50), (0.9, s.p90), (0.99, s.p99), (0.999, s.p99_9)] {
            let exact = exact_quantile(&v, q);
            // 3 significant digits: within 0.1 %, plus the 1 µs rounding.
            assert!(
                (got - exact).abs() <= exact * 0.001 + US,
                "{name} p{q}: summary {got} vs exact {exact}"
            );
        }
    }
    // Per kind: each half of the calls.
    let even = &summary.kinds["even"];
    let odd = &summary.kinds["odd"];
    assert_eq!(even.calls + odd.calls, summary.calls);
    assert_eq!(even.stages["capture"].count, even.calls);

    // The rolling windows add up to the cumulative counts.
    let lines = read_summaries(dir.path());
    let rolling: u64 = lines
        .iter()
        .filter(|s| s.window == "rolling")
        .map(|s| s.calls)
        .sum();
    assert_eq!(rolling, summary.calls);
    let observer = summary.observer_us.unwrap();
    assert!(observer.p50 > 0.0 && observer.p99 >= observer.p50);
}
