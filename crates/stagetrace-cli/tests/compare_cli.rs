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
        assert!(
            text.contains("Nothing changed beyond noise"),
            "seeds {a}/{b}: {text}"
        );
        let is_row = |l: &&str| matches!(l.split_whitespace().nth(1), Some("p50" | "p90" | "p99"));
        assert_eq!(text.lines().filter(is_row).count(), 0, "{text}");
        // Every row, with --all: each one noise, and no p-value beside it.
        let out = stagetrace(&["compare", p(&before), p(&after), "--all"]);
        let text = stdout(&out);
        let rows: Vec<&str> = text.lines().filter(is_row).collect();
        assert!(rows.len() >= 30, "{text}");
        for r in &rows {
            assert!(
                r.trim_end().ends_with(" ~"),
                "seeds {a}/{b}: not noise: {r}\n{text}"
            );
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
    // The answer first: infer, with its figures.
    assert!(text.contains("What changed: infer slower by"), "{text}");
    let capture_p50 = |l: &&str| l.split_whitespace().take(2).eq(["capture", "p50"]);
    assert!(!text.lines().any(|l| capture_p50(&l)), "{text}");
    let out = stagetrace(&["compare", p(&before), p(&after), "--all"]);
    let all = stdout(&out);
    let capture = all.lines().find(capture_p50).unwrap();
    assert!(capture.trim_end().ends_with(" ~"), "{capture}");

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
        stdout(&out).contains(
            "outputs: the policy's outputs were identical for all 3020 calls (same kind and seq)"
        ),
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

/// Issue 40's case through the command: a base run against one with 15 ms
/// more on the uplink. On estimated clocks the split reads +7.5 ms each
/// way: compare says, once, that net moved and which direction cannot be
/// told, with the bound, and no row claims a downlink move. On trusted
/// clocks the uplink is named and the downlink unchanged.
#[test]
fn a_one_way_change_is_judged_by_the_clock_split() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, seed: u64, trusted: bool, up: f64| {
        let f = dir.path().join(format!("{name}.jsonl"));
        gen::write(
            &f,
            &Scenario {
                seed,
                calls: 300,
                hz: 30.0,
                warmup: 10,
                infer_ms: (12.0, 0.2),
                split_err_ms: 1.35,
                trusted_clocks: trusted,
                link_delay_ms: (up, 0.0),
                ..Scenario::default()
            },
        );
        f
    };
    let (base, up15) = (run("base", 31, false, 0.0), run("up15", 32, false, 15.0));
    let out = stagetrace(&["compare", p(&base), p(&up15)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        text.matches("which direction cannot be told").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("What changed: net (uplink + downlink, exact) slower by 15."),
        "{text}"
    );
    assert!(
        text.contains("each within the clock split's ± 10.20 ms"),
        "{text}"
    );
    for l in text
        .lines()
        .filter(|l| l.trim_start().starts_with("downlink"))
    {
        assert!(l.contains("direction unknown") && !l.contains('%'), "{l}");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&stagetrace(&["compare", p(&base), p(&up15), "--json"]).stdout)
            .unwrap();
    for r in json["groups"][0]["rows"].as_array().unwrap() {
        if r["stage"] == "downlink" || r["stage"] == "uplink" {
            assert_eq!(r["significant"], false, "{r}");
            assert_eq!(r["direction_unknown"], true, "{r}");
        }
    }
    // With a drift bound the baseline's offset is carried to the second
    // run: the generated runs are 10 s long and start at the same time
    // (their clocks drift 0), so at 100 ppm the bound is 1 ms and the
    // 15 ms move is named the uplink's, the downlink unchanged.
    let out = stagetrace(&["compare", p(&base), p(&up15), "--drift-ppm", "100"]);
    let text = stdout(&out);
    assert!(
        text.contains("it is the uplink: uplink +15.")
            && text.contains("the downlink unchanged within it"),
        "{text}"
    );
    assert!(!text.contains("which direction cannot be told"), "{text}");
    let json: serde_json::Value = serde_json::from_slice(
        &stagetrace(&[
            "compare",
            p(&base),
            p(&up15),
            "--drift-ppm",
            "100",
            "--json",
        ])
        .stdout,
    )
    .unwrap();
    let carried = &json["groups"][0]["carried"];
    let up = carried["uplink_ms"].as_f64().unwrap();
    let down = carried["downlink_ms"].as_f64().unwrap();
    // The truth: +15 ms up, 0 down; the medians of two runs of 290 calls
    // with 0.1 ms of spread each differ from it by under 0.05 ms.
    assert!((up - 15.0).abs() <= 0.05, "{carried}");
    assert!(down.abs() <= 0.05, "{carried}");
    // A bound wider than the move leaves the direction untold, and says so.
    let text = stdout(&stagetrace(&[
        "compare",
        p(&base),
        p(&up15),
        "--drift-ppm",
        "2000",
    ]));
    assert!(
        text.contains(
            "which direction cannot be told even with the baseline's clock offset carried"
        ),
        "{text}"
    );
    support::assert_usage_error(
        &["compare", p(&base), p(&up15), "--drift-ppm", "-3"],
        "is not a drift bound",
    );
    let (tbase, tup15) = (run("tbase", 33, true, 0.0), run("tup15", 34, true, 15.0));
    let text = stdout(&stagetrace(&["compare", p(&tbase), p(&tup15)]));
    assert!(
        text.contains("What changed: uplink slower by 15."),
        "{text}"
    );
    assert!(text.contains("downlink unchanged"), "{text}");
    assert!(!text.contains("direction unknown"), "{text}");
    // `--stage transport` is the records' roundtrip.
    let text = stdout(&stagetrace(&[
        "compare",
        p(&tbase),
        p(&tup15),
        "--stage",
        "transport",
        "--all",
    ]));
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| matches!(l.split_whitespace().nth(1), Some("p50" | "p90" | "p99")))
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(
        rows.iter().all(|r| r.trim_start().starts_with("roundtrip")),
        "{text}"
    );
    support::assert_usage_error(
        &["compare", p(&tbase), p(&tup15), "--stage", "transprot"],
        "--stage transprot: no such stage",
    );
}
