//! The demo's truth, end to end: the `stagetrace demo` binary runs a
//! real client and server over loopback, through the built-in proxy, with a
//! known server clock skew and known per-direction delays; the records it
//! writes are checked against that truth and against the record schema.
//!
//! Tests in this file run one at a time (a lock): each measures latency on a
//! shared, possibly loaded machine, and they would disturb each other.
//! Timed figures are compared as low deciles across calls: on a loaded
//! machine scheduling delays only ever *add* time (to the proxy's delay
//! timers, the socket wake-ups, the simulated model's sleep), so a low
//! quantile is the figure free of that noise while a median can jump by
//! milliseconds when other processes compete for the cores. Bounds that hold
//! per call by construction (the offset error against `split_err_ms`) are
//! checked on every call.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;
use stagetrace_test_support::timing;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Run {
    json: Value,
    /// Every record the demo wrote to its output directory, schema-checked.
    records: Vec<Value>,
    _dir: tempfile::TempDir,
}

fn schema_validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/record.schema.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

fn record_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("records") && name.contains(".jsonl")
        })
        .collect();
    files.sort();
    files
}

/// Run `stagetrace demo --json --out <tmp> ARGS`, check every record file
/// line against the schema, and return the JSON and the records.
fn demo(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .arg("demo")
        .arg("--json")
        .arg("--out")
        .arg(dir.path())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "demo {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "demo --json printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let validator = schema_validator();
    let files = record_files(dir.path());
    assert!(
        !files.is_empty(),
        "no records-*.jsonl in the demo's --out directory"
    );
    let mut records = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            let rec: Value = serde_json::from_str(line).unwrap();
            if let Err(e) = validator.validate(&rec) {
                panic!("record violates docs/record.schema.json: {e}\n{line}");
            }
            records.push(rec);
        }
    }
    records.sort_by_key(|r| r["seq"].as_u64().unwrap());
    Run {
        json,
        records,
        _dir: dir,
    }
}

fn f(rec: &Value, name: &str) -> Option<f64> {
    rec.get(name).and_then(Value::as_f64)
}

fn measured(records: &[Value]) -> Vec<&Value> {
    records
        .iter()
        .filter(|r| r.get("warmup").is_none() && r.get("failed").is_none())
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "no values to take a median of");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn median_of(records: &[&Value], name: &str) -> f64 {
    median(records.iter().filter_map(|r| f(r, name)).collect())
}

/// Low decile (nearest rank).
fn low_decile_of(records: &[&Value], name: &str) -> f64 {
    let mut v: Vec<f64> = records.iter().filter_map(|r| f(r, name)).collect();
    assert!(!v.is_empty(), "no {name} values");
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) / 10]
}

/// The low decile of `name` within `bound` ms of its `truth`, reported
/// for `cargo xtask timing` before it is asserted.
fn assert_low_decile(records: &[&Value], name: &str, truth: f64, bound: f64) {
    let v = low_decile_of(records, name);
    timing::error(&format!("{name} low decile err (ms)"), v - truth, bound);
    assert!(
        (v - truth).abs() <= bound,
        "{name} low decile {v:.3} vs truth {truth:.3} ms (bound {bound} ms)"
    );
}

/// Reports `x` against the window [lo, hi]: its distance from the middle
/// against half the width, so 1.0 at either edge.
fn report_window(what: &str, x: f64, lo: f64, hi: f64) {
    timing::error(what, x - (lo + hi) / 2.0, (hi - lo) / 2.0);
}

/// Reports, of per-call (error, bound) pairs, the one with the highest
/// error / bound: the call nearest to failing its own bound.
fn report_worst_call(what: &str, calls: impl IntoIterator<Item = (f64, f64)>) {
    let ratio = |(e, b): &(f64, f64)| e.abs() / b;
    if let Some((e, b)) = calls
        .into_iter()
        .max_by(|x, y| ratio(x).total_cmp(&ratio(y)))
    {
        timing::error(what, e, b);
    }
}

