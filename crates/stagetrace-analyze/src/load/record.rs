//! One parsed record, and where each key of the record goes: the layout is
//! built once from the schema's field table (`stagetrace_schema::FIELDS`),
//! so a field added there is read with no change here.

use std::sync::LazyLock;

use stagetrace_schema::{Field, Figure, HostCount, FIELDS, FIGURE_COUNT};

use super::range;
use crate::figures;

/// One parsed record: only what the analysis uses.
#[derive(Debug)]
pub(crate) struct RawRecord {
    pub(crate) seq: u64,
    pub(crate) ts: f64,
    pub(crate) kind: String,
    /// Per figure (indexed by [`Figure::index`]), in ms; NaN when absent.
    pub(crate) values: [f64; FIGURE_COUNT],
    pub(crate) warmup: bool,
    pub(crate) failed: bool,
    pub(crate) deadline_miss: Option<bool>,
    pub(crate) error: String,
    pub(crate) has_digest: bool,
    pub(crate) digest: String,
    /// `batch_size`, 0 when absent.
    pub(crate) batch: u32,
    /// `cache`: `Some(true)` for `"hit"`, `Some(false)` for `"miss"`.
    pub(crate) cache_hit: Option<bool>,
    /// `stale_dropped`, 0 when absent.
    pub(crate) stale: u32,
    /// `dry_ticks`, 0 when absent.
    pub(crate) dry: u32,
    /// The robot's `voluntary_switches` (read loosely), when present.
    pub(crate) vol_switches: Option<u32>,
    /// `hops`, read loosely.
    pub(crate) hops: super::RawHops,
}

impl Default for RawRecord {
    fn default() -> Self {
        RawRecord {
            seq: 0,
            ts: 0.0,
            kind: String::new(),
            values: [f64::NAN; FIGURE_COUNT],
            warmup: false,
            failed: false,
            deadline_miss: None,
            error: String::new(),
            has_digest: false,
            digest: String::new(),
            batch: 0,
            cache_hit: None,
            stale: 0,
            dry: 0,
            vol_switches: None,
            hops: super::RawHops::default(),
        }
    }
}

impl RawRecord {
    /// Back to an empty record, keeping the strings' buffers.
    pub(crate) fn reset(&mut self) {
        self.seq = 0;
        self.ts = 0.0;
        self.kind.clear();
        self.values = [f64::NAN; FIGURE_COUNT];
        self.warmup = false;
        self.failed = false;
        self.deadline_miss = None;
        self.error.clear();
        self.has_digest = false;
        self.digest.clear();
        self.batch = 0;
        self.cache_hit = None;
        self.stale = 0;
        self.dry = 0;
        self.vol_switches = None;
        self.hops.reset();
    }

    /// Stores a figure's value given in its record unit, in ms; `Err`
    /// (naming the field) when it is beyond what such a figure can be.
    #[inline]
    pub(crate) fn set_figure(
        &mut self,
        figure: Figure,
        per_ms: f64,
        value: f64,
    ) -> Result<(), String> {
        range::check_figure(figure, per_ms, value)?;
        self.values[figure.index()] = value / per_ms;
        Ok(())
    }
}

/// What the reader does with one key of the record: a figure is stored
/// in ms, any other field is read as the schema's table names it (the
/// parsers read the ones the analysis uses and skip the rest, as they skip
/// unknown keys).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Slot {
    /// A figure; `per_ms` turns its record unit into ms. Every figure of
    /// the table is kept, the clock's too: the analysis picks what it
    /// tables (`figures::read`), tools read the rest.
    Figure {
        /// The figure.
        figure: Figure,
        /// Divisor from the record's unit to ms.
        per_ms: f64,
    },
    /// Any other field of the record.
    Field(Field),
    /// A key the record format does not know: skipped whatever its value.
    Unknown,
}

/// The robot's `voluntary_switches` (read loosely): a blocked control
/// thread's evidence. The analysis reads no other host count.
pub(crate) const ROBOT_VOLUNTARY_SWITCHES: Field = Field::HostCount {
    server: false,
    count: HostCount::VoluntarySwitches,
};

impl Slot {
    fn of(field: Field) -> Slot {
        match field {
            Field::Figure(figure) => Slot::Figure {
                figure,
                per_ms: figures::per_ms(figure.unit()),
            },
            other => Slot::Field(other),
        }
    }
}

/// One key of the record as the reader knows it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Key {
    /// JSON name.
    pub(crate) name: &'static str,
    /// The name's [`fingerprint`].
    fingerprint: (u64, u64),
    /// What to do with its value.
    pub(crate) slot: Slot,
    /// Its bit among the required fields (0 when optional).
    pub(crate) required_bit: u128,
    /// Its own bit (every field has one): a key given twice is found by it.
    pub(crate) bit: u128,
}

/// Longest name a [`fingerprint`] covers whole.
const FINGERPRINT_LEN: usize = 16;

/// A name's bytes as two words, so a lookup compares integers instead of
/// calling `memcmp` (the parser looks up every key of every line): the
/// first and last eight bytes, or four under eight bytes, or the bytes
/// themselves under four. With the length they cover every byte of a name
/// up to [`FINGERPRINT_LEN`] bytes.
#[inline]
fn fingerprint(name: &[u8]) -> (u64, u64) {
    if let (Some(a), Some(b)) = (name.first_chunk::<8>(), name.last_chunk::<8>()) {
        (u64::from_le_bytes(*a), u64::from_le_bytes(*b))
    } else if let (Some(a), Some(b)) = (name.first_chunk::<4>(), name.last_chunk::<4>()) {
        (
            u64::from(u32::from_le_bytes(*a)),
            u64::from(u32::from_le_bytes(*b)),
        )
    } else {
        let word = name
            .iter()
            .fold(0u64, |w, &byte| (w << 8) | u64::from(byte));
        (word, 0)
    }
}

