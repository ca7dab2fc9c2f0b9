//! One figure's mergeable distribution: an HdrHistogram of its values in
//! integer nanoseconds at [`SIGFIG`] significant figures, its exact largest
//! value and exact counts above fixed thresholds.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Significant figures of every histogram: values are kept to within a
/// relative error of [`RELATIVE_ERROR`].
pub const SIGFIG: u8 = 3;

/// The largest relative error of a quantile read from a sketch: 3
/// significant figures give 2048 sub-buckets per power of two, so a
/// bucket is at most 1/1024 of its lowest value wide (2^-10 ≈ 0.098 %).
pub const RELATIVE_ERROR: f64 = 1.0 / 1024.0;

/// The thresholds (ms) above which calls are counted exactly, per figure.
pub const THRESHOLDS_MS: [u32; 10] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];

/// Most calls one sketch may count: far above any fleet's, and low enough
/// that no sum of counts can overflow `u64` (a foreign blob's counts are
/// checked against it).
pub(crate) const MAX_COUNT: u64 = 1 << 53;

/// Nanoseconds of a value in ms (the dataset's `f32`), rounded; `None`
/// below zero (counted apart: an HdrHistogram holds no negative value).
pub(crate) fn ns_of(ms: f32) -> Option<u64> {
    let ns = (f64::from(ms) * 1e6).round();
    // `as` saturates: a value past u64 (impossible for the loader's
    // one-day bound) would land in the top bucket, not wrap.
    (ns >= 0.0).then_some(ns as u64)
}

/// A fresh histogram. `Histogram::new(3)` cannot fail (3 is in 0..=5), but
/// its constructor returns a `Result`: `None` keeps this free of panics.
pub(crate) fn new_histogram() -> Option<Histogram<u64>> {
    Histogram::new(SIGFIG).ok()
}

/// One figure of one kind.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "SketchWire", into = "SketchWire")]
pub(crate) struct Sketch {
    pub(crate) hist: Histogram<u64>,
    /// Exact largest value (ns).
    pub(crate) max_ns: u64,
    /// Values below zero (not in the histogram).
    pub(crate) below_zero: u64,
    /// Values above each of [`THRESHOLDS_MS`], exactly.
    pub(crate) above: [u64; THRESHOLDS_MS.len()],
}

impl Sketch {
    pub(crate) fn new() -> Option<Sketch> {
        Some(Sketch {
            hist: new_histogram()?,
            max_ns: 0,
            below_zero: 0,
            above: [0; THRESHOLDS_MS.len()],
        })
    }

    /// Adds one value (ms, as the dataset holds it).
    pub(crate) fn record(&mut self, ms: f32) {
        let Some(ns) = ns_of(ms) else {
            self.below_zero += 1;
            return;
        };
        // Auto-resizing histogram: recording fails only past u64's range
        // of buckets, which `ns_of` cannot produce; such a value is dropped.
        if self.hist.record(ns).is_ok() {
            self.max_ns = self.max_ns.max(ns);
            // The thresholds ascend: past the first one not exceeded, none is.
            for (count, t) in self.above.iter_mut().zip(THRESHOLDS_MS) {
                if ns <= u64::from(t) * 1_000_000 {
                    break;
                }
                *count += 1;
            }
        }
    }

    /// Adds another sketch's counts (exact: bucket counts add).
    pub(crate) fn merge(&mut self, other: &Sketch) -> Result<(), String> {
        self.hist
            .add(&other.hist)
            .map_err(|e| format!("cannot merge histograms: {e:?}"))?;
        self.max_ns = self.max_ns.max(other.max_ns);
        self.below_zero += other.below_zero;
        for (a, b) in self.above.iter_mut().zip(other.above) {
            *a += b;
        }
        Ok(())
    }

    /// Values in the histogram.
    pub(crate) fn n(&self) -> u64 {
        self.hist.len()
    }

    /// The q-quantile by nearest rank (as `stats::quantile`), in ns: the
    /// highest value of the bucket holding that rank, never above the
    /// exact largest value.
    pub(crate) fn quantile_ns(&self, q: f64) -> u64 {
        self.hist.value_at_quantile(q).min(self.max_ns)
    }
}

/// A sketch as it is written: the histogram's non-empty buckets as
/// `[value, count]` pairs in value order (a bucket's highest value), so the
/// bytes depend only on the counts, never on the order of merges or on the
/// histogram's internal size.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SketchWire {
    buckets: Vec<(u64, u64)>,
    max_ns: u64,
    below_zero: u64,
    above: [u64; THRESHOLDS_MS.len()],
}

impl From<Sketch> for SketchWire {
    fn from(s: Sketch) -> SketchWire {
        let buckets = s
            .hist
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        SketchWire {
            buckets,
            max_ns: s.max_ns,
            below_zero: s.below_zero,
            above: s.above,
        }
    }
}

impl TryFrom<SketchWire> for Sketch {
    type Error = String;

    fn try_from(w: SketchWire) -> Result<Sketch, String> {
        let mut hist = new_histogram().ok_or("cannot make a histogram")?;
        let mut total: u64 = w.below_zero;
        let mut last: Option<u64> = None;
        for (value, count) in w.buckets {
            if last.is_some_and(|l| l >= value) {
                return Err("histogram buckets out of order".into());
            }
            last = Some(value);
            total = total.saturating_add(count);
            if count == 0 || total > MAX_COUNT {
                return Err("histogram bucket count out of range".into());
            }
            hist.record_n(value, count)
                .map_err(|e| format!("histogram bucket {value} out of range: {e:?}"))?;
        }
        let max_agrees = if hist.is_empty() {
            w.max_ns == 0
        } else {
            hist.max() == hist.highest_equivalent(w.max_ns)
        };
        if !max_agrees || w.above.iter().any(|&a| a > hist.len()) {
            return Err("sketch counts disagree with its histogram".into());
        }
        Ok(Sketch {
            hist,
            max_ns: w.max_ns,
            below_zero: w.below_zero,
            above: w.above,
        })
    }
}
