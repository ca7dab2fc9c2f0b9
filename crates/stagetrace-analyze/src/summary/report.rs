//! A summary as the report `stagetrace summarize --json` prints and
//! Python's `Summary.report()` returns: per kind × figure the count,
//! p50 / p90 / p99 from the histogram and the exact max.

use std::collections::BTreeMap;

use serde::Serialize;

use super::sketch::{Sketch, RELATIVE_ERROR, THRESHOLDS_MS};
use super::{KindSummary, SlowCall, Summary};
use stagetrace_schema::Figure;

use crate::analysis::{ErrorCount, MergedVerdict, ALL_KINDS};
use crate::figures;

/// The version tag of [`SummaryReport`].
pub const REPORT_SCHEMA: &str = "stagetrace-summary-report/1";
/// How a summary's quantiles were made: HdrHistogram, 3 significant figures.
pub const QUANTILE_METHOD: &str = "hdr-3-sigfig";

/// The report of a summary.
#[derive(Clone, Debug, Serialize)]
pub struct SummaryReport {
    /// [`REPORT_SCHEMA`].
    pub schema: &'static str,
    /// [`QUANTILE_METHOD`]: the quantiles are a sketch's, not exact.
    pub quantiles: &'static str,
    /// The largest relative error of a quantile against the exact order
    /// statistic ([`RELATIVE_ERROR`]); `max` is exact.
    pub relative_error: f64,
    /// Calls read (warm-up and failed ones included).
    pub calls: u64,
    /// Warm-up calls (not in the figures).
    pub warmup: u64,
    /// Failed calls (not in the figures).
    pub failed: u64,
    /// Failure reasons, most frequent first (`other`: past the kept names).
    pub errors: Vec<ErrorCount>,
    /// The first call's start (Unix ms).
    pub first_ts_unix_ms: Option<f64>,
    /// The last call's start (Unix ms).
    pub last_ts_unix_ms: Option<f64>,
    /// Calls per robot.
    pub robots: BTreeMap<String, u64>,
    /// The thresholds (ms) each figure's `above` counts refer to.
    pub thresholds_ms: [u32; THRESHOLDS_MS.len()],
    /// One group per kind (and `*`, all kinds pooled, when several).
    pub groups: Vec<SummaryGroup>,
    /// Every kind's verdicts, largest cost first (empty when no partition
    /// was analysed: `summarize --no-verdicts`).
    pub verdicts: Vec<MergedVerdict>,
    /// The slowest calls by e2e, slowest first.
    pub slowest: Vec<SlowCall>,
    /// Files skipped whole as damaged (their calls are not in the report),
    /// by path, with what is wrong; empty when none was.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub damaged_files: Vec<DamagedFile>,
    /// Damaged files past the ones named.
    #[serde(skip_serializing_if = "is_zero")]
    pub damaged_others: u64,
}

/// A file a summary skipped whole.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DamagedFile {
    /// Its path.
    pub file: String,
    /// What is wrong with it.
    pub reason: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One kind's steady calls.
#[derive(Clone, Debug, Serialize)]
pub struct SummaryGroup {
    /// The kind (`*`: all kinds pooled).
    pub kind: String,
    /// Steady calls (neither warm-up nor failed).
    pub steady: u64,
    /// Steady calls whose record says whether it met its deadline.
    pub deadline_calls: u64,
    /// Of those, the misses.
    pub deadline_misses: u64,
    /// Per figure, in the report's display order.
    pub stages: Vec<SummaryStage>,
    /// Steady calls of the partitions analysed for verdicts (`None`: no
    /// partition was).
    pub verdict_calls: Option<u64>,
    /// The kind's verdicts through the merge path, largest cost first.
    pub verdicts: Vec<MergedVerdict>,
    /// The part of infer the partitions holding most of the calls name as
    /// the bottleneck at p95, when they time infer's parts.
    pub bottleneck_p95: Option<String>,
}

