//! Span attributes, all under `stagetrace.`: a figure's key is its record
//! name from the schema table (`stagetrace.infer_ms`), in the record's unit.

use opentelemetry::{KeyValue, Value};
use stagetrace::{record::CallRecord, record::ClockBasis};
use stagetrace_schema::Figure;
use stagetrace_schema::{Field, FIELDS};

/// Attribute keys that are not record fields.
pub(crate) mod key {
    pub(crate) const STAGE: &str = "stagetrace.stage";
    pub(crate) const KIND: &str = "stagetrace.kind";
    pub(crate) const SEQ: &str = "stagetrace.seq";
    pub(crate) const CLOCK: &str = "stagetrace.clock";
    pub(crate) const SYNTHESIZED: &str = "stagetrace.synthesized";
    /// On the `ttfb` span of a server that reports no timing: what the
    /// black box holds ([`stagetrace_schema::BLACK_BOX_NOTE`]).
    pub(crate) const BLACK_BOX: &str = "stagetrace.black_box";
    /// Pre-processing part of the server's `infer` (server timing, not a record field).
    pub(crate) const PRE_MS: &str = "stagetrace.pre_ms";
    /// Post-processing part of the server's `infer`.
    pub(crate) const POST_MS: &str = "stagetrace.post_ms";
    /// On a hop's network span: the hop's index in the record's `hops`;
    /// `stagetrace.hop.<key>` its figures there (`up_ms`, `offset_ms`, …).
    pub(crate) const HOP: &str = "stagetrace.hop";
    /// On a service's own spans: which service on the path made them
    /// (`policy_server`, `relay`, `executor`).
    pub(crate) const ROLE: &str = "stagetrace.role";
}

/// `stagetrace.<record field name>` (`stagetrace.infer_ms`) = `ns` in the
/// figure's record unit.
pub(super) fn figure_attribute(f: Figure, ns: i64) -> KeyValue {
    KeyValue::new(record_key(f.field()), f.to_unit(ns))
}

/// `stagetrace.<name>` for a field of the record.
fn record_key(name: &str) -> String {
    format!("stagetrace.{name}")
}

/// [`figure_attribute`] of an unsigned duration (server timing).
pub(super) fn duration_attribute(f: Figure, ns: u64) -> KeyValue {
    figure_attribute(f, i64::try_from(ns).unwrap_or(i64::MAX))
}

/// A stage span's attributes: its stage, the call's kind and seq, and the
/// `extra` figures that the record has.
pub(super) fn stage_attributes(
    rec: &CallRecord,
    stage: &'static str,
    extra: &[Figure],
) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new(key::STAGE, stage),
        KeyValue::new(key::KIND, rec.kind.clone()),
        KeyValue::new(key::SEQ, seq_value(rec.seq)),
    ];
    for f in extra {
        if let Some(ns) = rec.get(*f) {
            a.push(figure_attribute(*f, ns));
        }
    }
    a
}

/// Every field of the public record the record has (bar the ones that are
/// the span's own identity) as `stagetrace.<field>` attributes, in the
/// record's units, read from the schema's field table: a field added to the
/// record is exported too.
pub(super) fn record_attributes(rec: &CallRecord, out: &mut Vec<KeyValue>) {
    for info in &FIELDS {
        let value: Value = match info.field {
            Field::Seq | Field::Kind | Field::TraceId => continue,
            Field::TsUnix => Value::F64(rec.ts_unix_ms()),
            Field::Figure(f) => match rec.get(f) {
                Some(ns) => Value::F64(f.to_unit(ns)),
                None => continue,
            },
            Field::Clock => match clock_name(rec) {
                Some(c) => Value::String(c.into()),
                None => continue,
            },
            Field::DeadlineMiss => match rec.deadline_miss {
                Some(b) => Value::Bool(b),
                None => continue,
            },
            Field::ClockStep => match rec.clock_step {
                Some(b) => Value::Bool(b),
                None => continue,
            },
            Field::Warmup => match rec.warmup {
                Some(b) => Value::Bool(b),
                None => continue,
            },
            Field::Failed => match rec.failed {
                Some(b) => Value::Bool(b),
                None => continue,
            },
            Field::Error => match &rec.error {
                Some(e) => Value::String(e.clone().into()),
                None => continue,
            },
            Field::OutputDigest => match &rec.output_digest {
                Some(d) => Value::String(d.clone().into()),
                None => continue,
            },
            Field::BatchSize => match rec.batch_size {
                Some(n) => Value::I64(i64::from(n)),
                None => continue,
            },
            Field::Cache => match rec.cache {
                Some(c) => Value::String(c.as_str().into()),
                None => continue,
            },
            Field::StaleDropped => match rec.stale_dropped {
                Some(n) => Value::I64(i64::from(n)),
                None => continue,
            },
            Field::DryTicks => match rec.dry_ticks {
                Some(n) => Value::I64(i64::from(n)),
                None => continue,
            },
            // The per-hop figures as the record writes them (a JSON array).
            Field::Hops if rec.hops.is_empty() => continue,
            Field::Hops => {
                Value::String(stagetrace::hop_record::HopFigures::list_to_json(&rec.hops).into())
            }
            Field::HostCount { server, count } => match rec.host_counts.get(server, count) {
                Some(n) => Value::I64(i64::from(n)),
                None => continue,
            },
        };
        out.push(KeyValue::new(record_key(info.name), value));
    }
}

/// The record's `clock` value.
pub(super) fn clock_name(rec: &CallRecord) -> Option<&'static str> {
    rec.clock.map(ClockBasis::as_str)
}

/// `seq` as an OpenTelemetry integer (saturating: OTLP has no u64).
pub(super) fn seq_value(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}
