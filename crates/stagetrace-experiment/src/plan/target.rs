//! The plan's `[target]`: what the experiment measures.

use serde::{Deserialize, Serialize};

/// What the experiment measures: the built-in demo pipeline, or the
/// user's own client run as a command with the proxy in front of their server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// `"demo"`: the built-in robot client and policy server over loopback;
    /// `"command"`: the user's client, run as a command.
    pub kind: TargetKind,
    /// `command`: the client's argv; it must keep running (calling the
    /// server) until it is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// `command`: extra environment for the client. `STAGETRACE_PROXY_ADDR`
    /// (where to connect) is always set.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// `command`: where the client's stage layer writes `records-*.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_dir: Option<std::path::PathBuf>,
    /// `command`: the user's server, `host:port`; the proxy forwards to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// `command`: where the proxy listens (default `127.0.0.1:0`, a free port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// `command`: the environment variable the client reads its frame size
    /// (KiB) from; needed by the `payload` factor (the client is restarted
    /// at each level with the new value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_env: Option<String>,
    /// `command`: a captured observation (one msgpack map, openpi /
    /// LingBot-VA protocol) replayed by the `infer` factor against `upstream`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_file: Option<std::path::PathBuf>,
    /// `command`, HTTP servers: replay `replay_file` as the raw body of a
    /// POST to this path of `upstream` (e.g. `"/infer"`) instead of over WebSocket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_http_path: Option<String>,
    /// Content type of the HTTP replay (default `application/msgpack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_content_type: Option<String>,
    /// Control rate of the robot loop (calls per second).
    #[serde(default = "d_hz")]
    pub hz: f64,
    /// Cost of one simulated inference, ms.
    #[serde(default = "d_model_ms")]
    pub model_ms: f64,
    /// Camera frame sent with each observation, KiB.
    #[serde(default = "d_payload_kb")]
    pub payload_kb: u64,
    /// Cost of one simulated capture, ms.
    #[serde(default = "d_capture_ms")]
    pub capture_ms: f64,
    /// Cost of handing one action chunk to the actuator, ms.
    #[serde(default = "d_dispatch_ms")]
    pub dispatch_ms: f64,
    /// Standing one-way delay client → server through the proxy, ms.
    #[serde(default)]
    pub uplink_delay_ms: f64,
    /// Standing one-way delay server → client through the proxy, ms.
    #[serde(default)]
    pub downlink_delay_ms: f64,
    /// Standing bandwidth limit of each direction, Mbit/s (none by default).
    #[serde(default)]
    pub bandwidth_mbps: Option<f64>,
    /// Requests the server runs at once (one model: 1).
    #[serde(default = "d_one")]
    pub server_concurrency: usize,
    /// Warm-up before the baseline (connections, caches), seconds.
    #[serde(default = "d_warmup_s")]
    pub warmup_s: f64,
}

fn d_hz() -> f64 {
    30.0
}
fn d_model_ms() -> f64 {
    12.0
}
fn d_payload_kb() -> u64 {
    64
}
fn d_capture_ms() -> f64 {
    2.0
}
fn d_dispatch_ms() -> f64 {
    1.0
}
fn d_one() -> usize {
    1
}
fn d_warmup_s() -> f64 {
    1.0
}

/// Kinds of target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// The built-in demo pipeline (robot client, proxy, policy server).
    Demo,
    /// The user's client as a command, the proxy in front of their server.
    Command,
}
