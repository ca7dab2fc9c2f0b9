//! The general path: `serde_json` reads any valid JSON object (escapes,
//! `null`, exponents) and words the message for a corrupt line. Keys go
//! where the record layout says, as on the fast path.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::error::Category;
use serde_json::Value;
use stagetrace_schema::Field;

use super::record::{
    cache_of, count_of, duplicate, layout, validate, BadLine, Key, Layout, RawRecord, Slot,
    ROBOT_VOLUNTARY_SWITCHES,
};

/// Parses one line into `out`; `Err` carries serde's message (with the
/// line's column) or names the field that is wrong.
pub(super) fn parse(line: &[u8], out: &mut RawRecord) -> Result<(), BadLine> {
    let mut de = serde_json::Deserializer::from_slice(line);
    de.deserialize_map(RecordVisitor { out })
        .and_then(|()| de.end())
        .map_err(|e| BadLine {
            reason: e.to_string(),
            // `Data`: whole JSON, a wrong value (type, range, key missing or twice).
            broken_json: matches!(e.classify(), Category::Syntax | Category::Eof),
        })?;
    validate(out).map_err(BadLine::value)
}

struct RecordVisitor<'a> {
    out: &'a mut RawRecord,
}

impl<'de> Visitor<'de> for RecordVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a stagetrace record (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let out = self.out;
        let layout = layout();
        // Bits of the required fields seen, and of every known field read
        // (one given twice is an error, on the fast path too).
        let (mut seen, mut given) = (0u128, 0u128);
        while let Some(name) = map.next_key::<String>()? {
            let Some(key) = layout.key(name.as_bytes()) else {
                // Keys the format does not know are skipped, whatever their value.
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if given & key.bit != 0 {
                return Err(de::Error::custom(duplicate(key.name)));
            }
            given |= key.bit;
            read_value(out, &mut map, key)?;
            seen |= key.required_bit;
        }
        if let Some(name) = Layout::missing(seen).next() {
            return Err(de::Error::missing_field(name));
        }
        Ok(())
    }
}

/// Reads the value of one known key into `out`, as its slot says.
fn read_value<'de, A: MapAccess<'de>>(
    out: &mut RawRecord,
    map: &mut A,
    key: &Key,
) -> Result<(), A::Error> {
    match key.slot {
        Slot::Figure { figure, per_ms } => {
            // A required figure may not be null; an optional one
            // is then absent.
            let v = if key.required_bit != 0 {
                Some(map.next_value::<f64>()?)
            } else {
                map.next_value::<Option<f64>>()?
            };
            if let Some(v) = v {
                out.set_figure(figure, per_ms, v)
                    .map_err(de::Error::custom)?;
            }
        }
        Slot::Field(Field::Seq) => out.seq = map.next_value()?,
        Slot::Field(Field::TsUnix) => out.ts = map.next_value()?,
        Slot::Field(Field::Kind) => out.kind = map.next_value()?,
        Slot::Field(Field::Warmup) => out.warmup = map.next_value::<Option<bool>>()? == Some(true),
        Slot::Field(Field::Failed) => out.failed = map.next_value::<Option<bool>>()? == Some(true),
        Slot::Field(Field::DeadlineMiss) => out.deadline_miss = map.next_value()?,
        Slot::Field(Field::Error) => {
            out.error = map.next_value::<Option<String>>()?.unwrap_or_default()
        }
        Slot::Field(Field::OutputDigest) => {
            if let Some(d) = map.next_value::<Option<String>>()? {
                out.has_digest = true;
                out.digest = d;
            }
        }
        // Read loosely: a value of another type is ignored, not a corrupt line.
        Slot::Field(Field::BatchSize) => out.batch = count_of(map.next_value::<Value>()?.as_u64()),
        Slot::Field(Field::StaleDropped) => {
            out.stale = count_of(map.next_value::<Value>()?.as_u64())
        }
        Slot::Field(Field::DryTicks) => out.dry = count_of(map.next_value::<Value>()?.as_u64()),
        Slot::Field(ROBOT_VOLUNTARY_SWITCHES) => {
            out.vol_switches = map
                .next_value::<Value>()?
                .as_u64()
                .and_then(|n| u32::try_from(n).ok());
        }
        Slot::Field(Field::Cache) => {
            let v = map.next_value::<Value>()?;
            out.cache_hit = v.as_str().and_then(|s| cache_of(s.as_bytes()));
        }
        Slot::Field(Field::Hops) => out.hops.read_value(&map.next_value::<Value>()?),
        // Fields the analysis does not read (`trace_id`, `clock`,
        // `clock_step`, the other host counts): skipped whatever their value.
        Slot::Field(_) | Slot::Unknown => {
            map.next_value::<IgnoredAny>()?;
        }
    }
    Ok(())
}
