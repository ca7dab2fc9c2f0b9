//! What the verdict reads: the calls as observations on the run's timeline,
//! and the phases that timeline is cut into.

use serde::Serialize;
use stagetrace_schema::Figure;
use stagetrace_schema::FIGURE_COUNT;

/// One call as the verdict sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Obs {
    pub(crate) ts_ms: f64,
    pub(crate) phase: usize,
    pub(crate) settling: bool,
    pub(crate) failed: bool,
    /// The record's `seq`: for LeRobot's async pair the observation's
    /// timestep, the index of the last action the robot had run.
    pub(crate) seq: u64,
    /// The record's `dry_ticks` (0 when absent): control ticks without an
    /// action before this chunk came.
    pub(crate) dry_ticks: u32,
    /// Every figure in ms (the verdict's statistics and thresholds are in
    /// ms), indexed by [`Figure::index`]; NaN when the record lacks it.
    pub(crate) vals: [f32; FIGURE_COUNT],
}

impl Obs {
    /// Counted in the statistics: neither settling nor failed.
    pub(crate) fn counts(&self) -> bool {
        !self.settling && !self.failed
    }

    /// The figure in ms, NaN when absent.
    pub(crate) fn get(&self, f: Figure) -> f32 {
        self.vals[f.index()]
    }
}

/// A phase of the run on the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseSpan {
    /// `"warmup"`, `"baseline"` or `"level"`.
    pub phase: String,
    /// 0 for warm-up and baseline, 1.. for the levels.
    pub level: usize,
    /// Human label ("baseline", "delay 20 ms").
    pub label: String,
    /// Start, ms since the Unix epoch.
    pub start_unix_ms: f64,
    /// Calls starting before this are settling and left out.
    pub settle_until_unix_ms: f64,
    /// End (ms since the Unix epoch; the run's end for the last phase).
    pub end_unix_ms: f64,
    /// Calls counted in the statistics.
    pub calls: u64,
    /// Calls left out (settling, straddling a change, failed).
    pub excluded_calls: u64,
}

/// The counted values of figure `f` in phase `phase`, sorted.
pub(crate) fn column(obs: &[Obs], phase: usize, f: Figure) -> Vec<f32> {
    let mut v: Vec<f32> = obs
        .iter()
        .filter(|o| o.phase == phase && o.counts())
        .map(|o| o.get(f))
        .filter(|v| v.is_finite())
        .collect();
    v.sort_unstable_by(f32::total_cmp);
    v
}
