//! The report's data: what `--json` prints, field for field (documented in
//! `docs/report.md`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::stats::{Distribution, MannWhitney, RatioCi, Shift};

/// Version tag of the `--json` document.
pub const REPORT_SCHEMA: &str = "stagetrace-report/1";

/// The `kind` name of the group that pools every kind (only present when
/// the input has more than one kind).
pub const ALL_KINDS: &str = "*";

/// The whole report (`--json` prints exactly this).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// [`REPORT_SCHEMA`].
    pub schema: &'static str,
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

/// Inference's parts over a group's steady calls (`docs/report.md`,
/// "Inference's parts").
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InferParts {
    /// Calls carrying at least one of the parts.
    pub calls: u64,
    /// One per part the records carry, in call order (`pre`, `model`,
    /// `post`), then `rest` (infer less the parts sent) when the server
    /// times only some of them.
    pub parts: Vec<PartShare>,
    /// The part with the largest median.
    pub bottleneck_p50: &'static str,
    /// The part with the largest p95: the bottleneck, read from p95.
    pub bottleneck_p95: &'static str,
    /// The device's own time for the model's work (`device_ms`), when the
    /// records carry it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceTime>,
    /// Said under the parts when the model stage looks like a dispatch
    /// (far below post at p50) and no device time tells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One part of infer at p50 and p95.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PartShare {
    /// `pre`, `model`, `post` or `rest`.
    pub part: &'static str,
    /// Its median (ms).
    pub p50_ms: f64,
    /// Its 95th percentile (ms).
    pub p95_ms: f64,
    /// Its median over the sum of the parts' medians.
    pub share_p50: f64,
    /// Its p95 over the sum of the parts' p95s.
    pub share_p95: f64,
}

/// The device's own time for the model's work, and the calls on which it
/// ran past the model stage (the stage closed before the device was done).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceTime {
    /// Calls carrying `device_ms`.
    pub calls: u64,
    /// Its median (ms).
    pub p50_ms: f64,
    /// Its 95th percentile (ms).
    pub p95_ms: f64,
    /// Calls whose device time exceeds their model stage by more than the
    /// floor and 5 % of the device time.
    pub late_calls: u64,
    /// On those calls: device − model, averaged (ms; `null` without any).
    pub late_excess_ms: Option<f64>,
    /// On those calls: the model stage's median (ms).
    pub late_model_p50_ms: Option<f64>,
    /// On those calls: post's median (ms), where the device's work landed.
    pub late_post_p50_ms: Option<f64>,
}

/// One of the server's waits before it read the request.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerWait {
    /// `accept_wait` (every worker busy) or `loop_wait` (the event loop
    /// blocked).
    pub figure: &'static str,
    /// Calls carrying it.
    pub calls: u64,
    /// A call waited when its wait is above this (ms): the spike floor.
    pub threshold_ms: f64,
    /// Calls that waited.
    pub waited: u64,
    /// Their mean wait (ms; `null` without any).
    pub mean_ms: Option<f64>,
    /// Their median wait (ms).
    pub p50_ms: Option<f64>,
    /// The longest wait (ms).
    pub max_ms: Option<f64>,
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

/// Deadline misses against the target rate.
#[derive(Clone, Debug, Serialize)]
pub struct Deadline {
    /// Calls with a deadline.
    pub calls: u64,
    /// Calls that ended after their tick's deadline.
    pub misses: u64,
    /// `misses / calls`.
    pub miss_rate: f64,
    /// Lateness against the scheduled tick (ms), when recorded.
    pub late: Option<Distribution>,
    /// Why the calls missed: the loop's period, whether it is paced, and
    /// which stages carry the time over the period. Absent without a miss
    /// (or without `late_ms` to read the period from).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<DeadlineCause>,
}

