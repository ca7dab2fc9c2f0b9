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
    /// `demo`: which pair runs — `"ws"` (default) the request/response
    /// robot over WebSocket + msgpack, or `"grpc-async"` LeRobot's async
    /// inference over gRPC (`docs/lerobot.md`).
    #[serde(default)]
    pub transport: DemoTransport,
    /// `grpc-async`: actions per chunk (LeRobot's `actions_per_chunk`;
    /// default [`DEFAULT_CHUNK_SIZE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_size: Option<usize>,
    /// `grpc-async`: the robot sends an observation while its action queue
    /// holds at most this share of a chunk (LeRobot's
    /// `chunk_size_threshold`, 0–1; default [`DEFAULT_REFILL_THRESHOLD`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill_threshold: Option<f64>,
    /// `grpc-async`: the server answers a poll no sooner than this after it
    /// came (LeRobot's `inference_latency`: the wait lands in `poll_wait`), ms
    /// (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_latency_ms: Option<f64>,
}

/// `chunk_size` of a `grpc-async` target when the plan gives none (the
/// demo's `--chunk-size`).
pub const DEFAULT_CHUNK_SIZE: usize = 20;
/// `refill_threshold` of a `grpc-async` target when the plan gives none
/// (LeRobot's `chunk_size_threshold` default).
pub const DEFAULT_REFILL_THRESHOLD: f64 = 0.5;

impl Target {
    /// Whether this is the LeRobot async pair (`kind = "demo"`, `transport = "grpc-async"`).
    pub fn is_async(&self) -> bool {
        self.kind == TargetKind::Demo && self.transport == DemoTransport::GrpcAsync
    }

    /// Actions per chunk of the async pair.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE)
    }

    /// Refill threshold of the async pair.
    pub fn refill_threshold(&self) -> f64 {
        self.refill_threshold.unwrap_or(DEFAULT_REFILL_THRESHOLD)
    }

    /// Calls (records) per second the target makes when healthy: `hz`, or
    /// for the async pair one chunk per refill cycle — a chunk's actions
    /// less the one already run and those still queued at the refill —
    /// so that a phase held by `calls` lasts about as long as it will.
    pub fn call_hz(&self) -> f64 {
        if !self.is_async() {
            return self.hz;
        }
        let n = self.chunk_size() as f64;
        let queued_at_refill = (self.refill_threshold() * n).floor();
        self.hz / (n - 1.0 - queued_at_refill).max(1.0)
    }
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

/// The pair a `demo` target runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DemoTransport {
    /// The request/response robot over WebSocket + msgpack (openpi / LingBot-VA).
    #[default]
    Ws,
    /// LeRobot's async inference over gRPC: observations streamed, chunks
    /// polled, an action queue refilled at a threshold.
    GrpcAsync,
}
