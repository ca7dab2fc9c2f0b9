//! Why calls missed their tick's deadline: the loop's period read off the
//! records, whether the loop waits for its ticks at all, and which stages
//! carry the time over the period (`docs/report.md`, "Deadline misses").
//!
//! The records carry no target rate, only each call's lateness
//! (`late_ms` = end − its tick's deadline) and its e2e. A call starts at
//! or after its tick, so `e2e − late` = deadline − start is at most the
//! period, and equal to it on a call that started on its tick: the largest
//! `e2e − late` is the period.

use stagetrace_schema::Figure;

use super::group::GroupData;
use super::report::{DeadlineCause, DeadlineShare};
use crate::figures;
use crate::load::Dataset;
use crate::stats;

/// A loop whose median call takes this share of its period or more has no
/// slack for its calls' ordinary jitter: its misses are the call's own
/// size against the period, not a few calls held up.
const TIGHT_SHARE: f64 = 0.9;

/// A loop running this much faster than its target does not wait for its
/// ticks (a paced loop runs at the target, or slower when behind).
const UNPACED_RATE: f64 = 1.05;

/// The most idle time between calls (ms) a loop that does not sleep shows:
/// the layer's own pacing rule calls a call paced from 1 ms of idle on.
pub(super) const BACK_TO_BACK_MS: f64 = 1.0;

/// The figure `e2e − late` of call `i`: its deadline − its start (ms).
fn to_deadline(ds: &Dataset, i: usize) -> Option<f64> {
    Some(ds.value(Figure::E2e, i)? - ds.value(Figure::Late, i)?)
}

/// Why the group's calls missed their deadlines, when the records carry
/// lateness and some call missed; `None` otherwise. `split_err_ms`: the
/// run's median split bound (the one-way stages are then read as `net`,
/// whose split the estimated clock cannot tell); `floor_ms`: the smallest
/// excess worth naming.
pub(super) fn deadline_cause(
    ds: &Dataset,
    g: &GroupData,
    effective_hz: Option<f64>,
    split_err_ms: Option<f64>,
    floor_ms: f64,
) -> Option<DeadlineCause> {
    let calls: Vec<usize> = g.calls.iter().map(|&i| i as usize).collect();
    let period_ms = period_ms(ds)?;
    let missed: Vec<usize> = calls
        .iter()
        .copied()
        .filter(|&i| ds.value(Figure::Late, i).is_some_and(|l| l > 0.0))
        .collect();
    if missed.is_empty() {
        return None;
    }
    let e2e_p50_ms = stats::quantile(g.sorted(Figure::E2e), 0.5);
    let target_hz = 1000.0 / period_ms;
    let cause = loop_cause(effective_hz, target_hz, e2e_p50_ms, period_ms);
    let late_start_ms = late_start_ms(ds, &missed, period_ms);
    let has = |f: Figure| !g.sorted(f).is_empty();
    let parts = timeline_parts(&has, split_err_ms);
    let mut stages: Vec<DeadlineShare> = match cause {
        "over_period" => budget(ds, &parts, &missed),
        "held_up" => growth(ds, g, &parts, &missed, late_start_ms),
        _ => Vec::new(),
    };
    stages.retain(|s| s.ms.is_finite() && s.ms >= floor_ms);
    stages.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    Some(DeadlineCause {
        period_ms,
        target_hz,
        cause,
        idle_p50_ms: idle_p50_ms(ds, &calls),
        e2e_p50_ms,
        missed_e2e_p50_ms: median(values(ds, Figure::E2e, &missed)),
        late_start_ms,
        stages,
        host_wait_ms: median_host_wait(ds, &missed),
        host_wait_typical_ms: median_host_wait(ds, &calls),
    })
}

/// What kind of miss the loop shows: `unpaced` when it runs faster than
/// its target (its calls back to back, or paced by a period of its own,
/// not the target's), `over_period` when its median call leaves no slack
/// for ordinary jitter, else `held_up` (a few calls held up).
fn loop_cause(
    effective_hz: Option<f64>,
    target_hz: f64,
    e2e_p50_ms: f64,
    period_ms: f64,
) -> &'static str {
    if effective_hz.is_some_and(|hz| hz > UNPACED_RATE * target_hz) {
        "unpaced"
    } else if e2e_p50_ms >= TIGHT_SHARE * period_ms {
        "over_period"
    } else {
        "held_up"
    }
}

/// `f`'s values on the calls `on` that carry it (ms).
fn values(ds: &Dataset, f: Figure, on: &[usize]) -> Vec<f64> {
    on.iter().filter_map(|&i| ds.value(f, i)).collect()
}

