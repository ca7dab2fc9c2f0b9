//! Verdicts through the merge path (`docs/records.md`, "A fleet's month"):
//! each partition's exact analysis reduced to the evidence its verdicts
//! stand on, merged across partitions, and the verdicts read off the
//! merged evidence.
//!
//! The analysis of one robot's run is local in time, so a partition (a
//! robot's day, a chunk of it) gets the same verdicts as the whole run,
//! with two exceptions the evidence is shaped for:
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
//! second mode, a starved pool, deadline misses…) is a partition's vote,
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

use super::host_cause::BLOCKED;
use super::host_verdict::Spikes;
use super::options::{min_cost_ms, MIN_SPIKES, SPIKE_SHARE};
use super::report::{GroupReport, HostCause, Report, Verdict, ALL_KINDS};
use super::verdict::{spike_verdict, spiked};

/// Codes a figure's spikes give (`verdict.rs`, `spikes`): recomputed from
/// the merged counts, never voted.
const SPIKE_CODES: [&str; 5] = ["spikes", "host_cpu", "host_gc", "host_log", "blocked_wait"];
/// Codes that say nothing is wrong: what the merge gives when no verdict
/// stands, never voted.
const QUIET: [&str; 2] = ["steady", "no_steady_calls"];
/// The deadline's verdict: recomputed from the merged counts, never voted.
const DEADLINE_CODE: &str = "deadline_misses";
/// Event verdicts: one partition holds the event.
const EVENTS: [&str; 1] = ["stall"];

/// Milliseconds as integer nanoseconds (sums stay exact in any order).
fn ns(ms: f64) -> u64 {
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

/// Deadline misses over the partitions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadlineTally {
    /// Calls that carry a deadline.
    calls: u64,
    /// Of those, the misses.
    misses: u64,
    /// The `deadline_misses` verdict of the partition with the most misses
    /// that gave one: its misses, its count as its sentence opens, its
    /// sentence and its numbers.
    best: Option<(u64, String, String, serde_json::Value)>,
}

/// One figure's spikes over the partitions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpikeTally {
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
        let from_spikes = |v: &Verdict| {
            SPIKE_CODES.contains(&v.code)
                && v.evidence.get("period_s").is_none()
                && !g.modes.iter().any(|m| Some(m.stage) == v.stage)
        };
        for (name, s) in &g.outliers.by_stage {
            let threshold = ns(g.outliers.thresholds.get(name).copied().unwrap_or(0.0));
            let passed = s.rounds >= MIN_SPIKES as u64
                && s.rounds as f64 >= SPIKE_SHARE * steady as f64
                && !periodic.contains(name)
                && Figure::from_name(name).is_some_and(|f| !f.is_host());
            let spoken = g
                .verdicts
                .iter()
                .any(|v| from_spikes(v) && v.stage == Some(*name));
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
            ev.spikes.insert((*name).to_owned(), t);
        }
        for v in g.verdicts.iter().filter(|v| !from_spikes(v)) {
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
        if let Some(d) = &g.rate.deadline {
            let best = g
                .verdicts
                .iter()
                .find(|v| v.code == DEADLINE_CODE)
                .map(|v| {
                    (
                        d.misses,
                        missed(d.misses, d.calls),
                        v.text.clone(),
                        v.evidence.clone(),
                    )
                });
            ev.deadline = Some(DeadlineTally {
                calls: d.calls,
                misses: d.misses,
                best,
            });
        }
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

    /// The spike rules of `verdict.rs` applied to the merged counts.
    fn spike_verdicts(
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
        let mut out = Vec::new();
        for f in spiked(&flagged, &recurring) {
            let (Some(t), Some(median)) = (self.spikes.get(f.name()), p50_ms(f)) else {
                continue;
            };
            if 2 * t.replaced_rounds > t.rounds {
                continue;
            }
            let mean_ms = t.sum_ns as f64 / t.rounds as f64 / 1e6;
            let cost_ms = mean_ms - median;
            if cost_ms < floor_ms {
                continue;
            }
            let cause = t
                .hosts
                .iter()
                .filter(|(_, h)| 2 * h.rounds > t.rounds)
                .find_map(|(name, h)| {
                    Some(HostCause {
                        // The robot's voluntary switches are a count, not
                        // a figure (`blocked_wait`).
                        figure: if name == BLOCKED {
                            BLOCKED
                        } else {
                            Figure::from_name(name)?.name()
                        },
                        spike_median_ms: h.best.1,
                        median_ms: h.best.2,
                    })
                });
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

impl DeadlineTally {
    fn merge(&mut self, other: &DeadlineTally) {
        self.calls = self.calls.saturating_add(other.calls);
        self.misses = self.misses.saturating_add(other.misses);
        let key =
            |b: &(u64, String, String, serde_json::Value)| (b.0, b.2.clone(), b.3.to_string());
        if let Some(theirs) = &other.best {
            if self
                .best
                .as_ref()
                .is_none_or(|mine| key(theirs) > key(mine))
            {
                self.best = Some(theirs.clone());
            }
        }
    }

    /// `deadline_misses` when at least [`SPIKE_SHARE`] of the calls missed
    /// (`deadline_verdict.rs`'s rule, on the sums): the count of the whole,
    /// the cause and the stages that carry the time as the partition with
    /// the most misses gives them.
    fn verdict(&self, kind: &str) -> Option<MergedVerdict> {
        let rate = self.misses as f64 / self.calls.max(1) as f64;
        if !(self.misses > 0 && rate >= SPIKE_SHARE) {
            return None;
        }
        let count = missed(self.misses, self.calls);
        let (text, mut evidence) = match &self.best {
            None => (
                format!("{count} missed their tick's deadline."),
                serde_json::json!({}),
            ),
            Some((_, _, _, evidence)) if evidence.get("cause").is_none() => (
                format!("{count} missed their tick's deadline."),
                evidence.clone(),
            ),
            Some((misses, theirs, text, evidence)) if *misses == self.misses => {
                (text.replacen(theirs, &count, 1), evidence.clone())
            }
            Some((misses, theirs, text, evidence)) => (
                format!(
                    "{} (Why, and what carries the time: as the partition with the most misses, {misses}, says it.)",
                    text.replacen(theirs, &count, 1)
                ),
                evidence.clone(),
            ),
        };
        evidence["misses"] = serde_json::json!(self.misses);
        evidence["calls"] = serde_json::json!(self.calls);
        evidence["miss_rate"] = serde_json::json!(rate);
        Some(MergedVerdict {
            code: DEADLINE_CODE.into(),
            kind: kind.to_owned(),
            stage: Some(Figure::E2e.name().to_owned()),
            group: Some(Figure::E2e.side().as_str().to_owned()),
            text,
            evidence,
            share_of_calls: 1.0,
        })
    }
}

/// How a `deadline_misses` sentence opens: "12 of 300 calls (4.00%)".
fn missed(misses: u64, calls: u64) -> String {
    format!(
        "{misses} of {calls} calls ({:.2}%)",
        100.0 * misses as f64 / calls.max(1) as f64
    )
}

impl SpikeTally {
    fn merge(&mut self, other: &SpikeTally) {
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