/// One figure of one kind.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SummaryStage {
    /// The figure's name (`infer`, `e2e`, …).
    pub stage: String,
    /// Values (calls that carry the figure).
    pub n: u64,
    /// Median (ms), within `relative_error`.
    pub p50: f64,
    /// 90th percentile (ms), within `relative_error`.
    pub p90: f64,
    /// 99th percentile (ms), within `relative_error`.
    pub p99: f64,
    /// Largest value (ms), exact.
    pub max: f64,
    /// Values below zero (left out of the quantiles).
    pub below_zero: u64,
    /// Calls above each of `thresholds_ms`, exactly.
    pub above: Vec<u64>,
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn stage_of(name: &str, s: &Sketch) -> SummaryStage {
    let n = s.n();
    let q = |q: f64| if n == 0 { 0.0 } else { ms(s.quantile_ns(q)) };
    SummaryStage {
        stage: name.to_owned(),
        n,
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        max: ms(s.max_ns),
        below_zero: s.below_zero,
        above: s.above.to_vec(),
    }
}

fn group_of(kind: &str, k: &KindSummary) -> SummaryGroup {
    // The figures in the tables' order; names this build does not know
    // (a newer writer's) after them, by name.
    let order: Vec<&str> = figures::display_order().iter().map(|f| f.name()).collect();
    let mut names: Vec<&String> = k.figures.keys().collect();
    names.sort_by_key(|n| {
        (
            order.iter().position(|o| o == n).unwrap_or(usize::MAX),
            (*n).clone(),
        )
    });
    SummaryGroup {
        kind: kind.to_owned(),
        steady: k.steady,
        deadline_calls: k.deadline_calls,
        deadline_misses: k.deadline_misses,
        stages: names
            .into_iter()
            .filter_map(|n| Some(stage_of(n, k.figures.get(n)?)))
            .collect(),
        verdict_calls: k.verdicts.as_ref().map(|v| v.steady),
        verdicts: k.verdicts.as_ref().map_or_else(Vec::new, |v| {
            let p50 = |f: Figure| {
                let s = k.figures.get(f.name())?;
                (s.n() > 0).then(|| ms(s.quantile_ns(0.5)))
            };
            let e2e = p50(Figure::E2e).unwrap_or(f64::NAN);
            v.verdicts(kind, p50, e2e)
        }),
        bottleneck_p95: k
            .verdicts
            .as_ref()
            .and_then(|v| v.bottleneck_p95())
            .map(str::to_owned),
    }
}

impl Summary {
    /// The report of this summary.
    pub fn report(&self) -> SummaryReport {
        let mut groups: Vec<SummaryGroup> =
            self.kinds.iter().map(|(k, s)| group_of(k, s)).collect();
        if self.kinds.len() > 1 {
            // Pooled as `analysis` pools: the kinds' histograms added.
            let mut all = KindSummary::default();
            let pooled = self.kinds.values().try_for_each(|k| all.merge(k));
            // The pooled kinds get no verdicts of their own, as in `analysis`.
            all.verdicts = None;
            if pooled.is_ok() {
                groups.push(group_of(ALL_KINDS, &all));
            }
        }
        let mut verdicts: Vec<MergedVerdict> = groups
            .iter()
            .flat_map(|g| g.verdicts.iter().cloned())
            .collect();
        verdicts.sort_by(MergedVerdict::order);
        let mut errors: Vec<ErrorCount> = self
            .reasons
            .iter()
            .map(|(e, c)| ErrorCount {
                error: e.clone(),
                count: *c,
            })
            .collect();
        if self.other_reasons > 0 {
            match errors.iter_mut().find(|e| e.error == "other") {
                Some(e) => e.count += self.other_reasons,
                None => errors.push(ErrorCount {
                    error: "other".into(),
                    count: self.other_reasons,
                }),
            }
        }
        errors.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.error.cmp(&b.error)));
        SummaryReport {
            schema: REPORT_SCHEMA,
            quantiles: QUANTILE_METHOD,
            relative_error: RELATIVE_ERROR,
            calls: self.calls,
            warmup: self.warmup,
            failed: self.failed,
            errors,
            first_ts_unix_ms: self.first_ts_unix_ms,
            last_ts_unix_ms: self.last_ts_unix_ms,
            robots: self.robots.clone(),
            thresholds_ms: THRESHOLDS_MS,
            groups,
            verdicts,
            slowest: self.slowest.clone(),
            damaged_files: self
                .damaged
                .iter()
                .map(|(file, reason)| DamagedFile {
                    file: file.clone(),
                    reason: reason.clone(),
                })
                .collect(),
            damaged_others: self.other_damaged,
        }
    }
}
