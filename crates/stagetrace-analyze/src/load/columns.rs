//! A batch of calls given column by column (a Parquet row group's decoded
//! columns), pushed into the dataset's columns whole: no row is built,
//! each figure column is converted to ms and appended in one pass. The
//! batch is checked first as the row path checks each record; a batch
//! with anything the row path must word (a value out of range, a required
//! field missing, a column of another type) or read loosely (`hops`) is
//! refused whole, pushing nothing, and its reader gives it row by row.

use stagetrace_schema::{Field, FIELDS};

use super::range;
use super::record::{cache_of, count_of, layout, Slot, ROBOT_VOLUNTARY_SWITCHES};
use super::RawHops;
use super::{FilePart, Mitigated, F_DEADLINE_MISS, F_FAILED, F_HAS_DEADLINE, F_WARMUP};

/// Which rows of a column hold a value, in Arrow's layout: bit
/// `offset + i` of `bits` (least significant bit first) is set for a row
/// `i` that holds one.
#[derive(Clone, Copy, Debug)]
pub struct Valid<'a> {
    bits: Option<(&'a [u8], usize)>,
}

impl<'a> Valid<'a> {
    /// Every row holds a value.
    pub fn all() -> Valid<'a> {
        Valid { bits: None }
    }

    /// The rows whose bit is set (bit `offset + i` for row `i`).
    pub fn bitmap(bits: &'a [u8], offset: usize) -> Valid<'a> {
        Valid {
            bits: Some((bits, offset)),
        }
    }

    /// Whether row `i` holds a value (a row past the bitmap does not).
    #[inline]
    pub fn get(&self, i: usize) -> bool {
        match self.bits {
            None => true,
            Some((bits, offset)) => bit(bits, offset + i),
        }
    }
}

#[inline]
fn bit(bits: &[u8], j: usize) -> bool {
    bits.get(j >> 3).is_some_and(|b| (b >> (j & 7)) & 1 == 1)
}

/// One column of a batch, typed as the record's table types the field.
#[derive(Clone, Copy, Debug)]
pub enum Column<'a> {
    /// Counts (`seq`, `batch_size`, a host count).
    Counts(&'a [u64], Valid<'a>),
    /// Numbers: a figure in its record unit, or `ts_unix_ms`.
    Numbers(&'a [f64], Valid<'a>),
    /// Dictionary-coded text (`kind`, `error`, `cache`): row `i` holds
    /// `dict[keys[i]]`; a key out of range holds nothing.
    Labels(&'a [i32], Valid<'a>, &'a [&'a str]),
    /// Flags: bit `offset + i` of the bytes is row `i`'s value.
    Bools(&'a [u8], usize, Valid<'a>),
    /// Text: row `i` is `data[offsets[i]..offsets[i + 1]]` (`output_digest`).
    Texts(&'a [i32], &'a [u8], Valid<'a>),
    /// `hops`: row `i`'s entries are `offsets[i]..offsets[i + 1]` of the
    /// entry columns.
    Hops(&'a [i32], Valid<'a>, &'a [HopColumn<'a>]),
}

/// One key of the `hops` entries (`up_ms`, …): entry `e`'s value is
/// `values[e]` where `valid` says it has one.
#[derive(Clone, Copy, Debug)]
pub struct HopColumn<'a> {
    /// The entry's key.
    pub key: &'a str,
    /// Its value per entry.
    pub values: &'a [f64],
    /// Which entries have one.
    pub valid: Valid<'a>,
}

/// The columns of a batch of `rows` calls.
#[derive(Debug)]
pub struct ColumnBatch<'a> {
    rows: usize,
    /// By the field's index in `FIELDS`.
    columns: Vec<Option<Column<'a>>>,
}

