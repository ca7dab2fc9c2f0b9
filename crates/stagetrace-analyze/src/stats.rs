//! Exact order statistics and the tests the verdicts rest on.
//!
//! Everything works on sorted `f32` columns: percentiles are read off the
//! sorted data (nearest rank, an observed value), Mann–Whitney U is a merge,
//! Hodges–Lehmann is a bisection over pairwise differences, and the quantile
//! ratio interval is a seeded bootstrap.

use serde::Serialize;

/// The percentiles every table shows.
pub const QUANTILES: [f64; 4] = [0.5, 0.9, 0.99, 0.999];

/// Distribution of one figure: exact, from the raw values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
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

impl Summary {
    /// Summarises a sorted column (`None` when empty).
    pub fn of_sorted(sorted: &[f32]) -> Option<Summary> {
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
        Some(Summary {
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

/// Sorts finite `f32`s ascending: an LSD radix sort over the IEEE bits
/// (three 11-bit passes), linear time, which keeps `report` at millions of
/// records per second.
pub fn sort_f32(values: &mut [f32]) {
    if values.len() < 256 {
        values.sort_unstable_by(f32::total_cmp);
        return;
    }
    // Map to unsigned keys that sort like the floats.
    let mut keys: Vec<u32> = values
        .iter()
        .map(|v| {
            let b = v.to_bits();
            if b & 0x8000_0000 != 0 {
                !b
            } else {
                b | 0x8000_0000
            }
        })
        .collect();
    let mut tmp = vec![0u32; keys.len()];
    for pass in 0..3 {
        let shift = pass * 11;
        let mut counts = [0usize; 2048];
        for k in &keys {
            counts[((k >> shift) & 0x7ff) as usize] += 1;
        }
        if counts.contains(&keys.len()) {
            continue; // every key shares this digit: nothing to move
        }
        let mut sum = 0;
        for c in counts.iter_mut() {
            let here = *c;
            *c = sum;
            sum += here;
        }
        for k in &keys {
            let d = ((k >> shift) & 0x7ff) as usize;
            tmp[counts[d]] = *k;
            counts[d] += 1;
        }
        std::mem::swap(&mut keys, &mut tmp);
    }
    for (v, k) in values.iter_mut().zip(keys) {
        let b = if k & 0x8000_0000 != 0 {
            k & 0x7fff_ffff
        } else {
            !k
        };
        *v = f32::from_bits(b);
    }
}

/// Standard normal upper tail `P(Z > z)`.
pub fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// Complementary error function (Chebyshev fit, relative error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Result of a Mann–Whitney U test of `after` against `before`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MannWhitney {
    /// U statistic of `after`.
    pub u: f64,
    /// Normal-approximation z (tie-corrected, continuity-corrected); > 0 when `after` is larger.
    pub z: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// Probability that a random `after` value exceeds a random `before` value
    /// (ties count half): 0.5 means no location change.
    pub prob_greater: f64,
}

/// Mann–Whitney U test on two sorted samples, normal approximation with tie
/// correction (the samples here have hundreds to millions of values).
pub fn mann_whitney(before: &[f32], after: &[f32]) -> Option<MannWhitney> {
    let (n1, n2) = (before.len() as f64, after.len() as f64);
    if before.is_empty() || after.is_empty() {
        return None;
    }
    // Merge, assigning mid-ranks to ties; accumulate after's rank sum.
    let (mut i, mut j) = (0usize, 0usize);
    let mut rank = 0.0f64;
    let mut r_after = 0.0f64;
    let mut tie_term = 0.0f64;
    while i < before.len() || j < after.len() {
        let v = match (before.get(i), after.get(j)) {
            (Some(a), Some(b)) => a.min(*b),
            (Some(a), None) => *a,
            (None, Some(b)) => *b,
            (None, None) => break,
        };
        let mut ca = 0usize;
        while before.get(i) == Some(&v) {
            ca += 1;
            i += 1;
        }
        let mut cb = 0usize;
        while after.get(j) == Some(&v) {
            cb += 1;
            j += 1;
        }
        let t = (ca + cb) as f64;
        let mid = rank + (t + 1.0) / 2.0;
        r_after += mid * cb as f64;
        tie_term += t * t * t - t;
        rank += t;
    }
    let u = r_after - n2 * (n2 + 1.0) / 2.0;
    let mu = n1 * n2 / 2.0;
    let n = n1 + n2;
    let var = n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)).max(1.0));
    let (z, p) = if var > 0.0 {
        let d = u - mu;
        let cc = if d > 0.0 {
            (d - 0.5).max(0.0)
        } else {
            (d + 0.5).min(0.0)
        };
        let z = cc / var.sqrt();
        (z, (2.0 * normal_sf(z.abs())).min(1.0))
    } else {
        (0.0, 1.0)
    };
    Some(MannWhitney {
        u,
        z,
        p,
        prob_greater: u / (n1 * n2),
    })
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

/// Hodges–Lehmann shift estimate (median of all `after − before`
/// differences) with its distribution-free 95 % interval (Moses).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Shift {
    /// Estimated shift (ms), positive when `after` is slower.
    pub estimate: f64,
    /// Lower 95 % bound (ms).
    pub lo: f64,
    /// Upper 95 % bound (ms).
    pub hi: f64,
}

