//! What the verdict says, as `--json` prints it: each figure at each level
//! against the baseline, the thresholds, and the answer.

use std::collections::BTreeMap;

use serde::Serialize;
use stagetrace_analyze::stats::RatioCi;

use super::queue_figures::{ActionQueueLevel, ActionQueueVerdict};
use super::resources::ResourceSummary;

/// One figure at one level against the baseline.
#[derive(Clone, Debug, Serialize)]
pub struct ComponentResult {
    /// Calls at this level with the figure.
    pub n: usize,
    /// Median, ms.
    pub p50: f64,
    /// 90th percentile, ms.
    pub p90: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// p50 ratio to the baseline with a 95 % bootstrap interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ratio: Option<RatioCi>,
    /// p99 ratio to the baseline with a 95 % bootstrap interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ratio: Option<RatioCi>,
    /// Share of calls above the baseline's p99 + the p99 threshold: (baseline, level, p).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_exceedance: Option<(f64, f64, f64)>,
    /// The figure got slower beyond noise and thresholds.
    pub moved: bool,
    /// `"median"` (the whole stage slower) or `"tail"` (a few calls held up), when moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<&'static str>,
    /// When the CUSUM over windowed p90 first left the baseline (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_unix_ms: Option<f64>,
}

impl ComponentResult {
    /// The shift in ms of the quantile that moved (p50 for a median move, p99 for a tail).
    pub(crate) fn abs_shift(&self) -> f64 {
        let q = if self.shape == Some("median") {
            self.p50_ratio
        } else {
            self.p99_ratio
        };
        q.map_or(0.0, |q| q.after - q.before)
    }
}

/// One level against the baseline.
#[derive(Clone, Debug, Serialize)]
pub struct LevelResult {
    /// 1-based level number.
    pub level: usize,
    /// Label of the level.
    pub label: String,
    /// Every figure, by name.
    pub components: BTreeMap<&'static str, ComponentResult>,
    /// Resources during the level.
    pub resources: ResourceSummary,
    /// The robot's action queue against the baseline (LeRobot's async
    /// pair; absent for request/response targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_queue: Option<ActionQueueLevel>,
}

/// The answer.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentVerdict {
    /// The stage that moved first (`"gap"` when no stage moved but the
    /// unexplained time did), absent when nothing moved.
    pub first_stage: Option<&'static str>,
    /// The level it moved at (1-based).
    pub first_level: Option<usize>,
    /// That level's label.
    pub first_level_label: Option<String>,
    /// When it moved (ms since the epoch), from the change-point test.
    pub first_change_unix_ms: Option<f64>,
    /// Its shape: `"median"` or `"tail"`.
    pub shape: Option<&'static str>,
    /// Stages that moved with it or later: (stage, level).
    pub dragged: Vec<(&'static str, usize)>,
    /// Stages that stayed flat through every level.
    pub flat: Vec<&'static str>,
    /// Whether e2e moved at some level.
    pub e2e_moved: bool,
    /// `"saturated"`, `"throttled"` or `"unsaturated"` at the first level
    /// that moved.
    pub resources: Option<&'static str>,
    /// What the resources say.
    pub resource_note: Option<String>,
    /// Period of the spikes (s), when the first mover is a tail of periodic spikes.
    pub spike_period_s: Option<f64>,
    /// The host figure that moved at the first mover's level or before it
    /// (the host slowed first; the stage absorbed it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostMover>,
    /// What the robot's action queue did (LeRobot's async pair): its
    /// margin, dry ticks and the control loop's rate by level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_queue: Option<ActionQueueVerdict>,
    /// The next step (`docs/architecture.md`, section 7).
    pub next_step: String,
    /// The verdict in a sentence or three.
    pub summary: String,
}

impl ExperimentVerdict {
    /// No mover: `why` is the summary.
    pub(crate) fn nothing(why: &str) -> ExperimentVerdict {
        ExperimentVerdict {
            first_stage: None,
            first_level: None,
            first_level_label: None,
            first_change_unix_ms: None,
            shape: None,
            dragged: Vec::new(),
            flat: Vec::new(),
            e2e_moved: false,
            resources: None,
            resource_note: None,
            spike_period_s: None,
            host: None,
            action_queue: None,
            next_step: "run the plan again with more calls per level".into(),
            summary: why.to_owned(),
        }
    }
}

/// Thresholds resolved against the baseline.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Thresholds {
    /// Smallest p50 shift that counts, ms.
    pub min_p50_ms: f64,
    /// Smallest p99 shift that counts, ms.
    pub min_p99_ms: f64,
}

/// A host figure that moved before (or with) the first stage to move.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostMover {
    /// The host figure (`server_run_wait`).
    pub figure: &'static str,
    /// The level it moved at (1-based).
    pub level: usize,
    /// Its median shift against the baseline, ms.
    pub shift_ms: f64,
}
