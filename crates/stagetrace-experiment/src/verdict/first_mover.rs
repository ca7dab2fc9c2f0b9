//! The answer from the per-level results: which figure moved first, at
//! which level and in what shape, which it dragged along, which stayed flat,
//! and the period of its spikes when it moved as a tail.

use stagetrace_analyze::stats;
use stagetrace_schema::Figure;

use super::direction;
use super::obs::{column, Obs, PhaseSpan};
use super::resources::{resource_note, ResourceSummary};
use super::result::{ComponentResult, ExperimentVerdict, LevelResult, Thresholds};
use super::text;

/// The figures of a level with their results, in the order of the
/// level's map (by name: ties between movers resolve the same way on every run).
fn by_figure(l: &LevelResult) -> impl Iterator<Item = (Figure, &ComponentResult)> {
    l.components
        .iter()
        .filter_map(|(n, c)| Some((Figure::from_name(n)?, c)))
}

/// The first figure to move: at the lowest level where a candidate moved,
/// a median move before a tail-only one, among comparable moves the
/// earliest change, then the largest.
fn first_mover<'a>(
    levels: &'a [LevelResult],
    phases: &[PhaseSpan],
    candidate: &dyn Fn(Figure) -> bool,
) -> Option<(&'a LevelResult, Figure, &'a ComponentResult)> {
    for l in levels {
        let mut movers: Vec<(Figure, &ComponentResult)> = by_figure(l)
            .filter(|(f, c)| candidate(*f) && c.moved)
            .collect();
        if movers.is_empty() {
            continue;
        }
        // A median move outranks a tail-only move: transient contention from
        // outside can lift a p99 for a while, not a median.
        if movers.iter().any(|(_, c)| c.shape == Some("median")) {
            movers.retain(|(_, c)| c.shape == Some("median"));
        }
        // Among moves of comparable size (at least half the largest shift),
        // the earliest change (1 s buckets from the level's start: moves
        // caused by the same change land together), then the largest.
        movers.sort_by(|a, b| b.1.abs_shift().total_cmp(&a.1.abs_shift()));
        let top = movers[0].1.abs_shift();
        movers.retain(|(_, c)| c.abs_shift() >= 0.5 * top);
        let level_start = phases
            .iter()
            .find(|p| p.phase == "level" && p.level == l.level)
            .map_or(0.0, |p| p.settle_until_unix_ms);
        let bucket = |c: &ComponentResult| {
            c.change_unix_ms
                .map_or(i64::MAX, |t| ((t - level_start) / 1000.0).floor() as i64)
        };
        movers.sort_by(|a, b| {
            bucket(a.1)
                .cmp(&bucket(b.1))
                .then_with(|| b.1.abs_shift().total_cmp(&a.1.abs_shift()))
        });
        let (f, c) = movers[0];
        return Some((l, f, c));
    }
    None
}

/// The verdict when no candidate moved at any level: e2e's point estimates
/// moved though no test passed (a short level) is never "absorbed".
fn nothing_moved(
    levels: &[LevelResult],
    candidates: &[Figure],
    e2e_moved: bool,
    th: &Thresholds,
) -> ExperimentVerdict {
    let point = direction::e2e_point_move(levels, th);
    let mut v = match point {
        Some((l, stat, before, after)) => {
            let mut v =
                ExperimentVerdict::nothing(&direction::e2e_without_stage(l, stat, before, after));
            v.next_step =
                "raise the calls per level (or hold each level longer) to tell which stage moved"
                    .into();
            v
        }
        None => {
            let mut v = ExperimentVerdict::nothing(if e2e_moved {
                "e2e moved but no stage and not the gap beyond the thresholds: raise the levels or the calls per level"
            } else {
                "no stage moved at any level: the pipeline absorbs this factor over the range tried"
            });
            v.next_step =
                "raise the factor further (or hold each level longer) to find where it bites"
                    .into();
            v
        }
    };
    v.e2e_moved = e2e_moved || point.is_some();
    v.flat = candidates.iter().map(|f| f.name()).collect();
    v
}