/// Anchor differences between the client's and the server's wall-clock
/// readings (both from this host's clock, read at different instants).
const ANCHOR_TOL_MS: f64 = 0.1;

#[test]
fn ground_truth_skew_250_uplink_20_downlink_5() {
    let _serial = serial();
    let common = [
        "--server-skew-ms",
        "250",
        "--model-ms",
        "12",
        "--payload-kb",
        "32",
        "--hz",
        "15",
        "--warmup",
        "5",
        "--clock",
        "estimate",
    ];
    // The loopback cost of the same exchange without injected delay.
    let base = demo(
        &[
            &common[..],
            &[
                "--calls",
                "50",
                "--uplink-delay-ms",
                "0",
                "--downlink-delay-ms",
                "0",
            ],
        ]
        .concat(),
    );
    let base_net = low_decile_of(&measured(&base.records), "net_ms");

    let run = demo(
        &[
            &common[..],
            &[
                "--calls",
                "80",
                "--uplink-delay-ms",
                "20",
                "--downlink-delay-ms",
                "5",
            ],
        ]
        .concat(),
    );
    let recs = measured(&run.records);
    assert!(recs.len() >= 70, "only {} measured calls", recs.len());

    // The injected 25 ms plus the loopback's own (measured before).
    assert_low_decile(&recs, "net_ms", 25.0 + base_net, 1.5);
    assert_low_decile(&recs, "infer_ms", 12.0, 1.0);

    // The loop below asserts every call: report the one nearest its bound
    // first (the same truth, from the same fields).
    report_worst_call(
        "uplink / downlink vs truth, per-call split_err bound (ms)",
        recs.iter().filter_map(|r| {
            let (up, down, net) = (f(r, "uplink_ms")?, f(r, "downlink_ms")?, f(r, "net_ms")?);
            let (off, err) = (f(r, "offset_ms")?, f(r, "split_err_ms")?);
            let true_up = up + off - 250.0;
            let true_down = net - true_up;
            let miss = (true_up - up).abs().max((true_down - down).abs());
            Some((miss, err + ANCHOR_TOL_MS))
        }),
    );
    for r in &recs {
        assert_eq!(r["clock"], "estimate", "{r}");
        let (up, down, net) = (
            f(r, "uplink_ms").unwrap(),
            f(r, "downlink_ms").unwrap(),
            f(r, "net_ms").unwrap(),
        );
        let (off, err) = (f(r, "offset_ms").unwrap(), f(r, "split_err_ms").unwrap());
        // The server's clock is 250 ms ahead: reported uplink − true uplink
        // = 250 − offset (and the opposite for downlink).
        let true_up = up + off - 250.0;
        let true_down = net - true_up;
        assert!(
            (true_up - up).abs() <= err + ANCHOR_TOL_MS && (true_down - down).abs() <= err + ANCHOR_TOL_MS,
            "true uplink {true_up:.3} / downlink {true_down:.3} outside reported {up:.3} / {down:.3} ± {err:.3}: {r}"
        );
        // And the truth is what the proxy injected plus a loopback cost.
        assert!(
            true_up >= 20.0 - ANCHOR_TOL_MS,
            "true uplink {true_up:.3} below the injected 20 ms: {r}"
        );
        assert!(
            true_down >= 5.0 - ANCHOR_TOL_MS,
            "true downlink {true_down:.3} below the injected 5 ms: {r}"
        );
    }
    // A two-clock estimate assumes a symmetric path, so it must read the
    // skew plus half the delay asymmetry: 250 + (20 − 5) / 2 = 257.5 ms, and
    // up to half the loopback cost more (the 32 kB request rides uplink).
    let off = median_of(&recs, "offset_ms");
    let symmetric = 250.0 + (20.0 - 5.0) / 2.0;
    report_window(
        "offset median vs its window (ms)",
        off,
        symmetric - 1.0,
        symmetric + base_net / 2.0 + 1.0,
    );
    assert!(
        off >= symmetric - 1.0 && off <= symmetric + base_net / 2.0 + 1.0,
        "offset median {off:.3} vs {symmetric} (+ loopback {base_net:.3} / 2), ±1 ms"
    );
    // The split error is half the round-trip delay of the sample used: at
    // least half the injected 25 ms, at most that plus half the loopback.
    let err = median_of(&recs, "split_err_ms");
    report_window(
        "split_err median vs its window (ms)",
        err,
        12.5 - ANCHOR_TOL_MS,
        12.5 + base_net / 2.0 + 1.0,
    );
    assert!(
        err >= 12.5 - ANCHOR_TOL_MS && err <= 12.5 + base_net / 2.0 + 1.0,
        "split_err median {err:.3} vs (25 + loopback {base_net:.3}) / 2"
    );
}

