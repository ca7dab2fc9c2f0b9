//! The plan file: the target, a baseline phase, one factor with its levels.
//!
//! TOML, documented with examples in `docs/experiments.md`:
//!
//! ```toml
//! name = "network delay ramp"
//!
//! [target]            # the built-in demo pipeline
//! kind = "demo"
//! hz = 30
//! model_ms = 12
//!
//! [baseline]
//! hold_s = 4
//!
//! [factor]
//! kind = "net"        # net | payload | infer | cpu | pause
//! direction = "both"  # uplink | downlink | both (net only)
//! hold_s = 4
//! levels = [5, 20]    # shorthand for { delay_ms = 5 }, { delay_ms = 20 }
//! ```

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A whole experiment plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// A name for the report (default: the factor's kind).
    #[serde(default)]
    pub name: Option<String>,
    /// What is measured.
    pub target: Target,
    /// The idle phase every level is compared with.
    pub baseline: Hold,
    /// The one factor that is raised in steps.
    pub factor: Factor,
    /// Resource sampling.
    #[serde(default)]
    pub sampler: SamplerSpec,
    /// Thresholds of the verdict.
    #[serde(default)]
    pub verdict: VerdictSpec,
}

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

/// How long a phase lasts: seconds, or a number of calls (whichever is given).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hold {
    /// Seconds to hold the phase.
    #[serde(default)]
    pub hold_s: Option<f64>,
    /// Calls to collect in the phase.
    #[serde(default)]
    pub calls: Option<u64>,
}

impl Hold {
    /// The phase's nominal length at `hz` calls per second.
    pub fn duration(&self, hz: f64) -> Duration {
        let s = match (self.hold_s, self.calls) {
            (Some(s), _) => s,
            (None, Some(n)) => n as f64 / hz,
            (None, None) => 0.0,
        };
        Duration::from_secs_f64(s.clamp(0.0, 86_400.0))
    }
}

/// The factor raised in steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Factor {
    /// Which factor.
    pub kind: FactorKind,
    /// `net` only: which direction the levels shape.
    #[serde(default)]
    pub direction: Direction,
    /// Hold per level in seconds (or `calls`).
    #[serde(default)]
    pub hold_s: Option<f64>,
    /// Calls per level (instead of `hold_s`).
    #[serde(default)]
    pub calls: Option<u64>,
    /// `net` only: shape with a real kernel bottleneck — `tbf` on a veth
    /// pair between two network namespaces, with cross traffic from a
    /// built-in sender — instead of (or besides) the userspace proxy. Needs
    /// root and iproute2 (`ip`, `tc`); the levels then take `rate_mbit`,
    /// `cross_mbit` and `queue_ms`.
    #[serde(default)]
    pub kernel: bool,
    /// Settling time after each change, excluded from the statistics, s.
    #[serde(default = "d_settle_s")]
    pub settle_s: f64,
    /// The levels, lowest first.
    pub levels: Vec<LevelInput>,
}

fn d_settle_s() -> f64 {
    0.3
}

impl Factor {
    /// Hold of one level.
    pub fn hold(&self) -> Hold {
        Hold {
            hold_s: self.hold_s,
            calls: self.calls,
        }
    }
}

/// Factors an experiment can raise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FactorKind {
    /// The network through the userspace proxy: delay, jitter, bandwidth, stalls.
    Net,
    /// Extra concurrent inference requests (a captured observation replayed).
    Infer,
    /// CPU burner threads at a duty cycle.
    Cpu,
    /// Camera frame size.
    Payload,
    /// A client-side pause inside the call, outside every stage (a GC stand-in).
    Pause,
}

impl FactorKind {
    /// The name used in the plan.
    pub fn name(self) -> &'static str {
        match self {
            FactorKind::Net => "net",
            FactorKind::Infer => "infer",
            FactorKind::Cpu => "cpu",
            FactorKind::Payload => "payload",
            FactorKind::Pause => "pause",
        }
    }

    /// The level field a bare number stands for.
    pub fn primary(self) -> &'static str {
        match self {
            FactorKind::Net => "delay_ms",
            FactorKind::Infer => "in_flight",
            FactorKind::Cpu => "threads",
            FactorKind::Payload => "payload_kb",
            FactorKind::Pause => "pause_ms",
        }
    }
}

/// Which direction a `net` level shapes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Client → server.
    Uplink,
    /// Server → client.
    Downlink,
    /// Both.
    #[default]
    Both,
}

