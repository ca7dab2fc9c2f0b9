//! Verdicts through the merge path (`docs/records.md`, "A fleet's month"):
//! each partition's exact analysis reduced to the evidence its verdicts
//! stand on, merged across partitions, and the verdicts read off the
//! merged evidence.
//!
//! The analysis of one robot's run is local in time, so a partition (a
//! robot's day, a chunk of it) gets the same verdicts as the whole run,
//! with three exceptions the evidence is shaped for (`spikes.rs`,
//! `deadline.rs`):
//!
//! - spikes are counted: a stage that spikes on 5 calls of 300 reaches
//!   [`MIN_SPIKES`] only in the whole run, never in a third of it. So each
//!   partition keeps every figure's spike count, the sum of its spike
//!   values and the host figure that explains them, and the merge applies
//!   the spike rules (`verdict.rs`) to the sums;
//! - deadline misses are counted the same way: the misses and the calls
//!   that carry a deadline summed, the rule (`deadline_verdict.rs`) applied
//!   to the sums, the cause as the partition with the most misses gives it;
//! - an event (a `stall`) is in one partition only: kept when any
//!   partition has it.
//!
//! Every other verdict (a median shift against the baseline, a period, a
//! second mode, a starved pool…) is a partition's vote,
//! weighted by its steady calls: kept when the partitions that give it hold
//! more than half of the calls, with the sentence and numbers of the
//! partition with the most calls. A healthy partition outvotes a false
//! alarm of a small one.
//!
//! Merging is exact, associative and commutative: integer counts and
//! nanosecond sums, and "the one with the most calls" broken by a total
//! order, so any grouping and order of partitions gives the same bytes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stagetrace_schema::Figure;

mod deadline;
mod spikes;

use deadline::{DeadlineTally, DEADLINE_CODE};
use spikes::SpikeTally;

use super::options::min_cost_ms;
use super::report::{GroupReport, Report, ALL_KINDS};

/// Codes that say nothing is wrong: what the merge gives when no verdict
/// stands, never voted.
const QUIET: [&str; 2] = ["steady", "no_steady_calls"];
/// Event verdicts: one partition holds the event.
const EVENTS: [&str; 1] = ["stall"];

/// Milliseconds as integer nanoseconds (sums stay exact in any order).
pub(super) fn ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6).round().min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// One kind's verdict evidence, of one partition or of many merged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictEvidence {
    /// Steady calls of the partitions analysed.
    pub(crate) steady: u64,
    /// Steady calls of the partitions analysed against a baseline (their
    /// stages are judged by the median and tail tests, not by spikes).
    baseline_calls: u64,
    /// Steady calls of the partitions whose action queue absorbed the
    /// stages' jitter (no stage verdict stands there).
    absorbed_calls: u64,
    /// Per figure: its spikes.
    spikes: BTreeMap<String, SpikeTally>,
    /// Per figure: steady calls of the partitions where its spikes recur
    /// with a period (its spikes are a `periodic` verdict's, not `spikes`).
    periodic_calls: BTreeMap<String, u64>,
    /// Every other verdict, by code, stage and group.
    votes: BTreeMap<String, Vote>,
    /// Per part of infer: steady calls of the partitions whose p95
    /// bottleneck it is.
    bottleneck_p95: BTreeMap<String, u64>,
    /// The calls that carry a deadline and their misses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deadline: Option<DeadlineTally>,
}

/// A verdict some partitions gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Vote {
    code: String,
    stage: Option<String>,
    group: Option<String>,
    /// Steady calls of the partitions that gave it.
    calls: u64,
    /// The partition with the most calls that gave it: its calls, its
    /// sentence and its numbers.
    best: (u64, String, serde_json::Value),
}

