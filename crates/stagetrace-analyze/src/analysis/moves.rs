//! Verdicts on what moved against the baseline: a figure slower as a whole
//! (`median_shift`), a longer tail (`tail_only`), faster (`faster`), the
//! network when the clock split cannot tell the direction
//! (`network_moved`), and e2e moving with no stage to blame (`e2e_moved`).
//!
//! A move enters a verdict only when it costs the call at least the floor
//! of [`super::options::min_cost_ms`]; smaller ones stay in the tables
//! (`docs/report.md`, "What counts").

use std::collections::BTreeMap;

use serde_json::json;
use stagetrace_schema::Figure;

use super::report::{GroupReport, StageVsBaseline, Verdict};
use crate::format::{fmt_ms, signed_ms};

/// What the verdicts know beyond the group's figures.
#[derive(Clone, Copy, Debug)]
pub(super) struct Context {
    /// A baseline was given.
    pub(super) has_baseline: bool,
    /// How far the clock split may put a one-way stage's change on the wrong
    /// side (ms): the median `split_err_ms` of the run plus the baseline's.
    /// `None` when the records carry none (trusted clocks, or no split).
    pub(super) split_err_ms: Option<f64>,
    /// The smallest change worth a verdict (ms).
    pub(super) floor_ms: f64,
    /// The smallest p99 growth worth a `tail_only` verdict (ms): the spike
    /// floor, since a tail is the calls that stand out — a tenth of the
    /// call, not the 1 % a whole-stage shift needs.
    pub(super) tail_floor_ms: f64,
}

/// What a move costs the call, in ms added to e2e: the median's shift for a
/// whole-figure move (the saving, for `faster`), the p99's for a tail.
fn cost(code: &str, s: &StageVsBaseline) -> f64 {
    match code {
        "tail_only" => s.p99.after - s.p99.before,
        "faster" => -s.shift.estimate,
        _ => s.shift.estimate,
    }
}

/// Keeps a derived figure only when none of its parts is in `flagged`.
pub(super) fn dedupe(flagged: &[Figure]) -> Vec<Figure> {
    flagged
        .iter()
        .copied()
        .filter(|m| !m.parts().iter().any(|p| flagged.contains(p)))
        .collect()
}

