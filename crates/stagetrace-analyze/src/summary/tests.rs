#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::sketch::ns_of;
use super::*;
use crate::analysis::{self, AnalyzeOptions};
use crate::load::Dataset;
use crate::load::LoadOptions;
use crate::stats::{self, SplitMix64};
use stagetrace_schema::Figure;

/// Heavy-tailed calls: infer log-normal around `median` ms, one call in 50
/// with a Pareto tail (α = 1.5) on top; `fail_every`-th calls failed with
/// one of `reasons` reasons, the first 5 warm-up; every 7th call with a
/// deadline, missed when e2e > 30 ms.
fn lines(seed: u64, calls: usize, median: f64, reasons: usize, kinds: &[&str]) -> String {
    let mut rng = SplitMix64::new(seed);
    let mut out = String::new();
    for i in 0..calls {
        let mut infer = median * (0.4 * rng.normal()).exp();
        if rng.below(50) == 0 {
            infer += 5.0 / (1.0 - rng.next_f64()).powf(1.0 / 1.5);
        }
        let capture = 0.5 + rng.next_f64();
        let e2e = infer + capture + 0.2;
        let kind = kinds[i % kinds.len()];
        let _ = write!(
            out,
            "{{\"seq\":{i},\"ts_unix_ms\":{},\"kind\":\"{kind}\",\"capture_ms\":{capture:.3},\"infer_ms\":{infer:.3},\"e2e_ms\":{e2e:.3}",
            1_700_000_000_000u64 + seed * 10_000_000 + 20 * i as u64
        );
        if i < 5 {
            out.push_str(",\"warmup\":true");
        } else if reasons > 0 && i % 13 == 0 {
            let _ = write!(
                out,
                ",\"failed\":true,\"error\":\"reason-{:02}\"",
                (i / 13) % reasons
            );
        }
        if i % 7 == 0 {
            let _ = write!(out, ",\"late_ms\":0.0,\"deadline_miss\":{}", e2e > 30.0);
        }
        out.push_str("}\n");
    }
    out
}

fn dataset(parts: &[(&str, &str)]) -> Dataset {
    let sources = parts
        .iter()
        .map(|(name, text)| Ok((PathBuf::from(name), text.as_bytes())));
    Dataset::load_sources(sources, LoadOptions::default()).unwrap()
}

fn summary(name: &str, text: &str) -> Summary {
    Summary::of(&dataset(&[(name, text)]))
}

#[test]
fn sketch_quantiles_are_within_the_stated_precision_of_the_exact_ones() {
    let text = lines(1, 50_000, 12.0, 0, &["infer"]);
    let ds = dataset(&[("robot=arm-1/date=2026-12-03/part-0.parquet", &text)]);
    let report = Summary::of(&ds).report();
    let exact = analysis::analyze(&ds, None, &AnalyzeOptions::default()).report;
    let groups = analysis::group_data(&ds);
    for stage in ["capture", "infer", "e2e"] {
        let f = Figure::from_name(stage).unwrap();
        let sorted = groups[0].sorted(f);
        let got = report.groups[0]
            .stages
            .iter()
            .find(|s| s.stage == stage)
            .unwrap();
        assert_eq!(got.n, sorted.len() as u64);
        for (q, v) in [
            (0.5, got.p50),
            (0.9, got.p90),
            (0.99, got.p99),
            (1.0, got.max),
        ] {
            // The same nearest rank on the same values, in ns.
            let truth = ns_of(stats::quantile(sorted, q) as f32).unwrap() as f64;
            let sketch = (v * 1e6).round();
            assert!(sketch >= truth, "{stage} p{q}: {sketch} below {truth}");
            assert!(
                sketch - truth <= truth * RELATIVE_ERROR,
                "{stage} p{q}: {sketch} vs exact {truth}: {} > 2^-10",
                (sketch - truth) / truth
            );
        }
        let max = exact.groups[0].stages[stage].max;
        assert!(
            (got.max - max).abs() <= max * 1e-7,
            "{stage} max {} vs {max}",
            got.max
        );
        let p99 = exact.groups[0].stages[stage].p99;
        assert!((got.p99 - p99).abs() <= p99 * RELATIVE_ERROR + 1e-6);
    }
}