/// The verdict over `levels`; `candidates` are the figures that may be
/// named as the first mover, in report order.
pub(crate) fn decide(
    levels: &[LevelResult],
    phases: &[PhaseSpan],
    obs: &[Obs],
    candidates: &[Figure],
    base_res: Option<&ResourceSummary>,
    th: &Thresholds,
) -> ExperimentVerdict {
    let candidate = |f: Figure| candidates.contains(&f);
    let e2e_moved = levels.iter().any(|l| {
        l.components
            .get(Figure::E2e.name())
            .is_some_and(|c| c.moved)
    });
    let first = first_mover(levels, phases, &candidate);
    let Some((fl, first_fig, fc)) = first else {
        return nothing_moved(levels, candidates, e2e_moved, th);
    };
    let dragged = dragged_along(levels, fl.level, first_fig, &candidate);
    let flat = flat_beside(levels, candidates, first_fig, &dragged);
    let Named {
        first: first_fig,
        result: fc,
        dragged,
        undetermined,
        unnamed,
    } = name_told_one_way(obs, phases, levels, fl, first_fig, fc, dragged);

    let shape = fc.shape;
    let res = &fl.resources;
    let res_state = (res.samples > 0).then_some(res.state);
    let resource_note = (res.samples > 0).then(|| resource_note(res, base_res));
    let spike_period_s = (shape == Some("tail"))
        .then(|| spike_period(obs, phases, fl.level, first_fig))
        .flatten();
    let host = super::host::host_first(levels, fl.level, first_fig, fc.abs_shift());
    let summary = text::summary(&text::Findings {
        first: first_fig,
        level: fl,
        result: fc,
        spike_period_s,
        dragged: &dragged,
        levels,
        flat: &flat,
        resource_note: resource_note.as_deref(),
        undetermined: undetermined.as_deref(),
        unnamed: unnamed.as_deref(),
    });
    ExperimentVerdict {
        first_stage: Some(first_fig.name()),
        first_level: Some(fl.level),
        first_level_label: Some(fl.label.clone()),
        first_change_unix_ms: fc.change_unix_ms,
        shape,
        dragged: dragged.iter().map(|(f, l)| (f.name(), *l)).collect(),
        flat: flat.iter().map(|f| f.name()).collect(),
        e2e_moved,
        resources: res_state,
        resource_note,
        spike_period_s,
        next_step: match &host {
            Some(_) => "the host, not the stage: pin or reserve cores for the loop and the server, move the other load, or tune the GC; then run the plan again".into(),
            None => text::next_step(first_fig, shape, res_state),
        },
        summary: match &host {
            Some(h) => format!("{}. {summary}", h.sentence(first_fig)),
            None => summary,
        },
        host,
        action_queue: None,
    }
}

/// The candidates other than `first` that moved at `from_level` or above,
/// each with the lowest level it moved at, in the order they moved.
fn dragged_along(
    levels: &[LevelResult],
    from_level: usize,
    first: Figure,
    candidate: &dyn Fn(Figure) -> bool,
) -> Vec<(Figure, usize)> {
    let mut dragged: Vec<(Figure, usize)> = Vec::new();
    for l in levels.iter().filter(|l| l.level >= from_level) {
        for (f, c) in by_figure(l) {
            if candidate(f) && c.moved && f != first && !dragged.iter().any(|(d, _)| *d == f) {
                dragged.push((f, l.level));
            }
        }
    }
    dragged
}

/// The candidates measured at some level that neither moved first nor were
/// dragged along.
fn flat_beside(
    levels: &[LevelResult],
    candidates: &[Figure],
    first: Figure,
    dragged: &[(Figure, usize)],
) -> Vec<Figure> {
    candidates
        .iter()
        .copied()
        .filter(|f| {
            *f != first
                && !dragged.iter().any(|(d, _)| d == f)
                && levels.iter().any(|l| l.components.contains_key(f.name()))
        })
        .collect()
}

/// The first mover and the figures it dragged along as the verdict names
/// them, with the words for what was left unnamed.
struct Named<'a> {
    first: Figure,
    result: &'a ComponentResult,
    dragged: Vec<(Figure, usize)>,
    /// The one-way stages' shifts and the split's error, when the network
    /// moved in a direction that cannot be told.
    undetermined: Option<String>,
    /// The shift of a one-way stage left out, and the split's error.
    unnamed: Option<String>,
}