/// A verdict read off merged evidence.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MergedVerdict {
    /// The verdict code (`docs/report.md`, "Verdict codes").
    pub code: String,
    /// The request kind.
    pub kind: String,
    /// The stage it names.
    pub stage: Option<String>,
    /// `client`, `transport`, `server` or `call` (for a host's verdict:
    /// the end whose host it blames).
    pub group: Option<String>,
    /// The sentence: of the whole for spikes, of the partition with the
    /// most calls for a vote (then said so).
    pub text: String,
    /// The numbers behind it.
    pub evidence: serde_json::Value,
    /// Share of the analysed steady calls whose partitions gave it (1 for
    /// spikes, counted over the whole).
    pub share_of_calls: f64,
}

impl VerdictEvidence {
    /// Each kind's evidence of one partition's exact analysis.
    pub fn of_report(report: &Report) -> BTreeMap<String, VerdictEvidence> {
        let has_baseline = report.baseline.is_some();
        report
            .groups
            .iter()
            .filter(|g| g.kind != ALL_KINDS)
            .map(|g| (g.kind.clone(), VerdictEvidence::of_group(g, has_baseline)))
            .collect()
    }

    fn of_group(g: &GroupReport, has_baseline: bool) -> VerdictEvidence {
        let steady = g.steady;
        let mut ev = VerdictEvidence {
            steady,
            ..VerdictEvidence::default()
        };
        if has_baseline {
            ev.baseline_calls = steady;
        }
        let dry = g.verdicts.iter().any(|v| v.code == "queue_ran_dry");
        if g.action_queue.is_some() && !dry && !has_baseline {
            ev.absorbed_calls = steady;
        }
        let periodic: Vec<&str> = g
            .periodicity
            .iter()
            .filter(|p| p.significant)
            .map(|p| p.stage)
            .collect();
        for stage in &periodic {
            ev.periodic_calls.insert((*stage).to_owned(), steady);
        }
        ev.spikes = spikes::tally(g, &periodic);
        // The spike verdicts are recomputed from the merged counts, not voted.
        for v in g.verdicts.iter().filter(|v| !v.from_spikes) {
            if QUIET.contains(&v.code) || v.code == DEADLINE_CODE {
                continue;
            }
            let vote = Vote {
                code: v.code.to_owned(),
                stage: v.stage.map(str::to_owned),
                group: v.group.map(str::to_owned),
                calls: steady,
                best: (steady, v.text.clone(), v.evidence.clone()),
            };
            ev.votes.insert(vote.key(), vote);
        }
        if let Some(p) = &g.infer_parts {
            ev.bottleneck_p95
                .insert(p.bottleneck_p95.to_owned(), steady);
        }
        ev.deadline = deadline::tally(g);
        ev
    }

