//! The rows of a comparison: per figure the change of its p50, p90 and p99
//! between the runs, with the test's p-value (Mann–Whitney for the median,
//! the bootstrap for the tails); per hop of calls through gateways the same
//! for `up`, `down`, `net` and `relay`.

use stagetrace_schema::Figure;

use super::{one_way, GroupComparison, HopRows, Row};
use crate::analysis::{min_cost_ms, GroupData};
use crate::figures;
use crate::load::HopFig;
use crate::stats;

/// One kind's comparison before it is judged: every row (p-values pushed
/// to `pvals` in row order: stages, then hops), the clock split's bound,
/// no answer yet.
pub(super) fn compare_kind(
    b: &GroupData,
    a: &GroupData,
    seed: u64,
    pvals: &mut Vec<f64>,
) -> GroupComparison {
    let floor = min_cost_ms(stats::quantile(b.sorted(Figure::E2e), 0.5));
    let mut rows = Vec::new();
    for m in figures::display_order() {
        let side = Side {
            xs: b.sorted(m),
            ys: a.sorted(m),
            signed: m.is_signed(),
            floor,
        };
        rows.extend(rows_of(m.name(), &side, seed ^ m.index() as u64, pvals));
    }
    let hops = hop_rows(b, a, seed, floor, pvals);
    GroupComparison {
        kind: b.kind.clone(),
        before_n: b.calls.len() as u64,
        after_n: a.calls.len() as u64,
        summary: Vec::new(),
        split_err_ms: one_way::split_bound(b, a),
        carried: None,
        rows,
        hops,
    }
}

/// One figure's values on both sides, and how to compare them.
struct Side<'a> {
    xs: &'a [f32],
    ys: &'a [f32],
    /// A figure that can be negative: compared as a difference.
    signed: bool,
    /// The smallest change that counts (ms).
    floor: f64,
}

/// One quantile's change, as a ratio or a difference.
struct Change {
    before: f64,
    after: f64,
    /// Change, interval low, interval high, percent (NaN for a difference).
    pct: [f64; 3],
    ci_ms: Option<[f64; 2]>,
    p: f64,
}

/// The p50 / p90 / p99 rows of one figure (none below two values a side),
/// their p-values pushed to `pvals` in row order.
fn rows_of(stage: &'static str, side: &Side<'_>, seed: u64, pvals: &mut Vec<f64>) -> Vec<Row> {
    let (xs, ys) = (side.xs, side.ys);
    let mut rows = Vec::new();
    if xs.len() < 2 || ys.len() < 2 {
        return rows;
    }
    for (stat, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)] {
        let Some(c) = quantile_change(side, q, seed) else {
            continue;
        };
        let (p, test) = if stat == "p50" {
            (
                stats::mann_whitney(xs, ys).map_or(1.0, |mw| mw.p),
                "mann_whitney",
            )
        } else {
            (c.p, "bootstrap")
        };
        pvals.push(p);
        rows.push(Row {
            stage,
            stat,
            before: c.before,
            after: c.after,
            unit: if side.signed { "ms" } else { "%" },
            delta_pct: c.pct[0],
            ci_pct: [c.pct[1], c.pct[2]],
            delta_ms: c.after - c.before,
            ci_ms: c.ci_ms,
            min_effect_ms: side.floor,
            p,
            test,
            significant: false,
            direction_unknown: false,
        });
    }
    rows
}

/// The change of quantile `q`: a difference for a signed figure (a ratio
/// of values that cross zero means nothing), a ratio for a duration.
fn quantile_change(side: &Side<'_>, q: f64, seed: u64) -> Option<Change> {
    let (xs, ys) = (side.xs, side.ys);
    if side.signed {
        stats::quantile_diff(xs, ys, q, seed).map(|d| Change {
            before: d.before,
            after: d.after,
            pct: [f64::NAN; 3],
            ci_ms: Some([d.lo, d.hi]),
            p: d.p,
        })
    } else {
        stats::quantile_ratio(xs, ys, q, seed).map(|r| Change {
            before: r.before,
            after: r.after,
            pct: [
                100.0 * (r.ratio - 1.0),
                100.0 * (r.lo - 1.0),
                100.0 * (r.hi - 1.0),
            ],
            ci_ms: None,
            p: r.p,
        })
    }
}

/// The rows of the hops both runs have (the same path: hop `n` is the
/// same hop on both sides).
fn hop_rows(
    b: &GroupData,
    a: &GroupData,
    seed: u64,
    floor: f64,
    pvals: &mut Vec<f64>,
) -> Vec<HopRows> {
    let hops = b.hop_sorted.len().min(a.hop_sorted.len());
    let names = crate::analysis::hop_nodes(hops);
    (0..hops)
        .map(|l| {
            let mut rows = Vec::new();
            for fig in [HopFig::Up, HopFig::Down, HopFig::Net, HopFig::Relay] {
                // Seeds apart from the stages' (their figure indices are small).
                let seed = seed ^ (0x4000 + (l * 8 + fig.index()) as u64);
                let side = Side {
                    xs: b.hop_sorted(l, fig),
                    ys: a.hop_sorted(l, fig),
                    signed: false,
                    floor,
                };
                rows.extend(rows_of(fig.name(), &side, seed, pvals));
            }
            HopRows {
                hop: l + 1,
                from: names[l].clone(),
                to: names[l + 1].clone(),
                rows,
            }
        })
        .collect()
}
