//! `CallRecord`: the one representation of a call that flows from the layer
//! to every sink, and its public JSON-lines format (`docs/architecture.md`,
//! "The record"; `docs/record.schema.json`). The fields and their units come
//! from the schema table (`stagetrace-schema`).

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use stagetrace_schema::{ns_to_ms, Figure, HostCount, FIGURE_COUNT};
use stagetrace_schema::{Field, FIELDS};

/// What the hosts did to a call, counted — involuntary switches, page
/// faults, GC collections — on the robot's end and the server's
/// (`docs/host.md`); a count the host does not offer is absent, never 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCounts {
    /// The robot's, by [`HostCount::index`].
    pub robot: [Option<u32>; HostCount::ALL.len()],
    /// The policy server's, by [`HostCount::index`].
    pub server: [Option<u32>; HostCount::ALL.len()],
}

impl HostCounts {
    /// One count of one end (`server`: the policy server's).
    pub fn get(&self, server: bool, count: HostCount) -> Option<u32> {
        let end = if server { &self.server } else { &self.robot };
        end.get(count.index()).copied().flatten()
    }

    /// Its place, to fill.
    pub fn slot(&mut self, server: bool, count: HostCount) -> &mut Option<u32> {
        let end = if server {
            &mut self.server
        } else {
            &mut self.robot
        };
        &mut end[count.index()]
    }
}

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

impl ClockBasis {
    /// Every basis, in the order of the schema's `CLOCK_VALUES`.
    pub const ALL: [ClockBasis; 4] = [
        ClockBasis::Estimate,
        ClockBasis::Trusted,
        ClockBasis::None,
        ClockBasis::Degraded,
    ];

    /// The record's `clock` value (`"estimate"`, …): one of the schema's
    /// `CLOCK_VALUES`, so exporters need no list of their own.
    pub fn as_str(self) -> &'static str {
        stagetrace_schema::CLOCK_VALUES[self as usize]
    }
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

/// One hop of a relayed call on the call's timeline: its request's way
/// (the node before sends → this hop's node has the whole request) and its
/// reply's way back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HopTime {
    /// The request on this hop (the record's `hops[i].up_ms`).
    pub up: Option<SpanTime>,
    /// The reply on this hop (`hops[i].down_ms`).
    pub down: Option<SpanTime>,
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
    /// An async server's chunk ready → its reply sent, after `infer`.
    pub poll_wait: Option<SpanTime>,
    /// Synthesized downlink: server send → transport end (clock-corrected).
    pub downlink: Option<SpanTime>,
    /// The response's first byte, ns after the call's start, when the
    /// transport stamped it (inside the transport span).
    pub response_first_byte_ns: Option<u64>,
    /// The `dispatch` span.
    pub dispatch: Option<SpanTime>,
    /// Id of the client `transport` span: the parent id sent in `traceparent`.
    /// Exporters give the exported `transport` span this id, so the server's
    /// spans (parented through `traceparent`) join under it.
    pub transport_span_id: Option<[u8; 8]>,
    /// Id of the `call` span, when the layer assigned one (exporters make one up otherwise).
    pub call_span_id: Option<[u8; 8]>,
    /// Id of the (first) `dispatch` span: the parent id sent to a remote
    /// executor. Exporters give the exported `dispatch` span this id, so the
    /// executor's spans join under it.
    pub dispatch_span_id: Option<[u8; 8]>,
    /// Through relays: where each hop's request and reply were on the
    /// wire, index `i` as the record's `hops[i]` (hop `i` ends at relay
    /// `i`, the last one at the policy server), each placed with that
    /// hop's own clock offset. Empty (all `None`) for a direct call.
    pub hops: [HopTime; stagetrace_schema::MAX_HOPS_READ],
    /// The call's trace id and the `call` / `transport` span ids were taken
    /// from another tracing layer (e.g. `tracing-opentelemetry`, see
    /// [`crate::context`]), which exports the call and its stage spans itself:
    /// an exporter adds only the synthesized spans under the transport span.
    pub shared_context: bool,
}

/// Every duration figure of one call, integer nanoseconds indexed by
/// [`Figure`]. `None` is a figure that does not apply (absent from the JSON
/// record, never 0 or null).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Figures([Option<i64>; FIGURE_COUNT]);