/// Hodges–Lehmann on sorted samples; large samples are thinned to 4000
/// order statistics each (the interval then widens: conservative).
pub fn hodges_lehmann(before: &[f32], after: &[f32]) -> Option<Shift> {
    let x = thin_sorted(before, 4000);
    let y = thin_sorted(after, 4000);
    if x.is_empty() || y.is_empty() {
        return None;
    }
    let (n, m) = (x.len() as f64, y.len() as f64);
    let total = n * m;
    let half = 1.96 * (n * m * (n + m + 1.0) / 12.0).sqrt();
    let k_mid = (total / 2.0).ceil().max(1.0);
    let k_lo = (total / 2.0 - half).floor().max(1.0);
    let k_hi = (total / 2.0 + half).ceil().min(total);
    Some(Shift {
        estimate: kth_difference(&x, &y, k_mid as u64),
        lo: kth_difference(&x, &y, k_lo as u64),
        hi: kth_difference(&x, &y, k_hi as u64),
    })
}

/// The k-th smallest (1-based) of the differences `y_j − x_i`, by bisection.
fn kth_difference(x: &[f32], y: &[f32], k: u64) -> f64 {
    let (Some(x0), Some(x1), Some(y0), Some(y1)) = (x.first(), x.last(), y.first(), y.last())
    else {
        return f64::NAN;
    };
    let mut lo = f64::from(*y0) - f64::from(*x1);
    let mut hi = f64::from(*y1) - f64::from(*x0);
    // count of pairs with y - x <= d
    let count = |d: f64| -> u64 {
        let mut c = 0u64;
        let mut i = 0usize; // first x with x >= y - d
        for &yv in y {
            let t = f64::from(yv) - d;
            while i < x.len() && f64::from(x[i]) < t {
                i += 1;
            }
            c += (x.len() - i) as u64;
        }
        c
    };
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if count(mid) >= k {
            hi = mid;
        } else {
            lo = mid;
        }
        if hi - lo <= 1e-6 * (hi.abs().max(lo.abs()).max(1e-3)) {
            break;
        }
    }
    hi
}

/// Seeded SplitMix64: reproducible reports, no dependency.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform index in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.next_f64().max(1e-300);
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

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
    let mut rng = SplitMix64::new(seed ^ q.to_bits());
    let mut reps: Vec<f64> = Vec::with_capacity(BOOTSTRAP_ITERATIONS);
    let mut scratch: Vec<f32> = Vec::new();
    for _ in 0..BOOTSTRAP_ITERATIONS {
        let qb = boot_quantile(before, q, &mut rng, &mut scratch);
        let qa = boot_quantile(after, q, &mut rng, &mut scratch);
        reps.push(safe_ratio(qa, qb));
    }
    reps.sort_unstable_by(f64::total_cmp);
    let at = |p: f64| reps[((p * reps.len() as f64) as usize).min(reps.len() - 1)];
    let below = reps.iter().filter(|r| **r <= 1.0).count() as f64;
    let above = reps.iter().filter(|r| **r >= 1.0).count() as f64;
    let n = reps.len() as f64;
    let p = ((2.0 * below.min(above) + 1.0) / (n + 1.0)).min(1.0);
    Some(RatioCi {
        q,
        before: b,
        after: a,
        ratio,
        lo: at(0.025),
        hi: at(0.975),
        p,
    })
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

/// One-sided test that `after` exceeds `threshold` more often than `before`
/// does (two-proportion z-test). Returns (before fraction, after fraction, p).
pub fn exceedance(before: &[f32], after: &[f32], threshold: f64) -> (f64, f64, f64) {
    let (n1, n2) = (before.len() as f64, after.len() as f64);
    if n1 == 0.0 || n2 == 0.0 {
        return (f64::NAN, f64::NAN, 1.0);
    }
    let k1 = count_above(before, threshold) as f64;
    let k2 = count_above(after, threshold) as f64;
    let (p1, p2) = (k1 / n1, k2 / n2);
    let pooled = (k1 + k2) / (n1 + n2);
    let se = (pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)).sqrt();
    let p = if se > 0.0 {
        normal_sf((p2 - p1) / se)
    } else if p2 > p1 {
        0.0
    } else {
        1.0
    };
    (p1, p2, p)
}

