//! The calls that stand out: spikes by stage, second modes, periodic
//! patterns and the gap's single stalls.

use std::collections::BTreeMap;

use serde::Serialize;

use super::HostCause;

/// Rounds that stand out.
#[derive(Clone, Debug, Serialize)]
pub struct Outliers {
    /// The rule in words.
    pub rule: String,
    /// Per-stage threshold (ms) above which a value stands out.
    pub thresholds: BTreeMap<&'static str, f64>,
    /// Figures whose whole run moved past the baseline's threshold (its
    /// median is above it), with the shift of the median (ms): the run
    /// shifted as a whole, and its rounds are measured against its own
    /// median instead. Empty without a baseline.
    pub shifted: BTreeMap<&'static str, f64>,
    /// Rounds with at least one stage above its threshold.
    pub count: u64,
    /// Per figure: the rounds where it was above its threshold, and their
    /// mean value (ms). Every round counts, not only the listed ones.
    pub by_stage: BTreeMap<&'static str, StageSpikes>,
    /// The first rounds, in time order (at most the configured number).
    pub rounds: Vec<OutlierRound>,
    /// Per figure: the calls it spiked on (indices into the dataset, in
    /// order) and its values there (ms), for the verdicts that ask whether
    /// two figures spiked on the same calls.
    #[serde(skip)]
    pub(crate) spike_calls: BTreeMap<&'static str, Vec<(u32, f32)>>,
}

impl Outliers {
    /// The share of `calls` (dataset indices) on which `sum` spiked above
    /// `above` ms (0 when `calls` is empty or `sum` never spiked).
    pub(crate) fn share_within(&self, calls: &[u32], sum: &str, above: f64) -> f64 {
        let Some(s) = self.spike_calls.get(sum) else {
            return 0.0;
        };
        if calls.is_empty() {
            return 0.0;
        }
        let shared = calls
            .iter()
            .filter(|&&i| {
                s.binary_search_by_key(&i, |&(j, _)| j)
                    .is_ok_and(|k| f64::from(s[k].1) > above)
            })
            .count();
        shared as f64 / calls.len() as f64
    }

    /// How far the whole run shifted (ms): the e2e median's shift when e2e
    /// moved as a whole, else the largest shift of a figure that did.
    /// `None` when no figure moved as a whole (or without a baseline).
    pub fn whole_run_shift(&self) -> Option<f64> {
        self.shifted
            .get("e2e")
            .copied()
            .or_else(|| self.shifted.values().copied().reduce(f64::max))
    }
}

/// How often one figure stood out, and by how much.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StageSpikes {
    /// Rounds with this figure above its threshold.
    pub rounds: u64,
    /// Mean of those values (ms).
    pub mean_ms: f64,
    /// The host figure that explains these spikes, when one does (the
    /// same calls' run-queue wait, CPU stall or GC, on the end that can
    /// delay this figure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostCause>,
}

/// One round that stands out.
#[derive(Clone, Debug, Serialize)]
pub struct OutlierRound {
    /// The record's `seq`.
    pub seq: u64,
    /// Wall time of the call (ms since the epoch).
    pub ts_unix_ms: f64,
    /// The same as UTC ISO-8601.
    pub time: String,
    /// The call's e2e (ms).
    pub e2e_ms: f64,
    /// Stages above their threshold.
    pub stages: Vec<OutlierStage>,
    /// The robot that made the call (`--per-robot`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub robot: Option<String>,
    /// The call's index in the dataset (to find its robot).
    #[serde(skip)]
    pub index: usize,
}

/// A stage value above its threshold.
#[derive(Clone, Debug, Serialize)]
pub struct OutlierStage {
    /// Stage name.
    pub stage: &'static str,
    /// The value (ms).
    pub value_ms: f64,
    /// The threshold it crossed (ms).
    pub threshold_ms: f64,
}

