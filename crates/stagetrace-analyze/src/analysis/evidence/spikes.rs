//! A figure's spikes over the partitions: counted, summed and laid at the
//! host that explained them, then judged by `verdict.rs`'s spike rules
//! on the sums.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stagetrace_schema::Figure;

use super::super::host_cause::BLOCKED;
use super::super::host_verdict::Spikes;
use super::super::options::{MIN_SPIKES, SPIKE_SHARE};
use super::super::parts::spiked;
use super::super::report::{GroupReport, HostCause};
use super::super::verdict::spike_verdict;
use super::{ns, MergedVerdict, VerdictEvidence};

/// One figure's spikes over the partitions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SpikeTally {
    /// Calls it spiked on.
    rounds: u64,
    /// Sum of its values on those calls (ns).
    sum_ns: u64,
    /// Lowest and highest threshold they were counted against (ns).
    threshold_ns: (u64, u64),
    /// Spikes of partitions where the figure passed the spike rules and
    /// still got no spike verdict: a cause the records name replaced it.
    replaced_rounds: u64,
    /// Per host figure: the spikes it explained.
    hosts: BTreeMap<String, HostVote>,
}

/// A host figure that explained a figure's spikes in some partitions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostVote {
    /// Spikes of the partitions where it did.
    rounds: u64,
    /// Its medians (on the spike calls, on all calls) in the partition
    /// with the most of them, and that partition's spikes.
    best: (u64, f64, f64),
}

/// Every figure's spikes in one group; `periodic`: the figures whose
/// spikes recur with a period there.
pub(super) fn tally(g: &GroupReport, periodic: &[&str]) -> BTreeMap<String, SpikeTally> {
    let steady = g.steady;
    let mut out = BTreeMap::new();
    for (name, s) in &g.outliers.by_stage {
        let threshold = ns(g.outliers.thresholds.get(name).copied().unwrap_or(0.0));
        let passed = s.rounds >= MIN_SPIKES as u64
            && s.rounds as f64 >= SPIKE_SHARE * steady as f64
            && !periodic.contains(name)
            && Figure::from_name(name).is_some_and(|f| !f.is_host());
        let spoken = g
            .verdicts
            .iter()
            .any(|v| v.from_spikes && v.stage == Some(*name));
        let mut t = SpikeTally {
            rounds: s.rounds,
            sum_ns: ns(s.mean_ms * s.rounds as f64),
            threshold_ns: (threshold, threshold),
            replaced_rounds: if passed && !spoken { s.rounds } else { 0 },
            hosts: BTreeMap::new(),
        };
        if let Some(h) = &s.host {
            t.hosts.insert(
                h.figure.to_owned(),
                HostVote {
                    rounds: s.rounds,
                    best: (s.rounds, h.spike_median_ms, h.median_ms),
                },
            );
        }
        out.insert((*name).to_owned(), t);
    }
    out
}

impl SpikeTally {
    pub(super) fn merge(&mut self, other: &SpikeTally) {
        self.rounds = self.rounds.saturating_add(other.rounds);
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.threshold_ns = (
            self.threshold_ns.0.min(other.threshold_ns.0),
            self.threshold_ns.1.max(other.threshold_ns.1),
        );
        self.replaced_rounds = self.replaced_rounds.saturating_add(other.replaced_rounds);
        for (name, h) in &other.hosts {
            let mine = self.hosts.entry(name.clone()).or_default();
            mine.rounds = mine.rounds.saturating_add(h.rounds);
            let key = |b: &(u64, f64, f64)| (b.0, b.1.to_bits(), b.2.to_bits());
            if key(&h.best) > key(&mine.best) {
                mine.best = h.best;
            }
        }
    }
}

impl SpikeTally {
    /// The spikes' mean value (ms), when there were any.
    fn mean_ms(&self) -> Option<f64> {
        (self.rounds > 0).then(|| self.sum_ns as f64 / self.rounds as f64 / 1e6)
    }

    /// The host figure that explained most of the spikes (more than half),
    /// with its medians from the partition with the most of them.
    fn host_cause(&self) -> Option<HostCause> {
        self.hosts
            .iter()
            .filter(|(_, h)| 2 * h.rounds > self.rounds)
            .find_map(|(name, h)| {
                Some(HostCause {
                    // The robot's voluntary switches are a count, not a
                    // figure (`blocked_wait`).
                    figure: if name == BLOCKED {
                        BLOCKED
                    } else {
                        Figure::from_name(name)?.name()
                    },
                    spike_median_ms: h.best.1,
                    median_ms: h.best.2,
                })
            })
    }
}

impl VerdictEvidence {
    /// The spike rules of `verdict.rs` applied to the merged counts.
    pub(super) fn spike_verdicts(
        &self,
        kind: &str,
        p50_ms: &impl Fn(Figure) -> Option<f64>,
        floor_ms: f64,
    ) -> Vec<MergedVerdict> {
        let periodic = |name: &str| {
            self.periodic_calls
                .get(name)
                .is_some_and(|&c| 2 * u128::from(c) > u128::from(self.steady))
        };
        let flagged: Vec<Figure> = self
            .spikes
            .iter()
            .filter(|(name, t)| {
                t.rounds >= MIN_SPIKES as u64
                    && t.rounds as f64 >= SPIKE_SHARE * self.steady as f64
                    && !periodic(name)
            })
            .filter_map(|(name, _)| Figure::from_name(name))
            .filter(|f| !f.is_host())
            .collect();
        let recurring: Vec<Figure> = self
            .periodic_calls
            .keys()
            .filter(|name| periodic(name))
            .filter_map(|name| Figure::from_name(name))
            .collect();
        let cost = |f: Figure| match (self.spikes.get(f.name()), p50_ms(f)) {
            (Some(t), Some(median)) => t.mean_ms().map_or(0.0, |m| m - median),
            _ => 0.0,
        };
        let mut out = Vec::new();
        for f in spiked(&flagged, &recurring, cost) {
            let (Some(t), Some(median)) = (self.spikes.get(f.name()), p50_ms(f)) else {
                continue;
            };
            let Some(mean_ms) = t.mean_ms() else {
                continue;
            };
            if 2 * t.replaced_rounds > t.rounds {
                continue;
            }
            let cost_ms = mean_ms - median;
            if cost_ms < floor_ms {
                continue;
            }
            let cause = t.host_cause();
            let sp = Spikes {
                kind,
                steady: self.steady,
                f,
                rounds: t.rounds,
                cost_ms,
                median_ms: median,
            };
            let thresholds = (t.threshold_ns.0 as f64 / 1e6, t.threshold_ns.1 as f64 / 1e6);
            let v = spike_verdict(&sp, mean_ms, thresholds, cause.as_ref());
            out.push(MergedVerdict {
                code: v.code.to_owned(),
                kind: v.kind,
                stage: v.stage.map(str::to_owned),
                group: v.group.map(str::to_owned),
                text: v.text,
                evidence: v.evidence,
                share_of_calls: 1.0,
            });
        }
        out
    }
}
