//! Parquet inputs: the same calls as JSON lines and as a Parquet tree
//! (`stagetrace convert`) give the same `report --json` and `compare --json`;
//! `--robot` / `--since` / `--until` select partitions; a damaged file is
//! refused by name, and in a tree skipped by name with the rest reported.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;

use serde_json::Value;
use support::gen::{self, Gateway, Scenario};
use support::{assert_usage_error, p, stagetrace, stderr};

/// 2025-11-24 16:00:00 UTC: the generated run stays within that day.
const START_MS: f64 = 1_764_000_000_000.0;

fn lines_of_a_busy_run(infer_factor: f64) -> String {
    let mut text = gen::lines(&Scenario {
        seed: 3,
        calls: 1_500,
        start_unix_ms: START_MS,
        infer_factor,
        gateway: Some(Gateway::default()),
        fail_every: Some(97),
        deadline: true,
        digests: true,
        transport_tail: Some((0.02, 15.0)),
        ..Scenario::default()
    });
    text.push_str(&gen::lines(&Scenario {
        seed: 4,
        calls: 300,
        kind: "reset",
        start_unix_ms: START_MS + 60_000.0,
        infer_factor,
        ..Scenario::default()
    }));
    text
}

fn run_dir(root: &Path, name: &str, infer_factor: f64) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let run = format!("20251124T160000Z-{}", name.len());
    std::fs::write(
        dir.join(format!("records-{run}.jsonl")),
        lines_of_a_busy_run(infer_factor),
    )
    .unwrap();
    dir
}

fn convert(from: &Path, to: &Path) {
    convert_robot(from, to, "arm-3");
}

fn convert_robot(from: &Path, to: &Path, robot: &str) {
    let out = stagetrace(&["convert", p(from), "--to", p(to), "--robot", robot]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// `stagetrace ARGS --json`, without the input paths (which differ by format).
fn json_without_paths(args: &[&str]) -> Value {
    let out = stagetrace(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    let mut v: Value = serde_json::from_slice(&out.stdout).unwrap();
    strip_files(&mut v);
    v
}

fn strip_files(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("files");
            map.values_mut().for_each(strip_files);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_files),
        _ => {}
    }
}

#[test]
fn the_same_calls_in_parquet_give_the_same_report_and_compare() {
    let tmp = tempfile::tempdir().unwrap();
    let before = run_dir(tmp.path(), "before", 1.0);
    let after = run_dir(tmp.path(), "after", 1.25);
    let (pq_before, pq_after) = (tmp.path().join("pq-before"), tmp.path().join("pq-after"));
    convert(&before, &pq_before);
    convert(&after, &pq_after);

    let from_lines = json_without_paths(&["report", p(&after), "--baseline", p(&before), "--json"]);
    let from_parquet = json_without_paths(&[
        "report",
        p(&pq_after),
        "--baseline",
        p(&pq_before),
        "--json",
    ]);
    assert_eq!(from_lines["inputs"]["records"], 1_840);
    assert_eq!(from_lines, from_parquet);

    let from_lines = json_without_paths(&["compare", p(&before), p(&after), "--json"]);
    let from_parquet = json_without_paths(&["compare", p(&pq_before), p(&pq_after), "--json"]);
    assert_eq!(from_lines, from_parquet);

    // One file of the tree, and the tree under a robot filter, read the same calls.
    let selected = json_without_paths(&["report", p(&pq_after), "--robot", "arm-3", "--json"]);
    let whole = json_without_paths(&["report", p(&after), "--json"]);
    assert_eq!(selected, whole);
}

#[test]
fn robot_and_time_filters_select_partitions_and_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(tmp.path(), "run", 1.0);
    let pq = tmp.path().join("pq");
    convert(&run, &pq);
    assert!(pq.join("robot=arm-3/date=2025-11-24").is_dir());

    assert_usage_error(
        &["report", p(&pq), "--robot", "arm-4"],
        "no Parquet file for this selection",
    );
    assert_usage_error(
        &["report", p(&pq), "--since", "2025-11-25"],
        "no Parquet file for this selection",
    );
    assert_usage_error(&["report", p(&pq), "--since", "yesterday"], "not a time");
    assert_usage_error(&["report", p(&run), "--robot", "arm-3"], "convert it first");
    // The reset calls start a minute after the first call: --since cuts them apart.
    let since = "2025-11-24T16:00:59Z";
    let late = json_without_paths(&["report", p(&pq), "--since", since, "--json"]);
    let early = json_without_paths(&["report", p(&pq), "--until", since, "--json"]);
    let all = json_without_paths(&["report", p(&pq), "--json"]);
    let records = |v: &Value| v["inputs"]["records"].as_u64().unwrap();
    assert!(records(&late) > 0 && records(&early) > 0);
    assert_eq!(records(&late) + records(&early), records(&all));
}