/// Why a group's calls missed their tick's deadline (`docs/report.md`,
/// "Deadline misses").
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeadlineCause {
    /// The loop's period (ms), read off the records: the largest
    /// `e2e − late` (deadline − start, the period on a call that started
    /// on its tick).
    pub period_ms: f64,
    /// `1000 / period_ms`.
    pub target_hz: f64,
    /// `unpaced` (the loop runs its calls back to back, faster than its
    /// target: it does not wait for its ticks), `over_period` (the typical
    /// call takes 90 % of the period or more: the call does not fit), or
    /// `held_up` (a few calls took longer than usual).
    pub cause: &'static str,
    /// Median time between one call's end and the next one's start (ms;
    /// `null` when no two consecutive records say).
    pub idle_p50_ms: Option<f64>,
    /// e2e median of the steady calls (ms).
    pub e2e_p50_ms: f64,
    /// e2e median of the calls that missed (ms).
    pub missed_e2e_p50_ms: f64,
    /// Median of how long after its tick a missed call started (ms): the
    /// call before it overran.
    pub late_start_ms: f64,
    /// What carries the time, largest first: for `over_period` each
    /// stage's median on the missed calls; for `held_up` each stage's
    /// median excess over its own median on those calls, and `late_start`.
    /// Only what reaches the floor of "What counts".
    pub stages: Vec<DeadlineShare>,
    /// The hosts' run-queue wait on the missed calls (ms; the robot's
    /// `run_wait` plus the server's `server_run_wait`, their sum's median):
    /// time inside the stages when their threads were ready and had no
    /// core. `null` without host figures.
    pub host_wait_ms: Option<f64>,
    /// The same on the group's typical call (its median over every call).
    pub host_wait_typical_ms: Option<f64>,
}

/// One stage's share of the deadline misses (ms).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeadlineShare {
    /// The stage (or `late_start`).
    pub stage: &'static str,
    /// Its time (ms), as [`DeadlineCause::stages`] says.
    pub ms: f64,
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

/// Rounds that stand out.
#[derive(Clone, Debug, Serialize)]
pub struct Outliers {
    /// The rule in words.
    pub rule: String,
    /// Per-stage threshold (ms) above which a value stands out.
    pub thresholds: BTreeMap<&'static str, f64>,
    /// Figures whose whole run moved past the baseline's threshold (its
    /// median is above it), with the shift of the median (ms): the run
    /// shifted as a whole, and its rounds are measured against its own
    /// median instead. Empty without a baseline.
    pub shifted: BTreeMap<&'static str, f64>,
    /// Rounds with at least one stage above its threshold.
    pub count: u64,
    /// Per figure: the rounds where it was above its threshold, and their
    /// mean value (ms). Every round counts, not only the listed ones.
    pub by_stage: BTreeMap<&'static str, StageSpikes>,
    /// The first rounds, in time order (at most the configured number).
    pub rounds: Vec<OutlierRound>,
}

impl Outliers {
    /// How far the whole run shifted (ms): the e2e median's shift when e2e
    /// moved as a whole, else the largest shift of a figure that did.
    /// `None` when no figure moved as a whole (or without a baseline).
    pub fn whole_run_shift(&self) -> Option<f64> {
        self.shifted
            .get("e2e")
            .copied()
            .or_else(|| self.shifted.values().copied().reduce(f64::max))
    }
}

/// How often one figure stood out, and by how much.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StageSpikes {
    /// Rounds with this figure above its threshold.
    pub rounds: u64,
    /// Mean of those values (ms).
    pub mean_ms: f64,
    /// The host figure that explains these spikes, when one does (the
    /// same calls' run-queue wait, CPU stall or GC, on the end that can
    /// delay this figure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostCause>,
}

/// One round that stands out.
#[derive(Clone, Debug, Serialize)]
pub struct OutlierRound {
    /// The record's `seq`.
    pub seq: u64,
    /// Wall time of the call (ms since the epoch).
    pub ts_unix_ms: f64,
    /// The same as UTC ISO-8601.
    pub time: String,
    /// The call's e2e (ms).
    pub e2e_ms: f64,
    /// Stages above their threshold.
    pub stages: Vec<OutlierStage>,
    /// The robot that made the call (`--per-robot`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub robot: Option<String>,
    /// The call's index in the dataset (to find its robot).
    #[serde(skip)]
    pub index: usize,
}