/// A level as written: a bare number (the factor's primary knob) or a table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
// At most 64 levels per plan, parsed once: the size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum LevelInput {
    /// The factor's primary knob (`delay_ms`, `in_flight`, `threads`, `payload_kb`, `pause_ms`).
    Number(f64),
    /// Every knob by name.
    Table(Level),
}

/// One level's settings; which fields apply depends on the factor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    /// `net`: added one-way delay, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<f64>,
    /// `net`: uniform jitter ± ms around the delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
    /// `net`: bandwidth limit, Mbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mbps: Option<f64>,
    /// `net`: a stall of `stall_ms` every `stall_every_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_every_ms: Option<f64>,
    /// `net`: length of each stall, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_ms: Option<f64>,
    /// `net` with `kernel = true`: rate of the `tbf` bottleneck, Mbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_mbit: Option<f64>,
    /// `net` with `kernel = true`: UDP cross traffic sent through the
    /// bottleneck in the shaped direction(s), Mbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_mbit: Option<f64>,
    /// `net` with `kernel = true`: the longest a packet may wait in the
    /// `tbf` queue before it is dropped, ms (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<f64>,
    /// `infer`: extra requests kept in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u32>,
    /// `cpu`: burner threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// `cpu`: fraction of each 10 ms period a burner spins (0–1, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duty: Option<f64>,
    /// `cpu`: cores the burners are pinned to (default: not pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<Vec<usize>>,
    /// `payload`: frame size, KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_kb: Option<u64>,
    /// `pause`: length of each client pause, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_ms: Option<f64>,
    /// `pause`: period of the pauses, s (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_s: Option<f64>,
}

impl Level {
    /// A short label for tables ("delay 20 ms", "4 in flight"...).
    pub fn label(&self, kind: FactorKind, direction: Direction) -> String {
        let mut parts = Vec::new();
        let dir = match direction {
            Direction::Both => "",
            Direction::Uplink => "uplink ",
            Direction::Downlink => "downlink ",
        };
        if let Some(v) = self.delay_ms {
            parts.push(format!("{dir}delay {v} ms"));
        }
        if let Some(v) = self.jitter_ms {
            parts.push(format!("jitter ±{v} ms"));
        }
        if let Some(v) = self.bandwidth_mbps {
            parts.push(format!("{dir}{v} Mbit/s"));
        }
        if let (Some(e), Some(l)) = (self.stall_every_ms, self.stall_ms) {
            parts.push(format!("stall {l} ms every {e} ms"));
        }
        if let Some(v) = self.rate_mbit {
            parts.push(format!("{dir}tbf {v} Mbit/s"));
        }
        if let Some(v) = self.cross_mbit {
            parts.push(format!("cross traffic {v} Mbit/s"));
        }
        if let Some(v) = self.in_flight {
            parts.push(format!("{v} in flight"));
        }
        if let Some(v) = self.threads {
            parts.push(format!(
                "{v} burner{} at {:.0} %",
                if v == 1 { "" } else { "s" },
                100.0 * self.duty.unwrap_or(1.0)
            ));
        }
        if let Some(c) = &self.cores {
            parts.push(format!("on cores {c:?}"));
        }
        if let Some(v) = self.payload_kb {
            parts.push(format!("{v} KiB frames"));
        }
        if let Some(v) = self.pause_ms {
            parts.push(format!(
                "pause {v} ms every {} s",
                self.every_s.unwrap_or(2.0)
            ));
        }
        if parts.is_empty() {
            kind.name().to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// Resource sampling settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplerSpec {
    /// Samples per second (default 10).
    #[serde(default = "d_sampler_hz")]
    pub hz: f64,
}

fn d_sampler_hz() -> f64 {
    10.0
}

impl Default for SamplerSpec {
    fn default() -> Self {
        SamplerSpec { hz: d_sampler_hz() }
    }
}

/// Thresholds below which a change is not called a move.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictSpec {
    /// Smallest p50 shift that counts, ms (default: max(0.5 ms, 5 % of the baseline e2e p50)).
    #[serde(default)]
    pub min_p50_ms: Option<f64>,
    /// Smallest p99 shift that counts, ms (default: max(2 ms, 10 % of the baseline e2e p50)).
    #[serde(default)]
    pub min_p99_ms: Option<f64>,
}

/// Why a plan was rejected.
#[derive(Debug)]
pub enum PlanError {
    /// The file could not be read.
    Read(std::path::PathBuf, std::io::Error),
    /// The TOML did not parse or has unknown / mistyped fields.
    Parse(String),
    /// A value is out of range or does not apply to the factor.
    Invalid(String),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Read(p, e) => write!(
                f,
                "cannot read the plan {} ({e}); pass the path of a TOML plan (see docs/experiments.md)",
                p.display()
            ),
            PlanError::Parse(e) => write!(
                f,
                "the plan is not valid TOML for an experiment: {e} (see docs/experiments.md for the fields)"
            ),
            PlanError::Invalid(e) => write!(f, "invalid plan: {e}"),
        }
    }
}