impl<'a> ColumnBatch<'a> {
    /// A batch of `rows` calls with no column yet.
    pub fn new(rows: usize) -> ColumnBatch<'a> {
        ColumnBatch {
            rows,
            columns: vec![None; FIELDS.len()],
        }
    }

    /// The column of the field at `field` (its index in `FIELDS`).
    pub fn add(&mut self, field: usize, column: Column<'a>) {
        if let Some(slot) = self.columns.get_mut(field) {
            *slot = Some(column);
        }
    }

    fn get(&self, field: Field) -> Option<Column<'a>> {
        let i = FIELDS.iter().position(|f| f.field == field)?;
        self.columns.get(i).copied().flatten()
    }
}

impl<'a> Column<'a> {
    fn valid(&self) -> Valid<'a> {
        match *self {
            Column::Counts(_, v)
            | Column::Numbers(_, v)
            | Column::Labels(_, v, _)
            | Column::Bools(_, _, v)
            | Column::Texts(_, _, v)
            | Column::Hops(_, v, _) => v,
        }
    }

    /// Row `i`'s text, dictionary-coded or plain.
    fn label(&self, i: usize) -> Option<&'a str> {
        if let Column::Texts(..) = self {
            return self.text(i);
        }
        let Column::Labels(keys, valid, dict) = *self else {
            return None;
        };
        if !valid.get(i) {
            return None;
        }
        let k = usize::try_from(*keys.get(i)?).ok()?;
        dict.get(k).copied()
    }

    fn flag(&self, i: usize) -> Option<bool> {
        let Column::Bools(bits, offset, valid) = *self else {
            return None;
        };
        valid.get(i).then(|| bit(bits, offset + i))
    }

    fn count(&self, i: usize) -> Option<u64> {
        let Column::Counts(values, valid) = *self else {
            return None;
        };
        valid.get(i).then(|| values.get(i).copied()).flatten()
    }

    fn text(&self, i: usize) -> Option<&'a str> {
        let Column::Texts(offsets, data, valid) = *self else {
            return None;
        };
        if !valid.get(i) {
            return None;
        }
        let start = usize::try_from(*offsets.get(i)?).ok()?;
        let end = usize::try_from(*offsets.get(i + 1)?).ok()?;
        std::str::from_utf8(data.get(start..end)?).ok()
    }

    /// Whether any of the first `rows` rows holds a value.
    fn any(&self, rows: usize) -> bool {
        let valid = self.valid();
        (0..rows).any(|i| valid.get(i))
    }
}

impl FilePart {
    /// Pushes every row of `batch` into the part's columns; false, pushing
    /// nothing, when a row needs the row-by-row path ([`Row`](super::Row)):
    /// a required field missing, a value out of range, a column of another
    /// type than its field's, or `hops`.
    pub fn push_columns(&mut self, batch: &ColumnBatch<'_>) -> bool {
        if !self.fits(batch) {
            return false;
        }
        let rows = batch.rows;
        let base = self.ds.len();
        let (seq, ts, kind) = match (
            batch.get(Field::Seq),
            batch.get(Field::TsUnix),
            batch.get(Field::Kind),
        ) {
            (Some(Column::Counts(s, _)), Some(Column::Numbers(t, _)), Some(k)) => (s, t, k),
            _ => return false,
        };
        self.ds.seq.extend_from_slice(&seq[..rows]);
        self.ds.ts.extend_from_slice(&ts[..rows]);
        for i in 0..rows {
            let name = kind.label(i).unwrap_or("call");
            let k = self.ds.intern_kind(name);
            self.ds.kind.push(k);
        }
        self.push_figures(batch, base);
        self.push_flags(batch, base);
        self.push_sparse(batch, base);
        self.push_hops(batch, base);
        self.ds.notes.lines += rows as u64;
        self.rows += rows as u64;
        self.whole_batches += 1;
        true
    }

