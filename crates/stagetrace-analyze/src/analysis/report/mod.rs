//! The report's data: what `--json` prints, field for field (documented in
//! `docs/report.md`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::stats::{Distribution, MannWhitney, RatioCi, Shift};

mod deadline;
mod outliers;
mod server;

pub use deadline::{Deadline, DeadlineCause, DeadlineShare};
pub(crate) use outliers::StageSpikes;
pub use outliers::{
    GapReport, OutlierRound, OutlierStage, Outliers, Periodicity, SecondMode, Stall,
};
pub use server::{DeviceTime, InferParts, PartShare, ServerWait};

/// Version tag of the `--json` document.
pub const REPORT_SCHEMA: &str = "stagetrace-report/1";

/// How the report's quantiles were made: exact order statistics of every
/// call (`stagetrace summarize`, and `report` over its memory budget, say
/// `"hdr-3-sigfig"` instead: `summary::QUANTILE_METHOD`).
pub const QUANTILE_METHOD: &str = "exact";

/// The `kind` name of the group that pools every kind (only present when
/// the input has more than one kind).
pub const ALL_KINDS: &str = "*";

/// The whole report (`--json` prints exactly this).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// [`REPORT_SCHEMA`].
    pub schema: &'static str,
    /// [`QUANTILE_METHOD`]: every quantile is an exact order statistic.
    pub quantiles: &'static str,
    /// What was read.
    pub inputs: Inputs,
    /// The baseline that was read, when `--baseline` was given.
    pub baseline: Option<Inputs>,
    /// One group per `kind` (plus `"*"` pooling all kinds when there are several).
    pub groups: Vec<GroupReport>,
    /// Every group's verdicts, most important first.
    pub verdicts: Vec<Verdict>,
    /// The robots of a fleet report (`--per-robot`), in the order given;
    /// absent otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub robots: Vec<RobotInput>,
}

/// One robot of a fleet report: one input directory or file.
#[derive(Clone, Debug, Serialize)]
pub struct RobotInput {
    /// The robot's name: its directory's name (a file's: its name without
    /// `records-` and `.jsonl`).
    pub name: String,
    /// Its record files.
    pub files: Vec<String>,
    /// Records read from them (all kinds, warm-up and failed included).
    pub records: u64,
}

/// One robot's share of a group: its steady calls and per-stage p50 / p99.
#[derive(Clone, Debug, Serialize)]
pub struct RobotStages {
    /// The robot's steady calls of this group.
    pub steady: u64,
    /// The robot's own call rate, completion jitter and deadlines.
    pub rate: Rate,
    /// Per stage (same names as the group's `stages`).
    pub stages: BTreeMap<&'static str, RobotStage>,
}

/// One stage on one robot (ms).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RobotStage {
    /// Values.
    pub n: u64,
    /// Median (ms).
    pub p50: f64,
    /// 99th percentile (ms).
    pub p99: f64,
}

/// Files read and what the reader met.
#[derive(Clone, Debug, Serialize)]
pub struct Inputs {
    /// Paths as given.
    pub files: Vec<String>,
    /// Records read (all kinds, warm-up and failed included).
    pub records: u64,
    /// Lines read.
    pub lines: u64,
    /// Corrupt lines skipped under `--skip-bad`.
    pub skipped_bad: u64,
    /// Files whose last line was cut short.
    pub truncated_files: Vec<String>,
    /// Failure reasons of failed calls with their counts.
    pub errors: Vec<ErrorCount>,
    /// Reader warnings, one sentence each.
    pub warnings: Vec<String>,
}

/// One failure reason.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorCount {
    /// The record's `error` text.
    pub error: String,
    /// How many calls failed so.
    pub count: u64,
}

/// Everything about one `kind`.
#[derive(Clone, Debug, Serialize)]
pub struct GroupReport {
    /// The request kind (`"*"` for all kinds pooled).
    pub kind: String,
    /// Records of this kind.
    pub calls: u64,
    /// Calls in the steady-state figures (neither warm-up nor failed).
    pub steady: u64,
    /// Warm-up calls kept out of the figures.
    pub warmup_excluded: u64,
    /// Failed calls kept out of the figures.
    pub failed: u64,
    /// Wall time of the first steady call (ms since the epoch).
    pub start_unix_ms: f64,
    /// Wall time of the last steady call (ms since the epoch).
    pub end_unix_ms: f64,
    /// Call rate, completion jitter, deadlines.
    pub rate: Rate,
    /// The clock split's bound on uplink / downlink: the median
    /// `split_err_ms` of the steady calls (ms); `null` when the records
    /// carry none (trusted clocks, or no split).
    pub split_err_ms: Option<f64>,
    /// Per-stage distributions (ms), keyed by stage name.
    pub stages: BTreeMap<&'static str, Distribution>,
    /// Per-stage comparison with the baseline, keyed by stage name.
    pub baseline: BTreeMap<&'static str, StageVsBaseline>,
    /// Rounds that stand out.
    pub outliers: Outliers,
    /// Periodicity of each stage's spikes (stages with enough spikes).
    pub periodicity: Vec<Periodicity>,
    /// Figures with a second mode: above their threshold on more than a
    /// tenth of the calls without a period (a shape, not spikes).
    pub modes: Vec<SecondMode>,
    /// How the e2e variance splits over the stages and the gap.
    pub gap: Option<GapReport>,
    /// What batching, caching and stale-action dropping did (absent when no
    /// record of the group says).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mitigations: Option<Mitigations>,
    /// The robot's action queue when its chunks came (async inference;
    /// absent when no record carries `margin_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_queue: Option<ActionQueue>,
    /// Per hop of calls through gateways (the records' `hops`): its
    /// figures and their change against the baseline. Absent without.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hops: Vec<super::HopReport>,
    /// Inference's parts (`pre`, `model`, `post`): each one's share of
    /// infer at p50 and p95, the bottleneck, the device's own time. Absent
    /// when the records carry none of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infer_parts: Option<InferParts>,
    /// The server's waits before it read the request (queue's parts,
    /// `accept_wait`, `loop_wait`), those the records carry. Absent without.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub server_waits: Vec<ServerWait>,
    /// This group's verdicts.
    pub verdicts: Vec<Verdict>,
    /// Per robot (`--per-robot`), by name: its p50 / p99 per stage. Absent
    /// otherwise.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub robots: BTreeMap<String, RobotStages>,
}

