//! One record field's value as the JSON record writes it: the same unit,
//! the same rounding, the same absences, so a Parquet row reads back as the
//! JSON line of the same call.

use stagetrace::{hop_record::HopFigures, record::CallRecord};
use stagetrace_schema::{Field, FieldInfo, Figure};

/// One field of one record.
#[derive(Debug)]
pub(crate) enum Cell<'a> {
    Count(Option<u64>),
    Number(Option<f64>),
    Text(Option<&'a str>),
    Bool(Option<bool>),
    Hops(&'a [HopFigures]),
}

/// The value of `info` in `rec`, as the JSON record has it.
pub(crate) fn cell<'a>(rec: &'a CallRecord, info: &FieldInfo) -> Cell<'a> {
    match info.field {
        Field::Seq => Cell::Count(Some(rec.seq)),
        Field::TsUnix => Cell::Number(Some(unix_ns_to_ms(rec.ts_unix_ns))),
        Field::Kind => Cell::Text(Some(&rec.kind)),
        Field::TraceId => Cell::Text(rec.trace_id.as_deref()),
        Field::Figure(f) => Cell::Number(match rec.get(f) {
            Some(ns) => Some(f.to_unit(ns)),
            // The JSON record writes a missing required figure as 0.
            None if f.is_required() => Some(0.0),
            None => None,
        }),
        Field::Clock => Cell::Text(rec.clock.map(|c| c.as_str())),
        Field::ClockStep => Cell::Bool(rec.clock_step),
        Field::DeadlineMiss => Cell::Bool(rec.deadline_miss),
        Field::Warmup => Cell::Bool(rec.warmup),
        Field::Failed => Cell::Bool(rec.failed),
        Field::Error => Cell::Text(rec.error.as_deref()),
        Field::OutputDigest => Cell::Text(rec.output_digest.as_deref()),
        Field::BatchSize => Cell::Count(rec.batch_size.map(u64::from)),
        Field::Cache => Cell::Text(rec.cache.map(|c| c.as_str())),
        Field::StaleDropped => Cell::Count(rec.stale_dropped.map(u64::from)),
        Field::DryTicks => Cell::Count(rec.dry_ticks.map(u64::from)),
        Field::Hops => Cell::Hops(&rec.hops),
        Field::HostCount { server, count } => {
            Cell::Count(rec.host_counts.get(server, count).map(u64::from))
        }
    }
}

/// One hop's values in `HOP_KEYS` order: the ms figures as every `_ms`
/// figure is written, `drift_ppm` and its bound to three decimals.
pub(crate) fn hop_values(hop: &HopFigures) -> [Option<f64>; 8] {
    let ppm = |v: Option<f64>| {
        v.filter(|d| d.is_finite())
            .map(|d| (d * 1000.0).round() / 1000.0)
    };
    let ms = |v: Option<i64>| v.map(|ns| Figure::Net.to_unit(ns));
    [
        ms(hop.up_ns),
        ms(hop.down_ns),
        ms(hop.net_ns),
        ms(hop.relay_ns),
        ms(hop.offset_ns),
        ms(hop.err_ns),
        ppm(hop.drift_ppm),
        ppm(hop.drift_err_ppm),
    ]
}

/// `ts_unix_ms` as the record writes it: microsecond resolution, integer
/// rounding first.
fn unix_ns_to_ms(ns: u64) -> f64 {
    (ns.saturating_add(500) / 1000) as f64 / 1000.0
}