#[test]
fn trusted_clocks_without_skew_give_the_injected_split() {
    let _serial = serial();
    let run = demo(&[
        "--clock",
        "trusted",
        "--server-skew-ms",
        "0",
        "--uplink-delay-ms",
        "20",
        "--downlink-delay-ms",
        "5",
        "--payload-kb",
        "16",
        "--calls",
        "60",
        "--hz",
        "15",
        "--warmup",
        "5",
    ]);
    let recs = measured(&run.records);
    assert!(recs.len() >= 50, "only {} measured calls", recs.len());
    assert!(recs.iter().all(|r| r["clock"] == "trusted"));
    assert_low_decile(&recs, "uplink_ms", 20.0, 1.5);
    assert_low_decile(&recs, "downlink_ms", 5.0, 1.5);
}

/// The figures every completed call of the clock-step run has, each under 1 s.
const CLIENT_AND_SERVER_FIGURES: [&str; 6] = [
    "capture_ms",
    "queue_ms",
    "infer_ms",
    "dispatch_ms",
    "server_ms",
    "roundtrip_ms",
];

#[test]
fn server_clock_step_is_detected_and_no_stage_goes_wild() {
    let _serial = serial();
    let at = 30u64;
    let run = demo(&[
        "--server-skew-ms",
        "0",
        "--server-step-ms",
        "2000",
        "--server-step-at",
        "30",
        "--uplink-delay-ms",
        "2",
        "--downlink-delay-ms",
        "2",
        "--payload-kb",
        "16",
        "--calls",
        "80",
        "--hz",
        "20",
        "--warmup",
        "5",
    ]);
    let done: Vec<&Value> = run
        .records
        .iter()
        .filter(|r| r.get("failed").is_none())
        .collect();
    assert!(done.len() >= 75, "only {} completed calls", done.len());
    // The loop below asserts every call: report the largest figure first.
    timing::worst(
        "largest e2e or stage (ms)",
        done.iter().flat_map(|r| {
            std::iter::once("e2e_ms")
                .chain(CLIENT_AND_SERVER_FIGURES)
                .filter_map(|name| f(r, name))
        }),
        1000.0,
    );
    for r in &done {
        let e2e = f(r, "e2e_ms").unwrap();
        assert!(e2e < 1000.0, "absurd e2e: {r}");
        let net = f(r, "net_ms").unwrap();
        for name in ["uplink_ms", "downlink_ms"] {
            if let Some(v) = f(r, name) {
                assert!(
                    (0.0..=net + 0.002).contains(&v),
                    "{name} {v} outside [0, net {net}]: {r}"
                );
            }
        }
        for name in CLIENT_AND_SERVER_FIGURES {
            let v = f(r, name).unwrap();
            assert!(v < 1000.0, "absurd {name}: {r}");
        }
    }
    // The request with seq == at is the last one stamped by the old clock.
    let offset = |r: &&Value| (f(r, "offset_ms"), f(r, "split_err_ms"));
    let before: Vec<&&Value> = done
        .iter()
        .filter(|r| r["seq"].as_u64().unwrap() <= at && r.get("warmup").is_none())
        .collect();
    let after: Vec<&&Value> = done
        .iter()
        .filter(|r| r["seq"].as_u64().unwrap() > at + 3)
        .collect();
    assert!(before.len() >= 20 && after.len() >= 40);
    let per_call = |calls: &[&&Value], truth: f64| -> Vec<(f64, f64)> {
        calls
            .iter()
            .filter_map(|r| match offset(r) {
                (Some(off), Some(err)) => Some((off - truth, err + ANCHOR_TOL_MS)),
                _ => None,
            })
            .collect()
    };
    report_worst_call(
        "offset before the step vs 0, per-call bound (ms)",
        per_call(&before, 0.0),
    );
    report_worst_call(
        "offset after the step vs 2000, per-call bound (ms)",
        per_call(&after, 2000.0),
    );
    for r in before {
        let (Some(off), Some(err)) = offset(r) else {
            panic!("no offset before the step: {r}")
        };
        assert!(
            off.abs() <= err + ANCHOR_TOL_MS,
            "offset {off} before the step: {r}"
        );
    }
    for r in after {
        let (Some(off), Some(err)) = offset(r) else {
            panic!("no offset after the step: {r}")
        };
        assert!(
            (off - 2000.0).abs() <= err + ANCHOR_TOL_MS,
            "step not followed, offset {off}: {r}"
        );
    }
    // The step is flagged on the one call that confirmed it (the filter
    // wants two consistent samples past the step) and counted in the summary.
    let flagged: Vec<u64> = done
        .iter()
        .filter(|r| r.get("clock_step") == Some(&Value::Bool(true)))
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(flagged.len(), 1, "flagged calls {flagged:?}");
    assert!(
        (at + 1..=at + 3).contains(&flagged[0]),
        "step flagged at seq {}",
        flagged[0]
    );
    let cumulative: Value = std::fs::read_dir(run._dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("summary")
        })
        .flat_map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .find(|w| w["window"] == "cumulative")
        .unwrap();
    assert_eq!(cumulative["clock"]["steps"], 1, "{cumulative}");
}

