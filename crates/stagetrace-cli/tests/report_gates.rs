//! `--fail-if` gates and the `.hgrm` files.

#![allow(clippy::unwrap_used)]

mod support;

use std::fs;

use support::gen::{self, Scenario};
use support::{assert_usage_error, p, seeded, stagetrace, stderr};

#[test]
fn fail_if_fires_names_itself_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("records.jsonl");
    gen::write(&f, &seeded(9));
    // infer is ~30 ms with p99 ~34 ms.
    let out = stagetrace(&[
        "report",
        p(&f),
        "--fail-if",
        "infer.p99>80ms",
        "--fail-if",
        "e2e.max>1s",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = stagetrace(&[
        "report",
        p(&f),
        "--fail-if",
        "infer.p99>80ms",
        "--fail-if",
        "infer.p50>25ms",
        "--fail-if",
        "call:e2e.p99.9>=0.02s",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("fail-if fired: infer.p50>25ms"), "{err}");
    assert!(
        err.contains("fail-if fired: call:e2e.p99.9>=0.02s"),
        "{err}"
    );
    assert!(!err.contains("infer.p99>80ms"), "{err}");
    // Usage errors are status 2.
    assert_usage_error(
        &["report", p(&f), "--fail-if", "infer.p98>80ms"],
        "unknown statistic",
    );
    assert_usage_error(
        &["report", p(&f), "--fail-if", "deadline.misses>0"],
        "no deadlines",
    );
}

#[test]
fn hgrm_files_follow_hdrhistogram_format() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("records.jsonl");
    gen::write(&f, &seeded(10));
    let out_dir = dir.path().join("hgrm");
    let out = stagetrace(&["report", p(&f), "--hgrm", p(&out_dir)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let infer = fs::read_to_string(out_dir.join("call.infer.hgrm")).unwrap();
    let lines: Vec<&str> = infer.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]
    );
    // Data rows: value, percentile in [0,1], cumulative count, 1/(1-p); monotone.
    let mut last = (0.0f64, 0.0f64, 0u64);
    let mut rows = 0;
    for l in lines.iter().skip(2).take_while(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = l.split_whitespace().collect();
        assert!(cols.len() == 4 || cols.len() == 3, "{l}");
        let v: f64 = cols[0].parse().unwrap();
        let q: f64 = cols[1].parse().unwrap();
        let c: u64 = cols[2].parse().unwrap();
        assert!(v >= last.0 && q >= last.1 && c >= last.2, "{l}");
        last = (v, q, c);
        rows += 1;
    }
    assert!(rows > 50, "{rows}");
    assert_eq!(last.1, 1.0);
    assert_eq!(last.2, 3000);
    assert!(infer.contains("#[Max     = ") && infer.contains("Total count    =         3000]"));
    for stage in ["capture", "uplink", "e2e", "gap"] {
        assert!(
            out_dir.join(format!("call.{stage}.hgrm")).exists(),
            "{stage}"
        );
    }
}

#[test]
fn a_run_directory_stands_for_its_record_files() {
    let dir = tempfile::tempdir().unwrap();
    gen::write(
        &dir.path().join("records-a.jsonl"),
        &Scenario {
            seed: 12,
            calls: 400,
            ..Scenario::default()
        },
    );
    gen::write(
        &dir.path().join("records-b.jsonl"),
        &Scenario {
            seed: 13,
            calls: 600,
            ..Scenario::default()
        },
    );
    fs::write(dir.path().join("summary.x.jsonl"), "not records\n").unwrap();
    let out = stagetrace(&["report", p(dir.path()), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["inputs"]["files"].as_array().unwrap().len(), 2);
    assert_eq!(json["groups"][0]["steady"], 1000);
    let empty = tempfile::tempdir().unwrap();
    assert_usage_error(&["report", p(empty.path())], "no records*.jsonl files");
}

/// Records of an app whose policy server sends no timing: each call is the
/// user's `transport` span as a whole (`roundtrip`), around 10 + i % 5 ms.
fn without_server_timing(dir: &std::path::Path) -> std::path::PathBuf {
    let f = dir.join("records.jsonl");
    let lines: String = (0..200)
        .map(|i| {
            let rt = 10.0 + f64::from(i % 5);
            format!(
                "{{\"seq\":{i},\"ts_unix_ms\":{},\"kind\":\"call\",\"capture_ms\":2.0,\"roundtrip_ms\":{rt},\"dispatch_ms\":1.0,\"e2e_ms\":{},\"gap_ms\":0.2}}\n",
                1_764_000_000_000.0 + 33.0 * f64::from(i),
                rt + 3.2
            )
        })
        .collect();
    fs::write(&f, lines).unwrap();
    f
}

#[test]
fn the_span_names_users_write_are_stages() {
    let dir = tempfile::tempdir().unwrap();
    let f = without_server_timing(dir.path());
    // `transport` is the records' roundtrip (p99: 14 ms), `call` their e2e.
    let out = stagetrace(&["report", p(&f), "--fail-if", "transport.p99>12ms"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("fail-if fired: transport.p99>12ms — measured 14.000 ms > 12 ms"),
        "{}",
        stderr(&out)
    );
    // e2e p50: 15.2 ms.
    let out = stagetrace(&["report", p(&f), "--fail-if", "call.p50>15ms"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = stagetrace(&["report", p(&f), "--fail-if", "transport.p99>20ms"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn records_without_server_timing_say_what_they_miss() {
    let dir = tempfile::tempdir().unwrap();
    let f = without_server_timing(dir.path());
    let out = stagetrace(&["report", p(&f)]);
    let text = support::stdout(&out);
    let note = text
        .lines()
        .find(|l| l.trim_start().starts_with("no server timing:"))
        .unwrap_or_else(|| panic!("no note: {text}"));
    assert!(note.contains("docs/protocol.md"), "{note}");
    // Under the stage table, right after its rows.
    let rows_end = text
        .lines()
        .position(|l| l.trim_start().starts_with("gap "))
        .unwrap();
    assert_eq!(text.lines().nth(rows_end + 1), Some(note), "{text}");
    // A gate on a figure only server timing gives says why it has none.
    assert_usage_error(
        &["report", p(&f), "--fail-if", "infer.p99>10ms"],
        "no server timing: the policy server sends none (docs/protocol.md)",
    );
    // Records with server timing carry no such note.
    let timed = dir.path().join("timed.jsonl");
    gen::write(&timed, &seeded(11));
    let text = support::stdout(&stagetrace(&["report", p(&timed)]));
    assert!(!text.contains("no server timing"), "{text}");
}
