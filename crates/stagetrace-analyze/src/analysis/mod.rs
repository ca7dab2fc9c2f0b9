//! From records to figures and verdicts: per-stage distributions, baseline
//! comparison, outlier rounds, shape, periodicity, gap, verdicts.
//!
//! [`analyze`] runs it all; each step has its file: `group.rs` (a run split
//! into kinds, rate, mitigations), `baseline.rs` (shape against the
//! baseline), `outliers.rs`, `periodicity.rs`, `gap.rs` (the e2e variance),
//! `verdict.rs` (the sentences), and `report.rs` (what `--json` prints).

mod baseline;
mod fleet;
mod gap;
mod group;
mod hops;
mod moves;
mod options;
mod outliers;
mod periodicity;
mod report;
mod verdict;

use std::collections::BTreeMap;

use stagetrace_schema::Figure;

use crate::figures;
use crate::format::fmt_ms;
use crate::load::Dataset;
use crate::stats::{self, Summary};

pub use fleet::{per_robot, Robot};
pub use group::{group_data, GroupData};
pub use hops::HopReport;
pub use options::AnalyzeOptions;
pub use report::{
    Deadline, ErrorCount, GapReport, GroupReport, Inputs, Mitigations, OutlierRound, OutlierStage,
    Outliers, Periodicity, Rate, Report, RobotInput, RobotStage, RobotStages, StageVsBaseline,
    Verdict, ALL_KINDS, REPORT_SCHEMA,
};

pub(crate) use group::inputs_of;
pub(crate) use hops::nodes as hop_nodes;

use baseline::vs_baseline;
use gap::gap;
use group::{mitigations, rate};
use moves::Context;
use options::{min_cost_ms, MIN_N};
use outliers::outliers;
use periodicity::periodicity;
use verdict::{verdict_order, verdicts};

/// A report plus what the renderers need to draw it.
#[derive(Debug)]
pub struct Analysis<'a> {
    /// The figures and verdicts.
    pub report: Report,
    /// The run.
    pub run: &'a Dataset,
    /// Working data per group of the run (same order as `report.groups`).
    pub groups: Vec<GroupData>,
    /// Working data per group of the baseline, by kind.
    pub baseline_groups: Vec<GroupData>,
}

/// Analyses a run, optionally against a baseline (idle) run.
pub fn analyze<'a>(
    run: &'a Dataset,
    baseline: Option<&Dataset>,
    opts: &AnalyzeOptions,
) -> Analysis<'a> {
    let mut groups = group_data(run);
    let baseline_groups = baseline.map(group_data).unwrap_or_default();
    let mut reports = Vec::new();
    let mut verdicts = Vec::new();
    for g in groups.iter_mut() {
        let base = baseline_groups.iter().find(|b| b.kind == g.kind);
        let r = analyze_group(run, g, base, opts);
        verdicts.extend(r.verdicts.iter().cloned());
        reports.push(r);
    }
    verdicts.sort_by(verdict_order);
    let report = Report {
        schema: REPORT_SCHEMA,
        inputs: inputs_of(run),
        baseline: baseline.map(inputs_of),
        groups: reports,
        verdicts,
        robots: Vec::new(),
    };
    Analysis {
        report,
        run,
        groups,
        baseline_groups,
    }
}

/// Figures that get shape, outlier and periodicity analysis: every figure
/// read but lateness, which is a deadline figure rather than a stage.
fn analysed() -> impl Iterator<Item = Figure> {
    figures::read().filter(|f| *f != Figure::Late)
}