/// How long after its tick each missed call started (the call before it
/// overran): late − (e2e − period); the median (ms).
fn late_start_ms(ds: &Dataset, missed: &[usize], period_ms: f64) -> f64 {
    median(
        missed
            .iter()
            .filter_map(|&i| to_deadline(ds, i).map(|d| period_ms - d))
            .collect(),
    )
}

/// The budget of a loop over its period: where the typical missed call's
/// time goes, each part's median on the missed calls.
fn budget(ds: &Dataset, parts: &[Figure], missed: &[usize]) -> Vec<DeadlineShare> {
    parts
        .iter()
        .map(|f| DeadlineShare {
            stage: f.name(),
            ms: median(values(ds, *f, missed)),
        })
        .collect()
}

/// What grew on the missed calls of a loop with slack: each part over its
/// own median, and the late start the call before left them.
fn growth(
    ds: &Dataset,
    g: &GroupData,
    parts: &[Figure],
    missed: &[usize],
    late_start_ms: f64,
) -> Vec<DeadlineShare> {
    parts
        .iter()
        .map(|f| {
            let typical = stats::quantile(g.sorted(*f), 0.5);
            let grown = values(ds, *f, missed).into_iter().map(|v| v - typical);
            DeadlineShare {
                stage: f.name(),
                ms: median(grown.collect()),
            }
        })
        .chain([DeadlineShare {
            stage: LATE_START,
            ms: late_start_ms,
        }])
        .collect()
}

/// The median run-queue wait on both hosts over the calls `on` (ms);
/// `None` when none of them carries one.
fn median_host_wait(ds: &Dataset, on: &[usize]) -> Option<f64> {
    let waits: Vec<f64> = on.iter().filter_map(|&i| host_wait(ds, i)).collect();
    (!waits.is_empty()).then(|| median(waits))
}

/// Call `i`'s run-queue wait on both hosts (ms): the robot's and the
/// server's threads ready and without a core, inside the call. It overlaps
/// the stages (it is time inside them), so it is never one of the
/// timeline's parts; it says how much of their time the hosts' CPU took.
fn host_wait(ds: &Dataset, i: usize) -> Option<f64> {
    let robot = ds.value(Figure::RunWait, i);
    let server = ds.value(Figure::ServerRunWait, i);
    (robot.is_some() || server.is_some()).then(|| robot.unwrap_or(0.0) + server.unwrap_or(0.0))
}

/// The loop's period (ms): the largest `e2e − late` over every call the
/// loop ran, warm-up ones and other kinds included (the first call sets
/// the ticks, so it started on one); `None` without lateness on the
/// records.
fn period_ms(ds: &Dataset) -> Option<f64> {
    let period = (0..ds.len())
        .filter(|&i| !ds.is_failed(i))
        .filter_map(|i| to_deadline(ds, i))
        .fold(f64::NAN, f64::max);
    (period.is_finite() && period > 0.0).then_some(period)
}

/// The median of `v` (NaN when empty), as the report's quantiles take it.
fn median(v: Vec<f64>) -> f64 {
    let mut v: Vec<f32> = v.into_iter().map(|x| x as f32).collect();
    stats::sort_f32(&mut v);
    stats::quantile(&v, 0.5)
}

/// Median idle time (ms) between one call's end and the next call's start
/// (the next record of the same process, whatever its kind); `None` when
/// no two consecutive records say.
fn idle_p50_ms(ds: &Dataset, calls: &[usize]) -> Option<f64> {
    let idle: Vec<f64> = calls
        .iter()
        .filter_map(|&i| {
            let j = i + 1;
            if j >= ds.len() || ds.seq(j) != ds.seq(i) + 1 {
                return None;
            }
            Some(ds.ts_unix_ms(j) - ds.ts_unix_ms(i) - ds.value(Figure::E2e, i)?)
        })
        .collect();
    (!idle.is_empty()).then(|| median(idle))
}

/// The call's own timeline without overlap: the stages (or what stands in
/// for them) and the gap. With an estimated clock (`split_err_ms`) the
/// split of net into its directions is not known well enough to blame one
/// of them: `net` stands for both.
fn timeline_parts(has: &dyn Fn(Figure) -> bool, split_err_ms: Option<f64>) -> Vec<Figure> {
    let mut parts: Vec<Figure> = figures::stacked(has);
    if split_err_ms.is_some() && has(Figure::Net) {
        let one_way = |f: &Figure| figures::is_one_way(*f);
        if let Some(at) = parts.iter().position(one_way) {
            parts.retain(|f| !one_way(f));
            parts.insert(at, Figure::Net);
        }
    }
    parts
}

/// The pseudo-stage of a call that started after its tick (the call before
/// it overran): named with the stages that carry a miss.
pub(crate) const LATE_START: &str = "late_start";
