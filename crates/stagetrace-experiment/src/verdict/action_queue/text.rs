//! The action queue in the verdict's words: what it did, in the robot's
//! terms, beside the stage that moved first — or in its place, when the
//! queue moved at a lower level than any stage.

use crate::verdict::queue_figures::{ActionQueueLevel, ActionQueueVerdict};
use crate::verdict::resources::{resource_note, ResourceSummary};
use crate::verdict::result::{ExperimentVerdict, LevelResult};

/// The level's label as the verdict names it: "level 2 (uplink delay 40 ms)".
fn named(levels: &[LevelResult], level: usize) -> String {
    let label = levels
        .iter()
        .find(|l| l.level == level)
        .map_or(String::new(), |l| format!(" ({})", l.label));
    format!("level {level}{label}")
}

fn queue_at(levels: &[LevelResult], level: usize) -> Option<&ActionQueueLevel> {
    levels
        .iter()
        .find(|l| l.level == level)
        .and_then(|l| l.action_queue.as_ref())
}

/// What the queue did, reading by reading; a level equal to `anchor` is
/// said with `anchor_words` ("at the same level"), the level just named
/// again as "there", others by name.
fn readings(
    aq: &ActionQueueVerdict,
    levels: &[LevelResult],
    hz: f64,
    (anchor, anchor_words): (Option<usize>, &str),
) -> String {
    let last = std::cell::Cell::new(anchor);
    let at = |level: usize| {
        let words = if Some(level) == anchor {
            anchor_words.to_owned()
        } else if Some(level) == last.get() {
            " there".to_owned()
        } else {
            format!(" at {}", named(levels, level))
        };
        last.set(Some(level));
        words
    };
    let base = &aq.baseline;
    let found = |l: Option<usize>| l.and_then(|l| Some((l, queue_at(levels, l)?)));
    let margin = match found(aq.margin_fell_level) {
        Some((l, q)) => {
            let (before, after) = q
                .margin_change
                .map_or((base.margin_p10, q.phase.margin_p10), |c| (c.before, c.after));
            format!(
                "its margin fell{}: the closest tenth of the chunks came with {after:.1} ms of actions left, {before:.1} ms in the baseline",
                at(l)
            )
        }
        None => format!(
            "its margin held: the closest tenth of the chunks came with {:.1} ms of actions left in the baseline, and no level lower beyond noise",
            base.margin_p10
        ),
    };
    let rate = match found(aq.fell_behind_level) {
        Some((l, q)) => {
            let p = &q.phase;
            let lost = p.ticks_lost_share.unwrap_or(0.0).max(0.0);
            // Ticks lost but not dry: the loop itself did not tick.
            let why = if p.dry_tick_share < 0.5 * lost {
                "few of them dry: LeRobot's control loop waits for each SendObservations reply before its next tick, so the round trip took ticks from it"
            } else {
                "most of them dry"
            };
            format!(
                "the control loop fell behind{}: {:.1} of its {hz:.0} actions per second ({:.0} % of its ticks ran no action, {why})",
                at(l),
                p.actions_per_s.unwrap_or(0.0),
                100.0 * lost
            )
        }
        None => format!("the control loop kept its {hz:.0} actions per second"),
    };
    let dry = match found(aq.ran_dry_level) {
        Some((l, q)) => format!(
            "it ran dry{}: {:.1} % of control ticks without an action, before {} of {} chunks",
            at(l),
            100.0 * q.phase.dry_tick_share,
            q.phase.dry_chunks,
            q.phase.chunks
        ),
        None if base.dry_chunks > 0 => format!(
            "it ran dry no more often than in the baseline, where it did before {} of {} chunks",
            base.dry_chunks, base.chunks
        ),
        None => "it never ran dry".to_owned(),
    };
    format!("{margin}; {rate}; {dry}")
}