    /// Whether the batch can go whole: every check the row path makes
    /// ([`super::Row::finish`]) holds for every row.
    fn fits(&self, batch: &ColumnBatch<'_>) -> bool {
        let rows = batch.rows;
        for (i, info) in FIELDS.iter().enumerate() {
            let col = batch.columns.get(i).copied().flatten();
            let ok = match (layout().slots.get(i), col) {
                (_, None) => !info.required,
                (_, Some(c)) if info.required && !(0..rows).all(|r| c.valid().get(r)) => false,
                (Some(Slot::Figure { figure, per_ms }), Some(Column::Numbers(v, valid))) => {
                    v.len() >= rows
                        && (0..rows).all(|r| {
                            !valid.get(r)
                                || (range::check_figure(*figure, *per_ms, v[r]).is_ok()
                                    && ((v[r] / per_ms) as f32).is_finite())
                        })
                }
                // A figure in a column of another type: the row path words it.
                (Some(Slot::Figure { .. }), Some(_)) => false,
                (Some(Slot::Field(Field::Seq)), Some(Column::Counts(v, _))) => v.len() >= rows,
                (Some(Slot::Field(Field::TsUnix)), Some(Column::Numbers(v, _))) => {
                    v.len() >= rows
                        && v[..rows]
                            .iter()
                            .all(|t| range::check_unix_ms(info.name, *t).is_ok())
                }
                (
                    Some(Slot::Field(Field::Kind)),
                    Some(c @ (Column::Labels(..) | Column::Texts(..))),
                ) => (0..rows).all(|r| c.label(r).is_some_and(|k| !k.is_empty())),
                (Some(Slot::Field(Field::Hops)), Some(Column::Hops(offsets, ..))) => {
                    offsets.len() > rows
                }
                (Some(Slot::Field(f)), Some(c)) => fits_sparse(*f, c, rows),
                (_, Some(_)) => true,
            };
            if !ok {
                return false;
            }
        }
        true
    }

    fn push_figures(&mut self, batch: &ColumnBatch<'_>, base: usize) {
        let rows = batch.rows;
        let reads = &layout().reads;
        // The figures the analysis leaves out keep empty columns, as on the row path.
        let mut given = reads.map(|read| !read);
        for (i, slot) in layout().slots.iter().enumerate() {
            let (Slot::Figure { figure, per_ms }, Some(Column::Numbers(v, valid))) =
                (slot, batch.columns.get(i).copied().flatten())
            else {
                continue;
            };
            if given[figure.index()] {
                continue;
            }
            given[figure.index()] = true;
            let col = &mut self.ds.columns[figure.index()];
            if col.is_empty() && !(0..rows).any(|r| valid.get(r)) {
                // No call has it yet: the column stays empty.
                continue;
            }
            col.resize(base, f32::NAN);
            col.extend((0..rows).map(|r| {
                if valid.get(r) {
                    (v[r] / per_ms) as f32
                } else {
                    f32::NAN
                }
            }));
        }
        for (f, col) in self.ds.columns.iter_mut().enumerate() {
            if !given[f] && !col.is_empty() {
                col.resize(base + rows, f32::NAN);
            }
        }
    }

    fn push_flags(&mut self, batch: &ColumnBatch<'_>, base: usize) {
        let warmup = batch.get(Field::Warmup);
        let failed = batch.get(Field::Failed);
        let deadline = batch.get(Field::DeadlineMiss);
        let error = batch.get(Field::Error);
        for i in 0..batch.rows {
            let mut flags = 0;
            if warmup.and_then(|c| c.flag(i)) == Some(true) {
                flags |= F_WARMUP;
            }
            if failed.and_then(|c| c.flag(i)) == Some(true) {
                flags |= F_FAILED;
                let reason = error.and_then(|c| c.label(i)).unwrap_or("");
                self.count_error(reason);
            }
            if let Some(miss) = deadline.and_then(|c| c.flag(i)) {
                flags |= F_HAS_DEADLINE;
                if miss {
                    flags |= F_DEADLINE_MISS;
                }
            }
            self.ds.flags.push(flags);
        }
        debug_assert_eq!(self.ds.flags.len(), base + batch.rows);
    }