/// A figure whose distribution has a second mode: more than a tenth of the
/// calls above its outlier threshold, not periodic.
#[derive(Clone, Debug, Serialize)]
pub struct SecondMode {
    /// Stage name.
    pub stage: &'static str,
    /// Calls in the second mode.
    pub calls: u64,
    /// Their share of the steady calls.
    pub share: f64,
    /// The figure's median (ms).
    pub median_ms: f64,
    /// Mean of the second mode's values less the median (ms).
    pub excess_ms: f64,
    /// True when it adds at least a tenth of the e2e median to its calls:
    /// then a verdict (`second_mode`), otherwise a line in the tables.
    pub matters: bool,
    /// The host figure that explains the second mode's calls, if one does
    /// (then the verdict names the host, not the stage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostCause>,
}

/// Whether one stage's spikes recur with a period.
#[derive(Clone, Debug, Serialize)]
pub struct Periodicity {
    /// Stage name.
    pub stage: &'static str,
    /// Spike events (adjacent spiking calls merged).
    pub spikes: u64,
    /// Median inter-spike interval (s).
    pub isi_median_s: f64,
    /// Robust spread of the inter-spike intervals (1.4826·MAD / median).
    pub isi_cv: f64,
    /// Lag of the autocorrelation peak (s).
    pub acf_lag_s: f64,
    /// Autocorrelation of the spike series at that lag.
    pub acf: f64,
    /// Level the autocorrelation had to clear (`max(0.25, 5/√bins)`).
    pub acf_threshold: f64,
    /// Fraction of inter-spike intervals within ±20 % of the period.
    pub isi_on_period: f64,
    /// True when the spikes recur with a period.
    pub significant: bool,
    /// The period (s) when significant.
    pub period_s: Option<f64>,
    /// The period in calls when the spikes fall on every n-th call exactly
    /// (at least 80 % of the intervals).
    pub period_calls: Option<u64>,
    /// Each spike event's first call (indices into the dataset, in order).
    #[serde(skip)]
    pub(crate) event_calls: Vec<u32>,
}

/// Share of the e2e variance each part explains (`cov(part, e2e) / var(e2e)`).
#[derive(Clone, Debug, Serialize)]
pub struct GapReport {
    /// Calls used.
    pub n: u64,
    /// e2e standard deviation (ms).
    pub e2e_stddev_ms: f64,
    /// e2e median (ms).
    pub e2e_median_ms: f64,
    /// Share per part (they sum to ≈ 1 when the parts add up to e2e).
    pub shares: BTreeMap<&'static str, f64>,
    /// Share of the gap (time no stage covers).
    pub gap_share: f64,
    /// Share of the observer's own cost (part of the gap).
    pub observer_share: f64,
    /// True when e2e jitters (σ ≥ 1 % of the median) and the gap explains
    /// ≥ half of it, with the worst calls (and so the stalls) set aside.
    pub unexplained: bool,
    /// Calls that stalled: a pause outside every stage at least as long
    /// as the median call (each one an event, named with its call; none
    /// once they are frequent enough to be spikes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<Stall>,
}

/// One call that paused outside every stage (its gap) for at least a
/// median call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stall {
    /// The record's `seq`.
    pub seq: u64,
    /// Wall time of the call (ms since the epoch).
    pub ts_unix_ms: f64,
    /// The same as UTC ISO-8601.
    pub time: String,
    /// Its gap (ms).
    pub gap_ms: f64,
    /// Its gap over the median call's gap (ms).
    pub excess_ms: f64,
    /// Its e2e (ms).
    pub e2e_ms: f64,
    /// How late it ended against its tick's deadline (ms), with a target rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_ms: Option<f64>,
    /// The robot's host figures on that call above their median by at
    /// least half the excess, largest first: what held the robot (ms).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host: Vec<(&'static str, f64)>,
    /// The records carry host figures (so none explaining it says something).
    #[serde(skip)]
    pub host_measured: bool,
}
