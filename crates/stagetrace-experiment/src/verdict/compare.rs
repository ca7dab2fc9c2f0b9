//! One figure at one level against the baseline: bootstrap intervals on the
//! p50 and p99 ratios, a tail-exceedance test, and a one-sided CUSUM over
//! windowed p90 to time the move.

use stagetrace::Figure;
use stagetrace_analyze::stats;

use super::obs::Obs;
use super::result::{ComponentResult, Thresholds};

/// The level's values `lv` against the baseline's `base` (both sorted).
pub(crate) fn compare(base: &[f32], lv: &[f32], th: &Thresholds, seed: u64) -> ComponentResult {
    let mut r = ComponentResult {
        n: lv.len(),
        p50: stats::quantile(lv, 0.5),
        p90: stats::quantile(lv, 0.9),
        p99: stats::quantile(lv, 0.99),
        p50_ratio: None,
        p99_ratio: None,
        tail_exceedance: None,
        moved: false,
        shape: None,
        change_unix_ms: None,
    };
    if base.len() < 5 || lv.len() < 5 {
        return r;
    }
    r.p50_ratio = stats::quantile_ratio(base, lv, 0.5, seed);
    r.p99_ratio = stats::quantile_ratio(base, lv, 0.99, seed);
    let b99 = stats::quantile(base, 0.99);
    let ex = stats::exceedance(base, lv, b99 + th.min_p99_ms);
    r.tail_exceedance = Some(ex);
    let median = r
        .p50_ratio
        .is_some_and(|q| q.lo > 1.0 && q.after - q.before >= th.min_p50_ms && q.ratio >= 1.10);
    let tail = r
        .p99_ratio
        .is_some_and(|q| q.lo > 1.0 && q.after - q.before >= th.min_p99_ms && q.ratio >= 1.25)
        || (ex.2 < 0.001 && ex.1 >= 0.02 && ex.1 >= 3.0 * ex.0);
    r.moved = median || tail;
    r.shape = if median {
        Some("median")
    } else if tail {
        Some("tail")
    } else {
        None
    };
    r
}

/// One-sided CUSUM over windowed p90, from the first level up to `upto`,
/// against the baseline's windows: when did the figure leave the baseline?
pub(crate) fn cusum_change(
    obs: &[Obs],
    base_idx: usize,
    upto: usize,
    f: Figure,
    th: &Thresholds,
) -> Option<f64> {
    let series = |keep: &dyn Fn(usize) -> bool| -> Vec<(f64, f32)> {
        obs.iter()
            .filter(|o| keep(o.phase) && o.counts() && o.get(f).is_finite())
            .map(|o| (o.ts_ms, o.get(f)))
            .collect()
    };
    let base = series(&|p| p == base_idx);
    let after = series(&|p| p > base_idx && p <= upto);
    let w = (base.len() / 8).clamp(5, 15);
    let windows = |s: &[(f64, f32)]| -> Vec<(f64, f64)> {
        s.chunks(w)
            .filter(|ch| ch.len() * 2 >= w)
            .map(|ch| {
                let mut v: Vec<f32> = ch.iter().map(|x| x.1).collect();
                v.sort_unstable_by(f32::total_cmp);
                (ch[0].0, stats::quantile(&v, 0.9))
            })
            .collect()
    };
    let bw = windows(&base);
    if bw.len() < 3 {
        return None;
    }
    let mut bv: Vec<f32> = bw.iter().map(|x| x.1 as f32).collect();
    bv.sort_unstable_by(f32::total_cmp);
    let (mu, mad) = stats::median_mad(&bv);
    let sigma = (1.4826 * mad).max(0.05).max(0.02 * mu.abs());
    let k = (0.5 * sigma).max(0.5 * th.min_p50_ms);
    let h = (4.0 * sigma).max(2.0 * th.min_p50_ms);
    let mut s = 0.0f64;
    let mut start: Option<f64> = None;
    for (ts, x) in windows(&after) {
        let next = (s + x - mu - k).max(0.0);
        if s == 0.0 && next > 0.0 {
            start = Some(ts);
        }
        if next == 0.0 {
            start = None;
        }
        s = next;
        if s > h {
            return start.or(Some(ts));
        }
    }
    None
}
