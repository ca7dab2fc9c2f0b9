//! A fleet report (`stagetrace report --per-robot`): every robot's records
//! merged for the tables, each robot's p50 / p99 per stage, and a
//! `robot_differs` verdict for a robot slower than the other robots pooled.
//!
//! Each robot is held against the others by the same tests and floor as a
//! run against its baseline (`baseline.rs`, `moves.rs`): the other robots
//! pooled are the baseline. Only slower counts: with one slow robot, every
//! other robot is faster than a pool that holds the slow one, and is not
//! the robot to look at (`docs/report.md`, "A fleet").

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::json;
use stagetrace_schema::Figure;

use super::baseline::vs_baseline;
use super::group::rate_of;
use super::moves::{fmt_p, moves_of, Context};
use super::options::{min_cost_ms, spike_floor_ms, AnalyzeOptions, MIN_N};
use super::report::{RobotInput, RobotStage, RobotStages, StageVsBaseline, Verdict, ALL_KINDS};
use super::verdict::verdict_order;
use super::{analysed, Analysis, GroupData};
use crate::figures;
use crate::format::fmt_ms;
use crate::load::Dataset;
use crate::stats;

/// One robot of a fleet: its name and the record files it wrote (as they
/// appear in [`Dataset::files`]).
#[derive(Clone, Debug)]
pub struct Robot {
    /// Shown in the column and named by the verdict.
    pub name: String,
    /// Its files; a call belongs to the robot whose file it was read from.
    pub files: Vec<PathBuf>,
}

/// No robot owns the call (its file is in no robot's list).
const NOBODY: u32 = u32::MAX;

/// Adds the fleet view to an analysis of all robots' records merged: the
/// robots, their per-stage p50 / p99 in every group, and the verdicts
/// naming a robot slower than the rest (largest cost first, among the
/// others). Needs two robots or more; fewer leave the analysis as it is.
pub fn per_robot(a: &mut Analysis<'_>, robots: &[Robot], opts: &AnalyzeOptions) {
    if robots.len() < 2 {
        return;
    }
    let ds = a.run;
    let (owner, records) = owners(ds, robots);
    a.report.robots = robots
        .iter()
        .zip(&records)
        .map(|(r, n)| RobotInput {
            name: r.name.clone(),
            files: r.files.iter().map(|p| p.display().to_string()).collect(),
            records: *n,
        })
        .collect();
    let mut added = Vec::new();
    for (g, report) in a.groups.iter().zip(a.report.groups.iter_mut()) {
        let split = split(ds, g, &owner, robots.len());
        for (r, robot) in robots.iter().enumerate() {
            let stages = robot_stages(ds, g, &split[r], &owner, r);
            report.robots.insert(robot.name.clone(), stages);
        }
        // Each listed outlier round says whose call it was.
        for round in &mut report.outliers.rounds {
            round.robot = owner
                .get(round.index)
                .and_then(|&o| robots.get(o as usize))
                .map(|r| r.name.clone());
        }
        // The pooled group repeats its kinds' verdicts; it gets none.
        if g.kind == ALL_KINDS {
            continue;
        }
        let vs: Vec<Verdict> = robots
            .iter()
            .enumerate()
            .flat_map(|(r, robot)| differs(&g.kind, robot, r, &split, opts))
            .collect();
        if !vs.is_empty() {
            let named: Vec<Figure> = vs
                .iter()
                .filter_map(|v| v.stage.and_then(Figure::from_name))
                .collect();
            report.verdicts.retain(|v| !explained(v, &named));
            report.verdicts.extend(vs.iter().cloned());
            report.verdicts.sort_by(verdict_order);
            added.push((g.kind.clone(), named, vs));
        }
    }
    for (kind, named, vs) in added {
        a.report
            .verdicts
            .retain(|v| !(v.kind == kind && explained(v, &named)));
        a.report.verdicts.extend(vs);
    }
    a.report.verdicts.sort_by(verdict_order);
}