/// Name only the one-way stages whose move the clock split can tell apart:
/// an untold first mover gives way to a told one-way stage of its level, or to
/// the network as a whole; untold dragged one-way stages are left out.
fn name_told_one_way<'a>(
    obs: &[Obs],
    phases: &[PhaseSpan],
    levels: &[LevelResult],
    fl: &'a LevelResult,
    first: Figure,
    fc: &'a ComponentResult,
    mut dragged: Vec<(Figure, usize)>,
) -> Named<'a> {
    // A one-way stage whose move the clock split cannot tell from its error is
    // not named: when no one-way stage's move can be told, the network moved
    // and its direction is undetermined.
    let told = |f: Figure, level: usize| {
        !direction::is_one_way(f) || direction::told(obs, phases, levels, f, level)
    };
    let one_way = Figure::Net.parts();
    let (mut first_fig, mut fc) = (first, fc);
    let mut undetermined: Option<String> = None;
    let mut unnamed: Option<String> = None;
    if !told(first_fig, fl.level) {
        let other = dragged
            .iter()
            .find(|(f, lv)| *lv == fl.level && direction::is_one_way(*f) && told(*f, *lv))
            .and_then(|(f, _)| fl.components.get(f.name()).map(|c| (*f, c)));
        if let Some((f, c)) = other {
            unnamed = Some(direction::detail(obs, phases, fl, &[first_fig]));
            first_fig = f;
            fc = c;
        } else if let Some(c) = fl.components.get(Figure::Net.name()) {
            first_fig = Figure::Net;
            fc = c;
            undetermined = Some(direction::detail(obs, phases, fl, one_way));
        }
    }
    let untold: Vec<(Figure, usize)> = dragged
        .iter()
        .copied()
        .filter(|(f, lv)| !told(*f, *lv))
        .collect();
    dragged.retain(|(f, lv)| *f != first_fig && told(*f, *lv));
    if let Some(&(f, lv)) = untold.first() {
        let direction_known = first_fig == Figure::Net
            || direction::is_one_way(first_fig)
            || dragged.iter().any(|(d, _)| direction::is_one_way(*d));
        let at = |lv: usize| levels.iter().find(|l| l.level == lv);
        if direction_known {
            // The direction is named already: an unclear one-way stage is only left out.
            if let Some(l) = at(lv) {
                unnamed = Some(direction::detail(obs, phases, l, &[f]));
            }
        } else {
            dragged.push((Figure::Net, lv));
            if let Some(l) = at(lv) {
                undetermined = Some(direction::detail(obs, phases, l, one_way));
            }
        }
    }
    Named {
        first: first_fig,
        result: fc,
        dragged,
        undetermined,
        unnamed,
    }
}

/// Median interval between the spikes of `f` in a level (≥ 3 spikes).
fn spike_period(obs: &[Obs], phases: &[PhaseSpan], level: usize, f: Figure) -> Option<f64> {
    let pi = phases
        .iter()
        .position(|p| p.phase == "level" && p.level == level)?;
    let bi = phases.iter().position(|p| p.phase == "baseline")?;
    let base = column(obs, bi, f);
    let lv = column(obs, pi, f);
    let (med, _) = stats::median_mad(&base);
    let b99 = stats::quantile(&base, 0.99);
    let lvl99 = stats::quantile(&lv, 0.99);
    // Spikes: above the midpoint between the baseline's p99 and the level's p99.
    let thr = (b99.max(med) + lvl99) / 2.0;
    let ts: Vec<f64> = obs
        .iter()
        .filter(|o| o.phase == pi && o.counts() && f64::from(o.get(f)) > thr)
        .map(|o| o.ts_ms)
        .collect();
    if ts.len() < 3 {
        return None;
    }
    let mut d: Vec<f32> = ts
        .windows(2)
        .map(|w| ((w[1] - w[0]) / 1e3) as f32)
        .collect();
    d.sort_unstable_by(f32::total_cmp);
    Some(stats::quantile(&d, 0.5))
}
