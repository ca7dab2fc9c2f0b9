//! The per-call figures a record carries: the six stages and the derived ones.

use std::fmt;

/// One per-call figure of the record format (DESIGN section 1), in milliseconds.
///
/// The six canonical stages come first, then the derived figures. `observer`
/// is the record's `observer_us` converted to milliseconds so every column
/// shares one unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// Trigger → last frame in the local buffer (`capture_ms`).
    Capture,
    /// Send → server has the whole request (`uplink_ms`).
    Uplink,
    /// Server receive → inference start (`queue_ms`).
    Queue,
    /// Inference start → usable output (`infer_ms`).
    Infer,
    /// Server send → client has the whole response (`downlink_ms`).
    Downlink,
    /// Response decoded → executor starts the action (`dispatch_ms`).
    Dispatch,
    /// Client transport span, send → response (`roundtrip_ms`).
    Roundtrip,
    /// Server receive → server send (`server_ms`).
    Server,
    /// `roundtrip − server`: uplink + downlink (`net_ms`).
    Net,
    /// The whole call (`e2e_ms`).
    E2e,
    /// Time inside the call that no stage explains (`gap_ms`).
    Gap,
    /// The observer's own time on the call (`observer_us`, shown in ms).
    Observer,
    /// Lateness against the scheduled tick (`late_ms`), when a target rate is set.
    Late,
}

/// Number of [`Metric`]s.
pub const METRIC_COUNT: usize = 13;

impl Metric {
    /// Every metric, in display order.
    pub const ALL: [Metric; METRIC_COUNT] = [
        Metric::Capture,
        Metric::Uplink,
        Metric::Queue,
        Metric::Infer,
        Metric::Downlink,
        Metric::Dispatch,
        Metric::Roundtrip,
        Metric::Server,
        Metric::Net,
        Metric::E2e,
        Metric::Gap,
        Metric::Observer,
        Metric::Late,
    ];

    /// The six canonical stages of a call, in call order.
    pub const STAGES: [Metric; 6] = [
        Metric::Capture,
        Metric::Uplink,
        Metric::Queue,
        Metric::Infer,
        Metric::Downlink,
        Metric::Dispatch,
    ];

    /// A span of the call's own time (a stage, a derived figure, e2e, gap),
    /// as opposed to the observer's cost and the lateness against the tick.
    pub fn is_call_time(self) -> bool {
        !matches!(self, Metric::Observer | Metric::Late)
    }

    /// Column index (position in [`Metric::ALL`]).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The short name used in tables, `--json` and `--fail-if` (`"infer"`).
    pub fn name(self) -> &'static str {
        match self {
            Metric::Capture => "capture",
            Metric::Uplink => "uplink",
            Metric::Queue => "queue",
            Metric::Infer => "infer",
            Metric::Downlink => "downlink",
            Metric::Dispatch => "dispatch",
            Metric::Roundtrip => "roundtrip",
            Metric::Server => "server",
            Metric::Net => "net",
            Metric::E2e => "e2e",
            Metric::Gap => "gap",
            Metric::Observer => "observer",
            Metric::Late => "late",
        }
    }

    /// Looks a metric up by its short name or its record field name
    /// (`"infer"` or `"infer_ms"`; `"observer_us"` for the observer).
    pub fn from_name(name: &str) -> Option<Metric> {
        let base = name
            .strip_suffix("_ms")
            .or_else(|| name.strip_suffix("_us"))
            .unwrap_or(name);
        Metric::ALL.into_iter().find(|m| m.name() == base)
    }

    /// Which part of the system the figure belongs to: `"client"`,
    /// `"transport"`, `"server"`, `"call"` (e2e, gap, observer, late).
    pub fn group(self) -> &'static str {
        match self {
            Metric::Capture | Metric::Dispatch => "client",
            Metric::Uplink | Metric::Downlink | Metric::Roundtrip | Metric::Net => "transport",
            Metric::Queue | Metric::Infer | Metric::Server => "server",
            Metric::E2e | Metric::Gap | Metric::Observer | Metric::Late => "call",
        }
    }

    /// The figures this one is made of, when it is derived from others
    /// (a verdict names the finest figure that moved).
    pub fn parts(self) -> &'static [Metric] {
        match self {
            Metric::Roundtrip => &[
                Metric::Uplink,
                Metric::Downlink,
                Metric::Server,
                Metric::Queue,
                Metric::Infer,
                Metric::Net,
            ],
            Metric::Server => &[Metric::Queue, Metric::Infer],
            Metric::Net => &[Metric::Uplink, Metric::Downlink],
            Metric::E2e => &[
                Metric::Capture,
                Metric::Uplink,
                Metric::Queue,
                Metric::Infer,
                Metric::Downlink,
                Metric::Dispatch,
                Metric::Roundtrip,
                Metric::Server,
                Metric::Net,
                Metric::Gap,
            ],
            Metric::Gap => &[Metric::Observer],
            _ => &[],
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
