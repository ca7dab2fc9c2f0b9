//! The plan's `[factor]`: the one factor raised in steps, its levels and
//! how long each is held.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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
