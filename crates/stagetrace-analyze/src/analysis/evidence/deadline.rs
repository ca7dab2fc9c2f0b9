//! Deadline misses over the partitions: the misses and the calls that
//! carry a deadline summed, `deadline_verdict.rs`'s rule applied to the
//! sums, the cause as the partition with the most misses gives it.

use serde::{Deserialize, Serialize};
use stagetrace_schema::Figure;

use super::super::options::SPIKE_SHARE;
use super::super::report::GroupReport;
use super::MergedVerdict;

/// The deadline's verdict: recomputed from the merged counts, never voted.
pub(super) const DEADLINE_CODE: &str = "deadline_misses";

/// Deadline misses over the partitions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeadlineTally {
    /// Calls that carry a deadline.
    calls: u64,
    /// Of those, the misses.
    misses: u64,
    /// The `deadline_misses` verdict of the partition with the most misses
    /// that gave one: its misses, its count as its sentence opens, its
    /// sentence and its numbers.
    best: Option<(u64, String, String, serde_json::Value)>,
}

/// One group's deadline evidence, when its calls carry deadlines.
pub(super) fn tally(g: &GroupReport) -> Option<DeadlineTally> {
    let d = g.rate.deadline.as_ref()?;
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
    Some(DeadlineTally {
        calls: d.calls,
        misses: d.misses,
        best,
    })
}

impl DeadlineTally {
    pub(super) fn merge(&mut self, other: &DeadlineTally) {
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
    pub(super) fn verdict(&self, kind: &str) -> Option<MergedVerdict> {
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
