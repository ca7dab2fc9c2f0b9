//! A record given field by field, for readers of formats whose values are
//! already typed (a Parquet file's columns): no JSON text in between. Each
//! field goes where the record layout sends it and is checked as the JSON
//! parsers check it, so a Parquet file and the JSON lines of the same calls
//! load to the same columns.

use stagetrace_schema::{Field, FieldInfo, FIELDS};

use super::record::{
    cache_of, count_of, duplicate, layout, validate, Layout, RawRecord, Slot,
    ROBOT_VOLUNTARY_SWITCHES,
};

/// One field's value, typed as the record's table types it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cell<'a> {
    /// A count (`seq`, `batch_size`, a host count).
    Count(u64),
    /// A number: a figure in its record unit, or `ts_unix_ms`.
    Number(f64),
    /// Text (`kind`, `error`, `output_digest`, `cache`).
    Text(&'a str),
    /// A flag or a boolean (`warmup`, `deadline_miss`).
    Bool(bool),
}

/// One record, filled field by field ([`Row::set`], [`Row::hop`]), then
/// checked ([`Row::finish`]) and pushed into a [`FilePart`](super::FilePart).
#[derive(Debug, Default)]
pub struct Row {
    pub(super) raw: RawRecord,
    /// Bits of the fields given (a field given twice is refused).
    given: u128,
    /// Bits of the required fields given.
    seen: u128,
    /// The first value [`Row::set`] refused: the record is corrupt.
    refused: Option<String>,
}

impl Row {
    /// An empty record.
    pub fn new() -> Row {
        Row::default()
    }

    /// Back to an empty record, keeping its buffers.
    pub fn clear(&mut self) {
        self.raw.reset();
        self.given = 0;
        self.seen = 0;
        self.refused = None;
    }

    /// Sets the field at `field` (its index in the schema's `FIELDS`) to
    /// `value`; `Err` names the field when the value is beyond what it can
    /// hold, of another type than the field's, or given twice, and
    /// [`Row::finish`] reports the first such refusal (the record is
    /// corrupt, as a JSON line with that value is). Fields the analysis
    /// does not read are accepted and ignored.
    pub fn set(&mut self, field: usize, value: Cell<'_>) -> Result<(), String> {
        let result = self.try_set(field, value);
        if let Err(why) = &result {
            self.refused.get_or_insert_with(|| why.clone());
        }
        result
    }

    fn try_set(&mut self, field: usize, value: Cell<'_>) -> Result<(), String> {
        let Some(info) = FIELDS.get(field) else {
            return Ok(());
        };
        let bit = 1u128 << field;
        if self.given & bit != 0 {
            return Err(duplicate(info.name));
        }
        self.given |= bit;
        if info.required {
            self.seen |= bit;
        }
        let slot = layout().slots.get(field).copied().unwrap_or(Slot::Unknown);
        self.store(info, slot, value)
    }

    fn store(&mut self, info: &FieldInfo, slot: Slot, value: Cell<'_>) -> Result<(), String> {
        let out = &mut self.raw;
        let wrong = || format!("{} holds {value:?}, not a value of its type", info.name);
        match (slot, value) {
            (Slot::Figure { figure, per_ms }, Cell::Number(v)) => {
                out.set_figure(figure, per_ms, v)?
            }
            (Slot::Field(Field::Seq), Cell::Count(n)) => out.seq = n,
            (Slot::Field(Field::TsUnix), Cell::Number(v)) => out.ts = v,
            (Slot::Field(Field::Kind), Cell::Text(s)) => set_text(&mut out.kind, s),
            (Slot::Field(Field::Warmup), Cell::Bool(b)) => out.warmup = b,
            (Slot::Field(Field::Failed), Cell::Bool(b)) => out.failed = b,
            (Slot::Field(Field::DeadlineMiss), Cell::Bool(b)) => out.deadline_miss = Some(b),
            (Slot::Field(Field::Error), Cell::Text(s)) => set_text(&mut out.error, s),
            (Slot::Field(Field::OutputDigest), Cell::Text(s)) => {
                set_text(&mut out.digest, s);
                out.has_digest = true;
            }
            (Slot::Field(Field::BatchSize), Cell::Count(n)) => out.batch = count_of(Some(n)),
            (Slot::Field(Field::StaleDropped), Cell::Count(n)) => out.stale = count_of(Some(n)),
            (Slot::Field(Field::DryTicks), Cell::Count(n)) => out.dry = count_of(Some(n)),
            (Slot::Field(ROBOT_VOLUNTARY_SWITCHES), Cell::Count(n)) => {
                out.vol_switches = Some(count_of(Some(n)))
            }
            (Slot::Field(Field::Cache), Cell::Text(s)) => out.cache_hit = cache_of(s.as_bytes()),
            // Fields the analysis does not read (`trace_id`, `clock`, the
            // other host counts): any value, as the JSON parsers skip them.
            (Slot::Field(Field::Hops), _) => return Err(wrong()),
            (Slot::Field(f), _) if !analysis_reads(f) => {}
            (Slot::Unknown, _) => {}
            _ => return Err(wrong()),
        }
        Ok(())
    }

    /// Whether the analysis reads the field at `field` (its index in
    /// `FIELDS`): a reader may leave the others out (a Parquet reader does
    /// not decode their columns).
    pub fn is_read(field: usize) -> bool {
        FIELDS.get(field).is_some_and(|info| {
            matches!(info.field, Field::Figure(_)) || analysis_reads(info.field)
        })
    }

    /// The next entry of the record's `hops` starts (entries past what the
    /// analysis reads are counted and ignored, as in JSON).
    pub fn next_hop(&mut self) {
        self.raw.hops.next_hop();
    }

    /// `key` (`up_ms`, …) = `value` in the current `hops` entry, read
    /// loosely as in JSON: an unknown key or a value out of range is left out.
    pub fn hop(&mut self, key: &str, value: f64) {
        self.raw.hops.set(key.as_bytes(), value);
    }

    /// Checks the record whole: every required field given, every value in
    /// range; `Err` names what is wrong, as a JSON line's message would.
    pub fn finish(&self) -> Result<(), String> {
        if let Some(why) = &self.refused {
            return Err(why.clone());
        }
        let required = layout().required;
        if self.seen & required != required {
            if let Some(name) = Layout::missing(self.seen).next() {
                return Err(format!("missing field `{name}`"));
            }
        }
        validate(&self.raw)
    }
}

fn set_text(out: &mut String, s: &str) {
    out.clear();
    out.push_str(s);
}

/// Whether the analysis reads `field` (the others take any value).
fn analysis_reads(field: Field) -> bool {
    matches!(
        field,
        Field::Seq
            | Field::TsUnix
            | Field::Kind
            | Field::Warmup
            | Field::Failed
            | Field::DeadlineMiss
            | Field::Error
            | Field::OutputDigest
            | Field::BatchSize
            | Field::StaleDropped
            | Field::DryTicks
            | Field::Cache
            | Field::Hops
    ) || field == ROBOT_VOLUNTARY_SWITCHES
}
