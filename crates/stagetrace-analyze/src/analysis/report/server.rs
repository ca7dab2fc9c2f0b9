//! Inference's parts and the server's waits, as the report gives them.

use serde::Serialize;

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