/// A stage value above its threshold.
#[derive(Clone, Debug, Serialize)]
pub struct OutlierStage {
    /// Stage name.
    pub stage: &'static str,
    /// The value (ms).
    pub value_ms: f64,
    /// The threshold it crossed (ms).
    pub threshold_ms: f64,
}

/// A figure whose distribution has a second mode: more than a tenth of the
/// calls above its outlier threshold, not periodic.
#[derive(Clone, Debug, Serialize)]
pub struct SecondMode {
    /// Stage name.
    pub stage: &'static str,
    /// Calls in the second mode.
    pub calls: u64,
    /// Their share of the steady calls.
    pub share: f64,
    /// The figure's median (ms).
    pub median_ms: f64,
    /// Mean of the second mode's values less the median (ms).
    pub excess_ms: f64,
    /// True when it adds at least a tenth of the e2e median to its calls:
    /// then a verdict (`second_mode`), otherwise a line in the tables.
    pub matters: bool,
    /// The host figure that explains the second mode's calls, if one does
    /// (then the verdict names the host, not the stage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostCause>,
}

/// Whether one stage's spikes recur with a period.
#[derive(Clone, Debug, Serialize)]
pub struct Periodicity {
    /// Stage name.
    pub stage: &'static str,
    /// Spike events (adjacent spiking calls merged).
    pub spikes: u64,
    /// Median inter-spike interval (s).
    pub isi_median_s: f64,
    /// Robust spread of the inter-spike intervals (1.4826·MAD / median).
    pub isi_cv: f64,
    /// Lag of the autocorrelation peak (s).
    pub acf_lag_s: f64,
    /// Autocorrelation of the spike series at that lag.
    pub acf: f64,
    /// Level the autocorrelation had to clear (`max(0.25, 5/√bins)`).
    pub acf_threshold: f64,
    /// Fraction of inter-spike intervals within ±20 % of the period.
    pub isi_on_period: f64,
    /// True when the spikes recur with a period.
    pub significant: bool,
    /// The period (s) when significant.
    pub period_s: Option<f64>,
    /// The period in calls when the spikes fall on every n-th call exactly
    /// (at least 80 % of the intervals).
    pub period_calls: Option<u64>,
}

/// Share of the e2e variance each part explains (`cov(part, e2e) / var(e2e)`).
#[derive(Clone, Debug, Serialize)]
pub struct GapReport {
    /// Calls used.
    pub n: u64,
    /// e2e standard deviation (ms).
    pub e2e_stddev_ms: f64,
    /// e2e median (ms).
    pub e2e_median_ms: f64,
    /// Share per part (they sum to ≈ 1 when the parts add up to e2e).
    pub shares: BTreeMap<&'static str, f64>,
    /// Share of the gap (time no stage covers).
    pub gap_share: f64,
    /// Share of the observer's own cost (part of the gap).
    pub observer_share: f64,
    /// True when e2e jitters (σ ≥ 1 % of the median) and the gap explains
    /// ≥ half of it, with the worst calls (and so the stalls) set aside.
    pub unexplained: bool,
    /// Calls that stalled: a pause outside every stage at least as long
    /// as the median call (each one an event, named with its call; none
    /// once they are frequent enough to be spikes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<Stall>,
}

/// One call that paused outside every stage (its gap) for at least a
/// median call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stall {
    /// The record's `seq`.
    pub seq: u64,
    /// Wall time of the call (ms since the epoch).
    pub ts_unix_ms: f64,
    /// The same as UTC ISO-8601.
    pub time: String,
    /// Its gap (ms).
    pub gap_ms: f64,
    /// Its gap over the median call's gap (ms).
    pub excess_ms: f64,
    /// Its e2e (ms).
    pub e2e_ms: f64,
    /// How late it ended against its tick's deadline (ms), with a target rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_ms: Option<f64>,
    /// The robot's host figures on that call above their median by at
    /// least half the excess, largest first: what held the robot (ms).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host: Vec<(&'static str, f64)>,
    /// The records carry host figures (so none explaining it says something).
    #[serde(skip)]
    pub host_measured: bool,
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