#[test]
fn warm_up_and_failed_calls_are_kept_out_as_the_analysis_keeps_them() {
    let text = lines(2, 2_000, 10.0, 3, &["infer", "reset"]);
    let ds = dataset(&[("runs/arm-2/records-a.jsonl", &text)]);
    let s = Summary::of(&ds);
    let r = s.report();
    let a = analysis::analyze(&ds, None, &AnalyzeOptions::default()).report;
    assert_eq!((r.calls, r.warmup), (2_000, 5));
    assert_eq!(
        r.failed,
        a.inputs.errors.iter().map(|e| e.count).sum::<u64>()
    );
    assert_eq!(r.robots.keys().collect::<Vec<_>>(), ["arm-2"]);
    assert_eq!(r.groups.len(), 3, "two kinds and the pooled `*`");
    for g in &r.groups {
        let exact = a.groups.iter().find(|x| x.kind == g.kind).unwrap();
        assert_eq!(g.steady, exact.stages["e2e"].n, "{}", g.kind);
        assert_eq!(
            g.stages.iter().find(|s| s.stage == "e2e").unwrap().n,
            g.steady
        );
    }
    assert_eq!(r.slowest.len(), TOP_K);
    assert!(r.slowest.windows(2).all(|w| w[0].e2e_ms >= w[1].e2e_ms));
    let max = a.groups.last().unwrap().stages["e2e"].max;
    assert!((r.slowest[0].e2e_ms - max).abs() < 1e-5);
    assert!(r.slowest[0].stages.contains_key("infer"));
}

/// Six partitions of three robots, with overlapping and distinct failure
/// reasons (`reasons(p)` in partition `p`).
fn partitions(reasons: impl Fn(u64) -> usize) -> Vec<(String, String)> {
    (0..6u64)
        .map(|p| {
            let name = format!(
                "t/robot=arm-{}/date=2026-12-0{}/part-0.parquet",
                p % 3,
                p / 3 + 1
            );
            let reasons = reasons(p);
            (
                name,
                lines(p + 10, 3_000, 8.0 + p as f64, reasons, &["infer", "reset"]),
            )
        })
        .collect()
}

#[test]
fn merging_in_any_order_or_grouping_gives_the_bytes_of_the_union() {
    // Up to 30 reasons: the union's dataset keeps each by name too (the
    // loader pools reasons past its own 32, in order of appearance).
    let parts = partitions(|p| 5 + 5 * p as usize);
    let each: Vec<Summary> = parts.iter().map(|(n, t)| summary(n, t)).collect();
    let union = Summary::of(&dataset(
        &parts
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect::<Vec<_>>(),
    ));
    let want = text(&union);
    let forward = Summary::merge_all(&each).unwrap();
    assert_eq!(text(&forward), want);
    let backward = Summary::merge_all(each.iter().rev()).unwrap();
    assert_eq!(text(&backward), want);
    // A tree: pairs, then pairs of pairs, as a cluster's reduce does.
    let mut level: Vec<Summary> = each.iter().rev().cloned().collect();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|c| Summary::merge_all(c).unwrap())
            .collect();
    }
    assert_eq!(text(&level[0]), want);
    // Through bytes, as workers ship them.
    let shipped: Vec<Summary> = each
        .iter()
        .map(|s| Summary::from_bytes(&s.to_bytes()).unwrap())
        .collect();
    let mut rotated = shipped.clone();
    rotated.rotate_left(2);
    assert_eq!(text(&Summary::merge_all(&rotated).unwrap()), want);
    // The empty summary is the identity.
    let mut with_empty = Summary::new();
    with_empty.merge(&forward).unwrap();
    with_empty.merge(&Summary::new()).unwrap();
    assert_eq!(text(&with_empty), want);
    let r = forward.report();
    assert_eq!(r.robots.len(), 3);
    assert_eq!(r.calls, 18_000);
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        serde_json::to_string(&union.report()).unwrap()
    );
}

fn text(s: &Summary) -> String {
    String::from_utf8(s.to_bytes()).unwrap()
}

#[test]
fn reasons_past_the_bound_pool_the_same_whatever_the_order() {
    let parts = partitions(|p| 10 + 6 * p as usize);
    let each: Vec<Summary> = parts.iter().map(|(n, t)| summary(n, t)).collect();
    let want = text(&Summary::merge_all(&each).unwrap());
    let mut shuffled = each.clone();
    shuffled.swap(0, 5);
    shuffled.swap(1, 3);
    let (a, b) = shuffled.split_at(4);
    let mut left = Summary::merge_all(b).unwrap();
    left.merge(&Summary::merge_all(a).unwrap()).unwrap();
    assert_eq!(text(&left), want);
    let r = left.report();
    assert_eq!(r.errors.iter().map(|e| e.count).sum::<u64>(), r.failed);
    assert!(r.errors.iter().any(|e| e.error == "other"));
    assert!(r.errors.len() <= MAX_REASONS + 1);
}

