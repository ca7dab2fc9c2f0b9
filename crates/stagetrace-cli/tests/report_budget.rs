//! `report --memory-budget` (issue 42): inputs estimated to need more than
//! the budget for the exact report (Parquet footers' row counts, JSON
//! lines' sizes) get the summary's report — the JSON `stagetrace summarize`
//! prints, plus a `memory_budget` field saying which quantiles and why —
//! and the options only the exact report answers are refused by name;
//! within the budget the exact report says `"quantiles": "exact"`.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::gen::{self, Scenario};
use support::{assert_usage_error, p, stagetrace, stderr, stdout};

/// 2025-11-24 16:00:00 UTC: the generated runs stay within that day.
const START_MS: f64 = 1_764_000_000_000.0;

/// Calls per robot: two robots' worth need well over 1 MB for the exact
/// report (540 bytes a call, `budget.rs`), and one robot's JSON lines
/// too, so `--memory-budget 1` is exceeded.
const CALLS: usize = 6_000;

/// A robot's run directory of JSON lines: `calls` of kind `call`, then a
/// few hundred `reset` calls, some failed.
fn run_dir(root: &Path, robot: &str, seed: u64) -> PathBuf {
    let dir = root.join(robot);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = gen::lines(&Scenario {
        seed,
        calls: CALLS,
        start_unix_ms: START_MS,
        fail_every: Some(97),
        deadline: true,
        ..Scenario::default()
    });
    text.push_str(&gen::lines(&Scenario {
        seed: seed + 100,
        calls: 300,
        kind: "reset",
        start_unix_ms: START_MS + 60_000.0,
        ..Scenario::default()
    }));
    std::fs::write(
        dir.join(format!("records-20251124T160000Z-{seed}.jsonl")),
        text,
    )
    .unwrap();
    dir
}