#[test]
fn json_output_uses_the_record_field_names() {
    let _serial = serial();
    let run = demo(&[
        "--calls",
        "30",
        "--warmup",
        "5",
        "--hz",
        "30",
        "--payload-kb",
        "8",
    ]);
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/record.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let fields = schema["properties"].as_object().unwrap();
    let stages = run.json["stages"].as_object().expect("`stages` object");
    for name in [
        "capture_ms",
        "uplink_ms",
        "queue_ms",
        "infer_ms",
        "downlink_ms",
        "dispatch_ms",
        "roundtrip_ms",
        "server_ms",
        "net_ms",
        "e2e_ms",
        "gap_ms",
        "offset_ms",
        "split_err_ms",
    ] {
        assert!(stages.contains_key(name), "stages lacks {name}: {stages:?}");
    }
    for (name, dist) in stages {
        assert!(
            fields.contains_key(name),
            "stage key {name} is not a record field"
        );
        for q in ["n", "p50", "p90", "p99", "max", "mean"] {
            assert!(dist.get(q).is_some(), "{name} lacks {q}");
        }
        // The server's send wait comes with its next answer: the last
        // call, which has none, has no figure.
        let want = if name == "server_tx_wait_ms" { 24 } else { 25 };
        assert_eq!(
            dist["n"].as_u64(),
            Some(want),
            "{name}: {want} measured calls"
        );
    }
    assert_eq!(run.json["calls"], 30);
    assert_eq!(run.json["warmup"], 5);
    // The records in the JSON are the records in the files.
    let validator = schema_validator();
    let mut printed: Vec<Value> = run.json["records"].as_array().unwrap().clone();
    printed.sort_by_key(|r| r["seq"].as_u64().unwrap());
    assert_eq!(printed, run.records);
    for r in &printed {
        assert!(validator.is_valid(r), "{r}");
    }
    let seqs: Vec<u64> = run
        .records
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..30).collect::<Vec<_>>());
    assert!(run.records[..5].iter().all(|r| r["warmup"] == true));
    assert!(run.records[5..].iter().all(|r| r.get("warmup").is_none()));
    // The server saw our trace context on every request.
    assert_eq!(run.json["counters"]["server_requests_with_traceparent"], 30);
    assert!(run
        .records
        .iter()
        .all(|r| r["trace_id"].as_str().is_some_and(|t| t.len() == 32)));
}

