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

/// Fewest calls that make a verdict, whatever the share: from fewer the
/// rate cannot be told (three in 300 calls fit a true rate from 0.2 % to
/// 3 %), and a host's rare hiccup in a short run is not a stage's fault to
/// chase. They stay in the outlier list.
pub(crate) const MIN_SPIKES: usize = 5;

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

/// Share of the e2e median a spike must add to its call to stand out: a
/// 0.3 ms timer hiccup on a 12 ms stage of a 25 ms call, or a 2 ms host
/// hiccup on 1 % of a 22 ms call's network time, is jitter the tables show,
/// not a fault a user should chase at night (`docs/report.md`, "What
/// counts"). A tenth of the call is: it eats the slack of a loop that runs
/// at 80 % of its period.
pub(crate) const SPIKE_COST_SHARE: f64 = 0.10;

/// The smallest excess over a figure's median (ms) that makes a value an
/// outlier and a spike: [`SPIKE_COST_SHARE`] of the e2e median, and never
/// less than [`min_cost_ms`].
pub(crate) fn spike_floor_ms(e2e_median: f64) -> f64 {
    let share = if e2e_median.is_finite() {
        SPIKE_COST_SHARE * e2e_median
    } else {
        0.0
    };
    share.max(min_cost_ms(e2e_median))
}

/// Share of the steady calls a figure must spike on to be a verdict of its
/// own. Rarer spikes sit beyond the figure's p99, which the table shows as
/// its tail; from 1 % on they set the p99 themselves, so the table cannot
/// show them as spikes and the verdict must.
pub(super) const SPIKE_SHARE: f64 = 0.01;
