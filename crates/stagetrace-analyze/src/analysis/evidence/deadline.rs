//! Deadline misses over the partitions: the misses and the calls that
//! carry a deadline summed, `deadline_verdict.rs`'s rule applied to the
//! sums, the cause as the partition with the most misses gives it.

use serde::{Deserialize, Serialize};
use stagetrace_schema::Figure;

use super::super::deadline_verdict::{deadline_sentence, miss_count};
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
    /// that gave one.
    best: Option<BestMiss>,
}

/// A partition's `deadline_misses` verdict, its count left out: the
/// merged sentence is `before` + the summed count + `after`, built from
/// the same parts the partition's own sentence was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BestMiss {
    misses: u64,
    before: String,
    after: String,
    evidence: serde_json::Value,
}

impl BestMiss {
    /// Which of two partitions' verdicts the merge keeps: the most misses,
    /// then the sentence and the numbers (so any order merges alike).
    fn key(&self) -> (u64, &str, &str, String) {
        (
            self.misses,
            &self.before,
            &self.after,
            self.evidence.to_string(),
        )
    }

    /// The sentence with `count` in its place.
    fn sentence(&self, count: &str) -> String {
        format!("{}{count}{}", self.before, self.after)
    }
}

/// Stands for the count while a partition's sentence is cut around it:
/// no sentence has a NUL of its own.
const COUNT_MARK: &str = "\u{0}";

/// One group's deadline evidence, when its calls carry deadlines.
pub(super) fn tally(g: &GroupReport) -> Option<DeadlineTally> {
    let d = g.rate.deadline.as_ref()?;
    let best = g
        .verdicts
        .iter()
        .find(|v| v.code == DEADLINE_CODE)
        .and_then(|v| {
            let marked = deadline_sentence(g, COUNT_MARK);
            let (before, after) = marked.split_once(COUNT_MARK)?;
            Some(BestMiss {
                misses: d.misses,
                before: before.to_owned(),
                after: after.to_owned(),
                evidence: v.evidence.clone(),
            })
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
        if let Some(theirs) = &other.best {
            if self
                .best
                .as_ref()
                .is_none_or(|mine| theirs.key() > mine.key())
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
        let count = miss_count(self.misses, self.calls);
        let (text, mut evidence) = match &self.best {
            None => (
                format!("{count} missed their tick's deadline."),
                serde_json::json!({}),
            ),
            Some(best) if best.evidence.get("cause").is_none() => (
                format!("{count} missed their tick's deadline."),
                best.evidence.clone(),
            ),
            Some(best) if best.misses == self.misses => {
                (best.sentence(&count), best.evidence.clone())
            }
            Some(best) => (
                format!(
                    "{} (Why, and what carries the time: as the partition with the most misses, {}, says it.)",
                    best.sentence(&count),
                    best.misses
                ),
                best.evidence.clone(),
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
