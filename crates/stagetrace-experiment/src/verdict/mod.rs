//! The verdict: each level's figures against the baseline (bootstrap
//! intervals on the p50 and p99 ratios, a tail-exceedance test), a CUSUM
//! change-point over windowed p90 to time each move, then the first stage to
//! move, the stages it dragged along, what the resources did, and the next
//! step (`docs/architecture.md`, section 7).
//!
//! The figures compared come from the schema table (`figures.rs`).

mod action_queue;
mod compare;
mod direction;
mod first_mover;
mod host;
mod obs;
mod queue_figures;
mod resources;
mod result;
mod text;

use std::collections::BTreeMap;

use stagetrace_analyze::stats;
use stagetrace_schema::Figure;

use crate::figures;
use crate::plan::VerdictSpec;
use crate::sampler::ResourceSample;

pub(crate) use action_queue::attach as attach_action_queue;
pub use obs::PhaseSpan;
pub(crate) use obs::{column, Obs};
pub use queue_figures::{ActionQueueLevel, ActionQueuePhase, ActionQueueVerdict};
pub use resources::ResourceSummary;
pub use result::HostMover;
pub use result::{ComponentResult, ExperimentVerdict, LevelResult, Thresholds};

/// The full analysis: per-level results and the verdict.
pub(crate) fn analyze(
    phases: &[PhaseSpan],
    obs: &[Obs],
    samples: &[(usize, ResourceSample)],
    spec: &VerdictSpec,
) -> (
    Thresholds,
    Option<ResourceSummary>,
    Vec<LevelResult>,
    ExperimentVerdict,
) {
    let Some(base_idx) = phases.iter().position(|p| p.phase == "baseline") else {
        return (
            Thresholds {
                min_p50_ms: f64::NAN,
                min_p99_ms: f64::NAN,
            },
            None,
            Vec::new(),
            ExperimentVerdict::nothing("the run ended before the baseline"),
        );
    };
    let base = baseline_columns(obs, base_idx);
    let th = thresholds(&base, spec);
    let base_res = resources::resources(samples, base_idx, None);
    let levels: Vec<LevelResult> = phases
        .iter()
        .enumerate()
        .filter(|(_, p)| p.phase == "level")
        .map(|(pi, p)| LevelResult {
            level: p.level,
            label: p.label.clone(),
            components: compare_level(obs, base_idx, &base, pi, p.level, &th),
            resources: resources::resources(samples, pi, base_res.as_ref()).unwrap_or_default(),
            action_queue: None,
        })
        .collect();

    // Levels without a call did not run (the experiment was stopped after
    // the baseline): nothing can be said about the factor, least of all
    // that the pipeline absorbs it.
    if levels.iter().all(|l| l.components.is_empty()) {
        let mut v = ExperimentVerdict::nothing(
            "no level ran: the experiment stopped after the baseline, so nothing is known about the factor",
        );
        v.next_step = "run the plan to the end (each level needs its hold time)".into();
        return (th, base_res, levels, v);
    }
    let candidates = first_mover_candidates(&base);
    let verdict = first_mover::decide(&levels, phases, obs, &candidates, base_res.as_ref(), &th);
    (th, base_res, levels, verdict)
}

/// The baseline's values of every compared figure (stages and host
/// figures), by `Figure::index`; the others empty.
fn baseline_columns(obs: &[Obs], base_idx: usize) -> Vec<Vec<f32>> {
    let mut base: Vec<Vec<f32>> = vec![Vec::new(); Figure::ALL.len()];
    for f in figures::compared().chain(host::host_figures()) {
        base[f.index()] = column(obs, base_idx, f);
    }
    base
}

