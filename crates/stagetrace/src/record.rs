//! `CallRecord`: the one representation of a call that flows from the layer
//! to every sink, and its public JSON-lines format (DESIGN section 1,
//! `shared/record.schema.json`).

use serde::{Deserialize, Serialize};

/// What the uplink/downlink split of a record rests on (`clock` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockBasis {
    /// Offset estimated from the call's own NTP-style timestamps.
    Estimate,
    /// Client and server clocks trusted as synchronised (PTP/NTP): raw wall times.
    Trusted,
    /// No split attempted: only `net_ms` is reported.
    None,
    /// The server gave too little timing for a split (e.g. only `infer_ms`).
    Degraded,
}

/// Whether a server-side result cache answered the call (`cache` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheOutcome {
    /// The cache held the answer: the model did not run.
    Hit,
    /// The cache did not: the model ran (and its answer was stored).
    Miss,
}

impl CacheOutcome {
    /// `Hit` for `true`, `Miss` for `false`.
    pub fn from_hit(hit: bool) -> Self {
        if hit {
            CacheOutcome::Hit
        } else {
            CacheOutcome::Miss
        }
    }

    /// `"hit"` or `"miss"`, as in the record.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Miss => "miss",
        }
    }
}

/// Where one span sat on the call's timeline, for exporters that draw it.
///
/// Not part of the JSON record: offsets are on the client's monotonic clock,
/// relative to the call span's start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpanTime {
    /// Start, nanoseconds after the call started.
    pub start_ns: u64,
    /// Duration in nanoseconds.
    pub dur_ns: u64,
}

/// Positions of every stage on the call's timeline (client monotonic clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// Wall time of the call's start, nanoseconds since the Unix epoch.
    pub call_start_unix_ns: u64,
    /// Duration of the whole call.
    pub call_dur_ns: u64,
    /// The `capture` span.
    pub capture: Option<SpanTime>,
    /// The client `transport` span (roundtrip).
    pub transport: Option<SpanTime>,
    /// Synthesized uplink: transport start → server receive (clock-corrected).
    pub uplink: Option<SpanTime>,
    /// Server queue, placed with the clock offset.
    pub queue: Option<SpanTime>,
    /// Inference, placed with the clock offset when it ran on a server.
    pub infer: Option<SpanTime>,
    /// Synthesized downlink: server send → transport end (clock-corrected).
    pub downlink: Option<SpanTime>,
    /// The `dispatch` span.
    pub dispatch: Option<SpanTime>,
    /// Id of the client `transport` span: the parent id sent in `traceparent`.
    /// Exporters give the exported `transport` span this id, so the server's
    /// spans (parented through `traceparent`) join under it.
    pub transport_span_id: Option<[u8; 8]>,
    /// Id of the `call` span, when the layer assigned one (exporters make one up otherwise).
    pub call_span_id: Option<[u8; 8]>,
    /// The call's trace id and the `call` / `transport` span ids were taken
    /// from another tracing layer (e.g. `tracing-opentelemetry`, see
    /// [`crate::context`]), which exports the call and its stage spans itself:
    /// an exporter adds only the synthesized spans under the transport span.
    pub shared_context: bool,
}

/// One call: the public record (one JSON object per line of `records-*.jsonl`).
///
/// Every duration is in milliseconds with microsecond resolution. A field that
/// does not apply is `None` and absent from the JSON, never 0 or null.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Per process, in call order.
    pub seq: u64,
    /// Wall time of the call's start (ms since the Unix epoch).
    pub ts_unix_ms: f64,
    /// Request kind, `"call"` when the app gives none.
    pub kind: String,
    /// 32 lowercase hex digits, the id sent in `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Trigger → last frame in the local buffer.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub capture_ms: Option<f64>,
    /// Send → server has the whole request (needs the clock offset).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub uplink_ms: Option<f64>,
    /// Server receive → inference start.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub queue_ms: Option<f64>,
    /// Inference start → usable output.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub infer_ms: Option<f64>,
    /// Server send → client has the whole response (needs the clock offset).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub downlink_ms: Option<f64>,
    /// Response decoded → executor starts the action.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub dispatch_ms: Option<f64>,
    /// Client transport span, send → response.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub roundtrip_ms: Option<f64>,
    /// Server receive → server send on the server's monotonic clock.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub server_ms: Option<f64>,
    /// `roundtrip − server`: uplink + downlink, exact without clock sync.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub net_ms: Option<f64>,
    /// The whole call span.
    #[serde(with = "us_required")]
    pub e2e_ms: f64,
    /// `e2e − Σ stages`: time inside the call no stage explains.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub gap_ms: Option<f64>,
    /// Server − client clock offset used for this call.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub offset_ms: Option<f64>,
    /// ± bound on the uplink/downlink split.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub split_err_ms: Option<f64>,
    /// What the split rests on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockBasis>,
    /// Lateness against the scheduled tick, when a target rate is set.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub late_ms: Option<f64>,
    /// True when the call ended after its tick's deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_miss: Option<bool>,
    /// `Some(true)` for warm-up calls, absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<bool>,
    /// `Some(true)` when the call did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<bool>,
    /// A short reason, with `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The layer's own time spent on this call, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "us")]
    pub observer_us: Option<f64>,
    /// Hex digest of the returned action, for consistency checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_digest: Option<String>,
    /// How many requests the server's batch held (this one included), when
    /// the server batches and says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// `hit` / `miss` of the server's result cache, when it has one and says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheOutcome>,
    /// Action chunks of this call dropped as too old to execute (at least 1;
    /// absent when none was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_dropped: Option<u32>,
    /// Where each span sat; for exporters, not written to the JSON record.
    #[serde(skip)]
    pub timeline: Timeline,
}

impl CallRecord {
    /// The record as one JSON line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        // Serialising plain numbers, strings and bools cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Round to microsecond resolution (3 decimals of a millisecond).
pub fn round_us(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

mod us {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(ms) if ms.is_finite() => s.serialize_f64(super::round_us(*ms)),
            _ => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Option::<f64>::deserialize(d)
    }
}

mod us_required {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(if v.is_finite() {
            super::round_us(*v)
        } else {
            0.0
        })
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        f64::deserialize(d)
    }
}

/// One request as a policy server saw it: what a server-side exporter needs
/// to place the server's own spans (`queue`, `infer`) under the client's
/// transport span in the same trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerRecord {
    /// The context the request carried (`None` when it carried none or a rejected one).
    pub trace_parent: Option<crate::wire::TraceParent>,
    /// Request kind, `"call"` when the request names none.
    pub kind: String,
    /// The server's timing for this request (`recv_unix_ns` anchors it in wall time).
    pub timing: crate::wire::ServerTiming,
    /// `Some(reason)` when the request failed on the server.
    pub error: Option<String>,
}
