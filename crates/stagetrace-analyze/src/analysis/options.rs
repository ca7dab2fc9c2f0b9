//! Tuning of the analysis, and the sample sizes its tests need.

/// Tuning of the analysis. The defaults are the documented rules.
#[derive(Clone, Copy, Debug)]
pub struct AnalyzeOptions {
    /// Seed of the bootstrap (reports are reproducible).
    pub seed: u64,
    /// Outlier rule: a value stands out above `median + k · 1.4826 · MAD`.
    pub outlier_k: f64,
    /// Significance level of each shape test.
    pub alpha: f64,
    /// Most outlier rounds listed per group (all are counted).
    pub max_listed_outliers: usize,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            seed: 0x5eed_57a9e,
            outlier_k: 5.0,
            alpha: 1e-3,
            max_listed_outliers: 200,
        }
    }
}

/// Fewest values a shape or periodicity test runs on.
pub(crate) const MIN_N: usize = 20;

/// The records' resolution (ms): figures are written with 1 µs resolution.
pub(crate) const RESOLUTION_MS: f64 = 0.001;

/// Share of the e2e median a change must cost the call to enter a verdict.
pub(crate) const MIN_COST_SHARE: f64 = 0.01;

/// The smallest change (ms) worth a verdict or an outlier: 1 % of the e2e
/// median and ten times the records' resolution (`docs/report.md`,
/// "What counts"). Smaller changes stay in the tables.
pub(crate) fn min_cost_ms(e2e_median: f64) -> f64 {
    let share = if e2e_median.is_finite() {
        MIN_COST_SHARE * e2e_median
    } else {
        0.0
    };
    share.max(10.0 * RESOLUTION_MS)
}
