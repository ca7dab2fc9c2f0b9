//! From records to figures and verdicts: per-stage distributions, baseline
//! comparison, outlier rounds, shape, periodicity, gap, verdicts.
//!
//! [`analyze`] runs it all; each step has its file: `group.rs` (a run split
//! into kinds, rate, mitigations), `baseline.rs` (shape against the
//! baseline), `outliers.rs`, `periodicity.rs`, `gap.rs` (the e2e variance),
//! `verdict.rs` (the sentences), and `report/` (what `--json` prints:
//! the groups, inference's parts and the server's waits, the deadline, the
//! calls that stand out).

mod async_queue;
mod baseline;
mod causes;
mod deadline;
mod deadline_verdict;
mod evidence;
mod fleet;
mod gap;
mod group;
mod hop_report;
mod host_cause;
mod host_verdict;
mod infer_parts;
mod moves;
mod options;
mod outliers;
mod parts;
mod periodicity;
mod report;
mod server_waits;
mod shape;
mod thresholds;
mod verdict;

use std::collections::BTreeMap;

use stagetrace_schema::Figure;

use crate::figures;
use crate::load::Dataset;
use crate::stats::{self, Distribution};

pub use evidence::{MergedVerdict, VerdictEvidence};
pub use fleet::{per_robot, Robot};
pub use group::{group_data, GroupData};
pub use hop_report::HopReport;
pub use options::AnalyzeOptions;
pub use report::HostCause;
pub use report::{
    ActionQueue, Deadline, DeadlineCause, DeadlineShare, DeviceTime, ErrorCount, GapReport,
    GroupReport, InferParts, Inputs, Mitigations, OutlierRound, OutlierStage, Outliers, PartShare,
    Periodicity, Rate, Report, RobotInput, RobotStage, RobotStages, SecondMode, ServerWait,
    StageVsBaseline, Stall, Verdict, ALL_KINDS, QUANTILE_METHOD, REPORT_SCHEMA,
};

pub(crate) use group::inputs_of;
pub(crate) use hop_report::nodes as hop_nodes;
pub(crate) use options::min_cost_ms;

use async_queue::action_queue;
use baseline::vs_baseline;
use gap::gap;
use group::{mitigations, rate};
use moves::Context;
use options::spike_floor_ms;
use outliers::outliers;
use periodicity::periodicities;
use shape::second_modes;
use thresholds::{thresholds, Thresholds};
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
        quantiles: QUANTILE_METHOD,
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
/// read but lateness, which is a deadline figure rather than a stage, and
/// the host figures, which overlap the stages: they are read next to a
/// stage's spikes as their cause (`host_cause`), never a verdict of their own.
fn analysed() -> impl Iterator<Item = Figure> {
    figures::read().filter(|f| *f != Figure::Late && !f.is_host())
}

/// Records of one kind (or of all, `pooled`): (all, warm-up, failed).
fn counts(ds: &Dataset, kind_idx: Option<usize>, pooled: bool) -> (u64, u64, u64) {
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
    (calls, warm, failed)
}

/// One group's report: its counts and figures, against its baseline's
/// group when given, its spikes, shapes and causes, and its verdicts.
fn analyze_group(
    ds: &Dataset,
    g: &mut GroupData,
    base: Option<&GroupData>,
    opts: &AnalyzeOptions,
) -> GroupReport {
    let pooled = g.kind == ALL_KINDS;
    let kind_idx = ds.kinds.iter().position(|k| *k == g.kind);
    let (calls, warm, failed) = counts(ds, kind_idx, pooled);
    let first = g.calls.first().map_or(f64::NAN, |&i| ds.ts[i as usize]);
    let last = g.calls.last().map_or(f64::NAN, |&i| ds.ts[i as usize]);
    let mut rate = rate(ds, g);
    // The split's bound on uplink / downlink.
    let split_err_ms = median_split_err(g);
    let vs = match base {
        Some(b) if !pooled => against_baseline(g, b, opts),
        _ => BTreeMap::new(),
    };
    let e2e_ref = base.map_or(g.sorted(Figure::E2e), |b| b.sorted(Figure::E2e));
    let e2e_median = stats::quantile(e2e_ref, 0.5);
    let floor = min_cost_ms(e2e_median);
    let (outliers, periodicity, modes) = spikes(ds, g, base, &vs, opts, e2e_median);
    if let (false, Some(d)) = (pooled, rate.deadline.as_mut()) {
        d.cause = deadline::deadline_cause(ds, g, rate.effective_hz, split_err_ms, floor);
    }
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
        split_err_ms,
        stages: distributions(g),
        baseline: vs,
        outliers,
        periodicity,
        modes,
        gap,
        mitigations: mitigations(ds, kind_idx, pooled),
        action_queue: action_queue(ds, g),
        hops: hop_report::hop_reports(g, base, opts),
        infer_parts: infer_parts::infer_parts(ds, g, floor),
        server_waits: server_waits::server_waits(ds, g, spike_floor_ms(e2e_median)),
        verdicts: Vec::new(),
        robots: BTreeMap::new(),
    };
    if !pooled {
        report.verdicts = group_verdicts(&report, base, floor, e2e_median);
    }
    report
}