// By hand: arrays of more than 32 have no derived `Default`.
impl Default for Figures {
    fn default() -> Self {
        Figures([None; FIGURE_COUNT])
    }
}

impl Figures {
    /// The figure in nanoseconds, when it applies.
    pub fn get(&self, f: Figure) -> Option<i64> {
        self.0[f.index()]
    }

    /// Sets (or clears, with `None`) a figure, in nanoseconds.
    pub fn set(&mut self, f: Figure, ns: Option<i64>) {
        self.0[f.index()] = ns;
    }

    /// The figures that apply, in display order.
    pub fn iter(&self) -> impl Iterator<Item = (Figure, i64)> + '_ {
        Figure::ALL
            .into_iter()
            .filter_map(|f| self.get(f).map(|ns| (f, ns)))
    }
}

impl FromIterator<(Figure, i64)> for Figures {
    /// Figures from `(figure, ns)` pairs; a later pair wins.
    fn from_iter<I: IntoIterator<Item = (Figure, i64)>>(pairs: I) -> Self {
        let mut out = Figures::default();
        for (f, ns) in pairs {
            out.set(f, Some(ns));
        }
        out
    }
}

/// One call: the public record (one JSON object per line of `records-*.jsonl`).
///
/// Inside the process every duration is integer nanoseconds ([`Figures`],
/// read with [`CallRecord::get`]); the JSON record writes each figure in the
/// unit of its name (`*_ms`: milliseconds with microsecond resolution,
/// `observer_us`: microseconds), as the schema table says
/// ([`stagetrace_schema::FIELDS`], `docs/record.schema.json`). A field that
/// does not apply is `None` and absent from the JSON, never 0 or null.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallRecord {
    /// Per process, in call order.
    pub seq: u64,
    /// Wall time of the call's start, nanoseconds since the Unix epoch
    /// (written as `ts_unix_ms`).
    pub ts_unix_ns: u64,
    /// Request kind, `"call"` when the app gives none.
    pub kind: String,
    /// 32 lowercase hex digits, the id sent in `traceparent`.
    pub trace_id: Option<String>,
    /// Every duration figure (stages, derived, clock, observer, lateness).
    pub figures: Figures,
    /// What the split rests on.
    pub clock: Option<ClockBasis>,
    /// `Some(true)` on the call that confirmed a step of the server's clock
    /// (the offset estimate started afresh there), absent otherwise.
    pub clock_step: Option<bool>,
    /// True when the call ended after its tick's deadline.
    pub deadline_miss: Option<bool>,
    /// `Some(true)` for warm-up calls, absent otherwise.
    pub warmup: Option<bool>,
    /// `Some(true)` when the call did not complete.
    pub failed: Option<bool>,
    /// A short reason, with `failed`.
    pub error: Option<String>,
    /// Hex digest of the returned action, for consistency checks.
    pub output_digest: Option<String>,
    /// How many requests the server's batch held (this one included), when
    /// the server batches and says so.
    pub batch_size: Option<u32>,
    /// `hit` / `miss` of the server's result cache, when it has one and says so.
    pub cache: Option<CacheOutcome>,
    /// Action chunks of this call dropped as too old to execute (at least 1;
    /// absent when none was).
    pub stale_dropped: Option<u32>,
    /// Control ticks the robot ran without an action before this call's
    /// chunk arrived (async inference; absent when it was not told).
    pub dry_ticks: Option<u32>,
    /// Per-hop figures when the call went through relays (client → first
    /// relay, …, last relay → policy server; at most
    /// [`MAX_HOPS_READ`](stagetrace_schema::MAX_HOPS_READ)); empty, and
    /// absent from the JSON, without a relay.
    pub hops: Vec<crate::hop_record::HopFigures>,
    /// What the hosts did to the call, counted, per end (`docs/host.md`).
    pub host_counts: HostCounts,
    /// Where each span sat; for exporters, not written to the JSON record.
    pub timeline: Timeline,
}

impl CallRecord {
    /// A figure in nanoseconds, when it applies.
    pub fn get(&self, f: Figure) -> Option<i64> {
        self.figures.get(f)
    }

