//! From records to figures and verdicts: per-stage distributions, baseline
//! comparison, outlier rounds, shape, periodicity, gap, verdicts.
//!
//! [`analyze`] runs it all; each step has its file: `group.rs` (a run split
//! into kinds, rate, mitigations), `baseline.rs` (shape against the
//! baseline), `outliers.rs`, `periodicity.rs`, `gap.rs` (the e2e variance),
//! `verdict.rs` (the sentences), and `report.rs` (what `--json` prints).

mod baseline;
mod gap;
mod group;
mod options;
mod outliers;
mod periodicity;
mod report;
mod verdict;

use std::collections::BTreeMap;

use stagetrace_schema::Figure;

use crate::figures;
use crate::load::Dataset;
use crate::stats::{self, Summary};

pub use group::{group_data, GroupData};
pub use options::AnalyzeOptions;
pub use report::{
    Deadline, ErrorCount, GapReport, GroupReport, Inputs, Mitigations, OutlierRound, OutlierStage,
    Outliers, Periodicity, Rate, Report, StageVsBaseline, Verdict, ALL_KINDS, REPORT_SCHEMA,
};

pub(crate) use group::inputs_of;

use baseline::vs_baseline;
use gap::gap;
use group::{mitigations, rate};
use options::MIN_N;
use outliers::outliers;
use periodicity::periodicity;
use verdict::{verdict_rank, verdicts};

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
    verdicts.sort_by_key(|v| verdict_rank(v.code));
    let report = Report {
        schema: REPORT_SCHEMA,
        inputs: inputs_of(run),
        baseline: baseline.map(inputs_of),
        groups: reports,
        verdicts,
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

    // Spikes: above median + k·MAD of the reference (the baseline when given,
    // and then above its p99 too). Outlier rounds: that and above the
    // reference's p99 (the run's own without a baseline), so the list holds
    // the rounds that really stand out.
    let mut thresholds = BTreeMap::new();
    for m in analysed() {
        let reference = base.map_or(g.sorted(m), |b| b.sorted(m));
        if reference.len() < MIN_N || g.sorted(m).is_empty() {
            continue;
        }
        let (med, mad) = stats::median_mad(reference);
        let sigma = (1.4826 * mad).max(1e-3 * med.abs()).max(1e-3);
        let robust = med + opts.outlier_k * sigma;
        let thr = robust.max(stats::quantile(reference, 0.99));
        g.spike_thresholds[m.index()] = Some(if base.is_some() { thr } else { robust });
        g.thresholds[m.index()] = Some(thr);
        thresholds.insert(m.name(), thr);
    }
    let rule = if base.is_some() {
        format!(
            "value > baseline median + {}·1.4826·MAD and > baseline p99",
            opts.outlier_k
        )
    } else {
        format!(
            "value > run median + {}·1.4826·MAD and > run p99 (no baseline given)",
            opts.outlier_k
        )
    };
    let outliers = outliers(ds, g, rule, thresholds, opts);

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
        verdicts: Vec::new(),
    };
    if !pooled {
        report.verdicts = verdicts(&report, base.is_some());
    }
    report
}
