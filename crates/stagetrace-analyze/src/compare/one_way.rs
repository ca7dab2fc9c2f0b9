//! The report's rule for a one-way change (`docs/report.md`, "Uplink vs
//! downlink"), applied between two runs: uplink / downlink (and a hop's
//! `up` / `down`) rest on an estimated clock offset, so a move no larger
//! than the clock split's bound may belong to the other direction.

use stagetrace_schema::Figure;

use super::{GroupComparison, Row};
use crate::analysis::GroupData;
use crate::figures;
use crate::load::HopFig;
use crate::stats;

/// The median of sorted values, `None` without any.
fn median(xs: &[f32]) -> Option<f64> {
    (!xs.is_empty()).then(|| stats::quantile(xs, 0.5))
}

/// How far the clock split may put a one-way change on the wrong side
/// (ms): each run's median `split_err_ms`, added; `None` when neither run
/// carries one (trusted clocks, or no split).
pub(super) fn split_bound(b: &GroupData, a: &GroupData) -> Option<f64> {
    match (
        median(b.sorted(Figure::SplitErr)),
        median(a.sorted(Figure::SplitErr)),
    ) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
    }
}

/// Per hop, the same bound from the hop's own `err` (0 when neither run
/// has one).
pub(super) fn hop_bounds(b: &GroupData, a: &GroupData, hops: usize) -> Vec<f64> {
    (0..hops)
        .map(|l| {
            let e = |g: &GroupData| median(g.hop_sorted(l, HopFig::Err));
            e(b).unwrap_or(0.0) + e(a).unwrap_or(0.0)
        })
        .collect()
}

/// Holds a judged kind's one-way rows to their bounds: the stages' to the
/// clock split's, each hop's to `hop_bounds` (a bound of 0: no rule).
pub(super) fn judge(g: &mut GroupComparison, hop_bounds: &[f64]) {
    one_way_rule(&mut g.rows, g.split_err_ms, |f| {
        Figure::from_name(f).is_some_and(figures::is_one_way)
    });
    for (h, err) in g.hops.iter_mut().zip(hop_bounds) {
        let bound = (*err > 0.0).then_some(*err);
        one_way_rule(&mut h.rows, bound, |f| {
            f == HopFig::Up.name() || f == HopFig::Down.name()
        });
    }
}

/// A one-way figure that moved by no more than the clock split's bound may
/// have moved in the other direction, so it is not named — it is marked
/// `direction_unknown` instead of `significant`. One that moved by more
/// keeps its significance.
fn one_way_rule(rows: &mut [Row], bound: Option<f64>, one_way: impl Fn(&str) -> bool) {
    let Some(err) = bound else {
        return;
    };
    for r in rows
        .iter_mut()
        .filter(|r| r.significant && one_way(r.stage) && r.delta_ms.abs() <= err)
    {
        r.significant = false;
        r.direction_unknown = true;
    }
}