/// What to do about what the queue did (empty when it held).
fn advice(aq: &ActionQueueVerdict) -> Option<&'static str> {
    if aq.ran_dry_level.is_some() {
        Some("the action queue ran dry: raise refill_threshold (LeRobot's chunk_size_threshold: send observations earlier) until the margin covers the round trip, or cut the stage that moved (docs/lerobot.md)")
    } else if aq.fell_behind_level.is_some() {
        Some("the control loop lost ticks: LeRobot's loop waits for each SendObservations reply, so a round trip longer than a tick is taken from it — cut the network round trip, or send observations from a thread of their own")
    } else if aq.margin_fell_level.is_some() {
        Some("the action queue's margin fell but still covered the round trip: keep it above 0 as the factor grows (raise refill_threshold)")
    } else {
        None
    }
}

/// Write the action queue into `verdict`: beside the first stage, or as
/// the first mover when it moved at a lower level than any stage.
pub(super) fn tell(
    aq: &mut ActionQueueVerdict,
    levels: &[LevelResult],
    verdict: &mut ExperimentVerdict,
    hz: f64,
    base_res: Option<&ResourceSummary>,
) {
    let queue_first = aq
        .first_level
        .is_some_and(|q| verdict.first_level.is_none_or(|s| q < s));
    if queue_first {
        return lead(aq, levels, verdict, hz, base_res);
    }
    aq.summary = match aq.first_level {
        Some(_) => format!(
            "The action queue: {}.",
            readings(aq, levels, hz, (verdict.first_level, " at the same level"))
        ),
        None => format!(
            "The action queue held: {}.",
            readings(aq, levels, hz, (None, ""))
        ),
    };
    if !verdict.summary.ends_with('.') {
        verdict.summary.push('.');
    }
    verdict.summary.push(' ');
    verdict.summary.push_str(&aq.summary);
    if let Some(a) = advice(aq) {
        verdict.next_step = format!("{}; {a}", verdict.next_step);
    }
    verdict.action_queue = Some(aq.clone());
}

/// The action queue moved first: it is named (`margin`), the stage that
/// moved first (if one did) joins the figures dragged along.
fn lead(
    aq: &mut ActionQueueVerdict,
    levels: &[LevelResult],
    verdict: &mut ExperimentVerdict,
    hz: f64,
    base_res: Option<&ResourceSummary>,
) {
    let Some(level) = aq.first_level else { return };
    let what = readings(aq, levels, hz, (Some(level), ""));
    aq.summary = format!("The action queue: {what}.");
    let then = match (verdict.first_stage, verdict.first_level) {
        (Some(stage), Some(l)) => {
            verdict.dragged.insert(0, (stage, l));
            format!(
                "no stage had moved beyond noise at that level. The first stage to move: {}",
                verdict.summary
            )
        }
        _ => format!(
            "no stage moved beyond noise at any level (flat: {}).",
            verdict.flat.join(", ")
        ),
    };
    let lv = levels.iter().find(|l| l.level == level);
    let res = lv.map(|l| &l.resources).filter(|r| r.samples > 0);
    let note = res.map(|r| resource_note(r, base_res));
    verdict.summary = format!(
        "the robot's action queue moved first, at {}: {what}; {then}{}",
        named(levels, level),
        note.as_ref().map_or(String::new(), |n| format!(" {n}"))
    );
    let step = advice(aq).unwrap_or_default();
    verdict.next_step = if verdict.first_stage.is_some() {
        format!("{step}; then, for the stage: {}", verdict.next_step)
    } else {
        step.to_owned()
    };
    verdict.first_stage = Some(stagetrace_schema::Figure::Margin.name());
    verdict.first_level = Some(level);
    verdict.first_level_label = lv.map(|l| l.label.clone());
    verdict.first_change_unix_ms = None;
    verdict.shape = None;
    verdict.spike_period_s = None;
    verdict.host = None;
    verdict.resources = res.map(|r| r.state);
    verdict.resource_note = note;
    verdict.action_queue = Some(aq.clone());
}
