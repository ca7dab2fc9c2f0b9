//! Mergeable per-partition summaries: the analysis of a fleet's month in
//! bounded memory (`docs/records.md`, "A fleet's month").
//!
//! A [`Summary`] holds, per kind × figure, an HdrHistogram of the figure's
//! values in integer nanoseconds at 3 significant figures (a quantile read
//! from it is within [`RELATIVE_ERROR`], 2^-10 ≈ 0.1 %, of the exact order
//! statistic by the same nearest-rank rule as [`crate::stats::quantile`]),
//! its exact largest value and exact counts above [`THRESHOLDS_MS`]; the
//! calls, warm-up and failed calls with their reasons, the deadline
//! evidence, the time range, the robots seen and the [`TOP_K`] slowest calls
//! by e2e. Warm-up and failed calls are kept out of the figures exactly as
//! [`crate::analysis::group_data`] keeps them out.
//!
//! [`Summary::merge`] is exact, associative and commutative: the merged
//! summary of any grouping and order of partitions writes the same bytes
//! ([`Summary::to_bytes`]) as the summary of their union. So a cluster
//! engine (Dask, in the Python package) maps [`Summary::of`] over the
//! partitions and reduces with `merge`; `stagetrace summarize` does the
//! same on one machine, one file at a time.

mod of;
mod report;
mod sketch;
#[cfg(test)]
mod tests;
mod text;

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::analysis::VerdictEvidence;

pub use report::{
    DamagedFile, SummaryGroup, SummaryReport, SummaryStage, QUANTILE_METHOD, REPORT_SCHEMA,
};
pub use sketch::{RELATIVE_ERROR, SIGFIG, THRESHOLDS_MS};

use sketch::{Sketch, MAX_COUNT};

/// The format tag of [`Summary::to_bytes`]; [`Summary::from_bytes`] reads
/// this one only.
pub const SUMMARY_FORMAT: &str = "stagetrace-summary/1";
/// How many of the slowest calls (by e2e) a summary keeps.
pub const TOP_K: usize = 20;
/// Most failure reasons kept by name: the first ones in alphabetical order
/// (a rule that gives the same names whatever the order of merges); the
/// rest are counted as `other`.
pub const MAX_REASONS: usize = 32;
/// Most damaged files kept by name (the first by path, as the reasons);
/// the rest are counted.
pub const MAX_DAMAGED: usize = 32;

/// Why a summary's bytes could not be read, or two summaries merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryError {
    /// What is wrong, for a message.
    pub reason: String,
}

impl std::fmt::Display for SummaryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for SummaryError {}

fn error(reason: impl Into<String>) -> SummaryError {
    SummaryError {
        reason: reason.into(),
    }
}

/// One of the slowest calls, with its stage times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowCall {
    /// The call's e2e (ms).
    pub e2e_ms: f64,
    /// The robot whose file held it ([`robot_of`]).
    pub robot: String,
    /// Its `kind`.
    pub kind: String,
    /// Its `seq`.
    pub seq: u64,
    /// Its start (Unix ms).
    pub ts_unix_ms: f64,
    /// Every other figure its record carries (ms, by figure name).
    pub stages: BTreeMap<String, f64>,
}

/// Slowest first; ties broken by every field, so the kept calls and their
/// order never depend on the order of merges.
fn slower_first(a: &SlowCall, b: &SlowCall) -> Ordering {
    let stages = |c: &SlowCall| {
        c.stages
            .iter()
            .map(|(k, v)| (k.clone(), v.to_bits()))
            .collect::<Vec<_>>()
    };
    b.e2e_ms
        .total_cmp(&a.e2e_ms)
        .then_with(|| a.robot.cmp(&b.robot))
        .then_with(|| a.ts_unix_ms.total_cmp(&b.ts_unix_ms))
        .then_with(|| a.seq.cmp(&b.seq))
        .then_with(|| a.kind.cmp(&b.kind))
        .then_with(|| stages(a).cmp(&stages(b)))
}

/// One kind's steady calls.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KindSummary {
    steady: u64,
    /// Steady calls whose record says whether it missed its deadline.
    deadline_calls: u64,
    deadline_misses: u64,
    /// By figure name.
    figures: BTreeMap<String, Sketch>,
    /// The verdict evidence of the partitions analysed
    /// ([`Summary::of_analysed`]); absent when none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verdicts: Option<VerdictEvidence>,
}

