//! Distributions: one histogram per figure (µs) with the exact count, min,
//! max and mean kept apart in integer ns.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use crate::record::{round_us, CallRecord};
use stagetrace_schema::{Figure, FIGURE_COUNT};

use super::window::{figures, Quantiles, StageStats};

/// Significant digits of every histogram: values are exact to 0.1 %.
pub const SIGFIG: u8 = 3;

/// Largest value a histogram grows to (one hour in µs); larger values are
/// counted at this value (the exact max is kept apart), bounding memory.
const HIST_CAP: u64 = 3_600_000_000;

/// Record into an auto-resizing histogram, growing it up to [`HIST_CAP`].
fn record_capped(h: &mut Histogram<u64>, v: u64) {
    let v = v.min(HIST_CAP);
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

/// One figure's distribution: a histogram in µs plus the exact count, min,
/// max and sum in integer ns; milliseconds only when the stats are read.
#[derive(Debug)]
struct Dist {
    hist: Histogram<u64>,
    count: u64,
    min_ns: i64,
    max_ns: i64,
    sum_ns: i128,
}

impl Dist {
    fn new() -> Option<Self> {
        Some(Dist {
            hist: Histogram::new(SIGFIG).ok()?,
            count: 0,
            min_ns: i64::MAX,
            max_ns: i64::MIN,
            sum_ns: 0,
        })
    }

    fn record(&mut self, ns: i64) {
        let ns = ns.max(0);
        record_capped(&mut self.hist, (ns as u64).saturating_add(500) / 1000);
        self.count += 1;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        self.sum_ns += i128::from(ns);
    }

    fn quantile_ms(&self, q: f64) -> f64 {
        let ns = i64::try_from(self.hist.value_at_quantile(q))
            .unwrap_or(i64::MAX / 1000)
            .saturating_mul(1000);
        // The histogram reports the top of a bucket; never beyond the exact extremes.
        ms_rounded(ns.clamp(self.min_ns, self.max_ns))
    }

    fn stats(&self) -> Option<StageStats> {
        if self.count == 0 {
            return None;
        }
        let mean_ns = (self.sum_ns / i128::from(self.count)) as i64;
        Some(StageStats {
            count: self.count,
            min: ms_rounded(self.min_ns),
            p50: self.quantile_ms(0.50),
            p90: self.quantile_ms(0.90),
            p99: self.quantile_ms(0.99),
            p99_9: self.quantile_ms(0.999),
            max: ms_rounded(self.max_ns),
            mean: ms_rounded(mean_ns),
        })
    }

    fn reset(&mut self) {
        self.hist.reset();
        self.count = 0;
        self.min_ns = i64::MAX;
        self.max_ns = i64::MIN;
        self.sum_ns = 0;
    }
}

/// ns as ms with µs resolution, rounded exactly as the record writes them,
/// so a summary's min and max equal the records' own values.
fn ms_rounded(ns: i64) -> f64 {
    Figure::E2e.to_unit(ns)
}

/// One [`Dist`] per summarised figure (indexed by [`Figure::index`]),
/// created on first use.
#[derive(Debug)]
pub(crate) struct FigureSet {
    figs: [Option<Dist>; FIGURE_COUNT],
}

// By hand: arrays of more than 32 have no derived `Default`.
impl Default for FigureSet {
    fn default() -> Self {
        FigureSet {
            figs: std::array::from_fn(|_| None),
        }
    }
}

impl FigureSet {
    pub(crate) fn add(&mut self, rec: &CallRecord) {
        for f in figures() {
            let Some(ns) = rec.get(f) else { continue };
            let slot = &mut self.figs[f.index()];
            if slot.is_none() {
                *slot = Dist::new();
            }
            if let Some(d) = slot {
                d.record(ns);
            }
        }
    }

    pub(crate) fn stats(&self) -> BTreeMap<String, StageStats> {
        figures()
            .filter_map(|f| {
                let d = self.figs[f.index()].as_ref()?;
                Some((f.name().to_owned(), d.stats()?))
            })
            .collect()
    }

    pub(crate) fn reset(&mut self) {
        self.figs.iter_mut().flatten().for_each(Dist::reset);
    }
}

/// A plain histogram of non-negative values (µs or ns) for secondary figures.
#[derive(Debug)]
pub(crate) struct Plain(Option<Histogram<u64>>);

impl Plain {
    pub(crate) fn new() -> Self {
        Plain(Histogram::new(SIGFIG).ok())
    }

    pub(crate) fn record(&mut self, v: u64) {
        if let Some(h) = &mut self.0 {
            record_capped(h, v);
        }
    }

    pub(crate) fn quantiles(&self, scale: f64, offset: f64) -> Option<Quantiles> {
        let h = self.0.as_ref().filter(|h| !h.is_empty())?;
        Some(Quantiles {
            p50: round_us(h.value_at_quantile(0.50) as f64 / scale - offset),
            p99: round_us(h.value_at_quantile(0.99) as f64 / scale - offset),
        })
    }

    pub(crate) fn reset(&mut self) {
        if let Some(h) = &mut self.0 {
            h.reset();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn figure_percentiles_within_precision_and_exact_extremes() {
        let mut f = Dist::new().unwrap();
        for i in 1..=1000 {
            f.record(i * 100_000); // 0.1 ms steps
        }
        let s = f.stats().unwrap();
        assert_eq!(s.count, 1000);
        assert_eq!(s.min, 0.1);
        assert_eq!(s.max, 100.0);
        assert!((s.p50 - 50.0).abs() <= 50.0 * 0.001 + 0.001, "{}", s.p50);
        assert!((s.p99 - 99.0).abs() <= 99.0 * 0.001 + 0.001, "{}", s.p99);
        assert!((s.mean - 50.05).abs() < 1e-9);
    }
}
