//! How the e2e variance splits over the parts of the call and the gap.

use std::collections::BTreeMap;

use stagetrace_schema::{Figure, Side};

use super::group::GroupData;
use super::options::{MIN_N, MIN_SPIKES};
use super::report::{GapReport, Stall};
use crate::figures;
use crate::format::iso_time;
use crate::load::Dataset;
use crate::stats;

/// Each part's share of a group's e2e variance (`cov(part, e2e) / var(e2e)`),
/// when the group has enough calls and e2e varies.
pub(super) fn gap(ds: &Dataset, g: &GroupData) -> Option<GapReport> {
    let e2e: Vec<f64> = g
        .calls
        .iter()
        .map(|&i| ds.value(Figure::E2e, i as usize).unwrap_or(f64::NAN))
        .collect();
    if e2e.len() < MIN_N {
        return None;
    }
    let (_, var) = stats::mean_var(e2e.iter().copied());
    if var.is_nan() || var <= 0.0 {
        return None;
    }
    let has = |f: Figure| !g.sorted(f).is_empty();
    let shares = variance_shares(ds, g, &e2e, var);
    let gap_share = shares.get(Figure::Gap.name()).copied().unwrap_or(0.0);
    let observer_share = shares.get(Figure::Observer.name()).copied().unwrap_or(0.0);
    let sd = var.sqrt();
    let median = stats::quantile(g.sorted(Figure::E2e), 0.5);
    let explains = |sd: f64, gap_share: f64| sd >= 0.01 * median && gap_share >= 0.5;
    let gaps = series(ds, g, Figure::Gap);
    let (rest_var, rest_share) = gap_share_without_worst(&gaps, &e2e);
    let gap_median = stats::quantile(g.sorted(Figure::Gap), 0.5);
    Some(GapReport {
        n: e2e.len() as u64,
        e2e_stddev_ms: sd,
        e2e_median_ms: median,
        shares,
        gap_share,
        observer_share,
        unexplained: has(Figure::Gap)
            && explains(sd, gap_share)
            && explains(rest_var.sqrt(), rest_share),
        stalls: stalls(ds, g, &gaps, gap_median, median),
    })
}

/// `f` on each of the group's calls, in call order (ms; 0 where absent).
fn series(ds: &Dataset, g: &GroupData, f: Figure) -> Vec<f64> {
    let col = &ds.columns[f.index()];
    g.calls
        .iter()
        .map(|&i| {
            let v = col.get(i as usize).copied().unwrap_or(f32::NAN);
            if v.is_nan() {
                0.0
            } else {
                f64::from(v)
            }
        })
        .collect()
}

/// Each measured part of e2e's share of its variance `var`, and the
/// figures inside those parts (queue and infer within the server total,
/// infer's parts within infer, the observer within the gap); the sums
/// above them (roundtrip) get none.
fn variance_shares(
    ds: &Dataset,
    g: &GroupData,
    e2e: &[f64],
    var: f64,
) -> BTreeMap<&'static str, f64> {
    let has = |f: Figure| !g.sorted(f).is_empty();
    let parts = figures::e2e_parts(has);
    let inside = parts.iter().flat_map(|p| figures::descendants(*p));
    let mut shares = BTreeMap::new();
    for f in parts.iter().copied().chain(inside) {
        if has(f) && !shares.contains_key(f.name()) {
            shares.insert(f.name(), stats::covariance(&series(ds, g, f), e2e) / var);
        }
    }
    shares
}

/// e2e's variance and the gap's share of it with the worst calls set
/// aside (they stay in the outlier list). Jitter rests on at least
/// MIN_SPIKES calls, as spikes do: one 5 ms host hiccup in 290 calls can be
/// two thirds of a quiet run's variance, so the gap must still explain the
/// jitter without them.
fn gap_share_without_worst(gaps: &[f64], e2e: &[f64]) -> (f64, f64) {
    let rest = without_worst(e2e, MIN_SPIKES - 1);
    let (_, rest_var) = stats::mean_var(rest.iter().map(|&i| e2e[i]));
    let rest_share = if rest_var > 0.0 {
        let pick = |v: &[f64]| rest.iter().map(|&i| v[i]).collect::<Vec<f64>>();
        stats::covariance(&pick(gaps), &pick(e2e)) / rest_var
    } else {
        0.0
    };
    (rest_var, rest_share)
}

/// The calls that paused outside every stage as long as a whole median
/// call (`median`): each an event of its own, named with its call (a
/// `stall`), not jitter. From MIN_SPIKES stalls on they are spikes of the
/// gap, said as such: none is listed.
fn stalls(ds: &Dataset, g: &GroupData, gaps: &[f64], gap_median: f64, median: f64) -> Vec<Stall> {
    let stalled: Vec<usize> = (0..gaps.len())
        .filter(|&k| gaps[k] - gap_median >= median)
        .collect();
    if stalled.len() >= MIN_SPIKES {
        return Vec::new();
    }
    stalled
        .iter()
        .map(|&k| stall(ds, g, g.calls[k] as usize, gaps[k], gap_median))
        .collect()
}

/// Share of a stall's excess a host figure's own excess on that call must
/// reach to be named as what held the robot.
const HOST_SHARE: f64 = 0.5;

/// The stall of call `i` (an index into `ds`): when, how long, and the
/// robot's host figures that explain it.
fn stall(ds: &Dataset, g: &GroupData, i: usize, gap: f64, gap_median: f64) -> Stall {
    let excess = gap - gap_median;
    // The gap is the robot's own time: its host is the one to ask.
    let robot_host = Figure::ALL
        .into_iter()
        .filter(|f| f.is_host() && f.side() == Side::Client && !g.sorted(*f).is_empty());
    let mut host_measured = false;
    let mut host: Vec<(&'static str, f64)> = Vec::new();
    for f in robot_host {
        host_measured = true;
        let typical = stats::quantile(g.sorted(f), 0.5);
        if let Some(v) = ds.value(f, i) {
            if v - typical >= HOST_SHARE * excess {
                host.push((f.name(), v));
            }
        }
    }
    host.sort_by(|a, b| b.1.total_cmp(&a.1));
    Stall {
        seq: ds.seq(i),
        ts_unix_ms: ds.ts_unix_ms(i),
        time: iso_time(ds.ts_unix_ms(i)),
        gap_ms: gap,
        excess_ms: excess,
        e2e_ms: ds.value(Figure::E2e, i).unwrap_or(f64::NAN),
        late_ms: ds.value(Figure::Late, i),
        host,
        host_measured,
    }
}

/// Indices of `e2e` without its `k` largest values.
fn without_worst(e2e: &[f64], k: usize) -> Vec<usize> {
    let mut by_size: Vec<usize> = (0..e2e.len()).collect();
    by_size.sort_by(|&a, &b| e2e[b].total_cmp(&e2e[a]));
    let mut rest = by_size.split_off(k.min(by_size.len()));
    rest.sort_unstable();
    rest
}