/// Which robot each call of the run belongs to ([`NOBODY`] when its file
/// is in no robot's list), and how many records each robot has.
fn owners(ds: &Dataset, robots: &[Robot]) -> (Vec<u32>, Vec<u64>) {
    let mut owner = vec![NOBODY; ds.len()];
    let mut records = vec![0u64; robots.len()];
    for (j, path) in ds.files.iter().enumerate() {
        let Some(r) = robots.iter().position(|r| r.files.contains(path)) else {
            continue;
        };
        for i in ds.file_calls(j) {
            owner[i] = r as u32;
            records[r] += 1;
        }
    }
    (owner, records)
}

/// Robot `r`'s part of a group: its steady calls, its rate, and each
/// figure's p50 / p99 over its sorted values `per` (per figure).
fn robot_stages(
    ds: &Dataset,
    g: &GroupData,
    per: &[Vec<f32>],
    owner: &[u32],
    r: usize,
) -> RobotStages {
    let stages: BTreeMap<&'static str, RobotStage> = figures::read()
        .filter_map(|m| {
            let xs = &per[m.index()];
            (!xs.is_empty()).then(|| {
                (
                    m.name(),
                    RobotStage {
                        n: xs.len() as u64,
                        p50: stats::quantile(xs, 0.5),
                        p99: stats::quantile(xs, 0.99),
                    },
                )
            })
        })
        .collect();
    let calls: Vec<u32> = g
        .calls
        .iter()
        .copied()
        .filter(|&i| owner.get(i as usize) == Some(&(r as u32)))
        .collect();
    RobotStages {
        steady: per[Figure::E2e.index()].len() as u64,
        rate: rate_of(ds, &calls),
        stages,
    }
}

/// A merged-run verdict the robot verdicts on `named` make moot: `steady`,
/// and spikes in a figure a robot is slower in. The merged timeline
/// interleaves the robots: a slower robot's calls look like spikes of the
/// merged run (periodic ones, at its call rate) in those figures, and the
/// robot verdict says what they are.
fn explained(v: &Verdict, named: &[Figure]) -> bool {
    v.code == "steady"
        || (matches!(v.code, "periodic" | "spikes")
            && v.stage
                .and_then(Figure::from_name)
                .is_some_and(|f| named.iter().any(|n| related(f, *n))))
}

/// `a` is `b`, or one is made of the other (at any depth).
fn related(a: Figure, b: Figure) -> bool {
    a == b || figures::descendants(a).contains(&b) || figures::descendants(b).contains(&a)
}

/// Per robot, per figure: the sorted values of the group's steady calls.
fn split(ds: &Dataset, g: &GroupData, owner: &[u32], robots: usize) -> Vec<Vec<Vec<f32>>> {
    let mut out = vec![vec![Vec::new(); ds.columns.len()]; robots];
    for &i in &g.calls {
        let Some(&r) = owner.get(i as usize) else {
            continue;
        };
        let Some(per) = out.get_mut(r as usize) else {
            continue;
        };
        for (f, col) in ds.columns.iter().enumerate() {
            if let Some(v) = col.get(i as usize).filter(|v| !v.is_nan()) {
                per[f].push(*v);
            }
        }
    }
    for per in &mut out {
        for xs in per.iter_mut() {
            stats::sort_f32(xs);
        }
    }
    out
}

/// The other robots' values of figure `f`, pooled and sorted.
fn others(split: &[Vec<Vec<f32>>], r: usize, f: Figure) -> Vec<f32> {
    let mut v: Vec<f32> = split
        .iter()
        .enumerate()
        .filter(|(o, _)| *o != r)
        .flat_map(|(_, per)| per[f.index()].iter().copied())
        .collect();
    stats::sort_f32(&mut v);
    v
}