/// Two robots' runs, converted into one Parquet tree; the tree and the
/// first robot's run directory.
fn fleet(root: &Path) -> (PathBuf, PathBuf) {
    let tree = root.join("tree");
    let mut first = None;
    for (seed, robot) in [(1, "arm-1"), (2, "arm-2")] {
        let dir = run_dir(root, robot, seed);
        let out = stagetrace(&["convert", p(&dir), "--to", p(&tree), "--robot", robot]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        first.get_or_insert(dir);
    }
    (tree, first.unwrap())
}

fn json_of(args: &[&str]) -> Value {
    let out = stagetrace(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn over_the_budget_the_report_is_the_summarys_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let (tree, _) = fleet(tmp.path());
    // A damaged file counts no call in the estimate and is skipped by name.
    let broken = tree.join("robot=arm-2/date=2025-11-24/part-broken.parquet");
    std::fs::write(&broken, b"PAR1 not parquet").unwrap();

    let summarized = json_of(&["summarize", p(&tree), "--json"]);
    let mut reported = json_of(&["report", p(&tree), "--json", "--memory-budget", "1"]);
    let why = reported.as_object_mut().unwrap().remove("memory_budget");
    assert_eq!(
        reported, summarized,
        "the summary's report, field for field"
    );
    let why = why.expect("a memory_budget field");
    // Each partition analysed: every kind's verdicts over all its calls.
    for g in summarized["groups"].as_array().unwrap() {
        if g["kind"] != "*" {
            assert_eq!(g["verdict_calls"], g["steady"], "{g}");
        }
    }
    assert!(!summarized["verdicts"].as_array().unwrap().is_empty());
    assert_eq!(why["budget_mb"], 1);
    assert_eq!(why["quantiles"], "hdr-3-sigfig");
    // The footers' rows: every call the summary read (the damaged file's none).
    assert_eq!(why["estimated_calls"], summarized["calls"]);
    assert!(summarized["calls"].as_u64().unwrap() > 2 * CALLS as u64);
    assert!(why["exact_needs_mb"].as_u64().unwrap() > 1, "{why}");
    let note = why["note"].as_str().unwrap();
    assert!(
        note.starts_with("quantiles: HdrHistogram, within 0.1 % (not exact)"),
        "{note}"
    );
    assert!(note.contains("about 12.7 k calls"), "{note}");
    assert!(
        note.contains("over the 1 MB budget (--memory-budget)"),
        "{note}"
    );
    assert!(note.contains("--robot / --since / --until"), "{note}");

    // Text: the summary's table on stdout, the sentence on stderr.
    let text = stagetrace(&["report", p(&tree), "--memory-budget", "1"]);
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let summarize_text = stagetrace(&["summarize", p(&tree)]);
    assert_eq!(stdout(&text), stdout(&summarize_text));
    let err = stderr(&text);
    assert!(err.contains(note), "{err}");
    assert!(err.contains(&broken.display().to_string()), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn within_the_budget_the_report_is_exact_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let (tree, arm1) = fleet(tmp.path());
    for args in [
        vec!["report", p(&tree), "--json"],
        vec!["report", p(&tree), "--json", "--memory-budget", "100000"],
        vec!["report", p(&arm1), "--json", "--memory-budget", "100000"],
    ] {
        let v = json_of(&args);
        assert_eq!(v["schema"], "stagetrace-report/1", "{args:?}");
        assert_eq!(v["quantiles"], "exact", "{args:?}");
        assert!(v.get("memory_budget").is_none(), "{args:?}");
        assert!(v["verdicts"].is_array(), "{args:?}");
    }
    let out = stagetrace(&["report", p(&tree), "--memory-budget", "100000"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("HdrHistogram"), "{}", stderr(&out));
}

#[test]
fn json_lines_are_weighed_by_their_size() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, arm1) = fleet(tmp.path());
    let arm2 = tmp.path().join("arm-2");
    // Both robots' lines: weighed at the budget's bytes a line, they need
    // more than the smallest budget (1 MB) for the exact report.
    let bytes: u64 = [&arm1, &arm2]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap())
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let summarized = json_of(&["summarize", p(&arm1), p(&arm2), "--json"]);
    let mut reported = json_of(&[
        "report",
        p(&arm1),
        p(&arm2),
        "--json",
        "--memory-budget",
        "1",
    ]);
    let why = reported
        .as_object_mut()
        .unwrap()
        .remove("memory_budget")
        .unwrap_or_else(|| panic!("{bytes} bytes of JSON lines weighed within 1 MB"));
    assert_eq!(reported, summarized);
    // The estimate is the files' size at 936 bytes a line.
    assert_eq!(
        why["estimated_calls"].as_u64().unwrap(),
        [&arm1, &arm2]
            .iter()
            .flat_map(|d| std::fs::read_dir(d).unwrap())
            .map(|e| e.unwrap().metadata().unwrap().len().div_ceil(936))
            .sum::<u64>()
    );
}

#[test]
fn options_of_the_exact_report_over_the_budget_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (tree, _) = fleet(tmp.path());
    let html = tmp.path().join("r.html");
    let cases: [(Vec<&str>, &str); 4] = [
        (
            vec!["--fail-if", "infer.p99>80ms"],
            "--fail-if needs the exact report",
        ),
        (vec!["--html", p(&html)], "--html needs the exact report"),
        (vec!["--per-robot"], "--per-robot needs the exact report"),
        (
            vec!["--outlier-k", "4", "--seed", "7"],
            "--outlier-k, --seed need the exact report",
        ),
    ];
    for (extra, says) in cases {
        let mut args = vec!["report", p(&tree), "--memory-budget", "1"];
        args.extend(extra);
        let out = stagetrace(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            err.contains("over the 1 MB budget (--memory-budget)"),
            "{err}"
        );
        assert!(err.contains("raise --memory-budget"), "{err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing reported");
    }
    assert!(!html.exists());
    // A baseline judges each partition's verdicts through the merge path,
    // as `summarize --baseline` does: an idle run whose infer took 20 ms
    // against the fleet's 30 ms names infer's median shift.
    let idle = tmp.path().join("idle");
    std::fs::create_dir_all(&idle).unwrap();
    std::fs::write(
        idle.join("records-idle.jsonl"),
        gen::lines(&Scenario {
            seed: 9,
            calls: 600,
            start_unix_ms: START_MS,
            infer_ms: (20.0, 0.5),
            ..Scenario::default()
        }),
    )
    .unwrap();
    let mut reported = json_of(&[
        "report",
        p(&tree),
        "--memory-budget",
        "1",
        "--baseline",
        p(&idle),
        "--json",
    ]);
    reported.as_object_mut().unwrap().remove("memory_budget");
    let summarized = json_of(&["summarize", p(&tree), "--baseline", p(&idle), "--json"]);
    assert_eq!(reported, summarized);
    let shifts: Vec<(&str, &str)> = summarized["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["code"] == "median_shift")
        .map(|v| (v["kind"].as_str().unwrap(), v["stage"].as_str().unwrap()))
        .collect();
    assert!(shifts.contains(&("call", "infer")), "{shifts:?}");
    // Within the budget the same options are the exact report's, as before.
    let out = stagetrace(&["report", p(&tree), "--fail-if", "e2e.p99>100000ms"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_budget_for_standard_input_is_refused() {
    assert_usage_error(
        &["report", "-", "--memory-budget", "64"],
        "--memory-budget: the size of `-` (standard input) is not known",
    );
}
