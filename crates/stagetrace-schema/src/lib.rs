//! The figure table of the stagetrace record: every field of a call record,
//! its JSON name, unit, group, display order and the figures it is made of.
//!
//! stagetrace writes one JSON object per call (`records-*.jsonl`); other
//! tools read those files, so the names are a public format. This crate holds
//! that format once. The core's record serialization and rolling summaries,
//! the analysis (`stagetrace report`), the OTLP span attributes, the
//! experiment tables and verdicts all read this table; none keeps a list of
//! its own. Adding a figure means adding a row here, then the code that
//! measures it and its docs (`docs/architecture.md`, "Adding a stage").
//!
//! # Core concepts
//!
//! - A [`Figure`] is one per-call duration: the six stages of a call
//!   ([`Figure::STAGES`]), the figures derived from them (`net = uplink +
//!   downlink`, see [`Figure::parts`]), the clock figures and the observer's
//!   own cost. Inside a process a figure is integer nanoseconds; it becomes
//!   milliseconds (or microseconds, see [`Unit`]) only where a record is
//!   written or shown.
//! - A [`Field`] is one key of the JSON record, figures included, in the
//!   order a record is written ([`FIELDS`]).
//!
//! # Usage
//!
//! ```
//! use stagetrace_schema::{Figure, Group};
//!
//! assert_eq!(Figure::Net.field(), "net_ms");
//! assert_eq!(Figure::Net.parts(), &[Figure::Uplink, Figure::Downlink]);
//! assert_eq!(Figure::from_name("observer_us"), Some(Figure::Observer));
//! assert_eq!(Figure::Infer.group(), Group::ServerStage);
//! // 12.034 ms as written in a record
//! assert_eq!(Figure::Infer.to_unit(12_034_400), 12.034);
//! ```
//!
//! # Supported Rust versions
//!
//! Built and tested on stable Rust; the minimum supported version is 1.85.

use std::fmt;

/// The unit a figure is written in (the suffix of its JSON name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Milliseconds with microsecond resolution (`*_ms`).
    Millis,
    /// Microseconds with nanosecond resolution (`*_us`).
    Micros,
}

impl Unit {
    /// The JSON name's suffix: `"_ms"` or `"_us"`.
    pub const fn suffix(self) -> &'static str {
        match self {
            Unit::Millis => "_ms",
            Unit::Micros => "_us",
        }
    }

    /// Nanoseconds in one unit.
    pub const fn ns(self) -> i64 {
        match self {
            Unit::Millis => 1_000_000,
            Unit::Micros => 1_000,
        }
    }
}

/// What kind of figure a row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    /// A stage measured on the client (`capture`, `dispatch`).
    ClientStage,
    /// A stage that crosses the wire (`uplink`, `downlink`): its split needs
    /// the clock offset between the machines.
    LinkStage,
    /// A stage measured on the server (`queue`, `infer`).
    ServerStage,
    /// Derived from stages or spans (`roundtrip`, `server`, `net`, `e2e`, `gap`).
    Derived,
    /// What the uplink/downlink split rests on (`offset`, `split_err`).
    Clock,
    /// Figures about the call rather than a part of it: the observer's own
    /// cost and the lateness against the scheduled tick.
    Bookkeeping,
}

impl Group {
    /// One of the six canonical stages of a call.
    pub const fn is_stage(self) -> bool {
        matches!(
            self,
            Group::ClientStage | Group::LinkStage | Group::ServerStage
        )
    }
}

/// Which part of the system a figure belongs to, as reports group them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The robot client (`capture`, `dispatch`).
    Client,
    /// The wire between client and server.
    Transport,
    /// The policy server.
    Server,
    /// The whole call (`e2e`, `gap`, observer, lateness, clock).
    Call,
}

impl Side {
    /// `"client"`, `"transport"`, `"server"` or `"call"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Transport => "transport",
            Side::Server => "server",
            Side::Call => "call",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One per-call duration figure of the record. The variants are in display
/// order (the order of tables and reports); [`Figure::index`] is the position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Figure {
    /// Trigger → last frame in the local buffer.
    Capture,
    /// Send → server has the whole request (needs the clock offset).
    Uplink,
    /// Server receive → inference start.
    Queue,
    /// Inference start → usable output.
    Infer,
    /// Server send → client has the whole response (needs the clock offset).
    Downlink,
    /// Response decoded → executor starts the action.
    Dispatch,
    /// Client transport span, send → response.
    Roundtrip,
    /// Server receive → server send, on the server's monotonic clock.
    Server,
    /// `roundtrip − server`: uplink + downlink, exact without clock sync.
    Net,
    /// The whole call span.
    E2e,
    /// `e2e − Σ stages`: time inside the call that no stage explains.
    Gap,
    /// The observer's own time spent on the call.
    Observer,
    /// Lateness against the scheduled tick (negative: early), with a target rate.
    Late,
    /// Server − client clock offset used for the call.
    Offset,
    /// ± bound on the uplink/downlink split.
    SplitErr,
}

