//! One Parquet file straight into the analysis: the columns the analysis
//! reads are decoded (the others are not), row groups the time selection
//! rules out are skipped by their statistics, and each row lands in the
//! dataset field by field, with no JSON text in between. The values are
//! the file's own `f64`s, which the JSON path writes and reads back
//! exactly: both paths load the same columns.

use std::fs::File;
use std::ops::Range;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{Array, ListArray, RecordBatch};
use arrow_buffer::NullBuffer;
use parquet::arrow::arrow_reader::ParquetRecordBatchReader;
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::ChunkReader;
use parquet::file::statistics::Statistics;
use parquet::schema::types::SchemaDescriptor;
use stagetrace_analyze::load::{
    Cell, Column, ColumnBatch, FilePart, HopColumn, LoadError, LoadOptions, Row, Valid,
};
use stagetrace_schema::{Field, FIELDS, HOP_KEYS};

use super::contain::contain;
use super::view::{finite, not_finite, views, View};
use super::{batches, Plan, ReadError, Selection};

/// Rows per decoded batch: large enough that per-batch work is noise,
/// small enough that a batch's columns stay in cache.
const BATCH_ROWS: usize = 8192;

/// Why a file's calls could not be loaded.
#[derive(Debug)]
pub enum PartError {
    /// The file is damaged or foreign: skip it whole and say so.
    Damaged(ReadError),
    /// A record is corrupt (and `skip_bad` was not given): the load stops,
    /// as at a corrupt JSON line.
    Load(LoadError),
}

/// Reads the calls `sel` keeps from the Parquet file at `path` into a
/// part of the dataset. Every page read is decoded before the part is
/// returned, so a damaged file is refused whole, never half-read.
pub fn load_part(path: &Path, sel: &Selection, opts: LoadOptions) -> Result<FilePart, PartError> {
    let file = File::open(path).map_err(|e| {
        PartError::Damaged(ReadError {
            path: path.to_path_buf(),
            reason: format!("cannot read: {e}"),
        })
    })?;
    load_part_reader(path, file, sel, opts)
}

/// [`load_part`] for a file already in memory (or any [`ChunkReader`]);
/// `path` names it in errors and in the dataset.
pub fn load_part_reader<R: ChunkReader + 'static>(
    path: &Path,
    reader: R,
    sel: &Selection,
    opts: LoadOptions,
) -> Result<FilePart, PartError> {
    load_within(path, reader, sel, opts, None)
}

/// [`load_part`] of the row groups `groups` only (indices into the file's
/// row groups, see [`super::group_rows`]): a big file read a few groups at a time,
/// in bounded memory.
pub fn load_part_groups(
    path: &Path,
    sel: &Selection,
    opts: LoadOptions,
    groups: Range<usize>,
) -> Result<FilePart, PartError> {
    let file = File::open(path).map_err(|e| {
        PartError::Damaged(ReadError {
            path: path.to_path_buf(),
            reason: format!("cannot read: {e}"),
        })
    })?;
    load_within(path, file, sel, opts, Some(groups))
}

fn load_within<R: ChunkReader + 'static>(
    path: &Path,
    reader: R,
    sel: &Selection,
    opts: LoadOptions,
    only: Option<Range<usize>>,
) -> Result<FilePart, PartError> {
    let range = (sel.since_ms, sel.until_ms);
    let reader = batches(path, reader, move |meta| {
        let mut groups = row_groups(meta, range);
        if let Some(only) = only {
            groups.retain(|g| only.contains(g));
        }
        Plan {
            groups: Some(groups),
            columns: Some(projection(meta.file_metadata().schema_descr(), opts)),
            batch_rows: Some(BATCH_ROWS),
        }
    })
    .map_err(PartError::Damaged)?;
    fill(path, reader, sel, opts)
}

/// Decodes every batch into a part.
fn fill(
    path: &Path,
    mut reader: ParquetRecordBatchReader,
    sel: &Selection,
    opts: LoadOptions,
) -> Result<FilePart, PartError> {
    let damaged = |why: String| {
        PartError::Damaged(ReadError {
            path: path.to_path_buf(),
            reason: format!("damaged Parquet data ({why})"),
        })
    };
    let mut part = FilePart::new(path, opts);
    let mut row = Row::new();
    loop {
        let batch = match contain(|| reader.next()) {
            Ok(None) => return Ok(part),
            Ok(Some(Ok(batch))) => batch,
            Ok(Some(Err(e))) => return Err(damaged(format!("a corrupt row group: {e}"))),
            Err(panic) => return Err(damaged(panic)),
        };
        push_batch(&batch, sel, &mut row, &mut part).map_err(|e| match e {
            BatchError::Damaged(why) => PartError::Damaged(ReadError {
                path: path.to_path_buf(),
                reason: why,
            }),
            BatchError::Load(e) => PartError::Load(e),
        })?;
    }
}

