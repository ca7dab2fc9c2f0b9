//! `stagetrace demo` mitigation knobs, end to end: 4 clients, model cost
//! a + b·batch; `--batch 4` runs the calls in batches with unchanged
//! outputs (`compare` passes), a prompt-only cache key changes them
//! (`compare` fails). The throughput gain is measured, not asserted here
//! (a speed goal is a benchmark's, not a test's): docs/mitigations.md.

#![allow(clippy::unwrap_used)]

mod support;

use support::{assert_usage_error, p, stagetrace, stderr, stdout};

fn demo(out: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "demo",
        "--clients",
        "4",
        "--calls",
        "15",
        "--model-ms",
        "20",
        "--model-per-item-ms",
        "2",
        "--json",
        "--out",
        p(out),
    ];
    args.extend_from_slice(extra);
    let o = stagetrace(&args);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

#[test]
fn batch_knob_batches_calls_and_compare_checks_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let (before, batched, bad) = (
        tmp.path().join("before"),
        tmp.path().join("batched"),
        tmp.path().join("bad-cache"),
    );
    let b = demo(&before, &[]);
    // A window far longer than any step of the run: the batches are decided
    // by the four clients, not by how busy the machine is.
    let a = demo(&batched, &["--batch", "4", "--batch-wait-ms", "2000"]);
    let (tb, ta) = (
        b["throughput_per_s"].as_f64().unwrap(),
        a["throughput_per_s"].as_f64().unwrap(),
    );
    assert_eq!(a["calls_answered"], 60);
    eprintln!("batched {ta:.1}/s vs {tb:.1}/s");
    // The fleet starts together and every answer of a batch goes out at
    // once: 15 batches, each holding one call of every client.
    assert_eq!(a["batch"]["batches"], 15, "{a}");
    assert_eq!(a["batch"]["ran_full"], 15, "{a}");
    assert_eq!(a["batch"]["ran_at_window"], 0, "{a}");

    let ok = stagetrace(&["compare", p(&before), p(&batched)]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(
        stdout(&ok).contains("the policy's outputs were identical for all 60 calls"),
        "{}",
        stdout(&ok)
    );

    let c = demo(&bad, &["--cache", "16", "--cache-prompt-only"]);
    assert!(c["cache"]["hits"].as_u64().unwrap() > 0, "{c}");
    let fail = stagetrace(&["compare", p(&before), p(&bad)]);
    assert_eq!(fail.status.code(), Some(1), "{}", stdout(&fail));
    assert!(
        stdout(&fail).contains("OUTPUTS CHANGED"),
        "{}",
        stdout(&fail)
    );
}

/// A knob of the other scenario is refused by name, never silently ignored.
#[test]
fn knobs_of_the_other_scenario_are_refused() {
    assert_usage_error(
        &[
            "demo",
            "--clients",
            "4",
            "--hz",
            "50",
            "--otlp",
            "--calls",
            "5",
        ],
        "--hz, --otlp: not used by the mitigation demo",
    );
    assert_usage_error(
        &[
            "demo",
            "--batch",
            "4",
            "--uplink-delay-ms",
            "20",
            "--calls",
            "5",
        ],
        "--uplink-delay-ms: not used by the mitigation demo",
    );
    assert_usage_error(
        &["demo", "--scenes", "3", "--calls", "5"],
        "--scenes: only used by the mitigation demo",
    );
    // Defaults of the other scenario are not "typed": the plain forms run.
    let dir = tempfile::tempdir().unwrap();
    let out = stagetrace(&[
        "demo",
        "--clients",
        "2",
        "--calls",
        "3",
        "--model-ms",
        "1",
        "--out",
        p(dir.path()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
