//! Rounds that stand out: calls with a figure of the call's own time above
//! its threshold.

use std::collections::BTreeMap;

use stagetrace_schema::Figure;

use super::group::GroupData;
use super::options::AnalyzeOptions;
use super::report::{OutlierRound, OutlierStage, Outliers};
use crate::format::iso_time;
use crate::load::Dataset;

/// The rounds of a group above the thresholds set in `g` (`rule` says how
/// they were set).
pub(super) fn outliers(
    ds: &Dataset,
    g: &GroupData,
    rule: String,
    thresholds: BTreeMap<&'static str, f64>,
    shifted: BTreeMap<&'static str, f64>,
    opts: &AnalyzeOptions,
) -> Outliers {
    let mut count = 0u64;
    let mut rounds = Vec::new();
    let call_time: Vec<Figure> = Figure::ALL
        .into_iter()
        .filter(|f| f.is_call_time())
        .collect();
    for &i in &g.calls {
        let i = i as usize;
        let mut hit = Vec::new();
        for &f in &call_time {
            let Some(thr) = g.thresholds[f.index()] else {
                continue;
            };
            let Some(v) = ds.value(f, i) else {
                continue;
            };
            if v > thr {
                hit.push(OutlierStage {
                    stage: f.name(),
                    value_ms: v,
                    threshold_ms: thr,
                });
            }
        }
        if hit.is_empty() {
            continue;
        }
        count += 1;
        if rounds.len() < opts.max_listed_outliers {
            rounds.push(OutlierRound {
                seq: ds.seq[i],
                ts_unix_ms: ds.ts[i],
                time: iso_time(ds.ts[i]),
                e2e_ms: f64::from(ds.columns[Figure::E2e.index()][i]),
                stages: hit,
            });
        }
    }
    Outliers {
        rule,
        thresholds,
        shifted,
        count,
        rounds,
    }
}
