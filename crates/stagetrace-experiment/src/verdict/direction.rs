//! What the verdict may say about the network's direction, and about e2e
//! moving with no stage to name.
//!
//! In estimate mode the uplink/downlink split rests on an estimated clock
//! offset: a one-way stage's change may sit on the wrong side by up to the
//! split's error (`split_err_ms`, at the level plus at the baseline). A one-way
//! stage that moved by no more than that is not blamed: when no one-way stage
//! moved by more, the network moved and the direction is undetermined.

use stagetrace_analyze::stats;
use stagetrace_schema::Figure;

use super::obs::{column, Obs, PhaseSpan};
use super::result::{LevelResult, Thresholds};

/// The split's error on a change at `level` (ms): the median `split_err_ms`
/// of the level plus the baseline's; `None` without split errors.
pub(crate) fn split_err(obs: &[Obs], phases: &[PhaseSpan], level: usize) -> Option<f64> {
    let bi = phases.iter().position(|p| p.phase == "baseline")?;
    let li = phases
        .iter()
        .position(|p| p.phase == "level" && p.level == level)?;
    let med = |i: usize| {
        let v = column(obs, i, Figure::SplitErr);
        (!v.is_empty()).then(|| stats::quantile(&v, 0.5))
    };
    match (med(li), med(bi)) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// A one-way stage: one of the parts of `net`.
pub(crate) fn is_one_way(f: Figure) -> bool {
    Figure::Net.parts().contains(&f)
}

/// Whether a one-way stage's move at `level` can be told from the split's
/// error: its shift exceeds what the split allows there (always, without
/// split errors).
pub(crate) fn told(
    obs: &[Obs],
    phases: &[PhaseSpan],
    levels: &[LevelResult],
    f: Figure,
    level: usize,
) -> bool {
    let Some(err) = split_err(obs, phases, level) else {
        return true;
    };
    levels
        .iter()
        .find(|l| l.level == level)
        .and_then(|l| l.components.get(f.name()))
        .is_none_or(|c| c.abs_shift() > err)
}

/// The shifts of `one_way` at level `l` and the split's error, in words:
/// "uplink +3.00 ms, downlink +3.00 ms lie within the ±7.00 ms …".
pub(crate) fn detail(
    obs: &[Obs],
    phases: &[PhaseSpan],
    l: &LevelResult,
    one_way: &[Figure],
) -> String {
    let err = split_err(obs, phases, l.level).unwrap_or(0.0);
    let each: Vec<String> = one_way
        .iter()
        .map(|p| {
            let d = l.components.get(p.name()).map_or(0.0, |c| {
                let q = c
                    .p50_ratio
                    .filter(|_| c.shape != Some("tail"))
                    .or(c.p99_ratio);
                q.map_or(0.0, |q| q.after - q.before)
            });
            format!("{p} {d:+.2} ms")
        })
        .collect();
    format!(
        "{} {} within the ±{err:.2} ms the clock split allows at level {} (split_err_ms at the level plus the baseline; the split rests on an estimated clock offset, docs/clocks.md)",
        each.join(", "),
        if each.len() == 1 { "lies" } else { "lie" },
        l.level
    )
}

/// e2e at the first level where its median or p99 moved by the thresholds
/// (point estimates: a short level can move e2e without any test passing):
/// (level, "p99", before, after).
pub(crate) fn e2e_point_move<'a>(
    levels: &'a [LevelResult],
    th: &Thresholds,
) -> Option<(&'a LevelResult, &'static str, f64, f64)> {
    levels.iter().find_map(|l| {
        let c = l.components.get(Figure::E2e.name())?;
        let p99 = c.p99_ratio.filter(|q| q.after - q.before >= th.min_p99_ms);
        let p50 = c.p50_ratio.filter(|q| q.after - q.before >= th.min_p50_ms);
        p99.map(|q| (l, "p99", q.before, q.after))
            .or(p50.map(|q| (l, "p50", q.before, q.after)))
    })
}

/// The sentence for e2e moving with no stage named: whether the gap moved
/// with it, or the sample is too small to tell which stage.
pub(crate) fn e2e_without_stage(l: &LevelResult, stat: &str, before: f64, after: f64) -> String {
    let gap = l.components.get(Figure::Gap.name()).and_then(|g| {
        if stat == "p99" {
            g.p99_ratio
        } else {
            g.p50_ratio
        }
    });
    let why = match gap {
        Some(g) if g.after - g.before >= 0.5 * (after - before) => format!(
            "the gap (time inside the call no stage covers) went {stat} {:.2} → {:.2} ms: the client itself was held up — client scheduling, pauses, memory reclamation, logging",
            g.before, g.after
        ),
        _ => {
            let n = l
                .components
                .get(Figure::E2e.name())
                .map_or(0, |c| c.n);
            format!(
                "with {n} calls at that level the sample is too small to tell which stage — raise the calls per level"
            )
        }
    };
    format!(
        "e2e moved ({stat} {before:.2} → {after:.2} ms at level {} ({})) but no stage moved beyond noise: {why}.",
        l.level, l.label
    )
}