    /// A figure in milliseconds (exact, not rounded), for display and tests.
    pub fn ms(&self, f: Figure) -> Option<f64> {
        self.get(f).map(ns_to_ms)
    }

    /// Sets a figure, in nanoseconds.
    pub fn set(&mut self, f: Figure, ns: i64) {
        self.figures.set(f, Some(ns));
    }

    /// The whole call in nanoseconds (`e2e`, present in every record).
    pub fn e2e_ns(&self) -> i64 {
        self.get(Figure::E2e).unwrap_or(0)
    }

    /// Wall time of the call's start in milliseconds since the Unix epoch.
    pub fn ts_unix_ms(&self) -> f64 {
        self.ts_unix_ns as f64 / 1e6
    }

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

/// Wall time in ns as the record's `ts_unix_ms`: milliseconds with
/// microsecond resolution (integer rounding first, so no float noise).
fn unix_ns_to_ms(ns: u64) -> f64 {
    (ns.saturating_add(500) / 1000) as f64 / 1000.0
}

impl Serialize for CallRecord {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Written in the schema's field order; a field that does not apply is absent.
        let mut map = s.serialize_map(None)?;
        for info in &FIELDS {
            let name = info.name;
            match info.field {
                Field::Seq => map.serialize_entry(name, &self.seq)?,
                Field::TsUnix => map.serialize_entry(name, &unix_ns_to_ms(self.ts_unix_ns))?,
                Field::Kind => map.serialize_entry(name, &self.kind)?,
                Field::TraceId => entry(&mut map, name, &self.trace_id)?,
                Field::Figure(f) => match self.get(f) {
                    Some(ns) => map.serialize_entry(name, &f.to_unit(ns))?,
                    None if f.is_required() => map.serialize_entry(name, &0.0)?,
                    None => {}
                },
                Field::Clock => entry(&mut map, name, &self.clock)?,
                Field::DeadlineMiss => entry(&mut map, name, &self.deadline_miss)?,
                Field::Warmup => entry(&mut map, name, &self.warmup)?,
                Field::ClockStep => entry(&mut map, name, &self.clock_step)?,
                Field::Failed => entry(&mut map, name, &self.failed)?,
                Field::Error => entry(&mut map, name, &self.error)?,
                Field::OutputDigest => entry(&mut map, name, &self.output_digest)?,
                Field::BatchSize => entry(&mut map, name, &self.batch_size)?,
                Field::Cache => entry(&mut map, name, &self.cache)?,
                Field::StaleDropped => entry(&mut map, name, &self.stale_dropped)?,
                Field::DryTicks => entry(&mut map, name, &self.dry_ticks)?,
                Field::Hops if self.hops.is_empty() => {}
                Field::Hops => map.serialize_entry(name, &self.hops)?,
                Field::HostCount { server, count } => {
                    entry(&mut map, name, &self.host_counts.get(server, count))?
                }
            }
        }
        map.end()
    }
}

fn entry<M: SerializeMap, T: Serialize>(
    map: &mut M,
    name: &'static str,
    v: &Option<T>,
) -> Result<(), M::Error> {
    match v {
        Some(v) => map.serialize_entry(name, v),
        None => Ok(()),
    }
}

impl<'de> Deserialize<'de> for CallRecord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RecordVisitor)
    }
}

struct RecordVisitor;