/// Every figure the analysis reads that the group carries, as a distribution.
fn distributions(g: &GroupData) -> BTreeMap<&'static str, Distribution> {
    figures::read()
        .filter_map(|m| Some((m.name(), Distribution::of_sorted(g.sorted(m))?)))
        .collect()
}

/// Each analysed figure of the group against the baseline's group.
fn against_baseline(
    g: &GroupData,
    b: &GroupData,
    opts: &AnalyzeOptions,
) -> BTreeMap<&'static str, StageVsBaseline> {
    analysed()
        .filter_map(|m| Some((m.name(), vs_baseline(b.sorted(m), g.sorted(m), opts)?)))
        .collect()
}

/// The group's spikes: the thresholds, the periods the spikes repeat with
/// (none for the pooled group), the second modes, and the rounds above the
/// thresholds that are left. A figure above its threshold on many calls
/// has a second mode, not spikes: its calls leave the outlier list (its
/// threshold in `g` is cleared), and the shape is said once.
fn spikes(
    ds: &Dataset,
    g: &mut GroupData,
    base: Option<&GroupData>,
    vs: &BTreeMap<&'static str, StageVsBaseline>,
    opts: &AnalyzeOptions,
    e2e_median: f64,
) -> (Outliers, Vec<Periodicity>, Vec<SecondMode>) {
    let floor = min_cost_ms(e2e_median);
    let Thresholds {
        mut by_figure,
        shifted,
        rule,
    } = thresholds(g, base, vs, opts, floor, spike_floor_ms(e2e_median));
    let periodicity = if g.kind == ALL_KINDS {
        Vec::new()
    } else {
        periodicities(ds, g)
    };
    let modes = second_modes(ds, g, &periodicity, e2e_median);
    for m in &modes {
        if let Some(f) = Figure::from_name(m.stage) {
            g.thresholds[f.index()] = None;
        }
        by_figure.remove(m.stage);
    }
    let outliers = outliers(ds, g, rule, by_figure, shifted, opts);
    (outliers, periodicity, modes)
}

/// The median split bound of a group's records (ms); absent when they
/// carry none.
fn median_split_err(g: &GroupData) -> Option<f64> {
    let xs = g.sorted(Figure::SplitErr);
    (!xs.is_empty()).then(|| stats::quantile(xs, 0.5))
}

/// A group's verdicts, against its baseline's group when given; a hop or
/// a gateway that moved is named instead of the whole path's one-way
/// stages (which it is part of).
fn group_verdicts(
    report: &GroupReport,
    base: Option<&GroupData>,
    floor: f64,
    e2e_median: f64,
) -> Vec<Verdict> {
    // The split's error on a change: the run's and the baseline's (each
    // side's median split_err_ms); absent when the records carry none.
    let base_err = base.and_then(median_split_err);
    let cx = Context {
        has_baseline: base.is_some(),
        split_err_ms: match (report.split_err_ms, base_err) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        },
        floor_ms: floor,
        tail_floor_ms: spike_floor_ms(e2e_median),
    };
    let baseline_n = base.map_or(0, |b| b.calls.len() as u64);
    let mut out = verdicts(report, &cx, baseline_n);
    let named = hop_report::hop_verdicts(&report.kind, &report.hops, floor);
    if !named.is_empty() {
        out.retain(|v| !hop_report::superseded(v));
        out.extend(named);
        out.sort_by(verdict_order);
    }
    out
}
