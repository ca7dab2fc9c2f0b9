//! The action queue's figures per phase and level and what the verdict says
//! of it (async inference): plain types, so the level results can hold them
//! without depending on how they are computed (`action_queue/`).

use serde::Serialize;
use stagetrace_analyze::stats::DiffCi;

/// The action queue over one phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ActionQueuePhase {
    /// Chunks counted (records with a margin).
    pub chunks: usize,
    /// Median margin, ms.
    pub margin_p50: f64,
    /// 10th percentile of the margin, ms: the chunks that came closest.
    pub margin_p10: f64,
    /// Chunks that came after the queue had run dry (margin below 0).
    pub dry_chunks: usize,
    /// Control ticks without an action before those chunks.
    pub dry_ticks: u64,
    /// `dry_ticks` as a share of the ticks the phase had at the control rate.
    pub dry_tick_share: f64,
    /// Actions the robot ran per second (absent with fewer than two
    /// observations a second apart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions_per_s: Option<f64>,
    /// Share of the control rate's ticks that ran no action: dry, or never
    /// run because the loop was held up (1 − actions_per_s / hz).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ticks_lost_share: Option<f64>,
}

/// The action queue at one level against the baseline.
#[derive(Clone, Debug, Serialize)]
pub struct ActionQueueLevel {
    /// The level's figures.
    #[serde(flatten)]
    pub phase: ActionQueuePhase,
    /// The margin's p10 minus the baseline's, ms, with its 95 % bootstrap interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub margin_change: Option<DiffCi>,
    /// The margin fell beyond noise (its interval below 0, by the p50 threshold).
    pub margin_fell: bool,
    /// Chunks that came to an empty queue: (baseline share, level share, p).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_exceedance: Option<(f64, f64, f64)>,
    /// The queue ran dry beyond the baseline.
    pub ran_dry: bool,
    /// The control loop lost at least 5 % more of its ticks than in the baseline.
    pub fell_behind: bool,
    /// Any of the three: the action queue moved.
    pub moved: bool,
}

/// What the verdict says of the action queue.
#[derive(Clone, Debug, Serialize)]
pub struct ActionQueueVerdict {
    /// The baseline's figures.
    pub baseline: ActionQueuePhase,
    /// The lowest level where it moved.
    pub first_level: Option<usize>,
    /// The lowest level where its margin fell.
    pub margin_fell_level: Option<usize>,
    /// The lowest level where it ran dry.
    pub ran_dry_level: Option<usize>,
    /// The lowest level where the control loop fell behind.
    pub fell_behind_level: Option<usize>,
    /// In a sentence or two, in the robot's terms.
    pub summary: String,
}
