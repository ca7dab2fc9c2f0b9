//! Axis ticks for the HTML plots. Every function here returns at most
//! [`MAX_TICKS`] finite ticks after a bounded number of steps, whatever its
//! range: an infinite, NaN, empty or absurdly wide one (a loop stepping
//! toward an infinite bound once never ended while its output grew past
//! 1.7 GB).

/// Most ticks on one axis. Real axes have about ten.
pub(crate) const MAX_TICKS: usize = 1000;

/// Most decades a log axis walks: `f64` spans about 632.
const MAX_DECADES: usize = 700;

/// A round step (1, 2 or 5 times a power of ten) at least `raw`; 1 for a
/// `raw` that is not a positive finite number.
pub(crate) fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    if !(p.is_finite() && p > 0.0) {
        // Beyond what a power of ten can say (subnormal `raw`).
        return 1.0;
    }
    let f = raw / p;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    // Near `f64::MAX` the next round step is infinite: the power of ten
    // itself is the roundest finite one.
    if (m * p).is_finite() {
        m * p
    } else {
        p
    }
}

/// A tick label: three decimals at most, trailing zeros dropped.
pub(crate) fn trim_num(v: f64) -> String {
    let t = format!("{v:.3}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    t.to_string()
}

/// Ticks `0, step, 2·step, …` of an axis from 0 to `max` (about six),
/// and the axis top (`max` rounded up to a step). A `max` that is not a
/// positive finite number draws as 0 to 1; one beyond 1e300 as 0 to 1e300
/// (so that the top stays finite).
pub(crate) fn linear(max: f64) -> (f64, Vec<f64>) {
    let max = if max.is_finite() && max > 0.0 {
        max.min(1e300)
    } else {
        1.0
    };
    let step = nice_step(max / 6.0);
    let top = (max / step).ceil().max(1.0) * step;
    let steps = (top / step).round();
    let n = if steps.is_finite() && steps >= 1.0 {
        (steps as usize).min(MAX_TICKS - 1)
    } else {
        1
    };
    (top, (0..=n).map(|i| i as f64 * step).collect())
}

/// Up to `n + 1` ticks `lo, lo + step, …` not beyond `hi`, with a round step.
pub(crate) fn spaced(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let n = n.min(MAX_TICKS - 1);
    let step = nice_step((hi - lo) / n.max(1) as f64);
    (0..=n)
        .map(|i| lo + step * i as f64)
        .filter(|v| v.is_finite() && *v <= hi)
        .collect()
}

/// The 1-2-5 ticks of each decade within `[lo, hi]`, for a log axis; none
/// for a range that is not `0 < lo ≤ hi < ∞`.
pub(crate) fn log125(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    if !(lo > 0.0 && lo <= hi && hi.is_finite()) {
        return ticks;
    }
    // `lo` may be subnormal, where `10^floor(log10 lo)` is 0 and would never grow.
    let mut d = 10f64.powf(lo.log10().floor()).max(f64::MIN_POSITIVE);
    for _ in 0..MAX_DECADES {
        if d > hi * 1.0001 || ticks.len() >= MAX_TICKS {
            break;
        }
        for m in [1.0, 2.0, 5.0] {
            let v = d * m;
            if v >= lo && v <= hi && ticks.len() < MAX_TICKS {
                ticks.push(v);
            }
        }
        d *= 10.0;
    }
    ticks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Odd bounds: non-finite, huge, tiny, zero, negative.
    const ODD: [f64; 12] = [
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e300,
        -1e300,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        0.0,
        -1.0,
        3.4e38,
        1e-45,
    ];

    fn sane(ticks: &[f64]) {
        assert!(ticks.len() <= MAX_TICKS, "{} ticks", ticks.len());
        assert!(ticks.iter().all(|t| t.is_finite()), "{ticks:?}");
    }

    #[test]
    fn every_range_gives_few_finite_ticks() {
        crate::watchdog::within(30, "ticks on odd ranges", every_range);
    }

    fn every_range() {
        for max in ODD {
            let (top, ticks) = linear(max);
            assert!(top.is_finite() && top > 0.0, "{max}: top {top}");
            assert!(!ticks.is_empty(), "{max}");
            sane(&ticks);
            assert!(nice_step(max).is_finite(), "{max}");
            for other in ODD.into_iter().chain([1.0, 100.0]) {
                sane(&spaced(max, other, 8));
                sane(&spaced(other, max, 1_000_000));
                sane(&log125(max, other));
                sane(&log125(other, max));
            }
        }
        // The widest range a log axis can have still stops at the cap.
        assert_eq!(log125(5e-324, f64::MAX).len(), MAX_TICKS);
        // An f32 column's whole range: 83 decades, three ticks each.
        assert!(log125(1e-45, 3.4e38).len() < 3 * 84);
    }

    #[test]
    fn ordinary_ranges_keep_their_ticks() {
        assert_eq!(linear(36.0), (40.0, vec![0.0, 10.0, 20.0, 30.0, 40.0]));
        assert_eq!(linear(0.0).0, 1.0);
        assert_eq!(log125(3.0, 60.0), vec![5.0, 10.0, 20.0, 50.0]);
        assert_eq!(
            spaced(0.0, 7.5, 8),
            vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
        );
        assert_eq!(trim_num(2.50), "2.5");
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(130.0), 200.0);
    }
}
