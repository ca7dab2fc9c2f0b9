//! The robot's action queue as a stage (LeRobot's async inference): at
//! each level against the baseline, did the queue come closer to running
//! out, did it run out, and did the control loop keep its rate?
//!
//! Its figures run the other way from a stage's: a larger margin (the
//! actions still queued when a chunk came) is good news and never a move;
//! what moves is the margin **falling**, chunks coming after the queue had
//! **run dry** (ticks without an action), or the control loop **falling
//! behind** its rate — LeRobot's loop captures and sends each observation
//! inline and waits for `SendObservations`' reply, so a longer round trip
//! takes ticks from it without emptying the queue. Read from the records
//! alone: `margin_ms`, `dry_ticks`, and `seq` (the observation's timestep,
//! the index of the last action run: its rise over a phase is the actions
//! the robot ran).

#[cfg(test)]
mod tests;
mod text;

use stagetrace_analyze::stats;
use stagetrace_schema::Figure;

use super::obs::{column, Obs, PhaseSpan};
use super::queue_figures::{ActionQueueLevel, ActionQueuePhase, ActionQueueVerdict};
use super::resources::ResourceSummary;
use super::result::{ExperimentVerdict, LevelResult, Thresholds};

/// The margin's quantile compared: its low end. When a chunk takes more than
/// a control tick, the robot sends again on the next tick and that chunk
/// comes to a queue just refilled, so the median mixes the two kinds of
/// chunk; the lowest tenth is the chunks that came closest to running out.
const MARGIN_Q: f64 = 0.1;

/// Share of the control rate's ticks the loop may lose beyond the
/// baseline's before it "fell behind": one tick in twenty. The count is
/// exact (action indices), but a tokio interval on a busy host runs a
/// little late and the loop keeps that lateness (LeRobot's sleep does too).
const LOST_MIN: f64 = 0.05;

/// A level ran dry when at least this many chunks came to an empty queue,
/// at least [`DRY_SHARE`] of them, significantly more often than in the
/// baseline (p < [`DRY_P`]): the report's `queue_ran_dry` threshold.
const DRY_MIN_CHUNKS: usize = 3;
const DRY_SHARE: f64 = 0.01;
const DRY_P: f64 = 0.01;

/// The action queue of phase `pi` from its records.
fn phase_figures(obs: &[Obs], phases: &[PhaseSpan], pi: usize, hz: f64) -> ActionQueuePhase {
    let margins = column(obs, pi, Figure::Margin);
    let counted = || obs.iter().filter(|o| o.phase == pi && o.counts());
    let dry_chunks = counted().filter(|o| o.get(Figure::Margin) < 0.0).count();
    let dry_ticks: u64 = counted().map(|o| u64::from(o.dry_ticks)).sum();
    let p = &phases[pi];
    let span_s = (p.end_unix_ms - p.settle_until_unix_ms) / 1e3;
    let ticks = hz * span_s;
    // Every observation of the phase, failed ones too (a replaced
    // observation still names the action last run), settling ones not.
    let seen = || obs.iter().filter(|o| o.phase == pi && !o.settling);
    let first = seen().min_by(|a, b| a.ts_ms.total_cmp(&b.ts_ms));
    let last = seen().max_by(|a, b| a.ts_ms.total_cmp(&b.ts_ms));
    let actions_per_s = match (first, last) {
        (Some(a), Some(b)) if b.ts_ms - a.ts_ms >= 1e3 => {
            Some(b.seq.saturating_sub(a.seq) as f64 / ((b.ts_ms - a.ts_ms) / 1e3))
        }
        _ => None,
    };
    ActionQueuePhase {
        chunks: margins.len(),
        margin_p50: stats::quantile(&margins, 0.5),
        margin_p10: stats::quantile(&margins, MARGIN_Q),
        dry_chunks,
        dry_ticks,
        dry_tick_share: if ticks.is_finite() && ticks >= 1.0 {
            dry_ticks as f64 / ticks
        } else {
            0.0
        },
        actions_per_s,
        ticks_lost_share: actions_per_s.map(|r| 1.0 - r / hz),
    }
}

/// Level `pi` against the baseline `bi` (its figures `base`).
fn level_against(
    obs: &[Obs],
    phases: &[PhaseSpan],
    (bi, pi): (usize, usize),
    base: &ActionQueuePhase,
    hz: f64,
    th: &Thresholds,
) -> ActionQueueLevel {
    let phase = phase_figures(obs, phases, pi, hz);
    let (b, l) = (
        column(obs, bi, Figure::Margin),
        column(obs, pi, Figure::Margin),
    );
    let enough = b.len() >= 5 && l.len() >= 5;
    let seed = 0xacce ^ ((phases[pi].level as u64) << 8);
    let margin_change = enough
        .then(|| stats::quantile_diff(&b, &l, MARGIN_Q, seed))
        .flatten();
    // One-sided: a margin that grew is good news, never a move.
    let margin_fell = margin_change.is_some_and(|q| q.hi < 0.0 && -q.diff >= th.min_p50_ms);
    let neg = |v: &[f32]| {
        let mut n: Vec<f32> = v.iter().map(|m| -m).collect();
        n.reverse();
        n
    };
    let dry_exceedance = enough.then(|| stats::exceedance(&neg(&b), &neg(&l), 0.0));
    let ran_dry = dry_exceedance.is_some_and(|(_, share, p)| {
        phase.dry_chunks >= DRY_MIN_CHUNKS && share >= DRY_SHARE && p < DRY_P
    });
    let fell_behind = match (phase.ticks_lost_share, base.ticks_lost_share) {
        (Some(l), Some(b)) => l - b >= LOST_MIN,
        _ => false,
    };
    ActionQueueLevel {
        phase,
        margin_change,
        margin_fell,
        dry_exceedance,
        ran_dry,
        fell_behind,
        moved: margin_fell || ran_dry || fell_behind,
    }
}

/// Add the action queue to each level and to the verdict, when the
/// baseline's records carry an action queue (LeRobot's async pair): its
/// move joins the question of which stage moved first, and the verdict says
/// what it did in the robot's terms. `hz` is the robot's control rate.
pub(crate) fn attach(
    (phases, obs): (&[PhaseSpan], &[Obs]),
    hz: f64,
    (th, base_res): (&Thresholds, Option<&ResourceSummary>),
    levels: &mut [LevelResult],
    verdict: &mut ExperimentVerdict,
) {
    let Some(bi) = phases.iter().position(|p| p.phase == "baseline") else {
        return;
    };
    if column(obs, bi, Figure::Margin).len() < 5 || !(hz.is_finite() && hz > 0.0) {
        return;
    }
    let base = phase_figures(obs, phases, bi, hz);
    for l in levels.iter_mut() {
        let Some(pi) = phases
            .iter()
            .position(|p| p.phase == "level" && p.level == l.level)
        else {
            continue;
        };
        l.action_queue = Some(level_against(obs, phases, (bi, pi), &base, hz, th));
    }
    let at = |f: fn(&ActionQueueLevel) -> bool| {
        levels
            .iter()
            .find(|l| l.action_queue.as_ref().is_some_and(f))
            .map(|l| l.level)
    };
    let mut aq = ActionQueueVerdict {
        baseline: base,
        first_level: at(|q| q.moved),
        margin_fell_level: at(|q| q.margin_fell),
        ran_dry_level: at(|q| q.ran_dry),
        fell_behind_level: at(|q| q.fell_behind),
        summary: String::new(),
    };
    text::tell(&mut aq, levels, verdict, hz, base_res);
}
