//! Generated runs with a known ground truth: the analysis must name the
//! stage and the shape that was injected, and nothing else.

#![allow(clippy::unwrap_used)]

#[path = "support/gen.rs"]
mod gen;

use std::path::Path;

use gen::Scenario;
use stagetrace_analyze::analysis::{analyze, AnalyzeOptions, Report};
use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_analyze::render;

fn codes(r: &Report) -> Vec<(String, Option<String>)> {
    r.verdicts
        .iter()
        .map(|v| (v.code.to_string(), v.stage.map(str::to_string)))
        .collect()
}

fn run(s: &Scenario, base: Option<&Scenario>) -> Report {
    let ds = gen::dataset(s);
    let b = base.map(gen::dataset);
    let a = analyze(&ds, b.as_ref(), &AnalyzeOptions::default());
    eprintln!("{}", render::text(&a.report));
    a.report
}

#[test]
fn tail_only_in_transport() {
    let base = Scenario {
        seed: 11,
        ..Scenario::default()
    };
    let s = Scenario {
        seed: 12,
        transport_tail: Some((0.04, 15.0)),
        ..Scenario::default()
    };
    let r = run(&s, Some(&base));
    let c = codes(&r);
    let tail: Vec<_> = r
        .verdicts
        .iter()
        .filter(|v| v.code == "tail_only")
        .collect();
    assert!(!tail.is_empty(), "{c:?}");
    assert!(tail.iter().all(|v| v.group == Some("transport")), "{c:?}");
    assert!(tail.iter().any(|v| v.stage == Some("uplink")), "{c:?}");
    assert!(
        !c.iter()
            .any(|(code, _)| code == "median_shift" || code == "periodic"),
        "{c:?}"
    );
    let g = &r.groups[0];
    assert_eq!(g.baseline["uplink"].shape, "tail_only");
    assert_eq!(g.baseline["infer"].shape, "steady");
    assert!(g.outliers.count > 50, "outlier rounds {}", g.outliers.count);
    assert!(g
        .outliers
        .rounds
        .iter()
        .any(|o| o.stages.iter().any(|s| s.stage == "uplink")));
}

#[test]
fn median_shift_in_infer() {
    let base = Scenario {
        seed: 21,
        ..Scenario::default()
    };
    let s = Scenario {
        seed: 22,
        infer_factor: 1.2,
        ..Scenario::default()
    };
    let r = run(&s, Some(&base));
    let c = codes(&r);
    let shift: Vec<_> = r
        .verdicts
        .iter()
        .filter(|v| v.code == "median_shift")
        .collect();
    assert_eq!(shift.len(), 1, "{c:?}");
    assert_eq!(shift[0].stage, Some("infer"));
    assert_eq!(shift[0].group, Some("server"));
    assert!(!c.iter().any(|(code, _)| code == "tail_only"), "{c:?}");
    let b = &r.groups[0].baseline["infer"];
    assert!((b.p50.ratio - 1.2).abs() < 0.03, "{:?}", b.p50);
    assert!(
        b.p50.lo < 1.2 + 0.02 && b.p50.hi > 1.2 - 0.02,
        "{:?}",
        b.p50
    );
}

#[test]
fn spikes_every_two_seconds_in_dispatch() {
    let s = Scenario {
        seed: 31,
        dispatch_spikes: Some((2.0, 12.0)),
        ..Scenario::default()
    };
    for base in [
        None,
        Some(Scenario {
            seed: 32,
            ..Scenario::default()
        }),
    ] {
        let r = run(&s, base.as_ref());
        let c = codes(&r);
        let p: Vec<_> = r.verdicts.iter().filter(|v| v.code == "periodic").collect();
        assert_eq!(p.len(), 1, "{c:?}");
        assert_eq!(p[0].stage, Some("dispatch"));
        let period = p[0].evidence["period_s"].as_f64().unwrap();
        assert!((period - 2.0).abs() < 0.05, "period {period}");
        assert!(!c.iter().any(|(code, _)| code == "median_shift"), "{c:?}");
    }
}

#[test]
fn random_spikes_are_not_periodic() {
    let s = Scenario {
        seed: 41,
        transport_tail: Some((0.02, 15.0)),
        ..Scenario::default()
    };
    let r = run(&s, None);
    let per = &r.groups[0].periodicity;
    assert!(
        per.iter().any(|p| p.stage == "uplink" && p.spikes > 20),
        "{per:?}"
    );
    assert!(per.iter().all(|p| !p.significant), "{per:?}");
}

