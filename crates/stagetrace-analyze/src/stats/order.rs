//! Order statistics of sorted columns: percentiles by nearest rank (an
//! observed value), median and MAD, mean and variance, covariance.

use serde::Serialize;

/// The percentiles every table shows.
pub const QUANTILES: [f64; 4] = [0.5, 0.9, 0.99, 0.999];

/// Distribution of one figure: exact, from the raw values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Distribution {
    /// Number of values.
    pub n: u64,
    /// Smallest value (ms).
    pub min: f64,
    /// Median (ms).
    pub p50: f64,
    /// 90th percentile (ms).
    pub p90: f64,
    /// 99th percentile (ms).
    pub p99: f64,
    /// 99.9th percentile (ms).
    pub p999: f64,
    /// Largest value, exact (ms).
    pub max: f64,
    /// Arithmetic mean (ms).
    pub mean: f64,
    /// Standard deviation (ms).
    pub stddev: f64,
}

impl Distribution {
    /// Summarises a sorted column (`None` when empty).
    pub fn of_sorted(sorted: &[f32]) -> Option<Distribution> {
        let (first, last) = (sorted.first()?, sorted.last()?);
        let n = sorted.len() as f64;
        let mean = sorted.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
        let var = sorted
            .iter()
            .map(|v| {
                let d = f64::from(*v) - mean;
                d * d
            })
            .sum::<f64>()
            / n;
        Some(Distribution {
            n: sorted.len() as u64,
            min: f64::from(*first),
            p50: quantile(sorted, 0.5),
            p90: quantile(sorted, 0.9),
            p99: quantile(sorted, 0.99),
            p999: quantile(sorted, 0.999),
            max: f64::from(*last),
            mean,
            stddev: var.sqrt(),
        })
    }

    /// A statistic by the name `--fail-if` and `--json` use
    /// (`n`, `min`, `p50`, `p90`, `p99`, `p999`, `max`, `mean`, `stddev`).
    pub fn get(&self, stat: &str) -> Option<f64> {
        Some(match stat {
            "n" | "count" => self.n as f64,
            "min" => self.min,
            "p50" | "median" => self.p50,
            "p90" => self.p90,
            "p99" => self.p99,
            "p999" | "p99.9" => self.p999,
            "max" => self.max,
            "mean" => self.mean,
            "stddev" => self.stddev,
            _ => return None,
        })
    }
}

/// Mean and population variance in one pass (Welford).
pub fn mean_var(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut n, mut mean, mut m2) = (0.0f64, 0.0f64, 0.0f64);
    for v in values {
        n += 1.0;
        let d = v - mean;
        mean += d / n;
        m2 += d * (v - mean);
    }
    if n == 0.0 {
        (f64::NAN, f64::NAN)
    } else {
        (mean, m2 / n)
    }
}

/// Exact q-quantile of sorted data by nearest rank: the smallest value with
/// at least `q·n` values at or below it (NaN when empty).
pub fn quantile(sorted: &[f32], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let n = sorted.len();
    let rank = (q * n as f64).ceil() as usize;
    let idx = rank.clamp(1, n) - 1;
    f64::from(sorted[idx])
}

/// Median of `values` (sorted in place): the middle value, or the mean of
/// the two middle ones for an even count (not [`quantile`]'s nearest rank);
/// `None` when empty.
pub fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_unstable_by(f64::total_cmp);
    let n = values.len();
    (n > 0).then(|| {
        if n % 2 == 1 {
            values[n / 2]
        } else {
            0.5 * (values[n / 2 - 1] + values[n / 2])
        }
    })
}

/// Fraction of sorted values ≤ `x`.
pub fn cdf_at(sorted: &[f32], x: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = sorted.partition_point(|v| f64::from(*v) <= x);
    k as f64 / sorted.len() as f64
}

/// Number of sorted values strictly above `x`.
pub fn count_above(sorted: &[f32], x: f64) -> usize {
    sorted.len() - sorted.partition_point(|v| f64::from(*v) <= x)
}

/// Median and MAD (median absolute deviation, unscaled) of sorted data.
///
/// The deviations below and above the median form two sorted runs, so the
/// MAD is the k-th smallest of two sorted sequences: O(log n), no copy.
pub fn median_mad(sorted: &[f32]) -> (f64, f64) {
    let n = sorted.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let med = quantile(sorted, 0.5);
    let p = sorted.partition_point(|v| f64::from(*v) < med);
    // a(j): j-th smallest deviation among values below the median (ascending in j)
    let a = |j: usize| med - f64::from(sorted[p - 1 - j]);
    // b(j): j-th smallest deviation among values at or above it
    let b = |j: usize| f64::from(sorted[p + j]) - med;
    let (na, nb) = (p, n - p);
    let k = n.div_ceil(2); // nearest-rank median of the deviations, 1-based
                           // Find how many of the k smallest come from `a`: the largest i with
                           // a(i-1) <= b(k-i) (and feasibility bounds), by bisection.
    let (mut lo, mut hi) = (k.saturating_sub(nb), k.min(na));
    while lo < hi {
        let i = (lo + hi).div_ceil(2);
        // taking i from a needs a(i-1) <= b(k-i) when k-i < nb
        if k - i >= nb || a(i - 1) <= b(k - i) {
            lo = i;
        } else {
            hi = i - 1;
        }
    }
    let i = lo;
    let from_a = if i > 0 { a(i - 1) } else { f64::NEG_INFINITY };
    let from_b = if k > i {
        b(k - i - 1)
    } else {
        f64::NEG_INFINITY
    };
    (med, from_a.max(from_b))
}

/// Evenly spaced order statistics of a sorted sample (at most `k` values):
/// a faithful small copy of the distribution for quadratic-cost estimators.
pub fn thin_sorted(sorted: &[f32], k: usize) -> Vec<f32> {
    if sorted.len() <= k || k == 0 {
        return sorted.to_vec();
    }
    (0..k)
        .map(|i| {
            let idx = ((i as f64 + 0.5) * sorted.len() as f64 / k as f64) as usize;
            sorted[idx.min(sorted.len() - 1)]
        })
        .collect()
}

/// Pearson covariance of two equally long series.
pub fn covariance(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    if n < 2 {
        return f64::NAN;
    }
    let ma = a.iter().take(n).sum::<f64>() / n as f64;
    let mb = b.iter().take(n).sum::<f64>() / n as f64;
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - ma) * (y - mb))
        .sum::<f64>()
        / n as f64
}