pub(super) fn fmt_p(p: f64) -> String {
    if p < 1e-300 {
        "<1e-300".to_string()
    } else if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// The shape verdicts of a group against its baseline, each with its cost.
pub(super) fn moves(r: &GroupReport, cx: &Context) -> Vec<Verdict> {
    moves_of(&r.kind, &r.baseline, cx)
}

/// The shape verdicts of `kind`'s figures against a reference (`vs`: the
/// baseline, or the other robots of a fleet), each with its cost.
pub(super) fn moves_of(
    kind: &str,
    vs: &BTreeMap<&'static str, StageVsBaseline>,
    cx: &Context,
) -> Vec<Verdict> {
    let figure = |name: &str| Figure::from_name(name);
    // (code, figure, cost) of every move worth a verdict, parts before sums.
    let mut kept: Vec<(&'static str, Figure, f64)> = Vec::new();
    for code in ["median_shift", "tail_only", "faster"] {
        let mut flagged: Vec<(f64, Figure)> = vs
            .iter()
            .filter(|(_, s)| {
                let floor = if code == "tail_only" {
                    cx.tail_floor_ms
                } else {
                    cx.floor_ms
                };
                s.shape == code && cost(code, s) >= floor
            })
            .filter_map(|(n, s)| {
                let strength = if code == "tail_only" {
                    s.exceed_p
                } else {
                    s.mann_whitney.p
                };
                figure(n).map(|m| (strength, m))
            })
            .collect();
        // Strongest evidence first.
        flagged.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let flagged: Vec<Figure> = flagged.into_iter().map(|(_, m)| m).collect();
        for m in dedupe(&flagged) {
            if let Some(s) = vs.get(m.name()) {
                kept.push((code, m, cost(code, s)));
            }
        }
    }
    let mut out = Vec::new();
    if let Some(v) = network(kind, vs, cx, &mut kept) {
        out.push(v);
    }
    for (code, m, cost) in kept {
        let Some(s) = vs.get(m.name()) else {
            continue;
        };
        out.push(shape_verdict(kind, code, m, s, cost));
    }
    out
}

fn shape_verdict(
    kind: &str,
    code: &'static str,
    m: Figure,
    s: &StageVsBaseline,
    cost: f64,
) -> Verdict {
    let text = match code {
        "median_shift" => format!(
            "{m} got slower as a whole: median {} → {} (×{:.2}, 95% CI {:.2}–{:.2}; Mann–Whitney p={}, shift {} [{}, {}]); p99 ×{:.2}. The whole stage is slower — {}.",
            fmt_ms(s.p50.before), fmt_ms(s.p50.after), s.p50.ratio, s.p50.lo, s.p50.hi,
            fmt_p(s.mann_whitney.p), fmt_ms(s.shift.estimate), fmt_ms(s.shift.lo), fmt_ms(s.shift.hi),
            s.p99.ratio, m.advice()
        ),
        "tail_only" => format!(
            "{m} has a longer tail with a flat median: p99 {} → {} (×{:.2}, 95% CI {:.2}–{:.2}), {:.1}% of calls above the baseline p99 (baseline {:.1}%, p={}), median ×{:.2} (shift {} within noise). A few requests are held up: queueing or contention — {}.",
            fmt_ms(s.p99.before), fmt_ms(s.p99.after), s.p99.ratio, s.p99.lo, s.p99.hi,
            100.0 * s.exceed, 100.0 * s.baseline_exceed, fmt_p(s.exceed_p), s.p50.ratio,
            fmt_ms(s.shift.estimate), m.advice()
        ),
        _ => format!(
            "{m} got faster: median {} → {} (×{:.2}, 95% CI {:.2}–{:.2}; Mann–Whitney p={}).",
            fmt_ms(s.p50.before), fmt_ms(s.p50.after), s.p50.ratio, s.p50.lo, s.p50.hi,
            fmt_p(s.mann_whitney.p)
        ),
    };
    Verdict {
        from_spikes: false,
        code,
        kind: kind.to_string(),
        stage: Some(m.name()),
        group: Some(m.side().as_str()),
        text,
        evidence: json!({
            "cost_ms": cost,
            "p50_before_ms": s.p50.before, "p50_after_ms": s.p50.after,
            "p50_ratio": s.p50.ratio, "p50_ci": [s.p50.lo, s.p50.hi],
            "p99_before_ms": s.p99.before, "p99_after_ms": s.p99.after,
            "p99_ratio": s.p99.ratio, "p99_ci": [s.p99.lo, s.p99.hi],
            "mann_whitney_p": s.mann_whitney.p, "shift_ms": s.shift.estimate,
            "shift_ci_ms": [s.shift.lo, s.shift.hi],
            "exceed": s.exceed, "baseline_exceed": s.baseline_exceed, "exceed_p": s.exceed_p,
        }),
    }
}

/// One-way stages (the parts of `net`) that got slower by no more than the
/// clock split's error allows cannot be told apart: their rise may belong
/// to the other direction. When none of them rose by more, the network
/// moved and the direction is undetermined: one verdict on `net` replaces
/// theirs (and is returned). A one-way stage that rose by more keeps its
/// verdict; the others lose theirs.
fn network(
    kind: &str,
    vs: &BTreeMap<&'static str, StageVsBaseline>,
    cx: &Context,
    kept: &mut Vec<(&'static str, Figure, f64)>,
) -> Option<Verdict> {
    let err = cx.split_err_ms?;
    let is_one_way = |m: Figure| Figure::Net.parts().contains(&m);
    let slower = |code: &str| matches!(code, "median_shift" | "tail_only");
    let one_way: Vec<(Figure, f64)> = kept
        .iter()
        .filter(|(c, m, _)| slower(c) && is_one_way(*m))
        .map(|(_, m, cost)| (*m, *cost))
        .collect();
    if one_way.is_empty() {
        return None;
    }
    let told = one_way.iter().any(|(_, cost)| *cost > err);
    kept.retain(|(c, m, cost)| !(slower(c) && is_one_way(*m) && *cost <= err));
    if told {
        return None;
    }
    let n = vs.get(Figure::Net.name());
    let net_shift = n.map_or_else(
        || one_way.iter().map(|(_, c)| c).sum(),
        |s| s.shift.estimate,
    );
    let each: Vec<String> = Figure::Net
        .parts()
        .iter()
        .map(|p| {
            let d = one_way
                .iter()
                .find(|(m, _)| m == p)
                .map_or_else(|| "flat".to_string(), |(_, c)| signed_ms(*c));
            format!("{p} {d}")
        })
        .collect();
    let medians = n.map_or(String::new(), |s| {
        format!(
            ": net median {} → {} ({})",
            fmt_ms(s.p50.before),
            fmt_ms(s.p50.after),
            signed_ms(s.shift.estimate)
        )
    });
    Some(Verdict {
        from_spikes: false,
        code: "network_moved",
        kind: kind.to_string(),
        stage: Some(Figure::Net.name()),
        group: Some(Figure::Net.side().as_str()),
        text: format!(
            "the network moved{medians}; which direction is undetermined: {} — within the ±{} the clock split allows (split_err_ms, run + baseline; the split rests on an estimated clock offset, docs/clocks.md). Net itself is exact — {}.",
            each.join(", "),
            fmt_ms(err),
            Figure::Net.advice()
        ),
        evidence: json!({
            "cost_ms": net_shift,
            "split_err_ms": err,
            "one_way": one_way.iter().map(|(m, c)| (m.name(), *c)).collect::<std::collections::BTreeMap<_, _>>(),
        }),
    })
}

/// e2e moved against the baseline (its median by 5 % of the baseline's, or
/// its p99 by 10 % of it, and by the floor) while no figure's test did: a
/// short run. Says so, and whether the gap moved with it, rather than
/// calling the run steady.
pub(super) fn e2e_moved(r: &GroupReport, cx: &Context, baseline_n: u64) -> Option<Verdict> {
    let e = r.baseline.get(Figure::E2e.name())?;
    let base = e.p50.before;
    let d50 = e.p50.after - e.p50.before;
    let d99 = e.p99.after - e.p99.before;
    let (stat, before, after, delta) = if d99 >= (0.10 * base).max(cx.floor_ms) {
        ("p99", e.p99.before, e.p99.after, d99)
    } else if d50 >= (0.05 * base).max(cx.floor_ms) {
        ("p50", e.p50.before, e.p50.after, d50)
    } else {
        return None;
    };
    let gap = r.baseline.get(Figure::Gap.name()).map(|g| {
        if stat == "p99" {
            (g.p99.before, g.p99.after)
        } else {
            (g.p50.before, g.p50.after)
        }
    });
    let why = match gap {
        Some((gb, ga)) if ga - gb >= 0.5 * delta => format!(
            "the gap (time inside the call no stage covers) went {stat} {} → {}: the client itself was held up — look at client scheduling, pauses, memory reclamation, logging, or the observer",
            fmt_ms(gb),
            fmt_ms(ga)
        ),
        _ => format!(
            "the sample ({} calls, baseline {baseline_n}) is too small to tell which stage — run more calls",
            r.steady
        ),
    };
    Some(Verdict {
        from_spikes: false,
        code: "e2e_moved",
        kind: r.kind.clone(),
        stage: Some(Figure::E2e.name()),
        group: Some(Figure::E2e.side().as_str()),
        text: format!(
            "e2e {stat} went {} → {} ({}) but no stage moved beyond noise: {why}.",
            fmt_ms(before),
            fmt_ms(after),
            signed_ms(delta)
        ),
        evidence: json!({
            "cost_ms": delta, "stat": stat, "before_ms": before, "after_ms": after,
            "calls": r.steady, "baseline_calls": baseline_n,
        }),
    })
}
