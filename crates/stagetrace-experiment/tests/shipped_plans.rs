//! The plans `docs/experiments.md` shows ship as files in `examples/plans/`,
//! the doc shows them verbatim, every one is valid, and every demo plan runs
//! (holds shortened) with records for each of its levels.

#![allow(clippy::unwrap_used)]

use stagetrace_experiment::netns::kernel_bottleneck_available;
use stagetrace_experiment::plan::Plan;
use stagetrace_experiment::plan::TargetKind;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

mod support;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `examples/plans/*.toml`, by name.
fn shipped() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("examples/plans"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// Each TOML block of the doc, with the file name the line before it names.
fn doc_blocks() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(repo().join("docs/experiments.md")).unwrap();
    let mut out = Vec::new();
    let mut rest = doc.as_str();
    while let Some(at) = rest.find("```toml\n") {
        let before = rest[..at].trim_end();
        let name = before
            .lines()
            .last()
            .and_then(|l| l.strip_prefix("`examples/plans/"))
            .and_then(|l| l.strip_suffix("`:"))
            .unwrap_or_else(|| panic!("a TOML block without its file line: …{before:.80}"));
        let body_start = at + "```toml\n".len();
        let end = rest[body_start..].find("```").unwrap() + body_start;
        out.push((name.to_owned(), rest[body_start..end].to_owned()));
        rest = &rest[end + 3..];
    }
    out
}

#[test]
fn the_doc_shows_every_shipped_plan_verbatim() {
    let blocks = doc_blocks();
    let files = shipped();
    let names: BTreeSet<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let shown: BTreeSet<String> = blocks.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(shown, names, "doc blocks vs examples/plans/");
    assert_eq!(blocks.len(), files.len(), "a plan shown twice");
    for (name, body) in &blocks {
        let file = std::fs::read_to_string(repo().join("examples/plans").join(name)).unwrap();
        assert_eq!(&file, body, "docs/experiments.md vs examples/plans/{name}");
    }
}

#[test]
fn every_shipped_plan_is_valid() {
    for path in shipped() {
        if let Err(e) = Plan::from_file(&path) {
            panic!("{}: {e}", path.display());
        }
    }
}

/// Runs `plan` with every phase held for `calls` calls: its report is
/// written, with a level for each of the plan's and records for every level.
/// Held by calls, not seconds, so a level whose path stalls for a while
/// (TCP backing off after the qdisc change drops packets) still ends with
/// records; the runner's own limit bounds the wait.
fn run_short(mut plan: Plan, calls: u64) {
    plan.target.warmup_s = plan.target.warmup_s.min(0.5);
    plan.baseline.hold_s = None;
    plan.baseline.calls = Some(calls);
    plan.factor.hold_s = None;
    plan.factor.calls = Some(calls);
    let support::Finished { json, dir, .. } = support::run_to_end(&plan);
    let levels = support::levels_with_records(dir.path());
    let want: BTreeSet<u64> = (1..=plan.factor.levels.len() as u64).collect();
    assert_eq!(levels, want, "records of every level");
    assert_eq!(
        json["levels"].as_array().map(Vec::len),
        Some(plan.factor.levels.len())
    );
}

#[test]
fn every_shipped_demo_plan_runs() {
    for path in shipped() {
        let plan = Plan::from_file(&path).unwrap();
        if plan.target.kind != TargetKind::Demo {
            continue; // the user's own client: validated above
        }
        if plan.factor.kernel && !kernel_bottleneck_available() {
            stagetrace_test_support::prereq::missing(
                "every_shipped_demo_plan_runs (kernel-uplink.toml)",
                "netns",
                "the kernel bottleneck needs root and iproute2 (ip, tc)",
            );
            continue;
        }
        eprintln!("== {}", path.display());
        // 256 KiB frames through a 10 Mbit/s qdisc take a fifth of a second
        // each: fewer calls per phase there.
        let calls = if plan.factor.kernel { 8 } else { 20 };
        // Verdicts on tuned plans are demo_ramps.rs's; here every shipped
        // plan must run end to end with records for each of its levels.
        run_short(plan.clone(), calls);
    }
}
