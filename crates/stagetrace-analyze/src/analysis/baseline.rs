//! One figure against the baseline: ratios with intervals, the location
//! and tail tests, and the shape they add up to.

use super::options::{AnalyzeOptions, MIN_N};
use super::report::StageVsBaseline;
use crate::stats::{self, Distribution};

/// A figure's sorted values against the baseline's (`None` below [`MIN_N`]
/// values on either side).
pub(super) fn vs_baseline(
    base: &[f32],
    run: &[f32],
    opts: &AnalyzeOptions,
) -> Option<StageVsBaseline> {
    if base.len() < MIN_N || run.len() < MIN_N {
        return None;
    }
    let b = Distribution::of_sorted(base)?;
    let p50 = stats::quantile_ratio(base, run, 0.5, opts.seed)?;
    let p99 = stats::quantile_ratio(base, run, 0.99, opts.seed)?;
    let mw = stats::mann_whitney(base, run)?;
    let shift = stats::hodges_lehmann(base, run)?;
    let (med, mad) = stats::median_mad(base);
    let min_effect = (0.25 * 1.4826 * mad).max(0.01 * med.abs()).max(1e-3);
    let (be, re, ep) = stats::exceedance(base, run, b.p99);
    let located = mw.p < opts.alpha
        && shift.estimate.abs() >= min_effect
        && (shift.lo > 0.0 || shift.hi < 0.0);
    let floor = 0.5 / base.len() as f64;
    // The baseline p99 is itself an estimate: a steep tail can put 2 % of a
    // twin run above it. The p99 must also move by a meaningful amount.
    let tail_effect = (0.5 * 1.4826 * mad).max(0.05 * b.p99.abs()).max(1e-3);
    let tail_up = ep < opts.alpha
        && re >= 2.0 * be.max(floor)
        && p99.lo > 1.0
        && p99.after - p99.before >= tail_effect;
    // A median a little faster under a tail that grew by more (an executor
    // busy on every n-th chunk, the others started sooner) costs the call
    // its tail: that is the shape, not `faster`.
    let tail_costs_more = tail_up && p99.after - p99.before > -shift.estimate;
    let shape = if located && shift.estimate > 0.0 {
        "median_shift"
    } else if tail_costs_more {
        "tail_only"
    } else if located {
        "faster"
    } else if tail_up {
        "tail_only"
    } else {
        "steady"
    };
    Some(StageVsBaseline {
        baseline: b,
        p50,
        p99,
        mann_whitney: mw,
        shift,
        min_effect_ms: min_effect,
        baseline_exceed: be,
        exceed: re,
        exceed_p: ep,
        shape,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::stats::SplitMix64;

    fn sorted(mut v: Vec<f32>) -> Vec<f32> {
        stats::sort_f32(&mut v);
        v
    }

    /// An executor busy 15 ms on one chunk in five, the others started a
    /// little sooner than in the baseline: the tail is what the call pays,
    /// so the shape is `tail_only`, not `faster` (the median's 20 µs).
    #[test]
    fn a_tail_that_grew_by_more_than_the_median_fell_is_the_shape() {
        let mut rng = SplitMix64::new(7);
        let base = sorted(
            (0..1000)
                .map(|_| (0.12 + 0.01 * rng.normal()) as f32)
                .collect(),
        );
        let run = sorted(
            (0..1000)
                .map(|i| {
                    if i % 5 == 4 {
                        (15.0 + 0.01 * rng.normal()) as f32
                    } else {
                        (0.10 + 0.01 * rng.normal()) as f32
                    }
                })
                .collect(),
        );
        let v = vs_baseline(&base, &run, &AnalyzeOptions::default()).unwrap();
        assert!(v.shift.estimate < 0.0, "{:?}", v.shift);
        assert_eq!(v.shape, "tail_only");
        // Faster with no tail stays `faster`.
        let quicker = sorted(
            (0..1000)
                .map(|_| (0.10 + 0.01 * rng.normal()) as f32)
                .collect(),
        );
        let v = vs_baseline(&base, &quicker, &AnalyzeOptions::default()).unwrap();
        assert_eq!(v.shape, "faster");
    }
}