#[test]
fn bytes_round_trip() {
    let s = summary(
        "runs/arm-1/records-a.jsonl",
        &lines(3, 1_000, 9.0, 2, &["infer"]),
    );
    let b = s.to_bytes();
    let back = Summary::from_bytes(&b).unwrap();
    assert_eq!(back.to_bytes(), b);
    assert_eq!(back.calls(), 1_000);
}

#[test]
fn a_bad_or_foreign_blob_is_an_error_never_a_panic() {
    let good = summary(
        "runs/arm-1/records-a.jsonl",
        &lines(4, 500, 9.0, 2, &["infer"]),
    )
    .to_bytes();
    let text = String::from_utf8(good.clone()).unwrap();
    let err = |b: &[u8]| Summary::from_bytes(b).unwrap_err().reason;
    assert!(err(b"").contains("not a stagetrace summary"));
    assert!(err(b"\x80\x04garbage").contains("not a stagetrace summary"));
    assert!(err(b"{}").contains("no \"format\" tag"));
    assert!(err(b"[1,2]").contains("not a stagetrace summary"));
    let foreign = text.replace(SUMMARY_FORMAT, "stagetrace-summary/9");
    assert!(err(foreign.as_bytes()).contains("this build reads"));
    assert!(err(&good[..good.len() / 2]).contains("not a stagetrace summary"));
    let extra = text.replacen("\"calls\"", "\"bogus\":1,\"calls\"", 1);
    assert!(err(extra.as_bytes()).contains("damaged"));
    // Buckets out of order, a count past the bound, a max its histogram
    // disagrees with.
    let swapped = text.replacen("\"buckets\":[[", "\"buckets\":[[999999999999,1],[", 1);
    assert!(err(swapped.as_bytes()).contains("damaged"));
    let huge = text.replacen("\"calls\":500", "\"calls\":18446744073709551615", 1);
    assert!(err(huge.as_bytes()).contains("damaged"));
    let max = text.replacen("\"max_ns\":", "\"max_ns\":1", 1);
    assert!(err(max.as_bytes()).contains("damaged"));
    // Every single-byte change: an error or a summary, never a panic.
    let mut rng = SplitMix64::new(7);
    for _ in 0..3_000 {
        let mut b = good.clone();
        let at = rng.below(b.len());
        b[at] = b"0123456789,:[]{}\"-e."[rng.below(20)];
        if let Ok(s) = Summary::from_bytes(&b) {
            let _ = s.report().text();
        }
    }
}

#[test]
fn a_robot_is_named_by_its_partition_or_its_directory() {
    let p = |s: &str| robot_of(Path::new(s));
    assert_eq!(p("t/robot=arm-3/date=2026-12-03/part-1.parquet"), "arm-3");
    assert_eq!(p("runs/arm-4/records-x.jsonl"), "arm-4");
    assert!(!p("records-x.jsonl").is_empty());
}

#[test]
fn the_text_names_the_method() {
    let s = summary(
        "runs/arm-1/records-a.jsonl",
        &lines(5, 500, 9.0, 2, &["infer"]),
    );
    let t = s.report().text();
    assert!(
        t.contains("hdr-3-sigfig") && t.contains("infer") && t.contains("slowest"),
        "{t}"
    );
}

#[test]
fn damaged_files_are_named_in_any_order_and_counted_past_the_bound() {
    let parts: Vec<Summary> = (0..40)
        .map(|i| {
            Summary::damaged(
                &format!("tree/part-{i:02}.parquet"),
                "damaged Parquet data (x)",
            )
        })
        .collect();
    let forward = Summary::merge_all(&parts).unwrap();
    let backward = Summary::merge_all(parts.iter().rev()).unwrap();
    assert_eq!(forward.to_bytes(), backward.to_bytes());
    let (named, others) = forward.damaged_files();
    assert_eq!(named.len(), 32);
    assert_eq!(others, 8);
    assert_eq!(
        named.keys().next().map(String::as_str),
        Some("tree/part-00.parquet")
    );
    let report = forward.report();
    assert_eq!(report.damaged_files.len(), 32);
    assert_eq!(report.damaged_others, 8);
    assert!(
        report.text().contains("left out, damaged (40 file(s)"),
        "{}",
        report.text()
    );
    let back = Summary::from_bytes(&forward.to_bytes()).unwrap();
    assert_eq!(back.to_bytes(), forward.to_bytes());
}
