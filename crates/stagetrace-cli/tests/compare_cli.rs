//! `stagetrace compare`: `~` for noise, a real shift flagged with its size,
//! and a changed output fails loudly.

#![allow(clippy::unwrap_used)]

mod support;

use support::gen::{self, Scenario};
use support::{p, seeded, stagetrace, stderr, stdout};

#[test]
fn two_samples_of_one_distribution_are_noise() {
    let dir = tempfile::tempdir().unwrap();
    // Several seed pairs: the family-wise correction must hold every time.
    for (a, b) in [(201u64, 202u64), (203, 204), (205, 206)] {
        let before = dir.path().join(format!("before-{a}.jsonl"));
        let after = dir.path().join(format!("after-{b}.jsonl"));
        gen::write(&before, &seeded(a));
        gen::write(&after, &seeded(b));
        let out = stagetrace(&["compare", p(&before), p(&after)]);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| matches!(l.split_whitespace().nth(1), Some("p50" | "p90" | "p99")))
            .collect();
        assert!(rows.len() >= 30, "{text}");
        for r in &rows {
            assert!(r.contains(" ~ "), "seeds {a}/{b}: not noise: {r}\n{text}");
        }
    }
}

#[test]
fn a_real_twenty_percent_shift_is_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before.jsonl");
    let after = dir.path().join("after.jsonl");
    gen::write(&before, &seeded(301));
    gen::write(
        &after,
        &Scenario {
            seed: 302,
            infer_factor: 1.2,
            ..Scenario::default()
        },
    );
    let out = stagetrace(&["compare", p(&before), p(&after)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.split_whitespace().take(2).eq(["infer", "p50"]))
        .unwrap();
    assert!(!row.contains(" ~ "), "{row}");
    assert!(row.contains("+20.") || row.contains("+19."), "{row}");
    let capture = text
        .lines()
        .find(|l| l.split_whitespace().take(2).eq(["capture", "p50"]))
        .unwrap();
    assert!(capture.contains(" ~ "), "{capture}");

    let out = stagetrace(&["compare", p(&before), p(&after), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["schema"], "stagetrace-compare/1");
    let rows = json["groups"][0]["rows"].as_array().unwrap();
    let infer = rows
        .iter()
        .find(|r| r["stage"] == "infer" && r["stat"] == "p50")
        .unwrap();
    assert_eq!(infer["significant"], true);
    let d = infer["delta_pct"].as_f64().unwrap();
    assert!((d - 20.0).abs() < 3.0, "{d}");
    let ci = infer["ci_pct"].as_array().unwrap();
    assert!(
        ci[0].as_f64().unwrap() < 20.0 + 1.0 && ci[1].as_f64().unwrap() > 20.0 - 1.0,
        "{ci:?}"
    );
    assert_eq!(infer["test"], "mann_whitney");
}

#[test]
fn changed_outputs_fail_compare() {
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before.jsonl");
    let same = dir.path().join("same.jsonl");
    let changed = dir.path().join("changed.jsonl");
    gen::write(
        &before,
        &Scenario {
            seed: 401,
            digests: true,
            ..Scenario::default()
        },
    );
    gen::write(
        &same,
        &Scenario {
            seed: 402,
            digests: true,
            infer_factor: 0.8,
            ..Scenario::default()
        },
    );
    gen::write(
        &changed,
        &Scenario {
            seed: 403,
            digests: true,
            infer_factor: 0.8,
            flip_digests: vec![7, 1500],
            ..Scenario::default()
        },
    );
    let out = stagetrace(&["compare", p(&before), p(&same)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("outputs: identical for all 3020 calls"),
        "{}",
        stdout(&out)
    );

    let out = stagetrace(&["compare", p(&before), p(&changed)]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("OUTPUTS CHANGED: 2 of 3020"), "{text}");
    assert!(
        text.contains("seq 7:") && text.contains("seq 1500:"),
        "{text}"
    );
    assert!(stderr(&out).contains("FAILED"), "{}", stderr(&out));

    let out = stagetrace(&["compare", p(&before), p(&changed), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["outputs"]["mismatched"], 2);
    assert_eq!(json["outputs"]["compared"], 3020);
}