/// Number of [`Figure`]s.
pub const FIGURE_COUNT: usize = 15;

/// One row of the figure table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FigureInfo {
    /// Short name used in tables, summaries, `--json` and `--fail-if` (`"infer"`).
    pub name: &'static str,
    /// Name in the JSON record (`"infer_ms"`): `name` plus the unit's suffix.
    pub field: &'static str,
    /// Unit of the JSON record.
    pub unit: Unit,
    /// What kind of figure it is.
    pub group: Group,
    /// Which part of the system it belongs to.
    pub side: Side,
    /// The figures it is made of, when derived (a verdict names the finest
    /// figure that moved).
    pub parts: &'static [Figure],
    /// May be negative (`offset`, `late`); every other figure is clamped at 0.
    pub signed: bool,
    /// Present in every record (`e2e`).
    pub required: bool,
    /// One line for docs and generated help.
    pub doc: &'static str,
}

use Figure as F;

const fn row(
    name: &'static str,
    field: &'static str,
    unit: Unit,
    group: Group,
    side: Side,
    parts: &'static [Figure],
    doc: &'static str,
) -> FigureInfo {
    FigureInfo {
        name,
        field,
        unit,
        group,
        side,
        parts,
        signed: false,
        required: false,
        doc,
    }
}

const fn signed(mut info: FigureInfo) -> FigureInfo {
    info.signed = true;
    info
}

const fn required(mut info: FigureInfo) -> FigureInfo {
    info.required = true;
    info
}

/// The table, indexed by [`Figure::index`].
#[rustfmt::skip]
static TABLE: [FigureInfo; FIGURE_COUNT] = [
    row("capture", "capture_ms", Unit::Millis, Group::ClientStage, Side::Client, &[],
        "trigger → last frame in the local buffer"),
    row("uplink", "uplink_ms", Unit::Millis, Group::LinkStage, Side::Transport, &[],
        "send → server has the whole request (needs the clock offset)"),
    row("queue", "queue_ms", Unit::Millis, Group::ServerStage, Side::Server, &[],
        "server receive → inference start"),
    row("infer", "infer_ms", Unit::Millis, Group::ServerStage, Side::Server, &[],
        "inference start → usable output"),
    row("downlink", "downlink_ms", Unit::Millis, Group::LinkStage, Side::Transport, &[],
        "server send → client has the whole response (needs the clock offset)"),
    row("dispatch", "dispatch_ms", Unit::Millis, Group::ClientStage, Side::Client, &[],
        "response decoded → executor starts the action"),
    row("roundtrip", "roundtrip_ms", Unit::Millis, Group::Derived, Side::Transport,
        &[F::Uplink, F::Downlink, F::Server, F::Queue, F::Infer, F::Net],
        "client transport span, send → response"),
    row("server", "server_ms", Unit::Millis, Group::Derived, Side::Server,
        &[F::Queue, F::Infer],
        "server receive → server send, on the server's monotonic clock"),
    row("net", "net_ms", Unit::Millis, Group::Derived, Side::Transport,
        &[F::Uplink, F::Downlink],
        "roundtrip − server: uplink + downlink, exact without clock sync"),
    required(row("e2e", "e2e_ms", Unit::Millis, Group::Derived, Side::Call,
        &[F::Capture, F::Uplink, F::Queue, F::Infer, F::Downlink, F::Dispatch,
          F::Roundtrip, F::Server, F::Net, F::Gap],
        "the whole call span")),
    row("gap", "gap_ms", Unit::Millis, Group::Derived, Side::Call, &[F::Observer],
        "e2e − Σ stages: time inside the call that no stage explains"),
    row("observer", "observer_us", Unit::Micros, Group::Bookkeeping, Side::Call, &[],
        "the layer's own time spent on the call"),
    signed(row("late", "late_ms", Unit::Millis, Group::Bookkeeping, Side::Call, &[],
        "lateness against the scheduled tick, when a target rate is set")),
    signed(row("offset", "offset_ms", Unit::Millis, Group::Clock, Side::Call, &[],
        "server − client clock offset used for the call")),
    row("split_err", "split_err_ms", Unit::Millis, Group::Clock, Side::Call, &[],
        "± bound on the uplink/downlink split"),
];