/// Every key of the record, found by its bytes; built once from the field table.
#[derive(Debug)]
pub(crate) struct Layout {
    /// Keys by name length (a record's keys are short): a lookup compares
    /// only the few names of the same length.
    by_len: Vec<Vec<Key>>,
    /// Every required field's bit.
    pub(crate) required: u128,
    /// Per figure (by [`Figure::index`]): whether the analysis reads it.
    pub(crate) reads: [bool; FIGURE_COUNT],
    /// Per field (by its index in `FIELDS`): where its value goes.
    pub(crate) slots: Vec<Slot>,
}

impl Layout {
    fn new() -> Layout {
        let mut by_len: Vec<Vec<Key>> = Vec::new();
        let mut required = 0u128;
        let slots = FIELDS.iter().map(|info| Slot::of(info.field)).collect();
        for (i, info) in FIELDS.iter().enumerate() {
            let bit = 1u128 << i;
            let required_bit = if info.required { bit } else { 0 };
            required |= required_bit;
            let len = info.name.len();
            if by_len.len() <= len {
                by_len.resize_with(len + 1, Vec::new);
            }
            by_len[len].push(Key {
                name: info.name,
                fingerprint: fingerprint(info.name.as_bytes()),
                slot: Slot::of(info.field),
                required_bit,
                bit,
            });
        }
        let mut reads = [false; FIGURE_COUNT];
        for f in Figure::ALL {
            reads[f.index()] = true;
        }
        Layout {
            by_len,
            required,
            reads,
            slots,
        }
    }

    /// The key named `name`, when the record format has one.
    #[inline]
    pub(crate) fn key(&self, name: &[u8]) -> Option<&Key> {
        let same_len = self.by_len.get(name.len())?;
        if name.len() > FINGERPRINT_LEN {
            return same_len.iter().find(|k| k.name.as_bytes() == name);
        }
        let fp = fingerprint(name);
        same_len.iter().find(|k| k.fingerprint == fp)
    }

    /// The required fields a record lacks, given the bits of those it
    /// has, in the order of the field table.
    pub(crate) fn missing(seen: u128) -> impl Iterator<Item = &'static str> {
        FIELDS
            .iter()
            .enumerate()
            .filter(move |(i, info)| info.required && seen & (1u128 << i) == 0)
            .map(|(_, info)| info.name)
    }
}

// Every field's bit must fit the mask.
const _: () = assert!(FIELDS.len() <= u128::BITS as usize);

/// The record layout, built on first use.
pub(crate) fn layout() -> &'static Layout {
    static LAYOUT: LazyLock<Layout> = LazyLock::new(Layout::new);
    &LAYOUT
}

/// Why a line is not a record.
#[derive(Debug)]
pub(crate) struct BadLine {
    /// What is wrong, for the message.
    pub(crate) reason: String,
    /// The JSON itself is broken (it may end early, as a line the writer
    /// died in does), as opposed to whole JSON holding a wrong value: a
    /// whole last line with `1e300` in it is an error, not a cut-short line.
    pub(crate) broken_json: bool,
}

impl BadLine {
    /// A value that is wrong in otherwise whole JSON.
    pub(crate) fn value(reason: String) -> BadLine {
        BadLine {
            reason,
            broken_json: false,
        }
    }
}

/// What a line that gives one field of the record twice is told. Both
/// parsers refuse such a line: JSON leaves duplicates undefined, and a
/// reader that kept the first or the last would report a number the
/// writer may not have meant.
pub(crate) fn duplicate(name: &str) -> String {
    format!("duplicate key {name}")
}

/// A positive count from a record field; anything else (not an integer,
/// out of range) is not a count and is ignored, as unknown fields are.
pub(crate) fn count_of(v: Option<u64>) -> u32 {
    v.and_then(|n| u32::try_from(n).ok()).unwrap_or(0)
}

/// `Some(true)` for `"hit"`, `Some(false)` for `"miss"`, else `None`.
pub(crate) fn cache_of(s: &[u8]) -> Option<bool> {
    match s {
        b"hit" => Some(true),
        b"miss" => Some(false),
        _ => None,
    }
}

/// Checks what a parser filled in; `Err` names what is wrong.
pub(crate) fn validate(out: &RawRecord) -> Result<(), String> {
    range::check_unix_ms(Field::TsUnix.name(), out.ts)?;
    if out.kind.is_empty() {
        return Err(format!(
            "{} is empty (must name the request kind, \"call\" by default)",
            Field::Kind.name()
        ));
    }
    // Both parsers check each figure as they store it (`set_figure`);
    // this backstop keeps a value no `f32` column can hold finitely out
    // whatever path stored it. Absent figures are NaN.
    if let Some(i) = out
        .values
        .iter()
        .position(|v| !v.is_nan() && !(*v as f32).is_finite())
    {
        let name = Figure::ALL.get(i).map_or("a figure", |f| f.name());
        return Err(format!("{name} is not finite"));
    }
    Ok(())
}
