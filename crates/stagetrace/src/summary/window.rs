//! What one summary line says: the public types of `summary.*.jsonl`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use stagetrace_schema::Figure;

/// The figures a summary reports, in display order: the schema's call-time
/// figures (the six stages and those derived from them; see
/// [`Figure::is_call_time`]). Each is keyed by its short name (`"infer"`).
pub fn figures() -> impl Iterator<Item = Figure> {
    Figure::ALL.into_iter().filter(|f| f.is_call_time())
}

/// Distribution of one figure over a window, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageStats {
    /// Calls that had this figure.
    pub count: u64,
    /// Exact minimum.
    pub min: f64,
    /// Median (HdrHistogram, 3 significant digits).
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    /// Exact maximum.
    pub max: f64,
    /// Exact mean.
    pub mean: f64,
}

/// Per-kind figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KindSummary {
    /// Steady-state calls of this kind in the window.
    pub calls: u64,
    /// Figure name (see [`figures`]) → distribution.
    pub stages: BTreeMap<String, StageStats>,
}

/// Two quantiles of a secondary figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Deadline figures against the configured `target_hz`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeadlineSummary {
    /// The configured control rate.
    pub target_hz: f64,
    /// Deadline misses: calls (neither warm-up nor failed, so out of
    /// `calls`) that ended after their tick's deadline — the calls whose
    /// records say `deadline_miss: true`, as `stagetrace report` counts them.
    pub misses: u64,
    /// Ticks no call started in (the loop fell behind and skipped them).
    /// Not calls, so not in `misses`: counted apart.
    pub skipped_ticks: u64,
    /// Completed calls per second.
    pub effective_hz: f64,
    /// Completion − deadline (scheduled tick + period), ms; negative = slack.
    pub late_ms: Quantiles,
    /// |Δ²t| of consecutive call completions, ms.
    pub jitter_ms: Quantiles,
}

/// The clock figures of a window's calls: what their uplink/downlink splits
/// rest on (`offset_ms`, `split_err_ms` of the records).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockSummary {
    /// Steady-state calls whose split used an offset.
    pub calls: u64,
    /// Server − client offset used, ms: its range over the window (a clock
    /// step or a fresh estimate widens it) and the latest value.
    pub offset_ms: OffsetRange,
    /// ± bound on the uplink/downlink split, ms.
    pub split_err_ms: Quantiles,
    /// Steps of the server's clock confirmed in the window (each resets the
    /// estimate; the record of the call that confirmed it has `clock_step`).
    pub steps: u64,
    /// The server clock's rate against the client's, once estimated (≥ 5
    /// one-second buckets spanning ≥ 5 s since the last step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_ppm: Option<Drift>,
}

/// A clock's frequency error and its bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    /// Server clock rate − client clock rate, parts per million.
    pub value: f64,
    /// ± bound (3 standard errors of the regression, at least 2 ppm).
    pub err: f64,
}

/// A signed figure's range over a window and its latest value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OffsetRange {
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// The last call's.
    pub last: f64,
}

/// One line of `summary.*.jsonl`: a rolling window, or the cumulative summary
/// written at shutdown (`window == "cumulative"`). Durations in ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowSummary {
    /// Run id (UTC start time and pid), shared with the `records-<run>` file name.
    pub run: String,
    /// `"rolling"` or `"cumulative"`.
    pub window: String,
    /// Rolling window number, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// Window start, ms since the Unix epoch.
    pub start_unix_ms: f64,
    /// Window end, ms since the Unix epoch.
    pub end_unix_ms: f64,
    /// Steady-state calls that completed (warm-up and failed calls excluded).
    pub calls: u64,
    /// Warm-up calls, kept out of every figure.
    pub warmup_calls: u64,
    /// Failed calls (`failed: true`), kept out of the stage figures.
    pub failed_calls: u64,
    /// Figure name (see [`figures`]) → distribution over steady-state calls.
    pub stages: BTreeMap<String, StageStats>,
    /// Kind → its own figures.
    pub kinds: BTreeMap<String, KindSummary>,
    /// The layer's own cost per call on the app thread, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observer_us: Option<Quantiles>,
    /// Calls dropped because the queue to the worker was full.
    pub queue_drops: u64,
    /// Lines that could not be written (unwritable directory, full disk):
    /// `records_lost + summary_write_failures`.
    pub write_failures: u64,
    /// Record lines that could not be written, one per record: calls
    /// (warm-up and failed included) = records written + `records_lost` +
    /// `queue_drops`.
    #[serde(default)]
    pub records_lost: u64,
    /// Summary lines that could not be written.
    #[serde(default)]
    pub summary_write_failures: u64,
    /// Rejected trace-context / server-timing headers, counted on this layer
    /// (by its own parsing, or by code running under its subscriber).
    pub rejected_headers: u64,
    /// Negative durations clamped to 0, counted on this layer.
    pub clamped: u64,
    /// Stage spans that closed outside any call span, or named an unknown stage.
    pub ignored_spans: u64,
    /// Call spans that closed with no stage span inside.
    pub empty_calls: u64,
    /// Deadline figures, when a `target_hz` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DeadlineSummary>,
    /// Clock figures, when calls were split across two clocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockSummary>,
    /// A remote executor's clock figures, when dispatches were placed with
    /// its offset (`docs/stages.md`, "dispatch").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_clock: Option<super::ExecutorClockSummary>,
    /// How much faster this host's wall clock runs than its monotonic clock
    /// (ppm), once measured: non-zero while an NTP daemon slews it. Calls
    /// are placed on the wall clock as read at each call, so the figures
    /// stay right; a large value says the host's clock is being corrected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_slew_ppm: Option<f64>,
    /// Counters the record sinks report about themselves, cumulative
    /// (e.g. `otlp.dropped`, `otlp.failed`), from [`RecordSink::counters`](crate::sink::RecordSink::counters).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sink_counters: BTreeMap<String, u64>,
}

impl WindowSummary {
    /// The summary as one JSON line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The cumulative summary returned by [`FlushGuard::finish`](crate::FlushGuard::finish).
pub type Summary = WindowSummary;