#[test]
fn e2e_jitter_no_stage_explains() {
    let base = Scenario {
        seed: 51,
        ..Scenario::default()
    };
    let s = Scenario {
        seed: 52,
        gap_jitter_ms: 4.0,
        ..Scenario::default()
    };
    for b in [None, Some(&base)] {
        let r = run(&s, b);
        let c = codes(&r);
        let v: Vec<_> = r
            .verdicts
            .iter()
            .filter(|v| v.code == "unexplained_gap")
            .collect();
        assert_eq!(v.len(), 1, "{c:?}");
        assert_eq!(v[0].stage, Some("gap"));
        let gp = r.groups[0].gap.as_ref().unwrap();
        assert!(gp.gap_share > 0.7, "{gp:?}");
        assert!(gp.observer_share.abs() < 0.05, "{gp:?}");
        assert!(
            !c.iter().any(
                |(code, st)| matches!(code.as_str(), "median_shift" | "tail_only")
                    && st.as_deref() != Some("gap")
            ),
            "{c:?}"
        );
    }
}

#[test]
fn steady_run_against_its_twin_is_steady() {
    let base = Scenario {
        seed: 61,
        ..Scenario::default()
    };
    let s = Scenario {
        seed: 62,
        ..Scenario::default()
    };
    let r = run(&s, Some(&base));
    assert_eq!(codes(&r), vec![("steady".to_string(), None)]);
}

#[test]
fn warmup_and_failures_are_kept_out_and_counted() {
    let s = Scenario {
        seed: 71,
        warmup: 50,
        fail_every: Some(100),
        deadline: true,
        ..Scenario::default()
    };
    let r = run(&s, None);
    let g = &r.groups[0];
    assert_eq!(g.warmup_excluded, 50);
    assert_eq!(g.calls, 3050);
    assert_eq!(g.failed, 30);
    assert_eq!(g.steady, 3050 - 50 - 30);
    assert_eq!(g.stages["infer"].n, g.steady);
    // warm-up infer is 3× slower: kept out, the max stays near steady state
    assert!(g.stages["infer"].max < 45.0, "{:?}", g.stages["infer"]);
    assert_eq!(r.inputs.errors[0].error, "timeout");
    let d = g.rate.deadline.as_ref().unwrap();
    assert_eq!(d.calls, g.steady);
    assert!(d.misses > 0);
    let hz = g.rate.effective_hz.unwrap();
    assert!((hz - 50.0).abs() < 1.0, "{hz}");
}

#[test]
fn only_warmup_calls_say_so() {
    let s = Scenario {
        seed: 81,
        calls: 0,
        warmup: 30,
        ..Scenario::default()
    };
    let r = run(&s, None);
    assert_eq!(r.verdicts.len(), 1);
    assert_eq!(r.verdicts[0].code, "no_steady_calls");
    assert!(r.groups[0].stages.is_empty());
    // Serialises (NaN times become null) and renders.
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["groups"][0]["start_unix_ms"].is_null());
}

#[test]
fn kinds_are_kept_apart() {
    let text = |seed: u64, factor: f64| {
        gen::lines(&Scenario {
            seed,
            kind: "infer",
            infer_factor: factor,
            ..Scenario::default()
        }) + &gen::lines(&Scenario {
            seed: seed + 1,
            kind: "reset",
            infer_factor: 0.1,
            calls: 500,
            ..Scenario::default()
        })
    };
    let load = |t: String| {
        Dataset::load_reader(t.as_bytes(), Path::new("mixed"), LoadOptions::default()).unwrap()
    };
    let base = load(text(91, 1.0));
    let run_ds = load(text(93, 1.25));
    let a = analyze(&run_ds, Some(&base), &AnalyzeOptions::default());
    let kinds: Vec<&str> = a.report.groups.iter().map(|g| g.kind.as_str()).collect();
    assert_eq!(kinds, ["infer", "reset", "*"]);
    let g = |k: &str| a.report.groups.iter().find(|g| g.kind == k).unwrap();
    assert_eq!(g("reset").steady, 500);
    assert_eq!(g("*").steady, 3500);
    assert!((g("reset").stages["infer"].p50 - 3.0).abs() < 0.2);
    let shifts: Vec<_> = a
        .report
        .verdicts
        .iter()
        .filter(|v| v.code == "median_shift")
        .map(|v| (v.kind.as_str(), v.stage))
        .collect();
    assert_eq!(shifts, [("infer", Some("infer"))]);
    // --fail-if without a kind reads the pooled group; with one, that kind.
    let gate: stagetrace_analyze::gate::Gate = "reset:infer.p50>10ms".parse().unwrap();
    assert!(gate.check(&a.report).unwrap().is_none());
    let gate: stagetrace_analyze::gate::Gate = "infer.n>=3500".parse().unwrap();
    assert!(gate.check(&a.report).unwrap().is_some());
}