impl Figure {
    /// Every figure, in display order.
    pub const ALL: [Figure; FIGURE_COUNT] = [
        F::Capture,
        F::Uplink,
        F::Queue,
        F::Infer,
        F::Downlink,
        F::Dispatch,
        F::Roundtrip,
        F::Server,
        F::Net,
        F::E2e,
        F::Gap,
        F::Observer,
        F::Late,
        F::Offset,
        F::SplitErr,
    ];

    /// The six canonical stages of a call, in call order.
    pub const STAGES: [Figure; 6] = [
        F::Capture,
        F::Uplink,
        F::Queue,
        F::Infer,
        F::Downlink,
        F::Dispatch,
    ];

    /// Position in [`Figure::ALL`] (and in any array indexed by figure).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The figure's row of the table.
    pub fn info(self) -> &'static FigureInfo {
        &TABLE[self.index()]
    }

    /// Short name (`"infer"`).
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// JSON record name (`"infer_ms"`).
    pub fn field(self) -> &'static str {
        self.info().field
    }

    /// Unit of the JSON record.
    pub fn unit(self) -> Unit {
        self.info().unit
    }

    /// What kind of figure it is.
    pub fn group(self) -> Group {
        self.info().group
    }

    /// Which part of the system it belongs to.
    pub fn side(self) -> Side {
        self.info().side
    }

    /// The figures it is made of, when derived.
    pub fn parts(self) -> &'static [Figure] {
        self.info().parts
    }

    /// May be negative.
    pub fn is_signed(self) -> bool {
        self.info().signed
    }

    /// Present in every record.
    pub fn is_required(self) -> bool {
        self.info().required
    }

    /// One of the six canonical stages.
    pub fn is_stage(self) -> bool {
        self.group().is_stage()
    }

    /// A span of the call's own time (a stage or a figure derived from
    /// stages: what rolling summaries keep), as opposed to the observer's
    /// cost, the lateness against the tick and the clock figures.
    pub fn is_call_time(self) -> bool {
        self.is_stage() || self.group() == Group::Derived
    }

    /// Looks a figure up by its short name or its record name (`"infer"`,
    /// `"infer_ms"`, `"observer_us"`).
    pub fn from_name(name: &str) -> Option<Figure> {
        Figure::ALL
            .into_iter()
            .find(|f| f.name() == name || f.field() == name)
            .or_else(|| {
                let base = name
                    .strip_suffix("_ms")
                    .or_else(|| name.strip_suffix("_us"))?;
                Figure::ALL.into_iter().find(|f| f.name() == base)
            })
    }

    /// Looks a figure up by its exact record name (`"infer_ms"`).
    pub fn from_field(field: &str) -> Option<Figure> {
        Figure::ALL.into_iter().find(|f| f.field() == field)
    }

    /// Nanoseconds in the record's unit, rounded to the unit's resolution
    /// (µs for a `_ms` figure, ns for a `_us` one): the value a record writes.
    pub fn to_unit(self, ns: i64) -> f64 {
        to_unit(ns, self.unit())
    }

    /// A value in the record's unit back to nanoseconds (rounded to the
    /// nearest); `None` when it is not finite or does not fit.
    pub fn from_unit(self, value: f64) -> Option<i64> {
        from_unit(value, self.unit())
    }
}

impl fmt::Display for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Nanoseconds as milliseconds, exactly (no rounding): for display.
pub fn ns_to_ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// Milliseconds to nanoseconds, rounded to the nearest; `None` when not
/// finite or out of range.
pub fn ms_to_ns(ms: f64) -> Option<i64> {
    from_unit(ms, Unit::Millis)
}

/// `ns` in `unit`, rounded to a thousandth of the unit. Integer rounding
/// first, then one division: the printed value has at most three decimals.
fn to_unit(ns: i64, unit: Unit) -> f64 {
    // thousandths of the unit: µs for ms, ns for µs
    let step = unit.ns() / 1000;
    let half = step / 2;
    let thousandths = if ns >= 0 {
        (ns + half) / step
    } else {
        -((-ns + half) / step)
    };
    thousandths as f64 / 1000.0
}

