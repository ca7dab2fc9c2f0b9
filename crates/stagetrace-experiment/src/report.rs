//! What a run produced: the report `--json` prints, and the data of the HTML
//! plots beside it. Plain data: the runner fills it, `render` and `html` show it.

use std::collections::BTreeMap;

use serde::Serialize;
use stagetrace_schema::FIGURE_COUNT;

use crate::sampler::SamplerCost;
use crate::verdict::{ExperimentVerdict, LevelResult, PhaseSpan, ResourceSummary, Thresholds};

/// What a run produced: everything `--json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentReport {
    /// The plan's name.
    pub name: String,
    /// The factor raised.
    pub factor: &'static str,
    /// Where the files are.
    pub out: String,
    /// True when the run was stopped early (Ctrl-C or a failure); the
    /// verdict covers the levels completed.
    pub interrupted: bool,
    /// Why it stopped early.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_because: Option<String>,
    /// Where the target listened: `proxy` (what the client connects to) and `server`.
    pub addresses: BTreeMap<&'static str, String>,
    /// Every phase on the timeline.
    pub phases: Vec<PhaseSpan>,
    /// Baseline distributions (ms) per figure: n, p50, p90, p99.
    pub baseline: BTreeMap<&'static str, [f64; 4]>,
    /// Baseline resources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_resources: Option<ResourceSummary>,
    /// The thresholds the verdict used.
    pub thresholds: Thresholds,
    /// Each level against the baseline.
    pub levels: Vec<LevelResult>,
    /// The answer.
    pub verdict: ExperimentVerdict,
    /// The sampler's own cost.
    pub sampler: SamplerCost,
    /// What became of the GPU tracks (devices sampled through NVML, or why not).
    pub gpu: String,
    /// What was restored at the end.
    pub restored: Vec<String>,
    /// The data of the HTML plots (not in `--json`).
    #[serde(skip)]
    pub timeline: Timeline,
    /// Counters: calls completed and failed by the robot, records dropped,
    /// replayed requests (infer factor), burner threads pinned (cpu factor).
    pub counters: BTreeMap<&'static str, u64>,
}

/// What the timeline plots need, kept out of `--json`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timeline {
    /// Time zero of the plots (ms since the epoch): the baseline's start.
    pub t0_unix_ms: f64,
    /// Windows: (start, s after t0; windowed p90 of each figure drawn,
    /// indexed by [`stagetrace_schema::Figure::index`]; NaN = none or not drawn).
    /// Not serialised (serde has no arrays above 32; the report skips the
    /// timeline anyway).
    #[serde(skip)]
    pub windows: Vec<(f64, [f64; FIGURE_COUNT])>,
    /// Resource tracks: (s after t0; CPU %, CPU pressure %, run-queue wait %
    /// of a core, target CPU % of a core, busiest GPU's utilisation %).
    pub resources: Vec<(f64, [f64; 5])>,
}