fn analyze_group(
    ds: &Dataset,
    g: &mut GroupData,
    base: Option<&GroupData>,
    opts: &AnalyzeOptions,
) -> GroupReport {
    let pooled = g.kind == ALL_KINDS;
    let kind_idx = ds.kinds.iter().position(|k| *k == g.kind);
    let (mut calls, mut warm, mut failed) = (0u64, 0u64, 0u64);
    for i in 0..ds.len() {
        if !pooled && Some(usize::from(ds.kind[i])) != kind_idx {
            continue;
        }
        calls += 1;
        if ds.is_warmup(i) {
            warm += 1;
        } else if ds.is_failed(i) {
            failed += 1;
        }
    }
    let mut stages = BTreeMap::new();
    for m in figures::read() {
        if let Some(s) = Summary::of_sorted(g.sorted(m)) {
            stages.insert(m.name(), s);
        }
    }
    let first = g.calls.first().map_or(f64::NAN, |&i| ds.ts[i as usize]);
    let last = g.calls.last().map_or(f64::NAN, |&i| ds.ts[i as usize]);
    let rate = rate(ds, g);

    let mut vs = BTreeMap::new();
    if let Some(b) = base {
        if !pooled {
            for m in analysed() {
                if let Some(s) = vs_baseline(b.sorted(m), g.sorted(m), opts) {
                    vs.insert(m.name(), s);
                }
            }
        }
    }
    // A value stands out above median + k·σ of the reference (the baseline
    // when given, and then above its p99 too), and by at least what matters
    // next to the call. Without a baseline no percentile of the same data
    // serves: frequent spikes would set it and hide themselves. A figure
    // whose median is past the baseline's threshold moved as a whole: the
    // run's own median and spread serve for it, so the list holds the calls
    // that stand out of the shifted run rather than every call.
    let e2e_ref = base.map_or(g.sorted(Figure::E2e), |b| b.sorted(Figure::E2e));
    let floor = min_cost_ms(stats::quantile(e2e_ref, 0.5));
    let robust = |xs: &[f32]| {
        let (med, mad) = stats::median_mad(xs);
        let sigma = (1.4826 * mad).max(1e-3 * med.abs()).max(1e-3);
        (med, med + (opts.outlier_k * sigma).max(floor))
    };
    let mut thresholds = BTreeMap::new();
    let mut shifted = BTreeMap::new();
    for m in analysed() {
        let run = g.sorted(m);
        let reference = base.map_or(run, |b| b.sorted(m));
        if reference.len() < MIN_N || run.is_empty() {
            continue;
        }
        let (med, mut thr) = robust(reference);
        if base.is_some() {
            thr = thr.max(stats::quantile(reference, 0.99));
            // Moved as a whole: its median shifted by what matters (the
            // shape test, per kind), or past the threshold (pooled kinds).
            let shift = match vs.get(m.name()) {
                Some(v) => (v.shape == "median_shift" && v.shift.estimate >= floor)
                    .then_some(v.shift.estimate),
                None => {
                    let run_med = stats::quantile(run, 0.5);
                    (run.len() >= MIN_N && run_med > thr).then_some(run_med - med)
                }
            };
            if let Some(d) = shift {
                if m.is_call_time() {
                    shifted.insert(m.name(), d);
                }
                thr = robust(run).1;
            }
        }
        g.spike_thresholds[m.index()] = Some(thr);
        g.thresholds[m.index()] = Some(thr);
        thresholds.insert(m.name(), thr);
    }
    let rule = if base.is_some() {
        format!(
            "value > baseline median + max({k}·1.4826·MAD, {floor}) and > baseline p99; a figure that got slower as a whole is measured against the run's own median + max({k}·1.4826·MAD, {floor})",
            k = opts.outlier_k,
            floor = fmt_ms(floor)
        )
    } else {
        format!(
            "value > run median + max({}·1.4826·MAD, {}) (no baseline given)",
            opts.outlier_k,
            fmt_ms(floor)
        )
    };
    let outliers = outliers(ds, g, rule, thresholds, shifted, opts);

    let periodicity = if pooled {
        Vec::new()
    } else {
        let times: Vec<f64> = g.calls.iter().map(|&i| ds.ts[i as usize]).collect();
        let mut gaps: Vec<f32> = times.windows(2).map(|w| (w[1] - w[0]) as f32).collect();
        let call_dt = if gaps.is_empty() {
            1.0
        } else {
            let mid = gaps.len() / 2;
            let (_, v, _) = gaps.select_nth_unstable_by(mid, f32::total_cmp);
            f64::from(*v).max(1e-3)
        };
        analysed()
            .filter_map(|m| periodicity(ds, g, &times, call_dt, m))
            .collect()
    };
    let gap = if pooled { None } else { gap(ds, g) };
    let mut report = GroupReport {
        kind: g.kind.clone(),
        calls,
        steady: g.calls.len() as u64,
        warmup_excluded: warm,
        failed,
        start_unix_ms: first,
        end_unix_ms: last,
        rate,
        stages,
        baseline: vs,
        outliers,
        periodicity,
        gap,
        mitigations: mitigations(ds, kind_idx, pooled),
        hops: hops::hop_reports(g, base, opts),
        verdicts: Vec::new(),
        robots: BTreeMap::new(),
    };
    if !pooled {
        // The split's error on a change: the run's and the baseline's (each
        // side's median split_err_ms); absent when the records carry none.
        let err = |xs: &[f32]| (!xs.is_empty()).then(|| stats::quantile(xs, 0.5));
        let run_err = err(g.sorted(Figure::SplitErr));
        let base_err = base.and_then(|b| err(b.sorted(Figure::SplitErr)));
        let cx = Context {
            has_baseline: base.is_some(),
            split_err_ms: match (run_err, base_err) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            },
            floor_ms: floor,
        };
        let baseline_n = base.map_or(0, |b| b.calls.len() as u64);
        report.verdicts = verdicts(&report, &cx, baseline_n);
        // A link or a gateway that moved is named instead of the whole
        // path's link stages (which it is part of).
        let named = hops::hop_verdicts(&report.kind, &report.hops, floor);
        if !named.is_empty() {
            report.verdicts.retain(|v| !hops::superseded(v));
            report.verdicts.extend(named);
            report.verdicts.sort_by(verdict_order);
        }
    }
    report
}
