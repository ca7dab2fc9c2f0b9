//! Where a value stands out: each figure's outlier threshold, from the
//! baseline when one is given, and the figures that moved as a whole.

use std::collections::BTreeMap;

use super::analysed;
use super::group::GroupData;
use super::options::{AnalyzeOptions, MIN_N};
use super::report::StageVsBaseline;
use crate::format::fmt_ms;
use crate::stats;

/// The thresholds of one group, and the rule that set them.
pub(super) struct Thresholds {
    /// Threshold per figure (ms).
    pub(super) by_figure: BTreeMap<&'static str, f64>,
    /// Figures that got slower as a whole, by how much (ms).
    pub(super) shifted: BTreeMap<&'static str, f64>,
    /// The rule in words, for the report.
    pub(super) rule: String,
}

/// Sets `g`'s thresholds. A value stands out above median + k·σ of the
/// reference (the baseline when given, and then above its p99 too), and by
/// at least `spike_floor` (what a spike must cost the call to matter).
/// Without a baseline no percentile of the same data serves: frequent
/// spikes would set it and hide themselves. A figure whose median is past
/// the baseline's threshold moved as a whole: the run's own median and
/// spread serve for it, so the list holds the calls that stand out of the
/// shifted run rather than every call. `floor` is the smallest median shift
/// that counts as one.
pub(super) fn thresholds(
    g: &mut GroupData,
    base: Option<&GroupData>,
    vs: &BTreeMap<&'static str, StageVsBaseline>,
    opts: &AnalyzeOptions,
    floor: f64,
    spike_floor: f64,
) -> Thresholds {
    let robust = |xs: &[f32]| {
        let (med, mad) = stats::median_mad(xs);
        let sigma = (1.4826 * mad).max(1e-3 * med.abs()).max(1e-3);
        (med, med + (opts.outlier_k * sigma).max(spike_floor))
    };
    let mut by_figure = BTreeMap::new();
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
        by_figure.insert(m.name(), thr);
    }
    let rule = if base.is_some() {
        format!(
            "value > baseline median + max({k}·1.4826·MAD, {floor}) and > baseline p99; a figure that got slower as a whole is measured against the run's own median + max({k}·1.4826·MAD, {floor})",
            k = opts.outlier_k,
            floor = fmt_ms(spike_floor)
        )
    } else {
        format!(
            "value > run median + max({}·1.4826·MAD, {}) (no baseline given)",
            opts.outlier_k,
            fmt_ms(spike_floor)
        )
    };
    Thresholds {
        by_figure,
        shifted,
        rule,
    }
}