#[test]
fn http_transport_traces_the_same_stages() {
    let _serial = serial();
    let run = demo(&[
        "--transport",
        "http",
        "--clock",
        "trusted",
        "--server-skew-ms",
        "0",
        "--uplink-delay-ms",
        "6",
        "--downlink-delay-ms",
        "3",
        "--payload-kb",
        "16",
        "--calls",
        "40",
        "--hz",
        "20",
        "--warmup",
        "5",
    ]);
    let recs = measured(&run.records);
    assert_eq!(recs.len(), 35, "every call completes");
    assert_low_decile(&recs, "uplink_ms", 6.0, 1.5);
    assert_low_decile(&recs, "downlink_ms", 3.0, 1.5);
    assert_low_decile(&recs, "infer_ms", 12.0, 1.0);
    assert_eq!(run.json["transport"], "http");
}

#[test]
fn bad_arguments_are_refused_with_a_fix() {
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["demo", "--calls", "5", "--warmup", "5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--warmup"), "{err}");
}

#[test]
fn text_output_is_a_table_and_a_diagnosis() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args([
            "demo",
            "--calls",
            "20",
            "--warmup",
            "2",
            "--hz",
            "40",
            "--payload-kb",
            "4",
        ])
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "field",
        "p50",
        "p99",
        "uplink_ms",
        "infer_ms",
        "net_ms",
        "split_err_ms",
        "offset",
        // The default model (12 ms) outweighs the loopback link.
        "- infer dominates: ",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    assert!(
        !text.contains("network (uplink + downlink) dominates"),
        "{text}"
    );
    assert!(dir.path().join("demo.json").exists());
    assert!(!record_files(dir.path()).is_empty());
    // The layer's summaries: rolling windows and the cumulative one.
    let summaries: String = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("summary")
        })
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(
        summaries.contains("\"window\":\"cumulative\""),
        "{summaries}"
    );

    // A slow uplink and a cheap model: the diagnosis names the network.
    let (code, text, err) = demo_text(&[
        "--calls",
        "20",
        "--warmup",
        "2",
        "--hz",
        "20",
        "--payload-kb",
        "4",
        "--model-ms",
        "2",
        "--uplink-delay-ms",
        "40",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        text.contains("- the network (uplink + downlink) dominates: "),
        "{text}"
    );
    assert!(!text.contains("infer dominates"), "{text}");
}