impl KindSummary {
    fn merge(&mut self, other: &KindSummary) -> Result<(), SummaryError> {
        self.steady = self.steady.saturating_add(other.steady);
        self.deadline_calls = self.deadline_calls.saturating_add(other.deadline_calls);
        self.deadline_misses = self.deadline_misses.saturating_add(other.deadline_misses);
        for (name, s) in &other.figures {
            match self.figures.get_mut(name) {
                Some(mine) => mine.merge(s).map_err(error)?,
                None => {
                    self.figures.insert(name.clone(), s.clone());
                }
            }
        }
        match (self.verdicts.as_mut(), &other.verdicts) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (None, Some(theirs)) => self.verdicts = Some(theirs.clone()),
            (_, None) => {}
        }
        Ok(())
    }
}

/// The mergeable summary of one partition, or of many merged.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    format: String,
    calls: u64,
    warmup: u64,
    failed: u64,
    reasons: BTreeMap<String, u64>,
    other_reasons: u64,
    first_ts_unix_ms: Option<f64>,
    last_ts_unix_ms: Option<f64>,
    robots: BTreeMap<String, u64>,
    kinds: BTreeMap<String, KindSummary>,
    slowest: Vec<SlowCall>,
    /// Files skipped whole as damaged: path → what is wrong.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    damaged: BTreeMap<String, String>,
    /// Damaged files past [`MAX_DAMAGED`].
    #[serde(default, skip_serializing_if = "is_zero")]
    other_damaged: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Default for Summary {
    fn default() -> Summary {
        Summary {
            format: SUMMARY_FORMAT.to_string(),
            calls: 0,
            warmup: 0,
            failed: 0,
            reasons: BTreeMap::new(),
            other_reasons: 0,
            first_ts_unix_ms: None,
            last_ts_unix_ms: None,
            robots: BTreeMap::new(),
            kinds: BTreeMap::new(),
            slowest: Vec::new(),
            damaged: BTreeMap::new(),
            other_damaged: 0,
        }
    }
}

