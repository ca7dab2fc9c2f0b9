//! Rounds that stand out: calls with a figure of the call's own time above
//! its threshold.

use std::collections::BTreeMap;

use stagetrace_schema::{Figure, FIGURE_COUNT};

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
    let mut tally = Tally::new();
    let call_time: Vec<Figure> = Figure::ALL
        .into_iter()
        .filter(|f| f.is_call_time())
        .collect();
    for &i in &g.calls {
        let i = i as usize;
        let hit = spikes_of_call(ds, g, i, &call_time, &mut tally);
        if hit.is_empty() {
            continue;
        }
        count += 1;
        if rounds.len() < opts.max_listed_outliers {
            rounds.push(OutlierRound {
                seq: ds.seq[i],
                ts_unix_ms: ds.ts[i],
                time: iso_time(ds.ts[i]),
                e2e_ms: ds.value(Figure::E2e, i).unwrap_or(f64::NAN),
                stages: hit,
                robot: None,
                index: i,
            });
        }
    }
    Outliers {
        rule,
        thresholds,
        shifted,
        count,
        by_stage: tally.by_stage(ds, g),
        rounds,
        spike_calls: tally.spike_calls_by_name(),
    }
}

/// Every figure's spikes over a group, by [`Figure::index`].
struct Tally {
    /// Rounds it spiked on, and the sum of its values there (ms).
    per_figure: [(u64, f64); FIGURE_COUNT],
    /// The calls it spiked on (indices into the dataset, as the group
    /// holds them) and its values there (ms).
    spike_calls: Vec<Vec<(u32, f32)>>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            per_figure: [(0, 0.0); FIGURE_COUNT],
            spike_calls: vec![Vec::new(); FIGURE_COUNT],
        }
    }

    /// `f` spiked to `v` ms on call `i`.
    fn add(&mut self, f: Figure, i: usize, v: f64) {
        let slot = &mut self.per_figure[f.index()];
        slot.0 += 1;
        slot.1 += v;
        // The group's calls are u32 indices; a value as the column holds it.
        self.spike_calls[f.index()].push((i as u32, v as f32));
    }

    /// The calls each figure spiked on, sorted (figures that never
    /// spiked left out).
    fn spike_calls_by_name(&mut self) -> BTreeMap<&'static str, Vec<(u32, f32)>> {
        Figure::ALL
            .into_iter()
            .filter_map(|f| {
                let mut calls = std::mem::take(&mut self.spike_calls[f.index()]);
                calls.sort_unstable_by_key(|&(i, _)| i);
                (!calls.is_empty()).then_some((f.name(), calls))
            })
            .collect()
    }

    /// Each figure that spiked: how often, by how much on average, and the
    /// host cause its spike calls share.
    fn by_stage(&self, ds: &Dataset, g: &GroupData) -> BTreeMap<&'static str, StageSpikes> {
        Figure::ALL
            .into_iter()
            .filter_map(|f| {
                let (n, sum) = self.per_figure[f.index()];
                (n > 0).then(|| {
                    (
                        f.name(),
                        StageSpikes {
                            rounds: n,
                            mean_ms: sum / n as f64,
                            host: host_cause(ds, g, f, &calls_of(&self.spike_calls[f.index()])),
                        },
                    )
                })
            })
            .collect()
    }
}

/// The call indices of a figure's spikes.
fn calls_of(spikes: &[(u32, f32)]) -> Vec<usize> {
    spikes.iter().map(|&(i, _)| i as usize).collect()
}

/// The figures of `call_time` above their threshold on call `i`, each
/// counted in `tally`.
fn spikes_of_call(
    ds: &Dataset,
    g: &GroupData,
    i: usize,
    call_time: &[Figure],
    tally: &mut Tally,
) -> Vec<OutlierStage> {
    let mut hit = Vec::new();
    for &f in call_time {
        let (Some(thr), Some(v)) = (g.thresholds[f.index()], ds.value(f, i)) else {
            continue;
        };
        if v > thr {
            tally.add(f, i, v);
            hit.push(OutlierStage {
                stage: f.name(),
                value_ms: v,
                threshold_ms: thr,
            });
        }
    }
    hit
}
