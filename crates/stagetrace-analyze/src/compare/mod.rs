//! `compare BEFORE AFTER`: per-stage change with confidence (`~` when it is
//! noise), and output consistency where records carry an output digest.
//!
//! One file per step: `rows` measures each figure's change (p50 / p90 /
//! p99, the stages' and the hops'), `significance` judges them all at once
//! (Holm), `one_way` holds uplink / downlink to the clock split's bound,
//! `carry` carries the baseline's clock offset under a drift bound,
//! `answer` says in sentences what changed, `text` draws the tables and
//! `outputs` checks the policy's outputs.

mod answer;
mod carry;
mod one_way;
mod outputs;
mod rows;
mod significance;
mod text;

pub use carry::CarriedOffset;
pub use text::{render, text};

use serde::Serialize;

use stagetrace_schema::Figure;

use crate::analysis::{group_data, inputs_of, Inputs, ALL_KINDS};
use crate::load::Dataset;

/// Version tag of the compare `--json` document.
pub const COMPARE_SCHEMA: &str = "stagetrace-compare/1";

/// Family-wise significance level (Holm over every row of a comparison).
pub const COMPARE_ALPHA: f64 = 0.05;

/// The result of comparing two runs.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// [`COMPARE_SCHEMA`].
    pub schema: &'static str,
    /// The first run.
    pub before: Inputs,
    /// The second run.
    pub after: Inputs,
    /// Per kind.
    pub groups: Vec<GroupComparison>,
    /// Output consistency.
    pub outputs: DigestCheck,
    /// Rows whose change is significant.
    pub significant: u64,
}

/// One kind's comparison.
#[derive(Clone, Debug, Serialize)]
pub struct GroupComparison {
    /// The request kind.
    pub kind: String,
    /// Steady calls before.
    pub before_n: u64,
    /// Steady calls after.
    pub after_n: u64,
    /// The answer, in a few sentences: what changed, largest first, with
    /// the figures (the text prints it first).
    pub summary: Vec<String>,
    /// How far the clock split may put a one-way change on the wrong side
    /// (ms): the median `split_err_ms` of each run that carries one, added.
    /// `null` when neither does (trusted clocks, or no split).
    pub split_err_ms: Option<f64>,
    /// With a drift bound (`compare --drift-ppm`) and estimated clocks:
    /// the one-way changes with the baseline's offset carried, exact but
    /// for the drift. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carried: Option<CarriedOffset>,
    /// One row per stage and statistic.
    pub rows: Vec<Row>,
    /// Calls through gateways: per hop of the records' `hops`, one row per
    /// figure (`up`, `down`, `net`, `relay`) and statistic. Absent without.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hops: Vec<HopRows>,
}

/// One hop's rows.
#[derive(Clone, Debug, Serialize)]
pub struct HopRows {
    /// The hop's number ("hop 2"): the records' `hops[hop − 1]`.
    pub hop: usize,
    /// The node before it (`robot`, a gateway).
    pub from: String,
    /// The node at its end (a gateway, or `server`).
    pub to: String,
    /// One row per figure and statistic; `stage` names the figure.
    pub rows: Vec<Row>,
}

/// One stage statistic, before and after.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Stage name.
    pub stage: &'static str,
    /// `p50`, `p90` or `p99`.
    pub stat: &'static str,
    /// Value before (ms).
    pub before: f64,
    /// Value after (ms).
    pub after: f64,
    /// `%` (a duration: the change as a ratio) or `ms` (a signed figure,
    /// `late` or a clock offset: the change as a difference, since a ratio
    /// of values that cross zero means nothing).
    pub unit: &'static str,
    /// Change in percent (`+20.0` = 20 % slower); `null` for `ms` rows.
    pub delta_pct: f64,
    /// 95 % bootstrap interval of the change, percent; `null` for `ms` rows.
    pub ci_pct: [f64; 2],
    /// Change in ms (`after − before`), every row.
    pub delta_ms: f64,
    /// 95 % bootstrap interval of the difference (ms); `ms` rows only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci_ms: Option<[f64; 2]>,
    /// The smallest change that counts (ms): the report's floor, 1 % of the
    /// first run's e2e median and at least 0.01 ms. A change below it is
    /// never significant, however small its p-value.
    pub min_effect_ms: f64,
    /// p-value: Mann–Whitney for `p50`, bootstrap for the other quantiles.
    pub p: f64,
    /// `mann_whitney` or `bootstrap`.
    pub test: &'static str,
    /// Significant after Holm's correction over all rows at [`COMPARE_ALPHA`],
    /// its interval clear of "no change", and at least `min_effect_ms` —
    /// and, for a one-way figure (`uplink`, `downlink`, a hop's `up` /
    /// `down`), larger than the clock split's bound.
    pub significant: bool,
    /// A one-way figure that moved by the tests but within the clock
    /// split's bound: the move may belong to the other direction, so which
    /// direction moved cannot be told (never `significant`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub direction_unknown: bool,
}

