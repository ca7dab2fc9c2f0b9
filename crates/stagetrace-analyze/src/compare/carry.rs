//! The baseline's clock offset carried to the run, under a drift bound the
//! user states (`compare --drift-ppm N`): which direction of the link
//! moved between two runs on estimated clocks.
//!
//! Why it works: a call's raw one-way times are exact readings of two
//! clocks, `t1 − t0 = uplink + θ` and `t3 − t2 = downlink − θ` (θ the true
//! server − client offset, `docs/clocks.md`). Between two runs the change of
//! their medians is the change of the link plus the change of θ, and θ
//! moves only by the clocks' drift over the time between the calls. The
//! offset's estimate, and its error (the clock split's bound, often wider
//! than the move itself), cancel out: what is left is the drift, at most
//! `N ppm` × the time from the first run's first call to the second run's
//! last.

use serde::Serialize;
use stagetrace_schema::Figure;

use crate::analysis::GroupData;
use crate::load::Dataset;
use crate::stats;

/// The two runs' one-way changes with the baseline's offset carried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CarriedOffset {
    /// The most the two machines' clocks drift apart, as the user stated
    /// it (ppm).
    pub drift_ppm: f64,
    /// From the first run's first call to the second run's last (s).
    pub elapsed_s: f64,
    /// How far the offset may have moved between the runs (ms):
    /// `drift_ppm` × `elapsed_s`. The changes below are exact but for it.
    pub bound_ms: f64,
    /// Change of the uplink's median (ms), the offset carried.
    pub uplink_ms: f64,
    /// Change of the downlink's median (ms), the offset carried.
    pub downlink_ms: f64,
}

impl CarriedOffset {
    /// The direction(s) whose change is larger than the bound and than
    /// `min_effect_ms` (the smallest change that counts), largest first.
    pub fn moved(&self, min_effect_ms: f64) -> Vec<(Figure, f64)> {
        let floor = self.bound_ms.max(min_effect_ms);
        let mut out: Vec<(Figure, f64)> = [
            (Figure::Uplink, self.uplink_ms),
            (Figure::Downlink, self.downlink_ms),
        ]
        .into_iter()
        .filter(|(_, d)| d.abs() > floor)
        .collect();
        out.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
        out
    }
}

/// The raw one-way time of call `i` (ms): the uplink plus the offset used,
/// or the downlink less it — what the two clocks read, whatever the
/// estimate.
fn raw(ds: &Dataset, f: Figure, i: usize) -> Option<f64> {
    let theta = ds.value(Figure::Offset, i)?;
    match f {
        Figure::Uplink => Some(ds.value(f, i)? + theta),
        Figure::Downlink => Some(ds.value(f, i)? - theta),
        _ => None,
    }
}

/// The median raw one-way time of a group's calls (ms); `None` without.
fn raw_median(ds: &Dataset, g: &GroupData, f: Figure) -> Option<f64> {
    let mut v: Vec<f32> = g
        .calls
        .iter()
        .filter_map(|&i| raw(ds, f, i as usize))
        .map(|x| x as f32)
        .collect();
    if v.is_empty() {
        return None;
    }
    stats::sort_f32(&mut v);
    Some(stats::quantile(&v, 0.5))
}

/// The first and last call's time (unix ms) of a group.
fn span(ds: &Dataset, g: &GroupData) -> Option<(f64, f64)> {
    let first = ds.ts_unix_ms(*g.calls.first()? as usize);
    let last = ds.ts_unix_ms(*g.calls.last()? as usize);
    Some((first.min(last), first.max(last)))
}

/// The baseline's offset carried to the run under `drift_ppm`; `None` when
/// either run lacks the raw figures (no server timing, or no offset on the
/// records).
pub(super) fn carried(
    before: (&Dataset, &GroupData),
    after: (&Dataset, &GroupData),
    drift_ppm: f64,
) -> Option<CarriedOffset> {
    let change =
        |f: Figure| Some(raw_median(after.0, after.1, f)? - raw_median(before.0, before.1, f)?);
    let (uplink_ms, downlink_ms) = (change(Figure::Uplink)?, change(Figure::Downlink)?);
    let (b0, b1) = span(before.0, before.1)?;
    let (a0, a1) = span(after.0, after.1)?;
    let elapsed_s = (b1.max(a1) - b0.min(a0)) / 1e3;
    Some(CarriedOffset {
        drift_ppm,
        elapsed_s,
        bound_ms: drift_ppm * 1e-6 * elapsed_s * 1e3,
        uplink_ms,
        downlink_ms,
    })
}
