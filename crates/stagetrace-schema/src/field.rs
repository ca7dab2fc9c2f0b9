//! The record's field table: every JSON key, in the order a record is written.

use crate::figure::Figure;
use crate::table::TABLE;
use Figure as F;

/// A field's value type in the JSON record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    /// Non-negative integer.
    Count,
    /// Wall time, float milliseconds since the Unix epoch.
    UnixMillis,
    /// Free text.
    Text,
    /// 32 lowercase hex digits.
    TraceId,
    /// Lowercase hex digits.
    Hex,
    /// A duration figure (see [`Figure`]).
    Figure(Figure),
    /// One of a fixed set of strings.
    Enum(&'static [&'static str]),
    /// `true` or `false`.
    Bool,
    /// Present (and `true`) or absent.
    Flag,
    /// The `hops` array: one object per hop of a call that went through
    /// relays (at most `MAX_HOPS_READ`), absent without a relay.
    Hops,
}

/// One key of the JSON record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// `seq`: per process, in call order.
    Seq,
    /// `ts_unix_ms`: wall time of the call's start.
    TsUnix,
    /// `kind`: request kind, `"call"` when the app gives none.
    Kind,
    /// `trace_id`: the id sent in `traceparent`.
    TraceId,
    /// A duration figure.
    Figure(Figure),
    /// `clock`: what the uplink/downlink split rests on.
    Clock,
    /// `clock_step`: this call confirmed a step of the server's clock.
    ClockStep,
    /// `deadline_miss`: the call ended after its tick's deadline.
    DeadlineMiss,
    /// `warmup`: a warm-up call, kept out of steady-state figures.
    Warmup,
    /// `failed`: the call did not complete.
    Failed,
    /// `error`: a short reason, with `failed`.
    Error,
    /// `output_digest`: hex digest of the returned action.
    OutputDigest,
    /// `batch_size`: requests in the server's batch, this one included.
    BatchSize,
    /// `cache`: `hit` / `miss` of the server's result cache.
    Cache,
    /// `stale_dropped`: action chunks of this call dropped as too old.
    StaleDropped,
    /// `dry_ticks`: control ticks the robot ran without an action before
    /// this call's chunk arrived (async inference).
    DryTicks,
    /// `hops`: per-hop figures of a call that went through relays.
    Hops,
    /// What a host did to the call, counted (`minor_faults`,
    /// `server_minor_faults`, …): on the policy server's end when `server`.
    HostCount {
        /// The server's end (else the robot's).
        server: bool,
        /// What is counted.
        count: HostCount,
    },
}

/// A count of what a host did to a call (`docs/host.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostCount {
    /// Times the kernel took the core away from the call's thread.
    InvoluntarySwitches,
    /// Page faults served from memory.
    MinorFaults,
    /// Page faults that waited for I/O.
    MajorFaults,
    /// Garbage collections that ran, all generations.
    GcCollections,
    /// Times the call's thread gave its core up to wait (`ru_nvcsw`: a lock,
    /// a queue, a blocking read or write).
    VoluntarySwitches,
}

impl HostCount {
    /// Every count, in record order.
    pub const ALL: [HostCount; 5] = [
        HostCount::InvoluntarySwitches,
        HostCount::MinorFaults,
        HostCount::MajorFaults,
        HostCount::GcCollections,
        HostCount::VoluntarySwitches,
    ];

    /// Position in [`HostCount::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

const fn count(server: bool, count: HostCount, name: &'static str) -> FieldInfo {
    plain(Field::HostCount { server, count }, name, FieldType::Count)
}

/// One row of the record's field table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// The field.
    pub field: Field,
    /// JSON name.
    pub name: &'static str,
    /// Value type.
    pub ty: FieldType,
    /// Present in every record.
    pub required: bool,
}

/// `clock` values.
pub const CLOCK_VALUES: &[&str] = &["estimate", "trusted", "none", "degraded"];
/// Most entries of the `hops` array: one hop per relay (at most 4) plus
/// the last one to the policy server.
pub const MAX_HOPS_READ: usize = 5;
/// The keys of one `hops` entry: ms figures (only `offset_ms` may be
/// negative), then `drift_ppm` and its ± bound `drift_err_ppm`.
pub const HOP_KEYS: [&str; 8] = [
    "up_ms",
    "down_ms",
    "net_ms",
    "relay_ms",
    "offset_ms",
    "err_ms",
    "drift_ppm",
    "drift_err_ppm",
];
/// `cache` values.
pub const CACHE_VALUES: &[&str] = &["hit", "miss"];

const fn plain(field: Field, name: &'static str, ty: FieldType) -> FieldInfo {
    FieldInfo {
        field,
        name,
        ty,
        required: false,
    }
}