/// Same inputs, same outputs?
#[derive(Clone, Debug, Serialize)]
pub struct DigestCheck {
    /// Calls with a digest on both sides, joined by (kind, seq).
    pub compared: u64,
    /// Of those, equal digests.
    pub matched: u64,
    /// Of those, different digests.
    pub mismatched: u64,
    /// Digests only in the first run.
    pub only_before: u64,
    /// Digests only in the second run.
    pub only_after: u64,
    /// The first mismatches.
    pub mismatches: Vec<Mismatch>,
}

/// One call whose output changed.
#[derive(Clone, Debug, Serialize)]
pub struct Mismatch {
    /// Request kind.
    pub kind: String,
    /// The call's `seq`.
    pub seq: u64,
    /// Digest before.
    pub before: String,
    /// Digest after.
    pub after: String,
}

impl Comparison {
    /// Keeps only the rows of `figures` (the answer stays whole: it says
    /// what changed, whatever the rows shown); hops are dropped.
    pub fn only(&mut self, figures: &[Figure]) {
        for g in &mut self.groups {
            g.rows
                .retain(|r| figures.iter().any(|f| f.name() == r.stage));
            g.hops.clear();
        }
    }
}

impl DigestCheck {
    /// True when some output changed.
    pub fn failed(&self) -> bool {
        self.mismatched > 0
    }
}

/// Compares two runs.
pub fn compare(before: &Dataset, after: &Dataset, seed: u64) -> Comparison {
    compare_with(before, after, seed, None)
}

/// Compares two runs; with `drift_ppm` (the most the two machines' clocks
/// drift apart), a kind on estimated clocks also gets the baseline's offset
/// carried to the run ([`CarriedOffset`]), which names the direction a
/// change of net took when the drift over the time between the runs is
/// smaller than the change.
pub fn compare_with(
    before: &Dataset,
    after: &Dataset,
    seed: u64,
    drift_ppm: Option<f64>,
) -> Comparison {
    let gb = group_data(before);
    let ga = group_data(after);
    let mut groups = Vec::new();
    // Per group, per hop: that hop's clock bound on a change (ms).
    let mut hop_bounds: Vec<Vec<f64>> = Vec::new();
    // Every row's p-value, in row order over all kinds: Holm's correction
    // is over them all.
    let mut pvals = Vec::new();
    for b in gb.iter().filter(|g| g.kind != ALL_KINDS) {
        let Some(a) = ga.iter().find(|a| a.kind == b.kind) else {
            continue;
        };
        let mut group = rows::compare_kind(b, a, seed, &mut pvals);
        if let (Some(ppm), Some(_)) = (drift_ppm, group.split_err_ms) {
            group.carried = carry::carried((before, b), (after, a), ppm);
        }
        hop_bounds.push(one_way::hop_bounds(b, a, group.hops.len()));
        groups.push(group);
    }
    significance::mark(&mut groups, &pvals);
    let mut significant = 0;
    for (g, bounds) in groups.iter_mut().zip(&hop_bounds) {
        one_way::judge(g, bounds);
        significant += significance::count(g);
        g.summary = answer::summary(g);
    }
    Comparison {
        schema: COMPARE_SCHEMA,
        before: inputs_of(before),
        after: inputs_of(after),
        groups,
        outputs: outputs::digests(before, after),
        significant,
    }
}
