//! Rounds that stand out: calls with a figure of the call's own time above
//! its threshold.

use std::collections::BTreeMap;

use stagetrace_schema::Figure;

use super::group::GroupData;
use super::host_cause::host_cause;
use super::options::AnalyzeOptions;
use super::report::{OutlierRound, OutlierStage, Outliers, StageSpikes};
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
    // (rounds, sum of values) per figure, by index.
    let mut per_figure = [(0u64, 0.0f64); stagetrace_schema::FIGURE_COUNT];
    // The calls each figure spiked on (indices into the dataset).
    let mut spike_calls: Vec<Vec<usize>> = vec![Vec::new(); stagetrace_schema::FIGURE_COUNT];
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
                let slot = &mut per_figure[f.index()];
                slot.0 += 1;
                slot.1 += v;
                spike_calls[f.index()].push(i);
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
                robot: None,
                index: i,
            });
        }
    }
    let by_stage = Figure::ALL
        .into_iter()
        .filter_map(|f| {
            let (n, sum) = per_figure[f.index()];
            (n > 0).then(|| {
                (
                    f.name(),
                    StageSpikes {
                        rounds: n,
                        mean_ms: sum / n as f64,
                        host: host_cause(ds, g, f, &spike_calls[f.index()]),
                    },
                )
            })
        })
        .collect();
    Outliers {
        rule,
        thresholds,
        shifted,
        count,
        by_stage,
        rounds,
    }
}