/// The smallest p50 and p99 moves that count: the plan's, or a share of
/// the baseline's e2e median with a floor.
fn thresholds(base: &[Vec<f32>], spec: &VerdictSpec) -> Thresholds {
    let e2e_p50 = stats::quantile(&base[Figure::E2e.index()], 0.5);
    let e2e_p50 = if e2e_p50.is_finite() { e2e_p50 } else { 0.0 };
    Thresholds {
        min_p50_ms: spec.min_p50_ms.unwrap_or((0.05 * e2e_p50).max(0.5)),
        min_p99_ms: spec.min_p99_ms.unwrap_or((0.10 * e2e_p50).max(2.0)),
    }
}

/// The figures that may be named first mover: never the whole call (that
/// is the question), nor a sum whose parts were measured — `net` competes
/// only where the clocks gave no uplink/downlink split.
fn first_mover_candidates(base: &[Vec<f32>]) -> Vec<Figure> {
    let measured = |f: &Figure| !base[f.index()].is_empty();
    figures::compared()
        .filter(|f| *f != Figure::E2e && !f.parts().iter().any(measured))
        .collect()
}

/// Phase `pi` (level `level`) against the baseline (phase `base_idx`, its
/// columns `base`), each figure the level has values of: the comparison,
/// and when it moved, when (CUSUM).
fn compare_level(
    obs: &[Obs],
    base_idx: usize,
    base: &[Vec<f32>],
    pi: usize,
    level: usize,
    th: &Thresholds,
) -> BTreeMap<&'static str, ComponentResult> {
    let mut components = BTreeMap::new();
    for (c, f) in figures::compared().chain(host::host_figures()).enumerate() {
        let lv = column(obs, pi, f);
        if lv.is_empty() {
            continue;
        }
        let seed = 0x5eed ^ ((level as u64) << 8) ^ c as u64;
        let r = compare::compare(&base[f.index()], &lv, th, seed);
        let change = if r.moved {
            compare::cusum_change(obs, base_idx, pi, f, th)
        } else {
            None
        };
        components.insert(
            f.name(),
            ComponentResult {
                change_unix_ms: change,
                ..r
            },
        );
    }
    components
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use stagetrace_schema::FIGURE_COUNT;

    use super::*;

    fn phase(phase: &str, level: usize, start: f64, end: f64) -> PhaseSpan {
        PhaseSpan {
            phase: phase.into(),
            level,
            label: format!("{phase} {level}"),
            start_unix_ms: start,
            settle_until_unix_ms: start,
            end_unix_ms: end,
            calls: 0,
            excluded_calls: 0,
        }
    }

    /// A call with `f(figure)` ms for every compared figure.
    fn call(ts: f64, phase: usize, f: impl Fn(Figure) -> f32) -> Obs {
        let mut vals = [f32::NAN; FIGURE_COUNT];
        for fig in figures::compared() {
            vals[fig.index()] = f(fig);
        }
        Obs {
            ts_ms: ts,
            phase,
            settling: false,
            failed: false,
            seq: 0,
            dry_ticks: 0,
            vals,
        }
    }

    /// The synthetic calls' baseline, ms.
    fn base_ms(f: Figure) -> f32 {
        match f {
            Figure::Capture => 2.0,
            Figure::Uplink => 1.0,
            Figure::Queue => 0.05,
            Figure::Infer => 12.0,
            Figure::Downlink => 1.0,
            Figure::Dispatch => 1.0,
            Figure::Gap => 0.1,
            Figure::Net => 2.0,
            Figure::E2e => 17.0,
            _ => f32::NAN,
        }
    }

    /// Synthetic ramp: uplink +8 ms at level 1, queue only at level 2.
    #[test]
    fn names_the_stage_that_moved_at_the_lowest_level() {
        let phases = vec![
            phase("baseline", 0, 0.0, 3000.0),
            phase("level", 1, 3000.0, 6000.0),
            phase("level", 2, 6000.0, 9000.0),
        ];
        let mut obs = Vec::new();
        let mut x = 1u32;
        for i in 0..270 {
            let ts = i as f64 * 1000.0 / 30.0 + 0.5;
            let p = (i / 90) as usize;
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (x >> 16) as f32 / 65536.0 * 0.3;
            obs.push(call(ts, p, |f| {
                let base = base_ms(f) + noise;
                match (f, p) {
                    (Figure::Uplink, 1..) => base + 8.0,
                    (Figure::Queue, 2) => base + 10.0,
                    (Figure::Net, 1..) => base + 8.0,
                    (Figure::E2e, 1..) => base + 8.0,
                    _ => base,
                }
            }));
        }
        let (_, _, levels, v) = analyze(&phases, &obs, &[], &VerdictSpec::default());
        assert_eq!(levels.len(), 2);
        assert_eq!(v.first_stage, Some("uplink"), "{v:?}");
        assert_eq!(v.first_level, Some(1));
        assert_eq!(v.shape, Some("median"));
        assert_eq!(v.dragged, vec![("queue", 2)]);
        assert!(v.flat.contains(&"infer") && v.flat.contains(&"gap"));
        let change = v.first_change_unix_ms.unwrap();
        assert!((3000.0..4500.0).contains(&change), "{change}");
        // The transport's remedy (the schema table's, as `report` gives it).
        assert!(
            v.next_step
                .contains("bandwidth, frame size and retransmits"),
            "{}",
            v.next_step
        );
    }

    #[test]
    fn periodic_gap_spikes_with_flat_stages_name_the_gap() {
        let phases = vec![
            phase("baseline", 0, 0.0, 4000.0),
            phase("level", 1, 4000.0, 8000.0),
        ];
        let mut obs = Vec::new();
        for i in 0..240 {
            let ts = i as f64 * 1000.0 / 30.0 + 0.5;
            let p = (i / 120) as usize;
            let spike = p == 1 && i % 15 == 0;
            obs.push(call(ts, p, |f| {
                let j = (i % 7) as f32 * 0.03;
                match f {
                    Figure::Gap if spike => 40.0 + j,
                    Figure::E2e if spike => 57.0 + j,
                    _ => base_ms(f) + j,
                }
            }));
        }
        let (_, _, _, v) = analyze(&phases, &obs, &[], &VerdictSpec::default());
        assert_eq!(v.first_stage, Some("gap"), "{v:?}");
        assert_eq!(v.shape, Some("tail"));
        let period = v.spike_period_s.unwrap();
        assert!((period - 0.5).abs() < 0.05, "{period}");
        assert!(v.summary.starts_with("all stages flat"));
    }

    /// In estimate mode uplink and downlink both rise by
    /// 3 ms at level 1 with a split error of 3.5 ms a side: the network
    /// moved, which direction is undetermined; no one-way stage is named.
    #[test]
    fn one_way_stages_within_the_split_error_name_no_direction() {
        let phases = vec![
            phase("baseline", 0, 0.0, 3000.0),
            phase("level", 1, 3000.0, 6000.0),
        ];
        let mut obs = Vec::new();
        let mut x = 7u32;
        for i in 0..180 {
            let ts = i as f64 * 1000.0 / 30.0 + 0.5;
            let p = (i / 90) as usize;
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (x >> 16) as f32 / 65536.0 * 0.3;
            let mut o = call(ts, p, |f| {
                let base = base_ms(f) + noise;
                match (f, p) {
                    (Figure::Uplink | Figure::Downlink, 1) => base + 3.0,
                    (Figure::Net | Figure::E2e, 1) => base + 6.0,
                    _ => base,
                }
            });
            o.vals[Figure::SplitErr.index()] = 3.5;
            obs.push(o);
        }
        let (_, _, _, v) = analyze(&phases, &obs, &[], &VerdictSpec::default());
        assert_eq!(v.first_stage, Some("net"), "{v:?}");
        assert_eq!(v.dragged, vec![]);
        assert!(
            v.summary
                .starts_with("the network moved first, at level 1 (level 1): net p50 "),
            "{}",
            v.summary
        );
        assert!(
            v.summary.contains("which direction is undetermined: uplink +3.01 ms, downlink +3.01 ms lie within the ±7.00 ms the clock split allows"),
            "{}",
            v.summary
        );
        assert!(!v.summary.contains("Dragged along"), "{}", v.summary);
        // Trusted clocks (no split error): the same rises name the one-way stages.
        for o in obs.iter_mut() {
            o.vals[Figure::SplitErr.index()] = f32::NAN;
        }
        let (_, _, _, v) = analyze(&phases, &obs, &[], &VerdictSpec::default());
        assert_eq!(v.first_stage, Some("downlink"), "{v:?}");
        assert_eq!(v.dragged, vec![("uplink", 1)]);
        // Big uplink frames: uplink +8 ms is told; downlink +0.9 ms within the
        // ±1 ms the split allows is not dragged along.
        for (i, o) in obs.iter_mut().enumerate() {
            let level = i >= 90;
            o.vals[Figure::SplitErr.index()] = 0.5;
            let (up, down) = if level { (5.0, -2.1) } else { (0.0, 0.0) };
            o.vals[Figure::Uplink.index()] += up;
            o.vals[Figure::Downlink.index()] += down;
            o.vals[Figure::Net.index()] += up + down;
            o.vals[Figure::E2e.index()] += up + down;
        }
        let (_, _, _, v) = analyze(&phases, &obs, &[], &VerdictSpec::default());
        assert_eq!(v.first_stage, Some("uplink"), "{v:?}");
        assert_eq!(v.dragged, vec![]);
        assert!(
            v.summary
                .contains("Not named: downlink +0.91 ms lies within the ±1.00 ms the clock split allows at level 1"),
            "{}",
            v.summary
        );
    }

    /// A short level (30 calls) where one call's infer
    /// spikes: e2e's p99 moved, no test can name a stage — said so, never
    /// "absorbs this factor".
    #[test]
    fn a_short_level_moving_e2e_is_not_absorbed() {
        let phases = vec![
            phase("baseline", 0, 0.0, 1000.0),
            phase("level", 1, 1000.0, 2000.0),
        ];
        let mut obs = Vec::new();
        for i in 0..60 {
            let ts = i as f64 * 1000.0 / 30.0 + 0.5;
            let p = (i / 30) as usize;
            let spike = i == 45;
            obs.push(call(ts, p, |f| {
                let j = (i % 7) as f32 * 0.03;
                match f {
                    Figure::Infer if spike => 62.0 + j,
                    Figure::E2e if spike => 67.0 + j,
                    _ => base_ms(f) + j,
                }
            }));
        }
        let (_, _, _, v) = analyze(&phases, &obs, &[], &VerdictSpec::default());
        assert_eq!(v.first_stage, None, "{v:?}");
        assert!(v.e2e_moved);
        assert_eq!(
            v.summary,
            "e2e moved (p99 17.18 → 67.09 ms at level 1 (level 1)) but no stage moved beyond noise: with 30 calls at that level the sample is too small to tell which stage — raise the calls per level."
        );
    }

    /// Stopped (Ctrl-C) after the baseline: the level has no call, and the
    /// verdict says so instead of "the pipeline absorbs this factor".
    #[test]
    fn no_verdict_on_levels_that_did_not_run() {
        let phases = vec![
            phase("baseline", 0, 0.0, 3000.0),
            phase("level", 1, 3000.0, 6000.0),
        ];
        let obs: Vec<Obs> = (0..90)
            .map(|i| call(i as f64 * 1000.0 / 30.0 + 0.5, 0, base_ms))
            .collect();
        let (_, _, levels, v) = analyze(&phases, &obs, &[], &VerdictSpec::default());
        assert_eq!(levels.len(), 1);
        assert_eq!(v.first_stage, None);
        assert!(v.summary.starts_with("no level ran"), "{}", v.summary);
        assert!(!v.summary.contains("absorbs"), "{}", v.summary);
        assert!(!v.next_step.contains("raise the factor"), "{}", v.next_step);
    }
}