/// The robot a record file belongs to: the value of its nearest `robot=`
/// directory (a Parquet tree's partition), else the name of the directory
/// it sits in (a run directory), else `unknown`.
pub fn robot_of(path: &Path) -> String {
    path.ancestors()
        .filter_map(|a| a.file_name()?.to_str()?.strip_prefix("robot="))
        .next()
        .map(str::to_owned)
        .or_else(|| {
            // A bare file name sits in the working directory.
            let parent = match path.parent()? {
                p if p.as_os_str().is_empty() => Path::new("."),
                p => p,
            };
            let named = if parent.file_name().is_some() {
                parent.to_path_buf()
            } else {
                parent.canonicalize().ok()?
            };
            Some(named.file_name()?.to_str()?.to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

impl Summary {
    /// An empty summary: the identity of [`merge`](Self::merge).
    pub fn new() -> Summary {
        Summary::default()
    }

    /// The summary of a file skipped whole as damaged: no call, the file
    /// named with what is wrong, so a merged report says what it left out.
    pub fn damaged(path: &str, reason: &str) -> Summary {
        let mut s = Summary::new();
        s.damaged.insert(path.to_owned(), reason.to_owned());
        s
    }

    /// The files skipped as damaged (by name, the first [`MAX_DAMAGED`]
    /// by path) and how many more.
    pub fn damaged_files(&self) -> (&BTreeMap<String, String>, u64) {
        (&self.damaged, self.other_damaged)
    }

    /// Adds another summary: exact (histogram buckets, counts and the
    /// slowest calls combine without loss), associative and commutative.
    pub fn merge(&mut self, other: &Summary) -> Result<(), SummaryError> {
        self.calls = self.calls.saturating_add(other.calls);
        self.warmup = self.warmup.saturating_add(other.warmup);
        self.failed = self.failed.saturating_add(other.failed);
        for (r, c) in &other.reasons {
            let mine = self.reasons.entry(r.clone()).or_insert(0);
            *mine = mine.saturating_add(*c);
        }
        self.other_reasons = self.other_reasons.saturating_add(other.other_reasons);
        let min = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        let max = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
        self.first_ts_unix_ms = min(self.first_ts_unix_ms, other.first_ts_unix_ms);
        self.last_ts_unix_ms = max(self.last_ts_unix_ms, other.last_ts_unix_ms);
        for (r, c) in &other.robots {
            let mine = self.robots.entry(r.clone()).or_insert(0);
            *mine = mine.saturating_add(*c);
        }
        for (kind, k) in &other.kinds {
            self.kinds.entry(kind.clone()).or_default().merge(k)?;
        }
        self.slowest.extend(other.slowest.iter().cloned());
        for (path, why) in &other.damaged {
            self.damaged.insert(path.clone(), why.clone());
        }
        self.other_damaged = self.other_damaged.saturating_add(other.other_damaged);
        self.trim_slowest();
        self.trim_reasons();
        Ok(())
    }

    /// Merges summaries in the order given (any order gives the same).
    pub fn merge_all<'a>(
        summaries: impl IntoIterator<Item = &'a Summary>,
    ) -> Result<Summary, SummaryError> {
        let mut out = Summary::new();
        for s in summaries {
            out.merge(s)?;
        }
        Ok(out)
    }

    fn trim_slowest(&mut self) {
        self.slowest.sort_by(slower_first);
        self.slowest.truncate(TOP_K);
    }

    /// Keeps the [`MAX_REASONS`] first reasons by name; counts the rest as
    /// other. Associative: a reason among the first of the union is among
    /// the first of every part holding it, so no part ever pooled it.
    fn trim_reasons(&mut self) {
        while self.reasons.len() > MAX_REASONS {
            if let Some((_, c)) = self.reasons.pop_last() {
                self.other_reasons = self.other_reasons.saturating_add(c);
            }
        }
        while self.damaged.len() > MAX_DAMAGED {
            if self.damaged.pop_last().is_some() {
                self.other_damaged = self.other_damaged.saturating_add(1);
            }
        }
    }

    /// The summary as bytes (JSON, tagged [`SUMMARY_FORMAT`]): the same
    /// bytes for the same calls, whatever the order of merges.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising plain maps, numbers and strings cannot fail; an empty
        // vector would be refused by `from_bytes`, never misread.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads [`to_bytes`](Self::to_bytes)'s bytes; an error names what is
    /// wrong with a damaged or foreign blob (never a panic).
    pub fn from_bytes(bytes: &[u8]) -> Result<Summary, SummaryError> {
        #[derive(Deserialize)]
        struct Tag {
            format: Option<String>,
        }
        let tag: Tag = serde_json::from_slice(bytes).map_err(|e| {
            error(format!(
                "not a stagetrace summary (not a JSON object: {e}); give what Summary::to_bytes wrote"
            ))
        })?;
        match tag.format.as_deref() {
            Some(SUMMARY_FORMAT) => {}
            Some(other) => {
                return Err(error(format!(
                    "a summary of format {other:?}; this build reads {SUMMARY_FORMAT:?} only \
                     (summarise the partitions again with this version)"
                )))
            }
            None => return Err(error(
                "not a stagetrace summary (no \"format\" tag); give what Summary::to_bytes wrote",
            )),
        }
        let s: Summary = serde_json::from_slice(bytes)
            .map_err(|e| error(format!("a damaged stagetrace summary: {e}")))?;
        s.check()?;
        Ok(s)
    }

    /// What a blob must hold for the merges and the report to be sound.
    fn check(&self) -> Result<(), SummaryError> {
        if [self.calls, self.warmup, self.failed]
            .iter()
            .any(|&c| c > MAX_COUNT)
        {
            return Err(error("a damaged stagetrace summary: a count out of range"));
        }
        if self.reasons.len() > MAX_REASONS || self.damaged.len() > MAX_DAMAGED {
            return Err(error(
                "a damaged stagetrace summary: too many failure reasons",
            ));
        }
        if self.slowest.len() > TOP_K
            || self
                .slowest
                .windows(2)
                .any(|w| slower_first(&w[0], &w[1]) == Ordering::Greater)
        {
            return Err(error(
                "a damaged stagetrace summary: the slowest calls are too many or out of order",
            ));
        }
        let finite = |v: Option<f64>| v.is_none_or(f64::is_finite);
        if !finite(self.first_ts_unix_ms) || !finite(self.last_ts_unix_ms) {
            return Err(error(
                "a damaged stagetrace summary: a time is not a number",
            ));
        }
        Ok(())
    }

    /// Calls summarised (warm-up and failed ones included).
    pub fn calls(&self) -> u64 {
        self.calls
    }
}

/// A value in ms rounded to the records' 1 µs resolution (the dataset holds
/// `f32`: 12.345 would print as 12.345000267028809).
fn micros(v: f32) -> f64 {
    (f64::from(v) * 1000.0).round() / 1000.0
}
