//! The run's figures as `stagetrace report` reads them: its record files
//! loaded and analysed by `stagetrace-analyze`, restated per record field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use stagetrace::record::CallRecord;
use stagetrace_analyze::analysis::{AnalyzeOptions, GroupReport, Report, ALL_KINDS};
use stagetrace_analyze::stats::{self, Distribution};
use stagetrace_schema::{Figure, Unit};

use super::error::{err, DemoError};

/// The record files the layer wrote for run `run_id` in `out` (files of
/// earlier runs in the same directory are left out).
fn run_files(out: &Path, run_id: &str) -> Result<Vec<PathBuf>, DemoError> {
    let prefix = format!("records-{run_id}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(out)
        .map_err(|e| err(format!("{}: cannot list: {e}", out.display())))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".jsonl"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The run's records, read back from its files and analysed exactly as
/// `stagetrace report` would.
pub(crate) fn analyze_run(out: &Path, run_id: &str) -> Result<Report, DemoError> {
    let files = run_files(out, run_id)?;
    stagetrace_analyze::report_files(&files, &AnalyzeOptions::default())
        .map_err(|e| err(format!("cannot read back the run's records: {e}")))
}

/// The group that covers every call: the pooled one when there are
/// several kinds, else the only one.
pub(super) fn main_group(report: &Report) -> Option<&GroupReport> {
    report
        .groups
        .iter()
        .find(|g| g.kind == ALL_KINDS)
        .or_else(|| report.groups.first())
}

/// Neither warm-up nor failed: a call the figures count.
pub(super) fn steady(rec: &CallRecord) -> bool {
    rec.warmup.is_none() && rec.failed.is_none()
}

/// Distribution of one figure over the steady calls, by the analysis' own
/// order statistics.
pub(super) fn summarize(values: impl Iterator<Item = f64>) -> Option<Distribution> {
    let mut v: Vec<f32> = values.filter(|x| x.is_finite()).map(|x| x as f32).collect();
    stats::sort_f32(&mut v);
    Distribution::of_sorted(&v)
}

/// A summary in ms restated in `fig`'s record unit, rounded to the
/// record's resolution (a thousandth of the unit).
fn in_unit(s: Distribution, fig: Figure) -> Distribution {
    let k = Unit::Millis.ns() as f64 / fig.unit().ns() as f64;
    let f = |v: f64| (v * k * 1000.0).round() / 1000.0;
    Distribution {
        n: s.n,
        min: f(s.min),
        p50: f(s.p50),
        p90: f(s.p90),
        p99: f(s.p99),
        p999: f(s.p999),
        max: f(s.max),
        mean: f(s.mean),
        stddev: f(s.stddev),
    }
}

/// Every figure's distribution over the steady calls, keyed by its record
/// field name (`infer_ms`, `observer_us`), in the field's unit.
pub(super) fn stage_table(
    group: Option<&GroupReport>,
    records: &[CallRecord],
) -> BTreeMap<&'static str, Distribution> {
    let mut table = BTreeMap::new();
    for fig in Figure::ALL {
        // Figures the analysis does not read (the clock's: `offset`,
        // `split_err`) by the same order statistics, from the records.
        let s = match group.and_then(|g| g.stages.get(fig.name())) {
            Some(s) => Some(*s),
            None => summarize(
                records
                    .iter()
                    .filter(|r| steady(r))
                    .filter_map(|r| r.ms(fig)),
            ),
        };
        if let Some(s) = s {
            table.insert(fig.field(), in_unit(s, fig));
        }
    }
    table
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        // The demo's figures are analyze's order statistics: exact values
        // of the calls, nearest rank.
        let d = summarize((1..=100).map(f64::from)).unwrap();
        assert_eq!(
            (d.n, d.p50, d.p90, d.p99, d.max),
            (100, 50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(d.mean, 50.5);
        assert!(summarize(std::iter::once(f64::NAN)).is_none());
    }

    #[test]
    fn civil_dates() {
        // The demo keeps no date helper of its own; the dates it printed
        // come from the one in analyze.
        let day = |d: f64| stagetrace_analyze::format::iso_time(d * 86_400_000.0);
        assert_eq!(day(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(day(19_723.0), "2024-01-01T00:00:00.000Z");
        assert_eq!(day(20_454.0), "2026-01-01T00:00:00.000Z");
    }

    #[test]
    fn figures_are_restated_in_their_record_unit() {
        let s = summarize([0.0401, 0.05].into_iter()).unwrap();
        let us = in_unit(s, Figure::Observer);
        assert_eq!((us.min, us.max), (40.1, 50.0));
        let ms = in_unit(s, Figure::Infer);
        assert_eq!((ms.min, ms.max), (0.04, 0.05));
    }
}