/// The records' `batch_size`, `cache` and `stale_dropped`, over the group's
/// calls except warm-up ones (failed calls included: a dropped stale action
/// fails its call).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Mitigations {
    /// Calls whose record names the server batch they ran in.
    pub batched_calls: u64,
    /// Their mean `batch_size` (`null` without batched calls).
    pub mean_batch: Option<f64>,
    /// Calls answered from the server's result cache.
    pub cache_hits: u64,
    /// Calls the cache missed (the model ran).
    pub cache_misses: u64,
    /// hits / (hits + misses) (`null` without a cache).
    pub cache_hit_rate: Option<f64>,
    /// Calls that dropped at least one stale action chunk.
    pub stale_calls: u64,
    /// Action chunks dropped as stale, summed.
    pub stale_dropped: u64,
}

/// The robot's action queue when each chunk came (async inference, the
/// records' `margin_ms` and `dry_ticks`), over the group's steady calls.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ActionQueue {
    /// Chunks whose record says how long the queue would still have lasted.
    pub chunks: u64,
    /// Of them, chunks that came after the queue had run dry (a negative
    /// margin or idle ticks before them).
    pub dry_chunks: u64,
    /// Control ticks without an action before those chunks, summed.
    pub dry_ticks: u64,
    /// Median margin over all the chunks (ms; negative: the queue had run
    /// dry that long).
    pub margin_p50_ms: f64,
    /// How long the queue had been empty when a dry chunk came: median over
    /// the dry chunks (ms; `null` without any).
    pub dry_p50_ms: Option<f64>,
}

/// Call rate and timing regularity.
#[derive(Clone, Debug, Serialize)]
pub struct Rate {
    /// Steady calls per second over the run.
    pub effective_hz: Option<f64>,
    /// `|Δ²t|` of call completions (ms): how unevenly calls finish.
    pub jitter: Option<Distribution>,
    /// Deadline figures, when the records carry a target rate.
    pub deadline: Option<Deadline>,
}

/// One stage against the baseline.
#[derive(Clone, Debug, Serialize)]
pub struct StageVsBaseline {
    /// Baseline distribution.
    pub baseline: Distribution,
    /// Median ratio with its 95 % bootstrap interval.
    pub p50: RatioCi,
    /// p99 ratio with its 95 % bootstrap interval.
    pub p99: RatioCi,
    /// Location test.
    pub mann_whitney: MannWhitney,
    /// Hodges–Lehmann shift (ms) with its 95 % interval.
    pub shift: Shift,
    /// Smallest shift that counts as "the median moved" (ms).
    pub min_effect_ms: f64,
    /// Fraction of baseline values above the baseline p99.
    pub baseline_exceed: f64,
    /// Fraction of this run's values above the baseline p99.
    pub exceed: f64,
    /// One-sided p-value that the run exceeds the baseline p99 more often.
    pub exceed_p: f64,
    /// `"median_shift"`, `"faster"`, `"tail_only"` or `"steady"`.
    pub shape: &'static str,
}

/// A conclusion in plain language, with a machine-readable code.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// `median_shift`, `faster`, `tail_only`, `periodic`, `spikes`,
    /// `second_mode`, `host_cpu`, `host_gc`, `network_moved`, `e2e_moved`,
    /// `unexplained_gap`, `stall`, `worker_pool_starved`, `loop_blocked`,
    /// `device_after_model`, `queue_ran_dry`, `deadline_misses`,
    /// `no_steady_calls`, `steady`, or (fleet reports) `robot_differs`,
    /// `hop_slower` (`docs/report.md`, "Verdict codes").
    pub code: &'static str,
    /// The request kind it is about.
    pub kind: String,
    /// The stage it names (`null` for `steady`).
    pub stage: Option<&'static str>,
    /// `client`, `transport`, `server` or `call`.
    pub group: Option<&'static str>,
    /// The sentence shown to people.
    pub text: String,
    /// The numbers behind it (fields depend on `code`, see docs/report.md).
    pub evidence: serde_json::Value,
    /// Whether the spike rules gave it (`verdict.rs`'s `spikes`, with or
    /// without a host cause): a merge recomputes those from the
    /// partitions' counts, never votes on them, and `host_cpu` comes from
    /// periodic figures and second modes too.
    #[serde(skip)]
    pub(crate) from_spikes: bool,
}

/// A host figure that explains a figure's spikes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HostCause {
    /// The host figure (`server_run_wait`).
    pub figure: &'static str,
    /// Its median on the spike calls it explains (ms).
    pub spike_median_ms: f64,
    /// Its median on all the group's calls (ms).
    pub median_ms: f64,
}
