//! Second modes: a figure above its outlier threshold on so many calls
//! that the excursions are a shape of its distribution, not spikes.

use stagetrace_schema::Figure;

use super::analysed;
use super::group::GroupData;
use super::host_cause::host_cause;
use super::options::MIN_N;
use super::report::{Periodicity, SecondMode};
use crate::load::Dataset;

/// Share of the steady calls above which a figure's excursions are a
/// second mode rather than spikes. Spikes are rare by definition (the
/// verdict corpus injects them on 1–5 % of the calls); a healthy timer or a
/// cache shows a second mode on a fifth of the calls.
pub(crate) const MODE_SHARE: f64 = 0.10;

/// Share of the e2e median a second mode must add to its calls to be a
/// verdict of its own (`second_mode`): smaller ones are said in the tables
/// only. A tenth of the call on a tenth of the calls or more is what a
/// user would want named.
pub(crate) const MODE_VERDICT_SHARE: f64 = 0.10;

/// The call-time figures of `g` above their threshold on more than
/// [`MODE_SHARE`] of the calls, unless their excursions recur with a period
/// (which is a fault of its own, `periodic`).
pub(super) fn second_modes(
    ds: &Dataset,
    g: &GroupData,
    periodicity: &[Periodicity],
    e2e_median: f64,
) -> Vec<SecondMode> {
    let steady = g.calls.len();
    if steady < MIN_N {
        return Vec::new();
    }
    let periodic = |f: Figure| {
        periodicity
            .iter()
            .any(|p| p.significant && p.stage == f.name())
    };
    let mut out = Vec::new();
    for f in analysed().filter(|f| f.is_call_time() && !periodic(*f)) {
        let Some(thr) = g.thresholds[f.index()] else {
            continue;
        };
        let (mut n, mut sum) = (0usize, 0.0f64);
        let mut mode_calls = Vec::new();
        for &i in &g.calls {
            if let Some(v) = ds.value(f, i as usize) {
                if v > thr {
                    n += 1;
                    sum += v;
                    mode_calls.push(i as usize);
                }
            }
        }
        let share = n as f64 / steady as f64;
        if share <= MODE_SHARE {
            continue;
        }
        let median = crate::stats::quantile(g.sorted(f), 0.5);
        let excess_ms = sum / n as f64 - median;
        out.push(SecondMode {
            stage: f.name(),
            calls: n as u64,
            share,
            median_ms: median,
            excess_ms,
            matters: e2e_median.is_finite() && excess_ms >= MODE_VERDICT_SHARE * e2e_median,
            host: host_cause(ds, g, f, &mode_calls),
        });
    }
    out
}