    /// Digests, mitigations and the robot's voluntary switches: only the
    /// rows that have them are visited.
    fn push_sparse(&mut self, batch: &ColumnBatch<'_>, base: usize) {
        let rows = batch.rows;
        let call = |i: usize| u32::try_from(base + i).unwrap_or(u32::MAX);
        if self.opts.keep_digests {
            if let Some(c) = batch.get(Field::OutputDigest) {
                for i in 0..rows {
                    if let Some(d) = c.label(i) {
                        self.ds.digests.push((call(i), d.into()));
                    }
                }
            }
        }
        let columns = [
            batch.get(Field::BatchSize),
            batch.get(Field::Cache),
            batch.get(Field::StaleDropped),
            batch.get(Field::DryTicks),
        ];
        if columns.iter().flatten().any(|c| c.any(rows)) {
            let [b, cache, stale, dry] = columns;
            let count = |c: Option<Column<'_>>, i| count_of(c.and_then(|c| c.count(i)));
            for i in 0..rows {
                let m = Mitigated {
                    call: call(i),
                    batch: count(b, i),
                    cache_hit: cache
                        .and_then(|c| c.label(i))
                        .and_then(|s| cache_of(s.as_bytes())),
                    stale: count(stale, i),
                    dry: count(dry, i),
                };
                if m.batch > 0 || m.cache_hit.is_some() || m.stale > 0 || m.dry > 0 {
                    self.ds.mitigated.push(m);
                }
            }
        }
        let vol = batch.get(ROBOT_VOLUNTARY_SWITCHES);
        if vol.is_some_and(|c| c.any(rows)) || !self.ds.vol_switches.is_empty() {
            self.ds.vol_switches.resize(base, f32::NAN);
            for i in 0..rows {
                let n = vol.and_then(|c| c.count(i));
                let v = n.map_or(f32::NAN, |n| count_of(Some(n)) as f32);
                self.ds.vol_switches.push(v);
            }
        }
    }
}

impl FilePart {
    /// The calls' `hops`, read loosely as on the row path: each row with
    /// entries (or every row, once any call had some).
    fn push_hops(&mut self, batch: &ColumnBatch<'_>, base: usize) {
        let hops = match batch.get(Field::Hops) {
            Some(Column::Hops(offsets, valid, keys)) => Some((offsets, valid, keys)),
            _ => None,
        };
        let any = hops.is_some_and(|(_, valid, _)| (0..batch.rows).any(|r| valid.get(r)));
        if !any && self.ds.hops.hops() == 0 {
            return;
        }
        let mut raw = RawHops::default();
        for i in 0..batch.rows {
            raw.reset();
            if let Some((offsets, _, keys)) = hops.filter(|(_, valid, _)| valid.get(i)) {
                let start = usize::try_from(offsets[i]).unwrap_or(0);
                let end = usize::try_from(offsets[i + 1]).unwrap_or(0);
                for e in start..end {
                    raw.next_hop();
                    for k in keys {
                        if let Some(v) = k.values.get(e).filter(|_| k.valid.get(e)) {
                            raw.set(k.key.as_bytes(), *v);
                        }
                    }
                }
            }
            self.ds.hops.push(base + i, &raw);
        }
    }
}

/// Whether a column of a field the figures leave out fits its type (any
/// column of a field the analysis does not read fits: it is skipped).
fn fits_sparse(field: Field, c: Column<'_>, rows: usize) -> bool {
    match field {
        Field::Warmup | Field::Failed | Field::DeadlineMiss => matches!(c, Column::Bools(..)),
        Field::Error | Field::Cache | Field::OutputDigest => {
            matches!(c, Column::Labels(..) | Column::Texts(..))
                && (0..rows).all(|r| !c.valid().get(r) || c.label(r).is_some())
        }
        Field::BatchSize | Field::StaleDropped | Field::DryTicks => matches!(c, Column::Counts(..)),
        f if f == ROBOT_VOLUNTARY_SWITCHES => matches!(c, Column::Counts(..)),
        // Read fields whose column is of another type (the row path
        // words it).
        Field::Seq | Field::TsUnix | Field::Kind | Field::Hops | Field::Figure(_) => false,
        // The fields the analysis does not read: skipped, whatever their type.
        _ => true,
    }
}
