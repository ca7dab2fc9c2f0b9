//! Stage histograms as OTLP metrics in a real Prometheus: a fleet's per-stage p50/p99 from PromQL's `histogram_quantile`
//! over the robots' exponential histograms agree with the exact percentile
//! of all robots' merged records within the histogram's stated relative
//! error; with Prometheus down, failed exports are counted and export
//! resumes, with every call in the totals.
//!
//! Needs `STAGETRACE_PROMETHEUS_BIN` (set by `cargo xtask test`).

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::prometheus::Prometheus;
use stagetrace::{record::CallRecord, sink::RecordSink};
use stagetrace_otlp::{Histograms, OtlpMetrics};
use stagetrace_schema::Figure;

/// Finest scale the test allows: 32 buckets per octave. The values span
/// 5–60 ms (3.6 octaves, 115 buckets at this scale), within the 160-bucket
/// default, so the SDK keeps this scale.
const SCALE: i8 = 5;

/// The relative error of a quantile read from a base-2 exponential
/// histogram of scale `s`: a bucket spans `[b, b·2^(2^-s)]`.
fn relative_error(scale: i8) -> f64 {
    2f64.powf(2f64.powi(-i32::from(scale))) - 1.0
}

/// Robot `r`'s call `i`: `infer` spread over 5–57 ms (robot 2 slower, 8–56
/// ms), deterministically (a golden-ratio sequence), `e2e` 10 ms more.
fn infer_ms(r: u64, i: u64) -> f64 {
    let u = ((i as f64) * 0.618_033_988_75 + (r as f64) * 0.1).fract();
    if r == 2 {
        8.0 * 2f64.powf(u * 2.8)
    } else {
        5.0 * 2f64.powf(u * 3.5)
    }
}

fn record(r: u64, i: u64) -> CallRecord {
    let mut rec = CallRecord {
        seq: i,
        kind: "infer".into(),
        ..CallRecord::default()
    };
    let ns = (infer_ms(r, i) * 1e6).round() as i64;
    rec.set(Figure::Infer, ns);
    rec.set(Figure::E2e, ns + 10_000_000);
    rec
}

fn robot(prom: &Prometheus, instance: &str, interval: Duration) -> OtlpMetrics {
    OtlpMetrics::builder()
        .endpoint(prom.otlp_endpoint())
        .service_name("fleet-test")
        .resource_attribute("service.instance.id", instance)
        .export_interval(interval)
        .timeout(Duration::from_secs(2))
        .histograms(Histograms::Exponential {
            max_size: 160,
            max_scale: SCALE,
        })
        .build()
        .unwrap()
}

