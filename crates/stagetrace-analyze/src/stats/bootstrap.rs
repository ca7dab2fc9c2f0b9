//! Bootstrap intervals for the ratio of two quantiles.

use serde::Serialize;

use super::order::quantile;
use super::rng::SplitMix64;

/// Ratio `after_q / before_q` of one quantile with a 95 % bootstrap interval
/// and a bootstrap p-value for "ratio = 1".
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RatioCi {
    /// The quantile compared (0.5, 0.99…).
    pub q: f64,
    /// Quantile of the reference sample (ms).
    pub before: f64,
    /// Quantile of the other sample (ms).
    pub after: f64,
    /// `after / before`.
    pub ratio: f64,
    /// Lower 95 % bound of the ratio.
    pub lo: f64,
    /// Upper 95 % bound of the ratio.
    pub hi: f64,
    /// Two-sided bootstrap p-value of "no change".
    pub p: f64,
}

/// Bootstrap iterations for quantile ratios (bounded: cost is O(B) on large
/// samples, O(B·n) on small ones).
pub const BOOTSTRAP_ITERATIONS: usize = 2000;
/// Samples up to this size are resampled value by value; larger ones draw
/// the resample's order statistic directly (its index is binomial, ≈ normal).
const PLAIN_BOOTSTRAP_MAX: usize = 1000;

/// Bootstrap interval for the ratio of the q-quantiles of two sorted samples.
pub fn quantile_ratio(before: &[f32], after: &[f32], q: f64, seed: u64) -> Option<RatioCi> {
    if before.is_empty() || after.is_empty() {
        return None;
    }
    let b = quantile(before, q);
    let a = quantile(after, q);
    let ratio = safe_ratio(a, b);
    let (lo, hi, p) = replicate(before, after, q, seed ^ q.to_bits(), safe_ratio, 1.0);
    Some(RatioCi {
        q,
        before: b,
        after: a,
        ratio,
        lo,
        hi,
        p,
    })
}

/// Difference `after_q − before_q` of one quantile (ms) with a 95 %
/// bootstrap interval and a bootstrap p-value for "no change".
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DiffCi {
    /// The quantile compared.
    pub q: f64,
    /// Quantile of the reference sample (ms).
    pub before: f64,
    /// Quantile of the other sample (ms).
    pub after: f64,
    /// `after − before` (ms).
    pub diff: f64,
    /// Lower 95 % bound of the difference (ms).
    pub lo: f64,
    /// Upper 95 % bound of the difference (ms).
    pub hi: f64,
    /// Two-sided bootstrap p-value of "no change".
    pub p: f64,
}

/// Bootstrap interval for the difference of the q-quantiles of two sorted
/// samples: for signed figures (lateness, a clock offset), whose ratio means
/// nothing when a value crosses zero.
pub fn quantile_diff(before: &[f32], after: &[f32], q: f64, seed: u64) -> Option<DiffCi> {
    if before.is_empty() || after.is_empty() {
        return None;
    }
    let b = quantile(before, q);
    let a = quantile(after, q);
    let (lo, hi, p) = replicate(
        before,
        after,
        q,
        seed ^ q.to_bits() ^ 0xd1ff,
        |qa, qb| qa - qb,
        0.0,
    );
    Some(DiffCi {
        q,
        before: b,
        after: a,
        diff: a - b,
        lo,
        hi,
        p,
    })
}

/// [`BOOTSTRAP_ITERATIONS`] replicates of `stat(after_q, before_q)`: the
/// 95 % interval (lo, hi) and the two-sided p-value of "the statistic is
/// `null`" (1 for a ratio, 0 for a difference).
fn replicate(
    before: &[f32],
    after: &[f32],
    q: f64,
    seed: u64,
    stat: impl Fn(f64, f64) -> f64,
    null: f64,
) -> (f64, f64, f64) {
    let mut rng = SplitMix64::new(seed);
    let mut reps: Vec<f64> = Vec::with_capacity(BOOTSTRAP_ITERATIONS);
    let mut scratch: Vec<f32> = Vec::new();
    for _ in 0..BOOTSTRAP_ITERATIONS {
        let qb = boot_quantile(before, q, &mut rng, &mut scratch);
        let qa = boot_quantile(after, q, &mut rng, &mut scratch);
        reps.push(stat(qa, qb));
    }
    reps.sort_unstable_by(f64::total_cmp);
    let at = |p: f64| reps[((p * reps.len() as f64) as usize).min(reps.len() - 1)];
    let below = reps.iter().filter(|r| **r <= null).count() as f64;
    let above = reps.iter().filter(|r| **r >= null).count() as f64;
    let n = reps.len() as f64;
    let p = ((2.0 * below.min(above) + 1.0) / (n + 1.0)).min(1.0);
    (at(0.025), at(0.975), p)
}

fn safe_ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else if a > 0.0 {
        f64::INFINITY
    } else {
        1.0
    }
}

/// One bootstrap replicate of the q-quantile of a sorted sample.
fn boot_quantile(sorted: &[f32], q: f64, rng: &mut SplitMix64, scratch: &mut Vec<f32>) -> f64 {
    let n = sorted.len();
    if n <= PLAIN_BOOTSTRAP_MAX {
        scratch.clear();
        scratch.extend((0..n).map(|_| sorted[rng.below(n)]));
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
        let (_, v, _) = scratch.select_nth_unstable_by(rank, f32::total_cmp);
        return f64::from(*v);
    }
    // In a resample of n, the count of values at or below sorted[i] is
    // Binomial(n, (i+1)/n); the resample's quantile of rank r sits at the
    // index where that count reaches r, ≈ r + sqrt(n q (1-q))·Z.
    let nf = n as f64;
    let rank = (q * nf).ceil().clamp(1.0, nf);
    let sd = (nf * q * (1.0 - q)).sqrt();
    let idx = (rank - 1.0 + sd * rng.normal())
        .round()
        .clamp(0.0, nf - 1.0) as usize;
    f64::from(sorted[idx])
}