enum BatchError {
    Damaged(String),
    Load(LoadError),
}

/// Pushes the rows of `batch` that `sel` keeps.
fn push_batch(
    batch: &RecordBatch,
    sel: &Selection,
    row: &mut Row,
    part: &mut FilePart,
) -> Result<(), BatchError> {
    let ts = batch
        .column_by_name(Field::TsUnix.name())
        .and_then(|c| c.as_primitive_opt::<Float64Type>());
    let kept = |r: usize| ts.is_none_or(|t| !t.is_valid(r) || sel.keeps_time(t.value(r)));
    // The calls of a range are one run of rows (a file is in time order):
    // that run goes column by column.
    let rows = batch.num_rows();
    let first = (0..rows).find(|&r| kept(r));
    let Some(first) = first else { return Ok(()) };
    let end = (first..rows).find(|&r| !kept(r)).unwrap_or(rows);
    if (end..rows).all(|r| !kept(r)) {
        let run = batch.slice(first, end - first);
        if push_whole(&run, part)? {
            return Ok(());
        }
    }
    let present = present(batch)?;
    for r in 0..rows {
        if !kept(r) {
            continue;
        }
        row.clear();
        for (field, view) in &present {
            set(row, *field, view, r).map_err(BatchError::Damaged)?;
        }
        part.push(row).map_err(BatchError::Load)?;
    }
    Ok(())
}

/// The batch's columns seen as the record's fields, those it has only: a
/// row visits what the file holds.
fn present(batch: &RecordBatch) -> Result<Vec<(usize, View<'_>)>, BatchError> {
    let all = views(batch).map_err(|e| BatchError::Damaged(e.to_string()))?;
    Ok(all
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !matches!(v, View::Absent))
        .collect())
}

/// Pushes the batch column by column (`FilePart::push_columns`); false
/// when it must go row by row. `Err` is damage: a number no record holds.
fn push_whole(batch: &RecordBatch, part: &mut FilePart) -> Result<bool, BatchError> {
    let rows = batch.num_rows();
    let present = present(batch)?;
    for (field, view) in &present {
        if let View::Number(a) = view {
            let name = FIELDS.get(*field).map_or("a column", |f| f.name);
            finite(name, a).map_err(|e| BatchError::Damaged(e.to_string()))?;
        }
    }
    // The labels' dictionaries as text, kept while the batch borrows them.
    let dicts: Vec<Vec<&str>> = present
        .iter()
        .map(|(_, v)| match v {
            View::Label(_, values) => (0..values.len()).map(|i| values.value(i)).collect(),
            _ => Vec::new(),
        })
        .collect();
    let hops = hop_columns(&present).map_err(BatchError::Damaged)?;
    let mut batch = ColumnBatch::new(rows);
    for ((field, view), dict) in present.iter().zip(&dicts) {
        let column = match view {
            View::Absent => continue,
            View::Count(a) => Column::Counts(a.values(), valid(a.nulls())),
            View::Number(a) => Column::Numbers(a.values(), valid(a.nulls())),
            View::Label(d, _) => Column::Labels(d.keys().values(), valid(d.nulls()), dict),
            View::Bool(a) => {
                let bits = a.values();
                Column::Bools(bits.values(), bits.offset(), valid(a.nulls()))
            }
            View::Text(a) => Column::Texts(a.value_offsets(), a.value_data(), valid(a.nulls())),
            View::Hops(list) => Column::Hops(list.value_offsets(), valid(list.nulls()), &hops),
        };
        batch.add(*field, column);
    }
    Ok(part.push_columns(&batch))
}