/// Robot `r` against the other robots pooled: a `robot_differs` verdict
/// per figure it is slower in (as a whole, in its tail, or its network)
/// by at least the practical floor.
fn differs(
    kind: &str,
    robot: &Robot,
    r: usize,
    split: &[Vec<Vec<f32>>],
    opts: &AnalyzeOptions,
) -> Vec<Verdict> {
    let mine = &split[r];
    if mine[Figure::E2e.index()].len() < MIN_N {
        return Vec::new();
    }
    let mut vs: BTreeMap<&'static str, StageVsBaseline> = BTreeMap::new();
    for m in analysed() {
        if let Some(s) = vs_baseline(&others(split, r, m), &mine[m.index()], opts) {
            vs.insert(m.name(), s);
        }
    }
    let median = |xs: &[f32]| (!xs.is_empty()).then(|| stats::quantile(xs, 0.5));
    let split_err = (
        median(&mine[Figure::SplitErr.index()]),
        median(&others(split, r, Figure::SplitErr)),
    );
    let others_e2e = stats::quantile(&others(split, r, Figure::E2e), 0.5);
    let cx = Context {
        has_baseline: true,
        split_err_ms: match split_err {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        },
        floor_ms: min_cost_ms(others_e2e),
        tail_floor_ms: spike_floor_ms(others_e2e),
    };
    let peers = split.iter().enumerate().filter(|(o, _)| *o != r).count();
    moves_of(kind, &vs, &cx)
        .into_iter()
        .filter(|v| matches!(v.code, "median_shift" | "tail_only" | "network_moved"))
        .map(|v| robot_verdict(robot, peers, &vs, v))
        .collect()
}

/// A move of the robot against the others, said as the robot that differs.
fn robot_verdict(
    robot: &Robot,
    peers: usize,
    vs: &BTreeMap<&'static str, StageVsBaseline>,
    v: Verdict,
) -> Verdict {
    let name = &robot.name;
    let stage = v.stage.unwrap_or("e2e");
    let m = Figure::from_name(stage).unwrap_or(Figure::E2e);
    let s = vs.get(stage);
    let text = match (v.code, s) {
        ("median_shift", Some(s)) => format!(
            "robot {name} is slower than the other {peers} robot(s) in {m}: median {} against {} on the others (×{:.2}, 95% CI {:.2}–{:.2}; Mann–Whitney p={}, shift {} [{}, {}]); p99 {} against {}. The whole stage is slower on {name} — look at what differs on it (hardware, model or its version, load, its link); {}.",
            fmt_ms(s.p50.after), fmt_ms(s.p50.before), s.p50.ratio, s.p50.lo, s.p50.hi,
            fmt_p(s.mann_whitney.p), fmt_ms(s.shift.estimate), fmt_ms(s.shift.lo), fmt_ms(s.shift.hi),
            fmt_ms(s.p99.after), fmt_ms(s.p99.before), m.advice()
        ),
        ("tail_only", Some(s)) => format!(
            "robot {name} has a longer {m} tail than the other {peers} robot(s): p99 {} against {} (×{:.2}, 95% CI {:.2}–{:.2}), {:.1}% of its calls above the others' p99 (others {:.1}%, p={}), median {} against {}. A few of its requests are held up — {}.",
            fmt_ms(s.p99.after), fmt_ms(s.p99.before), s.p99.ratio, s.p99.lo, s.p99.hi,
            100.0 * s.exceed, 100.0 * s.baseline_exceed, fmt_p(s.exceed_p),
            fmt_ms(s.p50.after), fmt_ms(s.p50.before), m.advice()
        ),
        _ => format!(
            "robot {name} differs from the other {peers} robot(s) (they are its baseline here): {}",
            v.text
        ),
    };
    let mut evidence = json!({
        "robot": name,
        "shape": v.code,
        "cost_ms": v.evidence["cost_ms"],
        "peers": peers,
    });
    if let (Some(s), Some(e)) = (s, evidence.as_object_mut()) {
        let more = json!({
            "robot_p50_ms": s.p50.after, "others_p50_ms": s.p50.before,
            "robot_p99_ms": s.p99.after, "others_p99_ms": s.p99.before,
            "p50_ratio": s.p50.ratio, "p50_ci": [s.p50.lo, s.p50.hi],
            "p99_ratio": s.p99.ratio, "p99_ci": [s.p99.lo, s.p99.hi],
            "mann_whitney_p": s.mann_whitney.p, "shift_ms": s.shift.estimate,
            "shift_ci_ms": [s.shift.lo, s.shift.hi],
            "robot_exceed": s.exceed, "others_exceed": s.baseline_exceed, "exceed_p": s.exceed_p,
        });
        if let Some(more) = more.as_object() {
            e.extend(more.clone());
        }
    }
    Verdict {
        from_spikes: false,
        code: "robot_differs",
        kind: v.kind,
        stage: v.stage,
        group: v.group,
        text,
        evidence,
    }
}