fn from_unit(value: f64, unit: Unit) -> Option<i64> {
    let ns = (value * unit.ns() as f64).round();
    // i64 covers ±292 years of nanoseconds; anything beyond is not a latency.
    if ns.is_finite() && ns.abs() < 9.0e18 {
        Some(ns as i64)
    } else {
        None
    }
}

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
pub const FIELD_COUNT: usize = 28;

/// Every key of the record, in the order a record is written.
pub static FIELDS: [FieldInfo; FIELD_COUNT] = [
    always(plain(Field::Seq, "seq", FieldType::Count)),
    always(plain(Field::TsUnix, "ts_unix_ms", FieldType::UnixMillis)),
    always(plain(Field::Kind, "kind", FieldType::Text)),
    plain(Field::TraceId, "trace_id", FieldType::TraceId),
    figure_field(F::Capture),
    figure_field(F::Uplink),
    figure_field(F::Queue),
    figure_field(F::Infer),
    figure_field(F::Downlink),
    figure_field(F::Dispatch),
    figure_field(F::Roundtrip),
    figure_field(F::Server),
    figure_field(F::Net),
    figure_field(F::E2e),
    figure_field(F::Gap),
    figure_field(F::Offset),
    figure_field(F::SplitErr),
    plain(Field::Clock, "clock", FieldType::Enum(CLOCK_VALUES)),
    figure_field(F::Late),
    plain(Field::DeadlineMiss, "deadline_miss", FieldType::Bool),
    plain(Field::Warmup, "warmup", FieldType::Flag),
    plain(Field::Failed, "failed", FieldType::Flag),
    plain(Field::Error, "error", FieldType::Text),
    figure_field(F::Observer),
    plain(Field::OutputDigest, "output_digest", FieldType::Hex),
    plain(Field::BatchSize, "batch_size", FieldType::Count),
    plain(Field::Cache, "cache", FieldType::Enum(CACHE_VALUES)),
    plain(Field::StaleDropped, "stale_dropped", FieldType::Count),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_sit_at_their_figures_index() {
        for (i, f) in Figure::ALL.into_iter().enumerate() {
            assert_eq!(f.index(), i, "{f:?}");
            assert_eq!(f.field(), format!("{}{}", f.name(), f.unit().suffix()));
        }
    }

    #[test]
    fn every_figure_is_a_field_once() {
        for f in Figure::ALL {
            let n = FIELDS
                .iter()
                .filter(|i| i.field == Field::Figure(f))
                .count();
            assert_eq!(n, 1, "{f:?}");
        }
        let mut names: Vec<_> = FIELDS.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FIELD_COUNT);
    }

    #[test]
    fn parts_are_finer_than_the_whole() {
        for f in Figure::ALL {
            for p in f.parts() {
                assert_ne!(*p, f);
            }
        }
        assert_eq!(Figure::Net.parts(), &[Figure::Uplink, Figure::Downlink]);
    }

    #[test]
    fn names_look_up_both_ways() {
        assert_eq!(Figure::from_name("infer"), Some(Figure::Infer));
        assert_eq!(Figure::from_name("infer_ms"), Some(Figure::Infer));
        assert_eq!(Figure::from_name("observer_us"), Some(Figure::Observer));
        assert_eq!(Figure::from_name("split_err_ms"), Some(Figure::SplitErr));
        assert_eq!(Figure::from_name("nope"), None);
        assert_eq!(Field::from_name("ts_unix_ms"), Some(Field::TsUnix));
        assert_eq!(Field::Clock.name(), "clock");
    }

    #[test]
    fn units_round_to_a_thousandth() {
        assert_eq!(Figure::Infer.to_unit(12_034_499), 12.034);
        assert_eq!(Figure::Infer.to_unit(12_034_500), 12.035);
        assert_eq!(Figure::Offset.to_unit(-250_000_600), -250.001);
        assert_eq!(Figure::Observer.to_unit(3_250), 3.25);
        assert_eq!(Figure::Infer.from_unit(12.345), Some(12_345_000));
        assert_eq!(Figure::Observer.from_unit(3.25), Some(3_250));
        assert_eq!(Figure::Infer.from_unit(1e300), None);
        assert_eq!(Figure::Infer.from_unit(f64::NAN), None);
    }
}
