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

mod report;
mod sketch;
#[cfg(test)]
mod tests;
mod text;

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use stagetrace_schema::Figure;

use crate::figures;
use crate::load::{Dataset, F_DEADLINE_MISS, F_HAS_DEADLINE};

pub use report::{SummaryGroup, SummaryReport, SummaryStage, QUANTILE_METHOD, REPORT_SCHEMA};
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

    /// Summarises a dataset; each file's calls belong to the robot
    /// [`robot_of`] names after the file's path.
    pub fn of(ds: &Dataset) -> Summary {
        let mut s = Summary::new();
        let read: Vec<Figure> = figures::read().collect();
        for (file, path) in ds.files.iter().enumerate() {
            let robot = robot_of(path);
            let calls = ds.file_calls(file);
            if !calls.is_empty() {
                *s.robots.entry(robot.clone()).or_insert(0) += calls.len() as u64;
            }
            // The e2e a call must reach to be among the slowest kept so far:
            // below it, its stage times are not gathered at all.
            let mut floor = f64::NEG_INFINITY;
            for i in calls {
                s.add_call(ds, i, &robot, &read, floor);
                if s.slowest.len() >= 4 * TOP_K {
                    s.trim_slowest();
                    floor = s.slowest.last().map_or(floor, |c| c.e2e_ms);
                }
            }
        }
        for (reason, count) in &ds.errors {
            *s.reasons.entry(reason.clone()).or_insert(0) += count;
        }
        s.trim_slowest();
        s.trim_reasons();
        s
    }

    fn add_call(&mut self, ds: &Dataset, i: usize, robot: &str, read: &[Figure], floor: f64) {
        self.calls += 1;
        let ts = ds.ts_unix_ms(i);
        if ts.is_finite() {
            self.first_ts_unix_ms = Some(self.first_ts_unix_ms.map_or(ts, |t| t.min(ts)));
            self.last_ts_unix_ms = Some(self.last_ts_unix_ms.map_or(ts, |t| t.max(ts)));
        }
        let (warmup, failed) = (ds.is_warmup(i), ds.is_failed(i));
        self.warmup += u64::from(warmup);
        self.failed += u64::from(failed);
        if warmup || failed {
            // Kept out of the figures, as `analysis::group_data` does.
            return;
        }
        let kind = ds.kind_of(i);
        let k = self.kinds.entry(kind.to_owned()).or_default();
        k.steady += 1;
        let flags = ds.flags.get(i).copied().unwrap_or(0);
        if flags & F_HAS_DEADLINE != 0 {
            k.deadline_calls += 1;
            k.deadline_misses += u64::from(flags & F_DEADLINE_MISS != 0);
        }
        let e2e = ds.value(Figure::E2e, i).map(|v| micros(v as f32));
        let slow = e2e.is_some_and(|e| e >= floor);
        let mut stages = BTreeMap::new();
        for &f in read {
            let Some(&v) = ds.columns.get(f.index()).and_then(|c| c.get(i)) else {
                continue;
            };
            if v.is_nan() {
                continue;
            }
            if !k.figures.contains_key(f.name()) {
                let Some(sketch) = Sketch::new() else {
                    continue;
                };
                k.figures.insert(f.name().to_owned(), sketch);
            }
            if let Some(sketch) = k.figures.get_mut(f.name()) {
                sketch.record(v);
            }
            if slow && f != Figure::E2e {
                stages.insert(f.name().to_owned(), micros(v));
            }
        }
        if let (Some(e2e_ms), true) = (e2e, slow) {
            self.slowest.push(SlowCall {
                e2e_ms,
                robot: robot.to_owned(),
                kind: kind.to_owned(),
                seq: ds.seq(i),
                ts_unix_ms: ts,
                stages,
            });
        }
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
        if self.reasons.len() > MAX_REASONS {
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
