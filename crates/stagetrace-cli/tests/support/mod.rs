//! Helpers shared by the CLI tests: run the binary, generate record files.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::json;

#[path = "../../../stagetrace-analyze/tests/support/gen.rs"]
pub(crate) mod gen;

/// Runs `stagetrace ARGS…`.
pub(crate) fn stagetrace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(args)
        .output()
        .unwrap()
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `stagetrace ARGS…`, which must fail as a usage error (status 2)
/// whose message contains `says`.
#[track_caller]
pub(crate) fn assert_usage_error(args: &[&str], says: &str) {
    let out = stagetrace(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(says), "{err}");
}

/// The default generated run, with `seed`.
pub(crate) fn seeded(seed: u64) -> gen::Scenario {
    gen::Scenario {
        seed,
        ..gen::Scenario::default()
    }
}

pub(crate) fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A stage's figures in a summary line, scaled from its p50.
fn window_stats(p50: f64) -> serde_json::Value {
    json!({"count": 500, "min": p50 * 0.8, "p50": p50, "p90": p50 * 1.1, "p99": p50 * 1.3,
           "p99.9": p50 * 1.5, "max": p50 * 2.0, "mean": p50 * 1.02})
}

/// One summary line in the layer's format (`stagetrace::summary::WindowSummary`).
pub(crate) fn window(run: &str, index: u64, infer_p50: f64) -> String {
    json!({
        "run": run, "window": "rolling", "index": index,
        "start_unix_ms": 1_764_000_000_000.0 + 10_000.0 * index as f64,
        "end_unix_ms": 1_764_000_010_000.0 + 10_000.0 * index as f64,
        "calls": 500, "warmup_calls": 0, "failed_calls": 0,
        "stages": {"capture": window_stats(2.0), "infer": window_stats(infer_p50), "e2e": window_stats(infer_p50 + 6.0)},
        "kinds": {"call": {"calls": 500, "stages": {"infer": window_stats(infer_p50)}}},
        "observer_us": {"p50": 2.5, "p99": 6.0},
        "queue_drops": 0, "write_failures": 0, "rejected_headers": 0, "clamped": 0,
        "ignored_spans": 0, "empty_calls": 0,
        "deadline": {"target_hz": 50.0, "misses": 3, "skipped_ticks": 0, "effective_hz": 49.8,
                     "late_ms": {"p50": 0.1, "p99": 2.0}, "jitter_ms": {"p50": 0.2, "p99": 1.5}}
    })
    .to_string()
        + "\n"
}