/// The `hops` entries' columns, one per key the file has; `Err` names a
/// number no record holds.
fn hop_columns<'a>(present: &'a [(usize, View<'a>)]) -> Result<Vec<HopColumn<'a>>, String> {
    let Some(list) = present.iter().find_map(|(_, v)| match v {
        View::Hops(list) => Some(*list),
        _ => None,
    }) else {
        return Ok(Vec::new());
    };
    let entries = list.values().as_struct();
    let mut out = Vec::new();
    for key in HOP_KEYS {
        if let Some(col) = entries
            .column_by_name(key)
            .and_then(|c| c.as_primitive_opt::<Float64Type>())
        {
            finite(Field::Hops.name(), col).map_err(|e| e.to_string())?;
            out.push(HopColumn {
                key,
                values: col.values(),
                valid: valid(col.nulls()),
            });
        }
    }
    Ok(out)
}

fn valid(nulls: Option<&NullBuffer>) -> Valid<'_> {
    match nulls {
        None => Valid::all(),
        Some(n) => Valid::bitmap(n.validity(), n.offset()),
    }
}

/// Sets one field of `row` from its column at row `r`; `Err` is damage
/// (a number no record holds). A value the row refuses (out of range) is
/// left for [`Row::finish`] to report, as a JSON line's would be.
fn set(row: &mut Row, field: usize, view: &View<'_>, r: usize) -> Result<(), String> {
    let name = FIELDS.get(field).map_or("a column", |f| f.name);
    let cell = match view {
        View::Count(a) if a.is_valid(r) => Cell::Count(a.value(r)),
        View::Number(a) if a.is_valid(r) => {
            let v = a.value(r);
            if !v.is_finite() {
                return Err(not_finite(name, v).to_string());
            }
            Cell::Number(v)
        }
        View::Text(a) if a.is_valid(r) => Cell::Text(a.value(r)),
        View::Bool(a) if a.is_valid(r) => Cell::Bool(a.value(r)),
        View::Label(d, values) if d.is_valid(r) => {
            let key = d.keys().value(r);
            match usize::try_from(key).ok().filter(|i| *i < values.len()) {
                Some(i) => Cell::Text(values.value(i)),
                None => return Ok(()),
            }
        }
        View::Hops(list) if list.is_valid(r) => return hops(row, list, r),
        _ => return Ok(()),
    };
    // A value out of range makes the record corrupt: `Row::finish`
    // reports it with the row, as a JSON line's would be.
    let _refused = row.set(field, cell);
    Ok(())
}

/// The `hops` entries of row `r`.
fn hops(row: &mut Row, list: &ListArray, r: usize) -> Result<(), String> {
    let entries = list.value(r);
    let entries = entries.as_struct();
    let columns: Vec<(&str, &arrow_array::Float64Array)> = HOP_KEYS
        .iter()
        .filter_map(|k| {
            let col = entries
                .column_by_name(k)?
                .as_primitive_opt::<Float64Type>()?;
            Some((*k, col))
        })
        .collect();
    for i in 0..entries.len() {
        row.next_hop();
        for (key, col) in &columns {
            if col.is_valid(i) {
                let v = col.value(i);
                if !v.is_finite() {
                    return Err(not_finite(key, v).to_string());
                }
                row.hop(key, v);
            }
        }
    }
    Ok(())
}

/// The leaves of the columns the analysis reads (`output_digest` only
/// when the digests are kept): the others are never decoded.
fn projection(schema: &SchemaDescriptor, opts: LoadOptions) -> ProjectionMask {
    let wanted = |name: &str| {
        FIELDS.iter().enumerate().any(|(i, info)| {
            info.name == name
                && Row::is_read(i)
                && (opts.keep_digests || info.field != Field::OutputDigest)
        })
    };
    let leaves = (0..schema.num_columns()).filter(|&i| {
        let column = schema.column(i);
        column.path().parts().first().is_some_and(|top| wanted(top))
    });
    ProjectionMask::leaves(schema, leaves)
}

/// The row groups whose `ts_unix_ms` statistics may hold a call of the
/// time range: a group wholly before `since` or at or after `until` is
/// not read. A group without statistics is read.
fn row_groups(meta: &ParquetMetaData, (since, until): (Option<f64>, Option<f64>)) -> Vec<usize> {
    let ts_column = meta
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.path().parts() == [Field::TsUnix.name()]);
    (0..meta.num_row_groups())
        .filter(|&g| {
            let Some(stats) = ts_column.and_then(|c| meta.row_group(g).column(c).statistics())
            else {
                return true;
            };
            let Statistics::Double(s) = stats else {
                return true;
            };
            let before = since
                .zip(s.max_opt())
                .is_some_and(|(since, max)| *max < since);
            let after = until
                .zip(s.min_opt())
                .is_some_and(|(until, min)| *min >= until);
            !(before || after)
        })
        .collect()
}
