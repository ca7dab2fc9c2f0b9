//! Exact order statistics and the tests the verdicts rest on.
//!
//! Everything works on sorted `f32` columns: percentiles are read off the
//! sorted data (nearest rank, an observed value), Mann–Whitney U is a merge,
//! Hodges–Lehmann is a bisection over pairwise differences, and the quantile
//! ratio interval is a seeded bootstrap.

mod bootstrap;
mod order;
mod rng;
mod significance;
mod sort;
#[cfg(test)]
mod tests;

pub use bootstrap::{quantile_diff, quantile_ratio, DiffCi, RatioCi, BOOTSTRAP_ITERATIONS};
pub use order::{
    cdf_at, count_above, covariance, mean_var, median, median_mad, quantile, thin_sorted,
    Distribution, QUANTILES,
};
pub use rng::SplitMix64;
pub use significance::{
    exceedance, hodges_lehmann, holm, mann_whitney, normal_sf, MannWhitney, Shift,
};
pub use sort::sort_f32;
