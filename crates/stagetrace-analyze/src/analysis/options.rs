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
