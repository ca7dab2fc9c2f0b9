//! The async shape (LeRobot's async inference): the robot's action queue
//! when each chunk came, from the records' `margin_ms` and `dry_ticks`, and
//! the verdict when it ran dry. A healthy async run, whose chunks all come
//! before the queue empties, gets none.

use serde_json::json;
use stagetrace_schema::Figure;

use super::group::GroupData;
use super::options::MIN_SPIKES;
use super::report::{ActionQueue, GroupReport, Verdict};
use crate::format::fmt_ms;
use crate::load::Dataset;
use crate::stats::median;

/// Share of the chunks that must come after the queue ran dry for a
/// verdict: as for spikes, from 1 % on it sets the tail the robot feels.
const DRY_SHARE: f64 = 0.01;

/// The robot's action queue over a group's calls (`None` when no record
/// carries `margin_ms`): `ds.mitigated` is in call order, so each call's
/// idle ticks are found by a binary search.
pub(super) fn action_queue(ds: &Dataset, g: &GroupData) -> Option<ActionQueue> {
    let mut margins: Vec<f64> = Vec::new();
    let mut dry: Vec<f64> = Vec::new();
    let mut dry_ticks = 0u64;
    for &i in &g.calls {
        let Some(margin) = ds.value(Figure::Margin, i as usize) else {
            continue;
        };
        margins.push(margin);
        let ticks = ds
            .mitigated
            .binary_search_by_key(&i, |m| m.call)
            .map_or(0, |k| ds.mitigated[k].dry);
        if margin < 0.0 || ticks > 0 {
            dry.push(-margin.min(0.0));
            dry_ticks += u64::from(ticks);
        }
    }
    if margins.is_empty() {
        return None;
    }
    Some(ActionQueue {
        chunks: margins.len() as u64,
        dry_chunks: dry.len() as u64,
        dry_ticks,
        margin_p50_ms: median(&mut margins).unwrap_or(0.0),
        dry_p50_ms: median(&mut dry),
    })
}

/// "The action queue ran dry …" when enough chunks came after the robot's
/// action queue had emptied (at least [`MIN_SPIKES`] and [`DRY_SHARE`] of
/// them): how often, how late, and what to tune.
pub(super) fn queue_ran_dry(r: &GroupReport) -> Option<Verdict> {
    let q = r.action_queue.as_ref()?;
    let share = q.dry_chunks as f64 / q.chunks.max(1) as f64;
    if q.dry_chunks < MIN_SPIKES as u64 || share < DRY_SHARE {
        return None;
    }
    let late = q.dry_p50_ms.unwrap_or(0.0);
    Some(Verdict {
        from_spikes: false,
        code: "queue_ran_dry",
        kind: r.kind.clone(),
        stage: Some(Figure::Margin.name()),
        group: Some(Figure::Margin.side().as_str()),
        text: format!(
            "the action queue ran dry before {} of {} chunks ({:.1}%, {} control ticks without an action): those chunks came a median {} after it emptied; raise the refill threshold (send observations earlier) or cut infer (docs/lerobot.md).",
            q.dry_chunks,
            q.chunks,
            100.0 * share,
            q.dry_ticks,
            fmt_ms(late),
        ),
        evidence: json!({
            "chunks": q.chunks,
            "dry_chunks": q.dry_chunks,
            "dry_ticks": q.dry_ticks,
            "dry_p50_ms": late,
            "margin_p50_ms": q.margin_p50_ms,
            // What an empty queue costs the loop: the median wait for the chunk.
            "cost_ms": late,
        }),
    })
}
