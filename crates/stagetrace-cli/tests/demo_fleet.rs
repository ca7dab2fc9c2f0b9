//! A fleet on one machine (the export half): two
//! `stagetrace demo` robots, each with its own clock skew and one with a
//! slower model, push stage histograms to a real Prometheus (`--metrics`)
//! and tail-sampled traces to a real Jaeger (`--otlp --tail-sample`). The
//! fleet's PromQL names the slow robot's stage; the calls and the traces
//! kept add up to what each robot's summary says.
//!
//! Needs `STAGETRACE_PROMETHEUS_BIN` and `STAGETRACE_JAEGER_BIN` (set by
//! `cargo xtask test`).

#![allow(clippy::unwrap_used)]

/// The OTLP crate's Jaeger and Prometheus harnesses and the tool process
/// they run in.
#[path = "../../stagetrace-otlp/tests/common"]
mod common {
    pub mod jaeger;
    pub mod prometheus;
    pub mod tool;
}

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::jaeger::Jaeger;
use common::prometheus::Prometheus;
use serde_json::Value;
use stagetrace_test_support::timing;

const CALLS: u64 = 90;
/// The coarsest scale the SDK's 160-bucket exponential histogram takes for
/// values within 20 octaves: 8 buckets an octave, so a quantile is within
/// 2^(1/8) − 1 = 9.05 % of the truth.
const WORST_ERROR: f64 = 0.0905;

fn jsonl(dir: &Path, prefix: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with(prefix) && name.contains(".jsonl") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                out.push(serde_json::from_str::<Value>(line).unwrap());
            }
        }
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len().div_ceil(2) - 1]
}

#[test]
fn two_robots_in_prometheus_and_jaeger_the_slow_one_stands_out() {
    let test = "two_robots_in_prometheus_and_jaeger_the_slow_one_stands_out";
    let Some(prom) = Prometheus::start_or_skip(test) else {
        return;
    };
    let Some(jaeger) = Jaeger::start_or_skip(test) else {
        return;
    };
    let started_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let robots = [("robot-a", "4", "25"), ("robot-b", "12", "-30")];
    let children: Vec<_> = robots
        .iter()
        .zip(&dirs)
        .map(|((name, model_ms, skew_ms), dir)| {
            Command::new(env!("CARGO_BIN_EXE_stagetrace"))
                .args(["demo", "--calls", &CALLS.to_string(), "--warmup", "5"])
                .args(["--hz", "30", "--payload-kb", "10", "--json"])
                .args(["--model-ms", model_ms, "--server-skew-ms", skew_ms])
                .args(["--robot", name, "--tail-sample"])
                .arg("--otlp")
                .arg(jaeger.otlp_endpoint())
                .arg("--metrics")
                .arg(prom.otlp_endpoint())
                .arg("--out")
                .arg(dir.path())
                .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                .env_remove("OTEL_SERVICE_NAME")
                .env_remove("OTEL_RESOURCE_ATTRIBUTES")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "demo failed: {stderr}");
        assert!(stderr.contains("tail sampling:"), "{stderr}");
        assert!(stderr.contains("metrics ->"), "{stderr}");
    }

    let mut kept_total = 0;
    let mut p50 = Vec::new();
    for ((name, _, _), dir) in robots.iter().zip(&dirs) {
        let summaries = jsonl(dir.path(), "summary");
        let cumulative = summaries
            .iter()
            .find(|s| s["window"] == "cumulative")
            .unwrap();
        let c = &cumulative["sink_counters"];
        let calls = cumulative["calls"].as_u64().unwrap()
            + cumulative["warmup_calls"].as_u64().unwrap()
            + cumulative["failed_calls"].as_u64().unwrap();
        assert_eq!(calls, CALLS, "{cumulative}");
        // Every call judged: kept or dropped; the kept ones exported.
        let kept = c["otlp.sample.kept"].as_u64().unwrap();
        assert_eq!(
            kept + c["otlp.sample.dropped"].as_u64().unwrap(),
            CALLS,
            "{c}"
        );
        assert_eq!(c["otlp.exported"].as_u64().unwrap(), kept, "{c}");
        kept_total += kept;

        // Prometheus has every call of this robot, under its name.
        let q = format!("sum(stagetrace_calls_total{{instance=\"{name}\"}})");
        let got = prom.wait_value(&q, Duration::from_secs(20), |v| v == CALLS as f64);
        assert_eq!(got, Some(CALLS as f64), "{q}\n{}", prom.log());
        // Its infer median agrees with its records'.
        let records = jsonl(dir.path(), "records");
        let steady: Vec<f64> = records
            .iter()
            .filter(|r| r.get("warmup").is_none() && r.get("failed").is_none())
            .filter_map(|r| r["infer_ms"].as_f64())
            .collect();
        let exact = median(steady) / 1e3;
        let q = format!(
            "histogram_quantile(0.5, sum(stagetrace_infer_seconds{{instance=\"{name}\"}}))"
        );
        let estimate = prom.query(&q)[0].1;
        let err = (estimate - exact).abs() / exact;
        eprintln!(
            "{name}: infer p50 {:.3} ms in Prometheus, {:.3} ms in the records",
            estimate * 1e3,
            exact * 1e3
        );
        timing::error(
            &format!("{name} infer p50 in Prometheus, relative err"),
            err,
            WORST_ERROR,
        );
        assert!(err <= WORST_ERROR, "{name}: {estimate} vs {exact}");
        p50.push(estimate);
    }
    // The fleet query names the slow robot: robot-b's model is 8 ms slower.
    let by_robot = prom.query(
        "histogram_quantile(0.5, sum by (instance) (stagetrace_infer_seconds{job=\"stagetrace-demo-client\"}))",
    );
    let slowest = by_robot
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(m, _)| m["instance"].as_str().unwrap().to_owned());
    assert_eq!(slowest.as_deref(), Some("robot-b"), "{by_robot:?}");
    // A lower bound on the difference: reported as a ratio that reaches 1
    // when robot-b's p50 falls to robot-a's + 6 ms.
    timing::error(
        "(robot-a infer p50 + 6 ms) / robot-b's",
        (p50[0] + 0.006) / p50[1],
        1.0,
    );
    assert!(p50[1] - p50[0] > 0.006, "{p50:?}");

    // Jaeger holds exactly the client calls the two samplers kept.
    let ended_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut ids = Vec::new();
    for _ in 0..100 {
        ids = jaeger.trace_ids("stagetrace-demo-client", started_ns, ended_ns, 10_000);
        if ids.len() as u64 >= kept_total {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(ids.len() as u64, kept_total, "{}", jaeger.log());
    assert!(kept_total < 2 * CALLS, "sampling kept every call");
}

#[test]
fn fleet_flags_are_checked_before_the_run() {
    for (args, says) in [
        (vec!["--tail-sample"], "only used with --otlp"),
        (vec!["--robot", "arm 3/x"], "--robot"),
        (vec!["--clients", "2", "--metrics"], "--metrics"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
            .args(["demo", "--calls", "5", "--warmup", "1"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