const fn always(mut info: FieldInfo) -> FieldInfo {
    info.required = true;
    info
}

const fn figure_field(f: Figure) -> FieldInfo {
    let info = &TABLE[f.index()];
    FieldInfo {
        field: Field::Figure(f),
        name: info.field,
        ty: FieldType::Figure(f),
        required: info.required,
    }
}

/// Number of [`FIELDS`].
pub const FIELD_COUNT: usize = 71;

/// Every key of the record, in the order a record is written.
pub static FIELDS: [FieldInfo; FIELD_COUNT] = [
    always(plain(Field::Seq, "seq", FieldType::Count)),
    always(plain(Field::TsUnix, "ts_unix_ms", FieldType::UnixMillis)),
    always(plain(Field::Kind, "kind", FieldType::Text)),
    plain(Field::TraceId, "trace_id", FieldType::TraceId),
    figure_field(F::Capture),
    figure_field(F::Uplink),
    figure_field(F::Queue),
    figure_field(F::AcceptWait),
    figure_field(F::LoopWait),
    figure_field(F::Infer),
    figure_field(F::Pre),
    figure_field(F::Model),
    figure_field(F::Device),
    figure_field(F::Post),
    figure_field(F::Downlink),
    figure_field(F::Dispatch),
    figure_field(F::ExecTx),
    figure_field(F::ExecRelay),
    figure_field(F::ExecWait),
    figure_field(F::Roundtrip),
    figure_field(F::Ttfb),
    figure_field(F::Rx),
    figure_field(F::Server),
    figure_field(F::Net),
    figure_field(F::Relay),
    figure_field(F::E2e),
    figure_field(F::Gap),
    figure_field(F::ExecAck),
    figure_field(F::Offset),
    figure_field(F::SplitErr),
    figure_field(F::ExecOffset),
    figure_field(F::ExecErr),
    plain(Field::Clock, "clock", FieldType::Enum(CLOCK_VALUES)),
    plain(Field::ClockStep, "clock_step", FieldType::Flag),
    figure_field(F::Late),
    plain(Field::DeadlineMiss, "deadline_miss", FieldType::Bool),
    plain(Field::Warmup, "warmup", FieldType::Flag),
    plain(Field::Failed, "failed", FieldType::Flag),
    plain(Field::Error, "error", FieldType::Text),
    figure_field(F::Observer),
    figure_field(F::RunWait),
    figure_field(F::CpuStall),
    figure_field(F::Gc),
    figure_field(F::RxWait),
    figure_field(F::CaptureRunWait),
    figure_field(F::DispatchRunWait),
    figure_field(F::TxWait),
    figure_field(F::LogWrite),
    count(
        false,
        HostCount::InvoluntarySwitches,
        "involuntary_switches",
    ),
    count(false, HostCount::MinorFaults, "minor_faults"),
    count(false, HostCount::MajorFaults, "major_faults"),
    count(false, HostCount::GcCollections, "gc_collections"),
    count(false, HostCount::VoluntarySwitches, "voluntary_switches"),
    figure_field(F::ServerRunWait),
    figure_field(F::ServerCpuStall),
    figure_field(F::ServerGc),
    figure_field(F::ServerRxWait),
    figure_field(F::ServerTxWait),
    count(
        true,
        HostCount::InvoluntarySwitches,
        "server_involuntary_switches",
    ),
    count(true, HostCount::MinorFaults, "server_minor_faults"),
    count(true, HostCount::MajorFaults, "server_major_faults"),
    count(true, HostCount::GcCollections, "server_gc_collections"),
    count(
        true,
        HostCount::VoluntarySwitches,
        "server_voluntary_switches",
    ),
    plain(Field::OutputDigest, "output_digest", FieldType::Hex),
    plain(Field::BatchSize, "batch_size", FieldType::Count),
    plain(Field::Cache, "cache", FieldType::Enum(CACHE_VALUES)),
    plain(Field::StaleDropped, "stale_dropped", FieldType::Count),
    figure_field(F::PollWait),
    figure_field(F::Margin),
    plain(Field::DryTicks, "dry_ticks", FieldType::Count),
    plain(Field::Hops, "hops", FieldType::Hops),
];

impl Field {
    /// Looks a field up by its JSON name.
    pub fn from_name(name: &str) -> Option<Field> {
        FIELDS.iter().find(|f| f.name == name).map(|f| f.field)
    }

    /// The field's JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Field::Figure(f) => f.field(),
            other => FIELDS
                .iter()
                .find(|i| i.field == other)
                .map(|i| i.name)
                .unwrap_or(""),
        }
    }
}
