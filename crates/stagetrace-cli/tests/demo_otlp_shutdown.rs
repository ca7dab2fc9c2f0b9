//! `stagetrace demo --otlp` against a collector that accepts connections and
//! never answers: the demo ends within its shutdown bound
//! after the last call, and its last word — the exporters' messages and the
//! cumulative summary — accounts for every record.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use stagetrace_test_support::collector::silent_collector;
use stagetrace_test_support::timing;

/// The demo's `--otlp-shutdown-ms`.
const BOUND: Duration = Duration::from_millis(1000);
/// What the end of the run may take beyond that bound.
const MARGIN: Duration = Duration::from_secs(1);

fn lines(dir: &Path, prefix: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with(prefix) && name.ends_with(".jsonl") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                out.push(serde_json::from_str(line).unwrap());
            }
        }
    }
    out
}

/// The numbers of an exporter's final message:
/// `otlp: N records: E exported (S spans), D dropped (queue full), F lost in
/// X failed exports, A abandoned at shutdown`.
fn final_word(stderr: &str, service: &str) -> [u64; 5] {
    let line = stderr
        .lines()
        .find(|l| l.starts_with(service))
        .unwrap_or_else(|| panic!("no final message of {service}: {stderr}"));
    let n = |after: &str, before: &str| -> u64 {
        let rest = &line[line.find(after).unwrap() + after.len()..];
        rest[..rest.find(before).unwrap()].trim().parse().unwrap()
    };
    [
        n("otlp: ", " records"),
        n("records: ", " exported"),
        n("spans), ", " dropped"),
        n("(queue full), ", " lost"),
        n("failed exports, ", " abandoned at shutdown"),
    ]
}

#[test]
fn demo_with_a_silent_collector_ends_within_its_bound_and_accounts_for_every_record() {
    let endpoint = silent_collector();
    let dir = tempfile::tempdir().unwrap();
    let calls: u64 = 40;
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["demo", "--calls", &calls.to_string(), "--warmup", "2"])
        .args(["--hz", "40", "--payload-kb", "10", "--model-ms", "4"])
        .args(["--json", "--out"])
        .arg(dir.path())
        .args(["--otlp", &endpoint, "--otlp-shutdown-ms"])
        .arg(BOUND.as_millis().to_string())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .unwrap();
    let exited_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1e3;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed: {stderr}");

    // From the end of the last call to the exit: the layer's flush, the two
    // exporters' shutdown, the report. One bound for all of it.
    let records = lines(dir.path(), "records");
    assert_eq!(records.len() as u64, calls, "{stderr}");
    let last_end_ms = records
        .iter()
        .map(|r| r["ts_unix_ms"].as_f64().unwrap() + r["e2e_ms"].as_f64().unwrap_or(0.0))
        .fold(f64::MIN, f64::max);
    let tail = Duration::from_secs_f64((exited_ms - last_end_ms).max(0.0) / 1e3);
    eprintln!("from the last call to the exit: {tail:?}");
    timing::error(
        "last call to exit (ms)",
        tail.as_secs_f64() * 1e3,
        (BOUND + MARGIN).as_secs_f64() * 1e3,
    );
    assert!(
        tail < BOUND + MARGIN,
        "the demo took {tail:?} after its last call to exit; bound {BOUND:?}: {stderr}"
    );

    // The exporters' last word: every record in exactly one count.
    for service in ["stagetrace-demo-client", "stagetrace-demo-server"] {
        let [produced, exported, dropped, failed, abandoned] = final_word(&stderr, service);
        assert_eq!(produced, calls, "{service}: {stderr}");
        assert_eq!(
            exported + dropped + failed + abandoned,
            produced,
            "{service}: {stderr}"
        );
        assert_eq!(exported, 0, "the collector never answered: {stderr}");
    }

    // The cumulative summary, written after the exporter's final flush.
    let summaries = lines(dir.path(), "summary");
    let cumulative = summaries.last().unwrap();
    assert_eq!(cumulative["window"], "cumulative");
    let c = |name: &str| cumulative["sink_counters"][name].as_u64().unwrap();
    let counters = &cumulative["sink_counters"];
    assert_eq!(c("otlp.queued") + c("otlp.dropped"), calls, "{counters}");
    assert_eq!(
        c("otlp.exported") + c("otlp.dropped") + c("otlp.failed") + c("otlp.abandoned"),
        calls,
        "{counters}"
    );
    assert!(c("otlp.abandoned") > 0, "{counters}");
}

#[test]
fn the_shutdown_bound_without_otlp_is_a_usage_error() {
    support::assert_usage_error(
        &["demo", "--calls", "3", "--otlp-shutdown-ms", "500"],
        "--otlp-shutdown-ms: only used with --otlp",
    );
}