    /// Adds another partition's evidence (exact, associative, commutative).
    pub fn merge(&mut self, other: &VerdictEvidence) {
        self.steady = self.steady.saturating_add(other.steady);
        self.baseline_calls = self.baseline_calls.saturating_add(other.baseline_calls);
        self.absorbed_calls = self.absorbed_calls.saturating_add(other.absorbed_calls);
        add_calls(&mut self.periodic_calls, &other.periodic_calls);
        add_calls(&mut self.bottleneck_p95, &other.bottleneck_p95);
        match (self.deadline.as_mut(), &other.deadline) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (None, Some(theirs)) => self.deadline = Some(theirs.clone()),
            (_, None) => {}
        }
        for (name, t) in &other.spikes {
            match self.spikes.get_mut(name) {
                Some(mine) => mine.merge(t),
                None => {
                    self.spikes.insert(name.clone(), t.clone());
                }
            }
        }
        for (key, v) in &other.votes {
            match self.votes.get_mut(key) {
                Some(mine) => {
                    mine.calls = mine.calls.saturating_add(v.calls);
                    if best_first(&v.best, &mine.best) {
                        mine.best = v.best.clone();
                    }
                }
                None => {
                    self.votes.insert(key.clone(), v.clone());
                }
            }
        }
    }

    /// The verdicts the merged evidence gives for `kind`, largest cost
    /// first; `p50_ms(f)`: figure `f`'s median over all the calls (the
    /// summary's sketch), `e2e_p50_ms`: the call's.
    pub fn verdicts(
        &self,
        kind: &str,
        p50_ms: impl Fn(Figure) -> Option<f64>,
        e2e_p50_ms: f64,
    ) -> Vec<MergedVerdict> {
        let total = self.steady;
        let most = |calls: u64| 2 * u128::from(calls) > u128::from(total);
        let mut out: Vec<MergedVerdict> = self
            .votes
            .values()
            .filter(|v| v.calls > 0 && (EVENTS.contains(&v.code.as_str()) || most(v.calls)))
            .map(|v| MergedVerdict {
                code: v.code.clone(),
                kind: kind.to_owned(),
                stage: v.stage.clone(),
                group: v.group.clone(),
                text: if v.calls == total {
                    v.best.1.clone()
                } else {
                    format!(
                        "{} (The partitions holding {:.0}% of the calls say so; the sentence and numbers are those of the one with the most, {} calls.)",
                        v.best.1,
                        100.0 * v.calls as f64 / total as f64,
                        v.best.0
                    )
                },
                evidence: v.best.2.clone(),
                share_of_calls: v.calls as f64 / total as f64,
            })
            .collect();
        if !most(self.baseline_calls) && !most(self.absorbed_calls) {
            out.extend(self.spike_verdicts(kind, &p50_ms, min_cost_ms(e2e_p50_ms)));
        }
        out.extend(self.deadline.as_ref().and_then(|d| d.verdict(kind)));
        if out.is_empty() && total > 0 {
            out.push(MergedVerdict {
                code: "steady".into(),
                kind: kind.to_owned(),
                stage: None,
                group: None,
                text: format!(
                    "steady: no verdict stands over the {total} calls analysed partition by partition (no stage spikes on enough of them, no verdict of the partitions holding most of them)."
                ),
                evidence: serde_json::json!({ "calls": total }),
                share_of_calls: 1.0,
            });
        }
        out.sort_by(MergedVerdict::order);
        out
    }

    /// The part of infer the partitions holding most of the calls name as
    /// the p95 bottleneck.
    pub fn bottleneck_p95(&self) -> Option<&str> {
        self.bottleneck_p95
            .iter()
            .find(|(_, &c)| 2 * u128::from(c) > u128::from(self.steady))
            .map(|(part, _)| part.as_str())
    }
}

impl MergedVerdict {
    /// [`super::verdict::verdict_order`] for merged verdicts: what slowed
    /// the call by its cost, largest first; then deadline misses, what got
    /// faster; ties in a fixed order.
    pub fn order(a: &MergedVerdict, b: &MergedVerdict) -> std::cmp::Ordering {
        class(a)
            .cmp(&class(b))
            .then_with(|| cost(b).total_cmp(&cost(a)))
            .then_with(|| a.kind.cmp(&b.kind))
            .then_with(|| a.code.cmp(&b.code))
            .then_with(|| a.stage.cmp(&b.stage))
    }
}

impl Vote {
    fn key(&self) -> String {
        format!(
            "{} {} {}",
            self.code,
            self.stage.as_deref().unwrap_or("-"),
            self.group.as_deref().unwrap_or("-")
        )
    }
}

/// True when `a` is the better representative: more calls, then the text
/// and numbers in a fixed order (so the merge order never decides).
fn best_first(a: &(u64, String, serde_json::Value), b: &(u64, String, serde_json::Value)) -> bool {
    (a.0, &a.1, a.2.to_string()) > (b.0, &b.1, b.2.to_string())
}

fn add_calls(mine: &mut BTreeMap<String, u64>, other: &BTreeMap<String, u64>) {
    for (k, c) in other {
        let m = mine.entry(k.clone()).or_insert(0);
        *m = m.saturating_add(*c);
    }
}

/// [`super::verdict::verdict_order`]'s classes for a merged verdict.
fn class(v: &MergedVerdict) -> u8 {
    match v.code.as_str() {
        "deadline_misses" => 1,
        "faster" => 2,
        "no_steady_calls" => 3,
        "steady" => 4,
        _ => 0,
    }
}

fn cost(v: &MergedVerdict) -> f64 {
    v.evidence["cost_ms"].as_f64().unwrap_or(0.0)
}