/// Holm–Bonferroni: which of `p_values` are significant at family level `alpha`.
pub fn holm(p_values: &[f64], alpha: f64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..p_values.len()).collect();
    order.sort_by(|a, b| p_values[*a].total_cmp(&p_values[*b]));
    let m = p_values.len();
    let mut out = vec![false; m];
    for (rank, &i) in order.iter().enumerate() {
        if p_values[i] <= alpha / (m - rank) as f64 {
            out[i] = true;
        } else {
            break;
        }
    }
    out
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn radix_sort_matches_std() {
        let mut rng = SplitMix64::new(1);
        let mut v: Vec<f32> = (0..10_000)
            .map(|i| ((rng.normal() * 50.0) as f32) * if i % 7 == 0 { -1.0 } else { 1.0 })
            .collect();
        v.push(0.0);
        v.push(-0.0);
        let mut w = v.clone();
        sort_f32(&mut v);
        w.sort_unstable_by(f32::total_cmp);
        assert_eq!(v, w);
    }

    #[test]
    fn mad_matches_the_definition() {
        let mut rng = SplitMix64::new(9);
        for n in [1usize, 2, 3, 10, 101, 1000] {
            let mut v: Vec<f32> = (0..n)
                .map(|i| (rng.normal() * 3.0 + if i % 5 == 0 { 20.0 } else { 0.0 }).round() as f32)
                .collect();
            sort_f32(&mut v);
            let med = quantile(&v, 0.5);
            let mut dev: Vec<f32> = v
                .iter()
                .map(|x| (f64::from(*x) - med).abs() as f32)
                .collect();
            sort_f32(&mut dev);
            assert_eq!(median_mad(&v), (med, quantile(&dev, 0.5)), "n={n}");
        }
    }

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f32> = (1..=1000).map(|i| i as f32).collect();
        assert_eq!(quantile(&v, 0.5), 500.0);
        assert_eq!(quantile(&v, 0.99), 990.0);
        assert_eq!(quantile(&v, 0.999), 999.0);
        assert_eq!(quantile(&v, 1.0), 1000.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        let s = Summary::of_sorted(&v).unwrap();
        assert_eq!(s.mean, 500.5);
    }

    #[test]
    fn mann_whitney_sees_shift_not_noise() {
        let mut rng = SplitMix64::new(7);
        let mut a: Vec<f32> = (0..2000).map(|_| (10.0 + rng.normal()) as f32).collect();
        let mut b: Vec<f32> = (0..2000).map(|_| (10.0 + rng.normal()) as f32).collect();
        let mut c: Vec<f32> = (0..2000).map(|_| (10.5 + rng.normal()) as f32).collect();
        sort_f32(&mut a);
        sort_f32(&mut b);
        sort_f32(&mut c);
        assert!(mann_whitney(&a, &b).unwrap().p > 0.01);
        let mw = mann_whitney(&a, &c).unwrap();
        assert!(mw.p < 1e-6 && mw.z > 0.0);
        let hl = hodges_lehmann(&a, &c).unwrap();
        assert!((hl.estimate - 0.5).abs() < 0.15, "{hl:?}");
        assert!(hl.lo < hl.estimate && hl.estimate < hl.hi);
    }

    #[test]
    fn quantile_ratio_interval_covers() {
        let mut rng = SplitMix64::new(3);
        for n in [500usize, 50_000] {
            let mut a: Vec<f32> = (0..n).map(|_| (10.0 + rng.normal()) as f32).collect();
            let mut b: Vec<f32> = (0..n).map(|_| (12.0 + 1.2 * rng.normal()) as f32).collect();
            sort_f32(&mut a);
            sort_f32(&mut b);
            let r = quantile_ratio(&a, &b, 0.5, 1).unwrap();
            assert!(r.lo < 1.2 && r.hi > 1.2 && r.lo > 1.1, "{r:?}");
            assert!(r.p < 0.01);
        }
    }

    #[test]
    fn holm_controls_family() {
        assert_eq!(holm(&[0.001, 0.04, 0.3], 0.05), vec![true, false, false]);
        assert_eq!(holm(&[0.01, 0.02], 0.05), vec![true, true]);
    }
}