impl std::error::Error for PlanError {}

fn invalid(msg: impl Into<String>) -> PlanError {
    PlanError::Invalid(msg.into())
}

impl Plan {
    /// Read and validate a plan file.
    pub fn from_file(path: &Path) -> Result<Plan, PlanError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| PlanError::Read(path.to_path_buf(), e))?;
        Plan::from_toml(&text)
    }

    /// Parse and validate a plan from TOML text.
    pub fn from_toml(text: &str) -> Result<Plan, PlanError> {
        let plan: Plan = toml::from_str(text).map_err(|e| PlanError::Parse(e.to_string()))?;
        plan.validate()?;
        Ok(plan)
    }

    /// The plan's name for reports.
    pub fn title(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{} ramp", self.factor.kind.name()))
    }

    /// The levels with bare numbers expanded to their factor's primary knob.
    pub fn levels(&self) -> Vec<Level> {
        let kind = self.factor.kind;
        self.factor
            .levels
            .iter()
            .map(|l| match l {
                LevelInput::Table(t) => t.clone(),
                LevelInput::Number(v) => {
                    let v = *v;
                    let mut t = Level::default();
                    match kind {
                        FactorKind::Net => t.delay_ms = Some(v),
                        FactorKind::Infer => t.in_flight = Some(v.max(0.0) as u32),
                        FactorKind::Cpu => t.threads = Some(v.max(0.0) as u32),
                        FactorKind::Payload => t.payload_kb = Some(v.max(0.0) as u64),
                        FactorKind::Pause => t.pause_ms = Some(v),
                    }
                    t
                }
            })
            .collect()
    }

    /// Nominal run time: warm-up, baseline, every level.
    pub fn nominal_duration(&self) -> Duration {
        let hz = self.target.hz;
        let levels = self.factor.levels.len() as u32;
        Duration::from_secs_f64(self.target.warmup_s.max(0.0))
            + self.baseline.duration(hz)
            + self.factor.hold().duration(hz) * levels
    }

    /// Check every value; the error names the field and the fix.
    pub fn validate(&self) -> Result<(), PlanError> {
        let t = &self.target;
        let ms_ok = |v: f64| v.is_finite() && (0.0..=60_000.0).contains(&v);
        if !(t.hz.is_finite() && t.hz > 0.0 && t.hz <= 1000.0) {
            return Err(invalid(format!(
                "target.hz = {} must be a rate between 0 and 1000 calls per second",
                t.hz
            )));
        }
        for (name, v) in [
            ("target.model_ms", t.model_ms),
            ("target.capture_ms", t.capture_ms),
            ("target.dispatch_ms", t.dispatch_ms),
            ("target.uplink_delay_ms", t.uplink_delay_ms),
            ("target.downlink_delay_ms", t.downlink_delay_ms),
        ] {
            if !ms_ok(v) {
                return Err(invalid(format!(
                    "{name} = {v} must be between 0 and 60000 ms"
                )));
            }
        }
        if let Some(b) = t.bandwidth_mbps {
            if !(b.is_finite() && b > 0.0) {
                return Err(invalid(format!(
                    "target.bandwidth_mbps = {b} must be above 0 (leave it out for no limit)"
                )));
            }
        }
        if t.payload_kb > 16 * 1024 {
            return Err(invalid("target.payload_kb must be at most 16384 (16 MiB)"));
        }
        if t.server_concurrency == 0 || t.server_concurrency > 1024 {
            return Err(invalid(
                "target.server_concurrency must be between 1 and 1024",
            ));
        }
        if !(t.warmup_s.is_finite() && (0.0..=600.0).contains(&t.warmup_s)) {
            return Err(invalid("target.warmup_s must be between 0 and 600 s"));
        }
        self.check_target_kind()?;
        check_hold("baseline", &self.baseline)?;
        check_hold("factor", &self.factor.hold())?;
        let f = &self.factor;
        if !(f.settle_s.is_finite() && f.settle_s >= 0.0) {
            return Err(invalid("factor.settle_s must be 0 or more seconds"));
        }
        if let Some(s) = f.hold_s {
            if f.settle_s >= s {
                return Err(invalid(format!(
                    "factor.settle_s = {} leaves nothing of hold_s = {s}; lower settle_s",
                    f.settle_s
                )));
            }
        }
        if f.levels.is_empty() {
            return Err(invalid(
                "factor.levels is empty: give at least one level, e.g. levels = [5, 20]",
            ));
        }
        if f.levels.len() > 64 {
            return Err(invalid("factor.levels: at most 64 levels"));
        }
        if f.kernel && f.kind != FactorKind::Net {
            return Err(invalid(format!(
                "factor.kernel applies to net only, not {}",
                f.kind.name()
            )));
        }
        if f.direction != Direction::Both && f.kind != FactorKind::Net {
            return Err(invalid(format!(
                "factor.direction applies to net only, not {}",
                f.kind.name()
            )));
        }
        if !(self.sampler.hz.is_finite() && self.sampler.hz > 0.0 && self.sampler.hz <= 100.0) {
            return Err(invalid("sampler.hz must be between 0 and 100"));
        }
        for (i, level) in self.levels().iter().enumerate() {
            check_level(f.kind, i + 1, level)?;
            if !f.kernel {
                if let Some((name, _)) = [
                    ("rate_mbit", level.rate_mbit.is_some()),
                    ("cross_mbit", level.cross_mbit.is_some()),
                    ("queue_ms", level.queue_ms.is_some()),
                ]
                .iter()
                .find(|(_, set)| *set)
                {
                    return Err(invalid(format!(
                        "level {}: {name} shapes the kernel bottleneck; set factor.kernel = true (needs root), or use bandwidth_mbps for the userspace proxy",
                        i + 1
                    )));
                }
            }
        }
        Ok(())
    }
}

