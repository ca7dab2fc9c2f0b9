//! Bad input: a corrupt line names file and line and stops (exit 2) unless
//! `--skip-bad`; a cut-short last line is a warning; empty input says so.

#![allow(clippy::unwrap_used)]

mod support;

use std::fs;

use support::gen::{self, Scenario};
use support::{assert_usage_error, p, stagetrace, stderr, stdout};

fn good_lines(n: usize) -> String {
    let s = Scenario {
        seed: 5,
        calls: n,
        warmup: 0,
        ..Scenario::default()
    };
    gen::lines(&s)
}

#[test]
fn corrupt_line_names_file_and_line_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("records-bad.jsonl");
    let mut text = good_lines(100);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(
        41,
        "{\"seq\":41,\"ts_unix_ms\":1,\"kind\":\"call\",\"e2e_ms\":}",
    );
    lines.insert(70, "garbage");
    text = lines.join("\n") + "\n";
    fs::write(&f, &text).unwrap();
    let out = stagetrace(&["report", p(&f)]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains(&format!("{}:42:", f.display())), "{err}");
    assert!(err.contains("--skip-bad"), "{err}");
    assert!(stdout(&out).is_empty());

    let out = stagetrace(&["report", p(&f), "--skip-bad", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["inputs"]["skipped_bad"], 2);
    assert_eq!(json["groups"][0]["steady"], 100);
    let err = stderr(&out);
    assert!(err.contains("skipped 2 corrupt line(s)"), "{err}");
    assert!(err.contains(":42:") && err.contains(":71:"), "{err}");
}

#[test]
fn truncated_last_line_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("records-crash.jsonl");
    let mut text = good_lines(50);
    text.push_str("{\"seq\":50,\"ts_unix_ms\":1764000001000.0,\"kind\":\"call\",\"infer_");
    fs::write(&f, &text).unwrap();
    let out = stagetrace(&["report", p(&f)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("last line is cut short"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("50 steady call(s)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn empty_input_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("records-empty.jsonl");
    fs::write(&f, "").unwrap();
    assert_usage_error(&["report", p(&f)], "no records in");
    let missing = dir.path().join("nope.jsonl");
    assert_usage_error(&["report", p(&missing)], "cannot read");
}
