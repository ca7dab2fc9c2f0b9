//! `stagetrace report --per-robot` over several robots' directories: the records merged in the tables, a per-robot column, and a
//! verdict naming the robot that differs and the stage.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};

use support::gen::{self, Scenario};
use support::{assert_usage_error, p, stagetrace, stderr, stdout};

/// One directory per robot, named after it, holding its record file.
fn fleet(root: &Path, robots: &[(&str, u64, f64)]) -> Vec<PathBuf> {
    robots
        .iter()
        .map(|(name, seed, infer_factor)| {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let s = Scenario {
                seed: *seed,
                calls: 1500,
                infer_factor: *infer_factor,
                ..Scenario::default()
            };
            gen::write(&dir.join(format!("records-{name}-run.jsonl")), &s);
            dir
        })
        .collect()
}

fn report(dirs: &[PathBuf], extra: &[&str]) -> std::process::Output {
    let mut args = vec!["report", "--per-robot"];
    args.extend(dirs.iter().map(|d| p(d)));
    args.extend(extra);
    stagetrace(&args)
}

#[test]
fn the_verdict_names_the_slower_robot_and_its_stage() {
    let root = tempfile::tempdir().unwrap();
    let dirs = fleet(
        root.path(),
        &[("arm-1", 61, 1.0), ("arm-2", 62, 1.0), ("arm-3", 63, 1.2)],
    );
    let out = report(&dirs, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let named: Vec<(&str, &str)> = json["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["code"] == "robot_differs")
        .map(|v| {
            (
                v["evidence"]["robot"].as_str().unwrap(),
                v["stage"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(named, vec![("arm-3", "infer")], "{json}");
    assert_eq!(json["verdicts"][0]["code"], "robot_differs");
    let names: Vec<&str> = json["robots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["arm-1", "arm-2", "arm-3"]);
    // Merged: every robot's steady calls in the one table.
    assert_eq!(json["groups"][0]["steady"], 4500);
    let infer = |r: &str, q: &str| {
        json["groups"][0]["robots"][r]["stages"]["infer"][q]
            .as_f64()
            .unwrap()
    };
    assert!((infer("arm-3", "p50") - 36.0).abs() < 0.2, "{json}");
    assert!((infer("arm-1", "p50") - 30.0).abs() < 0.2, "{json}");
    assert!(infer("arm-3", "p99") > infer("arm-3", "p50"));

    let out = report(&dirs, &[]);
    let text = stdout(&out);
    assert!(text.contains("per robot (p50 / p99, ms"), "{text}");
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("stage ") && l.contains("arm-1"))
        .unwrap();
    assert!(
        header.contains("arm-2") && header.contains("arm-3"),
        "{header}"
    );
    assert!(
        text.contains("robot arm-3 is slower than the other 2 robot(s) in infer"),
        "{text}"
    );
}

#[test]
fn identical_robots_get_no_robot_verdict() {
    let root = tempfile::tempdir().unwrap();
    let dirs = fleet(
        root.path(),
        &[("arm-1", 71, 1.0), ("arm-2", 72, 1.0), ("arm-3", 73, 1.0)],
    );
    let out = report(&dirs, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let codes: Vec<&str> = json["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["steady"], "{json}");
    assert_eq!(json["groups"][0]["robots"].as_object().unwrap().len(), 3);
}

/// With --per-robot, pooling the robots is the point, so no pooling warning;
/// rate and jitter per robot, never across the merged robots (three robots
/// at 50 Hz each are not one at 150 Hz); each listed outlier names its robot.
#[test]
fn per_robot_rates_and_outliers_name_their_robot_without_a_pooling_warning() {
    let root = tempfile::tempdir().unwrap();
    let dirs = fleet(
        root.path(),
        &[("arm-1", 81, 1.0), ("arm-2", 82, 1.0), ("arm-3", 83, 1.3)],
    );
    // Two runs in one robot's directory: pooled, and said only without
    // --per-robot.
    let extra = Scenario {
        seed: 84,
        calls: 200,
        ..Scenario::default()
    };
    gen::write(&dirs[0].join("records-arm-1-second.jsonl"), &extra);
    // arm-2's uplink spikes on 2 % of its calls: the outliers to list.
    let spiky = Scenario {
        seed: 82,
        calls: 1500,
        stage_spikes: Some(("uplink", 0.02, 10.0)),
        ..Scenario::default()
    };
    gen::write(&dirs[1].join("records-arm-2-run.jsonl"), &spiky);
    let out = report(&dirs, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    eprintln!("{text}");
    assert!(!stderr(&out).contains("pools"), "{}", stderr(&out));
    assert!(
        text.contains("rate and completion jitter per robot (below)"),
        "{text}"
    );
    assert!(!text.contains("Hz effective"), "{text}");
    let hz_row = text
        .lines()
        .find(|l| l.trim_start().starts_with("Hz "))
        .unwrap_or_else(|| panic!("no Hz row: {text}"));
    let hz: Vec<f64> = hz_row
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(hz.len(), 3, "{hz_row}");
    // arm-1 holds two runs: its rate is over both; arm-2 and arm-3 call at 50 Hz.
    assert!(
        (hz[1] - 50.0).abs() < 0.05 && (hz[2] - 50.0).abs() < 0.05,
        "{hz_row}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&report(&dirs, &["--json"]).stdout).unwrap();
    let rounds = json["groups"][0]["outliers"]["rounds"].as_array().unwrap();
    assert!(!rounds.is_empty(), "{json}");
    // arm-2's uplink spikes, and arm-3's slowest infers past the merged
    // threshold: every round says whose it is.
    assert!(
        rounds
            .iter()
            .all(|r| matches!(r["robot"].as_str(), Some("arm-2" | "arm-3"))),
        "{rounds:?}"
    );
    assert!(
        rounds
            .iter()
            .filter(|r| r["robot"] == "arm-2")
            .all(|r| r["stages"][0]["stage"] == "uplink"),
        "{rounds:?}"
    );
    assert!(text.contains(" arm-2 2025-"), "{text}");
    // Without --per-robot the same directories are one pooled run, said so.
    let mut args = vec!["report"];
    args.extend(dirs.iter().map(|d| p(d)));
    let pooled = stagetrace(&args);
    assert!(stderr(&pooled).contains("pools"), "{}", stderr(&pooled));
}

#[test]
fn a_fleet_needs_two_distinctly_named_robots() {
    let root = tempfile::tempdir().unwrap();
    let dirs = fleet(root.path(), &[("arm-1", 81, 1.0)]);
    assert_usage_error(
        &["report", "--per-robot", p(&dirs[0])],
        "give two robots' directories or more",
    );
    let twin = root.path().join("other").join("arm-1");
    std::fs::create_dir_all(&twin).unwrap();
    gen::write(&twin.join("records-x.jsonl"), &support::seeded(82));
    assert_usage_error(
        &["report", "--per-robot", p(&dirs[0]), p(&twin)],
        "two robots are named \"arm-1\"",
    );
    // Without the flag, several directories are one pooled run, and the
    // command says how to see them as robots.
    let b = root.path().join("arm-2");
    std::fs::create_dir_all(&b).unwrap();
    gen::write(&b.join("records-y.jsonl"), &support::seeded(83));
    let out = stagetrace(&["report", p(&dirs[0]), p(&b), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("add --per-robot"), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json.get("robots").is_none());
}