/// The nearest-rank quantile of `v` (sorted).
fn exact(v: &[f64], q: f64) -> f64 {
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[test]
fn fleet_quantiles_in_prometheus_agree_with_the_merged_records() {
    let Some(prom) =
        Prometheus::start_or_skip("fleet_quantiles_in_prometheus_agree_with_the_merged_records")
    else {
        return;
    };
    const ROBOTS: u64 = 3;
    const CALLS: u64 = 1000;
    let mut all = Vec::new();
    let mut robots = Vec::new();
    for r in 0..ROBOTS {
        let mut m = robot(&prom, &format!("robot-{r}"), Duration::from_secs(60));
        for i in 0..CALLS {
            let rec = record(r, i);
            all.push(rec.ms(Figure::Infer).unwrap() / 1e3);
            m.on_record(&rec);
        }
        assert!(m.flush(), "{}", m.stats());
        robots.push(m);
    }
    all.sort_by(f64::total_cmp);
    let calls = prom.wait_value(
        "sum(stagetrace_calls_total{job=\"fleet-test\"})",
        Duration::from_secs(20),
        |v| v == (ROBOTS * CALLS) as f64,
    );
    assert_eq!(calls, Some((ROBOTS * CALLS) as f64), "{}", prom.log());
    let per_robot = prom.query("stagetrace_calls_total{job=\"fleet-test\",kind=\"infer\"}");
    let mut instances: Vec<String> = per_robot
        .iter()
        .map(|(m, _)| m["instance"].as_str().unwrap_or_default().to_owned())
        .collect();
    instances.sort();
    assert_eq!(instances, ["robot-0", "robot-1", "robot-2"]);

    let bound = relative_error(SCALE);
    for q in [0.5, 0.99] {
        let promql =
            format!("histogram_quantile({q}, sum(stagetrace_infer_seconds{{job=\"fleet-test\"}}))");
        let got = prom.query(&promql);
        assert_eq!(got.len(), 1, "{promql}: {got:?}");
        let estimate = got[0].1;
        let truth = exact(&all, q);
        let err = (estimate - truth).abs() / truth;
        eprintln!(
            "p{}: Prometheus {:.4} ms, exact {:.4} ms, relative error {:.3} % (bound {:.3} %)",
            q * 100.0,
            estimate * 1e3,
            truth * 1e3,
            err * 100.0,
            bound * 100.0
        );
        assert!(
            err <= bound,
            "p{q}: Prometheus {estimate} s vs exact {truth} s: error {err} > {bound}"
        );
    }
    // The slow robot stands out in its own quantile.
    let p50 = |inst: &str| {
        prom.query(&format!(
            "histogram_quantile(0.5, stagetrace_infer_seconds{{instance=\"{inst}\"}})"
        ))[0]
            .1
    };
    assert!(p50("robot-2") > p50("robot-0"));
    for m in &robots {
        let s = m.shutdown();
        assert_eq!(s.failed_exports, 0, "{s}");
    }
}

#[test]
fn prometheus_down_failed_exports_are_counted_and_export_resumes() {
    let Some(mut prom) =
        Prometheus::start_or_skip("prometheus_down_failed_exports_are_counted_and_export_resumes")
    else {
        return;
    };
    let mut m = robot(&prom, "robot-down", Duration::from_millis(200));
    let mut sent = 0u64;
    // The robot's side: recording never waits for the collector.
    let feed = |m: &mut OtlpMetrics, sent: &mut u64, n: u64| -> Duration {
        let t = Instant::now();
        for _ in 0..n {
            m.on_record(&record(0, *sent));
            *sent += 1;
        }
        t.elapsed()
    };
    let calls = "sum(stagetrace_calls_total{instance=\"robot-down\"})";
    feed(&mut m, &mut sent, 200);
    assert_eq!(
        prom.wait_value(calls, Duration::from_secs(20), |v| v == 200.0),
        Some(200.0),
        "{}",
        prom.log()
    );
    prom.stop();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut while_down = Duration::ZERO;
    while m.stats().failed_exports < 3 {
        assert!(
            Instant::now() < deadline,
            "no failed export counted: {}",
            m.stats()
        );
        while_down += feed(&mut m, &mut sent, 50);
        std::thread::sleep(Duration::from_millis(100));
    }
    let failed = m.stats().failed_exports;
    assert!(m
        .stats()
        .last_error
        .unwrap()
        .contains("/api/v1/otlp/v1/metrics"));
    let down_calls = sent - 200;
    // 50 calls at a time: recording them took far less than the export
    // interval, whatever the collector did.
    eprintln!("{down_calls} calls recorded while Prometheus was down in {while_down:?}");
    prom.restart();
    feed(&mut m, &mut sent, 100);
    let total = sent as f64;
    assert_eq!(
        prom.wait_value(calls, Duration::from_secs(30), |v| v == total),
        Some(total),
        "{}",
        prom.log()
    );
    // The failed exports arrive as a counter once the collector is back.
    let losses = prom.wait_value(
        "stagetrace_export_losses_total{instance=\"robot-down\",signal=\"metrics\"}",
        Duration::from_secs(20),
        |v| v >= failed as f64,
    );
    assert!(
        losses.is_some_and(|v| v >= failed as f64),
        "{losses:?} vs {failed}"
    );
    assert_eq!(
        m.counters()
            .iter()
            .find(|(k, _)| *k == "metrics.failed_exports")
            .unwrap()
            .1,
        m.stats().failed_exports
    );
    m.shutdown();
}

#[test]
fn explicit_buckets_arrive_as_a_classic_histogram() {
    let Some(prom) = Prometheus::start_or_skip("explicit_buckets_arrive_as_a_classic_histogram")
    else {
        return;
    };
    let mut m = OtlpMetrics::builder()
        .endpoint(prom.otlp_endpoint())
        .service_name("explicit-test")
        .histograms(Histograms::Explicit {
            bounds_ms: vec![10.0, 20.0, 50.0],
        })
        .build()
        .unwrap();
    // infer 5..57 ms: count how many fall at or under 20 ms.
    let under_20 = (0..100).filter(|&i| infer_ms(0, i) <= 20.0).count() as f64;
    for i in 0..100 {
        m.on_record(&record(0, i));
    }
    assert!(m.flush(), "{}", m.stats());
    let got = prom.wait_value(
        "stagetrace_infer_seconds_bucket{job=\"explicit-test\",le=\"0.02\"}",
        Duration::from_secs(20),
        |v| v == under_20,
    );
    assert_eq!(got, Some(under_20), "{}", prom.log());
    let all = prom.query("stagetrace_infer_seconds_bucket{job=\"explicit-test\",le=\"+Inf\"}");
    assert_eq!(all[0].1, 100.0);
    m.shutdown();
}