impl<'de> Visitor<'de> for RecordVisitor {
    type Value = CallRecord;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a stagetrace call record (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CallRecord, A::Error> {
        use serde::de::Error;
        let mut rec = CallRecord::default();
        let (mut seen_seq, mut seen_ts, mut seen_kind, mut seen_e2e) = (false, false, false, false);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let Some(field) = Field::from_name(&key) else {
                // New fields may be added to the format: skip what we do not know.
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            match field {
                Field::Seq => {
                    rec.seq = map.next_value()?;
                    seen_seq = true;
                }
                Field::TsUnix => {
                    let ms: f64 = map.next_value()?;
                    let ns = stagetrace_schema::ms_to_ns(ms)
                        .filter(|ns| *ns >= 0)
                        .ok_or_else(|| A::Error::custom("ts_unix_ms out of range"))?;
                    rec.ts_unix_ns = ns as u64;
                    seen_ts = true;
                }
                Field::Kind => {
                    rec.kind = map.next_value()?;
                    seen_kind = true;
                }
                Field::TraceId => rec.trace_id = map.next_value()?,
                Field::Figure(f) => {
                    let v: Option<f64> = map.next_value()?;
                    if let Some(v) = v {
                        let ns = f.from_unit(v).ok_or_else(|| {
                            A::Error::custom(format_args!("{} out of range", f.field()))
                        })?;
                        rec.set(f, ns);
                        seen_e2e |= f == Figure::E2e;
                    }
                }
                Field::Clock => rec.clock = map.next_value()?,
                Field::DeadlineMiss => rec.deadline_miss = map.next_value()?,
                Field::Warmup => rec.warmup = map.next_value()?,
                Field::ClockStep => rec.clock_step = map.next_value()?,
                Field::Failed => rec.failed = map.next_value()?,
                Field::Error => rec.error = map.next_value()?,
                Field::OutputDigest => rec.output_digest = map.next_value()?,
                Field::BatchSize => rec.batch_size = map.next_value()?,
                Field::Cache => rec.cache = map.next_value()?,
                Field::StaleDropped => rec.stale_dropped = map.next_value()?,
                Field::DryTicks => rec.dry_ticks = map.next_value()?,
                Field::Hops => rec.hops = map.next_value_seed(crate::hop_record::HopsSeed)?,
                Field::HostCount { server, count } => {
                    *rec.host_counts.slot(server, count) = map.next_value()?
                }
            }
        }
        for (seen, name) in [
            (seen_seq, "seq"),
            (seen_ts, "ts_unix_ms"),
            (seen_kind, "kind"),
            (seen_e2e, "e2e_ms"),
        ] {
            if !seen {
                return Err(A::Error::missing_field(name));
            }
        }
        Ok(rec)
    }
}

/// One request as a service on the call's path saw it — a policy server, a
/// relay (gateway) or a remote executor: what that service's exporter needs
/// to place its own spans in the caller's trace (the policy server's
/// `queue` / `infer` under the client's transport span, a relay's span under
/// its caller's and its forward span above the downstream's, an executor's
/// wait under the robot's `dispatch` span).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerRecord {
    /// The context the request carried (`None` when it carried none or a rejected one).
    pub trace_parent: Option<stagetrace_wire::TraceParent>,
    /// Request kind, `"call"` when the request names none.
    pub kind: String,
    /// The server's timing for this request (`recv_unix_ns` anchors it in wall time).
    /// A relay's `infer_ns` is its whole handler (the forward included); an
    /// executor's `queue_ns` is its wait until the chunk started.
    pub timing: stagetrace_wire::ServerTiming,
    /// `Some(reason)` when the request failed on the server.
    pub error: Option<String>,
    /// What kind of service answered (default: a policy server).
    pub role: ServiceRole,
    /// A relay's call to its downstream for this request, when it made one.
    pub forward: Option<Forwarded>,
}

/// Which service on a call's path made a [`ServerRecord`]: its exporter
/// names and places the spans by it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceRole {
    /// A policy server: `queue` and `infer`.
    #[default]
    PolicyServer,
    /// A relay (gateway) between the client and the policy server.
    Relay,
    /// A remote executor acknowledging action chunks: `exec_wait`.
    Executor,
}

/// A relay's downstream call for one request: when it forwarded and had the
/// reply (its monotonic clock, after the request was received) and the
/// parent id it sent downstream in `traceparent`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// The parent id sent downstream (the relay's transport span's id):
    /// the downstream's spans hang under it. `None` when the relay sent no
    /// `traceparent` (no stage layer installed in its process).
    pub span_id: Option<[u8; 8]>,
    /// Received → the request handed to the downstream client.
    pub forward_ns: u64,
    /// Received → the downstream's whole reply in.
    pub reply_ns: u64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn clock_names_are_the_serialized_values() {
        for basis in ClockBasis::ALL {
            let json = serde_json::to_string(&basis).unwrap();
            assert_eq!(json, format!("\"{}\"", basis.as_str()));
        }
        assert_eq!(ClockBasis::ALL.len(), stagetrace_schema::CLOCK_VALUES.len());
    }
}