impl Plan {
    fn check_target_kind(&self) -> Result<(), PlanError> {
        let t = &self.target;
        let command_fields = [
            ("command", t.command.is_some()),
            ("env", !t.env.is_empty()),
            ("records_dir", t.records_dir.is_some()),
            ("upstream", t.upstream.is_some()),
            ("listen", t.listen.is_some()),
            ("payload_env", t.payload_env.is_some()),
            ("replay_file", t.replay_file.is_some()),
            ("replay_http_path", t.replay_http_path.is_some()),
            ("replay_content_type", t.replay_content_type.is_some()),
        ];
        match t.kind {
            TargetKind::Demo => {
                if let Some((name, _)) = command_fields.iter().find(|(_, set)| *set) {
                    return Err(invalid(format!(
                        "target.{name} applies to kind = \"command\" only"
                    )));
                }
            }
            TargetKind::Command => {
                if t.command.as_ref().is_none_or(|c| c.is_empty()) {
                    return Err(invalid(
                        "target.command: give the client's argv, e.g. command = [\"python\", \"client.py\"]",
                    ));
                }
                if t.records_dir.is_none() {
                    return Err(invalid(
                        "target.records_dir: give the directory the client's stage layer writes records-*.jsonl to",
                    ));
                }
                match &t.upstream {
                    Some(u) if u.parse::<std::net::SocketAddr>().is_ok() => {}
                    _ => {
                        return Err(invalid(
                            "target.upstream: give the server's address as ip:port, e.g. \"10.0.0.5:8000\"",
                        ))
                    }
                }
                if let Some(path) = &t.replay_http_path {
                    if !path.starts_with('/') || t.replay_file.is_none() {
                        return Err(invalid(
                            "target.replay_http_path must start with '/' and comes with target.replay_file (the request body to replay)",
                        ));
                    }
                }
                if let Some(l) = &t.listen {
                    if l.parse::<std::net::SocketAddr>().is_err() {
                        return Err(invalid(format!(
                            "target.listen = {l:?} must be ip:port, e.g. \"127.0.0.1:9000\""
                        )));
                    }
                }
                match self.factor.kind {
                    FactorKind::Pause => {
                        return Err(invalid(
                            "a pause factor needs the demo target (it pauses the demo's client)",
                        ))
                    }
                    FactorKind::Payload if t.payload_env.is_none() => {
                        return Err(invalid(
                            "a payload factor on a command target needs target.payload_env: the variable your client reads its frame size (KiB) from",
                        ))
                    }
                    FactorKind::Infer if t.replay_file.is_none() => {
                        return Err(invalid(
                            "an infer factor on a command target needs target.replay_file: a captured observation (msgpack map, or with replay_http_path an HTTP request body) to replay",
                        ))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

fn check_hold(name: &str, h: &Hold) -> Result<(), PlanError> {
    match (h.hold_s, h.calls) {
        (Some(_), Some(_)) => Err(invalid(format!("{name}: give hold_s or calls, not both"))),
        (None, None) => Err(invalid(format!(
            "{name}: give hold_s (seconds) or calls (calls per phase)"
        ))),
        (Some(s), None) if !(s.is_finite() && s > 0.0 && s <= 86_400.0) => Err(invalid(format!(
            "{name}.hold_s = {s} must be between 0 and 86400 s"
        ))),
        (None, Some(n)) if !(5..=10_000_000).contains(&n) => Err(invalid(format!(
            "{name}.calls = {n}: use at least 5 calls per phase"
        ))),
        _ => Ok(()),
    }
}

fn check_level(kind: FactorKind, i: usize, l: &Level) -> Result<(), PlanError> {
    let fields: [(&str, bool, &[FactorKind]); 15] = [
        ("rate_mbit", l.rate_mbit.is_some(), &[FactorKind::Net]),
        ("cross_mbit", l.cross_mbit.is_some(), &[FactorKind::Net]),
        ("queue_ms", l.queue_ms.is_some(), &[FactorKind::Net]),
        ("delay_ms", l.delay_ms.is_some(), &[FactorKind::Net]),
        ("jitter_ms", l.jitter_ms.is_some(), &[FactorKind::Net]),
        (
            "bandwidth_mbps",
            l.bandwidth_mbps.is_some(),
            &[FactorKind::Net],
        ),
        (
            "stall_every_ms",
            l.stall_every_ms.is_some(),
            &[FactorKind::Net],
        ),
        ("stall_ms", l.stall_ms.is_some(), &[FactorKind::Net]),
        ("in_flight", l.in_flight.is_some(), &[FactorKind::Infer]),
        ("threads", l.threads.is_some(), &[FactorKind::Cpu]),
        ("duty", l.duty.is_some(), &[FactorKind::Cpu]),
        ("cores", l.cores.is_some(), &[FactorKind::Cpu]),
        ("payload_kb", l.payload_kb.is_some(), &[FactorKind::Payload]),
        ("pause_ms", l.pause_ms.is_some(), &[FactorKind::Pause]),
        ("every_s", l.every_s.is_some(), &[FactorKind::Pause]),
    ];
    for (name, set, kinds) in fields {
        if set && !kinds.contains(&kind) {
            return Err(invalid(format!(
                "level {i}: {name} does not apply to a {} factor",
                kind.name()
            )));
        }
    }
    let ms_ok = |v: Option<f64>| v.is_none_or(|v| v.is_finite() && (0.0..=60_000.0).contains(&v));
    match kind {
        FactorKind::Net => {
            if l.delay_ms.is_none()
                && l.jitter_ms.is_none()
                && l.bandwidth_mbps.is_none()
                && l.stall_ms.is_none()
                && l.rate_mbit.is_none()
                && l.cross_mbit.is_none()
            {
                return Err(invalid(format!(
                    "level {i}: a net level needs delay_ms, jitter_ms, bandwidth_mbps, stall_ms, rate_mbit or cross_mbit"
                )));
            }
            for (name, v) in [("rate_mbit", l.rate_mbit), ("cross_mbit", l.cross_mbit)] {
                if let Some(v) = v {
                    if !(v.is_finite() && v > 0.0 && v <= 100_000.0) {
                        return Err(invalid(format!(
                            "level {i}: {name} = {v} must be above 0 and at most 100000 Mbit/s"
                        )));
                    }
                }
            }
            if let Some(q) = l.queue_ms {
                if !(q.is_finite() && (1.0..=10_000.0).contains(&q)) {
                    return Err(invalid(format!(
                        "level {i}: queue_ms = {q} must be between 1 and 10000 ms"
                    )));
                }
            }
            for (name, v) in [
                ("delay_ms", l.delay_ms),
                ("jitter_ms", l.jitter_ms),
                ("stall_every_ms", l.stall_every_ms),
                ("stall_ms", l.stall_ms),
            ] {
                if !ms_ok(v) {
                    return Err(invalid(format!(
                        "level {i}: {name} must be between 0 and 60000 ms"
                    )));
                }
            }
            if let Some(b) = l.bandwidth_mbps {
                if !(b.is_finite() && b > 0.0) {
                    return Err(invalid(format!(
                        "level {i}: bandwidth_mbps must be above 0"
                    )));
                }
            }
            match (l.stall_every_ms, l.stall_ms) {
                (Some(e), Some(s)) if s >= e => {
                    return Err(invalid(format!(
                        "level {i}: stall_ms ({s}) must be shorter than stall_every_ms ({e})"
                    )))
                }
                (Some(_), None) | (None, Some(_)) => {
                    return Err(invalid(format!(
                        "level {i}: give stall_ms and stall_every_ms together"
                    )))
                }
                _ => {}
            }
        }
        FactorKind::Infer => match l.in_flight {
            Some(n) if (1..=256).contains(&n) => {}
            _ => {
                return Err(invalid(format!(
                    "level {i}: in_flight must be between 1 and 256"
                )))
            }
        },
        FactorKind::Cpu => {
            match l.threads {
                Some(n) if (1..=256).contains(&n) => {}
                _ => {
                    return Err(invalid(format!(
                        "level {i}: threads must be between 1 and 256"
                    )))
                }
            }
            if let Some(d) = l.duty {
                if !(d.is_finite() && d > 0.0 && d <= 1.0) {
                    return Err(invalid(format!("level {i}: duty = {d} must be in (0, 1]")));
                }
            }
            if let Some(cores) = &l.cores {
                // A core the kernel refuses is reported (burners_pinned), not fatal.
                if cores.is_empty() || cores.iter().any(|c| *c >= 1024) {
                    return Err(invalid(format!(
                        "level {i}: cores must list core numbers (0, 1, ...) below 1024, or be left out"
                    )));
                }
            }
        }
        FactorKind::Payload => match l.payload_kb {
            Some(kb) if kb <= 16 * 1024 => {}
            _ => {
                return Err(invalid(format!(
                    "level {i}: payload_kb must be between 0 and 16384"
                )))
            }
        },
        FactorKind::Pause => {
            if l.pause_ms.is_none() || !ms_ok(l.pause_ms) {
                return Err(invalid(format!(
                    "level {i}: pause_ms must be between 0 and 60000"
                )));
            }
            if let Some(e) = l.every_s {
                if !(e.is_finite() && e >= 0.05) {
                    return Err(invalid(format!(
                        "level {i}: every_s must be at least 0.05 s"
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shorthand_levels_expand_to_the_primary_knob() {
        let p = Plan::from_toml(
            "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 2\n[factor]\nkind = \"net\"\nhold_s = 2\nlevels = [5, { delay_ms = 10, jitter_ms = 2 }]\n",
        )
        .unwrap();
        let l = p.levels();
        assert_eq!(l[0].delay_ms, Some(5.0));
        assert_eq!(l[1].jitter_ms, Some(2.0));
        assert_eq!(p.target.hz, 30.0);
    }

    #[test]
    fn misplaced_fields_are_named() {
        let e = Plan::from_toml(
            "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 2\n[factor]\nkind = \"infer\"\nhold_s = 2\nlevels = [{ delay_ms = 5 }]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("delay_ms does not apply to a infer factor"),
            "{e}"
        );
        let e = Plan::from_toml("[target]\nkind = \"demo\"\n[baseline]\n[factor]\nkind = \"net\"\nhold_s = 1\nlevels = [1]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("baseline: give hold_s"), "{e}");
        let e = Plan::from_toml(
            "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 2\n[factor]\nkind = \"net\"\nhold_s = 2\nlevels = [{ rate_mbit = 10 }]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("set factor.kernel = true"), "{e}");
        let e = Plan::from_toml(
            "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 2\n[factor]\nkind = \"cpu\"\nkernel = true\nhold_s = 2\nlevels = [1]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("factor.kernel applies to net only"), "{e}");
        let p = Plan::from_toml(
            "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 2\n[factor]\nkind = \"net\"\nkernel = true\nhold_s = 2\nlevels = [{ rate_mbit = 10, cross_mbit = 4, queue_ms = 50 }]\n",
        )
        .unwrap();
        assert_eq!(p.levels()[0].rate_mbit, Some(10.0));
        let e = Plan::from_toml("[target]\nkind = \"demo\"\nhzz = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hzz"), "{e}");
    }
}
