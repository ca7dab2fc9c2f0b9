//! The tests the verdicts rest on: Mann–Whitney U (a merge of two sorted
//! samples), the Hodges–Lehmann shift (a bisection over pairwise
//! differences), tail exceedance, Holm's correction.

use serde::Serialize;

use super::order::{count_above, thin_sorted};

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
/// `None` when a sample is empty or holds a NaN.
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
        if ca + cb == 0 {
            // A NaN equals nothing: it has no rank, and would never be passed.
            return None;
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
