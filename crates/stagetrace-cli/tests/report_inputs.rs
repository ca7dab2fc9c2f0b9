//! What `report` and `compare` take as input: a run directory stands for its
//! regular `records*.jsonl` files (a FIFO among them is passed over, never
//! opened); a summary file given as records is named as such.

#![allow(clippy::unwrap_used)]

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::gen::{self, Scenario};
use support::{assert_usage_error, p};

fn good_lines(n: usize) -> String {
    gen::lines(&Scenario {
        seed: 9,
        calls: n,
        warmup: 0,
        ..Scenario::default()
    })
}

/// Runs `stagetrace ARGS`; kills it and fails when it is not done in 30 s.
fn finishes(args: &[&str]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("stagetrace {args:?} still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_fifo_in_a_run_directory_is_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("records-a.jsonl"), good_lines(200)).unwrap();
    let fifo = dir.path().join("records-b.jsonl");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo failed");
    for args in [
        vec!["report", p(dir.path()), "--json"],
        vec!["compare", p(dir.path()), p(dir.path())],
    ] {
        let out = finishes(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
    let out = finishes(&["report", p(dir.path()), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["inputs"]["files"].as_array().unwrap().len(),
        1,
        "{json}"
    );
}

#[test]
fn a_summary_file_given_as_records_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.20261203T070000Z-1.jsonl");
    std::fs::write(
        &summary,
        "{\"run\":\"r\",\"window\":\"rolling\",\"index\":0,\"start_unix_ms\":1.0,\"end_unix_ms\":2.0,\"calls\":0,\"stages\":{}}\n",
    )
    .unwrap();
    assert_usage_error(
        &["report", p(&summary)],
        "is a summary file (rolling windows), not records",
    );
}

#[test]
fn runs_that_share_a_directory_are_said_to_be_pooled() {
    let dir = tempfile::tempdir().unwrap();
    // One run whose file rotated at midnight: one run, no word.
    std::fs::write(
        dir.path()
            .join("records-20261203T070000Z-11.2026-12-03.jsonl"),
        good_lines(100),
    )
    .unwrap();
    std::fs::write(
        dir.path()
            .join("records-20261203T070000Z-11.2026-12-04.jsonl"),
        good_lines(100),
    )
    .unwrap();
    let out = finishes(&["report", p(dir.path()), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let warnings = json["inputs"]["warnings"].to_string();
    assert!(!warnings.contains("pools"), "{warnings}");
    // A second process wrote into the same directory.
    std::fs::write(
        dir.path()
            .join("records-20261203T080000Z-12.2026-12-03.jsonl"),
        good_lines(100),
    )
    .unwrap();
    let out = finishes(&["report", p(dir.path()), "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let warnings = json["inputs"]["warnings"].to_string();
    assert!(
        warnings.contains("the run pools 2 runs (20261203T070000Z-11, 20261203T080000Z-12)"),
        "{warnings}"
    );
}