/// `stagetrace demo ARGS` in text mode; returns (exit code, stdout, stderr).
fn demo_text(args: &[&str]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .arg("demo")
        .arg("--out")
        .arg(dir.path())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn trusted_clocks_that_disagree_are_called_out() {
    let _serial = serial();
    let common = [
        "--clock",
        "trusted",
        "--calls",
        "30",
        "--warmup",
        "5",
        "--hz",
        "30",
        "--payload-kb",
        "8",
    ];
    // The server's clock 250 ms ahead: every uplink exceeds the round trip
    // and every downlink is negative, both clamped.
    let (code, text, err) = demo_text(&[&common[..], &["--server-skew-ms", "250"]].concat());
    assert_eq!(code, Some(0), "{err}");
    assert!(
        text.contains("declared trusted (--clock trusted) but disagree"),
        "{text}"
    );
    assert!(text.contains("Use --clock estimate"), "{text}");
    assert!(text.contains("OUTSIDE"), "{text}");
    // The same clocks in agreement: no warning.
    let (code, text, err) = demo_text(&[&common[..], &["--server-skew-ms", "0"]].concat());
    assert_eq!(code, Some(0), "{err}");
    assert!(!text.contains("disagree"), "{text}");
}

#[test]
fn bad_knobs_and_a_taken_address_exit_2() {
    let (code, _, err) = demo_text(&["--hz", "0", "--calls", "5", "--warmup", "1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--hz"), "{err}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // `--warmup` belongs to the paced demo (the mitigation demo refuses it).
    for extra in [&["--warmup", "1"][..], &["--clients", "2"][..]] {
        let args = [&["--server-addr", &addr, "--calls", "5"][..], extra].concat();
        let (code, _, err) = demo_text(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&addr) && err.contains("cannot bind"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn ctrl_c_ends_the_run_reports_it_and_exits_130() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["demo", "--calls", "100000", "--warmup", "2", "--hz", "50"])
        .args(["--payload-kb", "4", "--out"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The records file appears when the layer is built, just before the
    // loop starts; give the loop time to make calls.
    let started = Instant::now();
    while record_files(dir.path()).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(60), "no records");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let sent = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "no exit after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut text, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    // What ran is reported, in the terminal and in demo.json.
    assert!(text.contains("against the injected truth"), "{text}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("demo.json")).unwrap())
            .unwrap();
    assert_eq!(json["interrupted"], true);
    let calls = json["calls"].as_u64().unwrap();
    assert!((10..100_000).contains(&calls), "{calls} calls");
}

/// One definition of a deadline miss: with a model slower
/// than the control period every steady call misses — the demo's counter,
/// the report inside its JSON and the records all say 25 of 25, and the
/// ticks the loop fell behind by are not added (it said 354 for 300 calls).
#[test]
fn deadline_misses_are_calls_not_ticks() {
    let _serial = serial();
    let run = demo(&[
        "--calls",
        "30",
        "--warmup",
        "5",
        "--hz",
        "50",
        "--model-ms",
        "30",
        "--payload-kb",
        "8",
    ]);
    let late = run
        .records
        .iter()
        .filter(|r| r.get("warmup").is_none() && r["deadline_miss"] == true)
        .count();
    assert_eq!(late, 25);
    assert_eq!(run.json["counters"]["deadline_misses"], 25);
    let d = &run.json["report"]["groups"][0]["rate"]["deadline"];
    assert_eq!(
        (d["misses"].as_u64(), d["calls"].as_u64()),
        (Some(25), Some(25))
    );
}

/// `--no-server-timing` plays an unmodified server, over WebSocket and HTTP:
/// every call is cut at the response's first byte, the wait holds the
/// injected delays and the model, and nothing is called inference.
#[test]
fn a_server_without_timing_shows_the_black_box() {
    let _serial = serial();
    for transport in ["ws", "http"] {
        let run = demo(&[
            "--no-server-timing",
            "--transport",
            transport,
            "--uplink-delay-ms",
            "6",
            "--downlink-delay-ms",
            "3",
            "--model-ms",
            "12",
            "--payload-kb",
            "16",
            "--calls",
            "40",
            "--hz",
            "20",
            "--warmup",
            "5",
        ]);
        let recs = measured(&run.records);
        assert_eq!(recs.len(), 35, "{transport}: every call completes");
        for r in &recs {
            let (ttfb, rx, rt) = (
                f(r, "ttfb_ms").unwrap(),
                f(r, "rx_ms").unwrap(),
                f(r, "roundtrip_ms").unwrap(),
            );
            assert!((ttfb + rx - rt).abs() <= 0.002, "{transport}: {r}");
            // The injected delays and the model's cost all lie before the
            // first byte.
            assert!(ttfb >= 6.0 + 12.0 + 3.0, "{transport}: {r}");
            for absent in [
                "infer_ms",
                "queue_ms",
                "server_ms",
                "uplink_ms",
                "net_ms",
                "clock",
            ] {
                assert!(r.get(absent).is_none(), "{transport}: {absent} in {r}");
            }
        }
        // How close to the truth the cut lies is stagetrace-net's
        // black_box test (a tap's stamps); here: what the demo injected.
        let truth = &run.json["truth"]["ttfb"];
        assert_eq!(truth["injected_ms"], 21.0, "{}", run.json["truth"]);
        assert!(run.json["stages"].get("infer_ms").is_none());
    }
}