#[test]
fn a_damaged_parquet_file_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(tmp.path(), "run", 1.0);
    let pq = tmp.path().join("pq");
    convert(&run, &pq);
    let file = walk_one(&pq);
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 100]).unwrap();
    let out = stagetrace(&["report", p(&pq)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert!(err.contains("not a readable Parquet file"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn walk_one(dir: &Path) -> std::path::PathBuf {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|x| x == "parquet") {
                return path;
            }
        }
    }
    panic!("no parquet file under {}", dir.display());
}

#[test]
fn a_tree_of_two_robots_is_a_fleet_and_a_robot_filter_opens_only_its_files() {
    let tmp = tempfile::tempdir().unwrap();
    let arm1 = run_dir(tmp.path(), "arm-1", 1.0);
    let arm2 = run_dir(tmp.path(), "arm-2", 1.3);
    let tree = tmp.path().join("tree");
    convert_robot(&arm1, &tree, "arm-1");
    convert_robot(&arm2, &tree, "arm-2");

    let from_lines = json_without_paths(&["report", p(&arm1), p(&arm2), "--per-robot", "--json"]);
    let from_tree = json_without_paths(&["report", p(&tree), "--per-robot", "--json"]);
    assert_eq!(from_lines, from_tree);
    assert!(from_tree.to_string().contains("robot_differs"));

    // A damaged file in arm-2's partition is never opened for arm-1.
    std::fs::write(
        tree.join("robot=arm-2/date=2025-11-24/part-broken.parquet"),
        b"PAR1 not parquet",
    )
    .unwrap();
    let only_arm1 = json_without_paths(&["report", p(&tree), "--robot", "arm-1", "--json"]);
    assert_eq!(
        only_arm1,
        json_without_paths(&["report", p(&arm1), "--json"])
    );
    // Without the filter it is read, found damaged and skipped by name.
    let out = stagetrace(&["report", p(&tree), "--per-robot", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("part-broken.parquet"),
        "{}",
        stderr(&out)
    );
}

/// The sample file of `stagetrace-parquet` with one byte changed where the
/// byte-stream-split decoder panics on it (its `tests/damaged.rs`).
fn a_file_that_panics_the_decoder() -> Vec<u8> {
    let mut bytes = stagetrace_parquet::sample::file();
    bytes[10862] = 18;
    bytes
}

#[test]
fn a_damaged_file_in_a_tree_is_skipped_by_name_and_the_rest_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(tmp.path(), "run", 1.0);
    let pq = tmp.path().join("pq");
    convert(&run, &pq);
    let intact = json_without_paths(&["report", p(&pq), "--json"]);
    let bad = walk_one(&pq).with_file_name("part-zz-damaged.parquet");
    std::fs::write(&bad, a_file_that_panics_the_decoder()).unwrap();

    let out = stagetrace(&["report", p(&pq), "--json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let mut v: Value = serde_json::from_slice(&out.stdout).unwrap();
    strip_files(&mut v);
    assert_eq!(v, intact, "the report covers the rest, as without the file");
    let name = bad.display().to_string();
    assert!(
        err.contains(&format!("skipped a damaged Parquet file: {name}")),
        "{err}"
    );
    assert!(
        err.contains("leaves out 1 damaged Parquet file(s)"),
        "{err}"
    );
    assert!(!err.contains("thread 'main' panicked"), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.contains(&name)).count(),
        2,
        "{err}"
    );

    // The text report too; and the file alone is an error naming it.
    let out = stagetrace(&["report", p(&pq)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains(&name), "{}", stderr(&out));
    let out = stagetrace(&["report", p(&bad)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("every Parquet file is damaged"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn convert_skips_a_damaged_input_by_name_and_converts_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let good = run_dir(tmp.path(), "good", 1.0);
    let bad = run_dir(tmp.path(), "bad-run", 1.0);
    let bad_file = std::fs::read_dir(&bad)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut text = std::fs::read_to_string(&bad_file).unwrap();
    text.insert_str(0, "this line is no record\n");
    std::fs::write(&bad_file, text).unwrap();
    let pq = tmp.path().join("pq");
    let out = stagetrace(&[
        "convert",
        p(&good),
        p(&bad),
        "--to",
        p(&pq),
        "--robot",
        "arm-3",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let name = bad_file.display().to_string();
    assert!(
        err.contains(&format!("skipped a damaged input: {name}:1")),
        "{err}"
    );
    assert!(err.contains("left out 1 damaged input(s)"), "{err}");
    let records = |path: &Path| {
        json_without_paths(&["report", p(path), "--json"])["inputs"]["records"].clone()
    };
    assert_eq!(records(&pq), records(&good));
}

#[test]
fn convert_leaves_out_a_last_line_cut_short_as_report_does() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(tmp.path(), "run", 1.0);
    let file = std::fs::read_dir(&run)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("{\"seq\":99999,\"ts_unix_ms\":17640");
    std::fs::write(&file, text).unwrap();
    let pq = tmp.path().join("pq");
    let out = stagetrace(&["convert", p(&run), "--to", p(&pq), "--robot", "arm-3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("cut short"), "{}", stderr(&out));
    let records = |path: &Path| {
        json_without_paths(&["report", p(path), "--json"])["inputs"]["records"].clone()
    };
    assert_eq!(records(&pq), records(&run));
}
