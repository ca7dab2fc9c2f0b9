//! One Parquet file straight into the analysis: the columns the analysis
//! reads are decoded (the others are not), row groups the time selection
//! rules out are skipped by their statistics, and each row lands in the
//! dataset field by field, with no JSON text in between. The values are
//! the file's own `f64`s, which the JSON path writes and reads back
//! exactly: both paths load the same columns.

use std::fs::File;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{Array, ListArray, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReader;
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;
use parquet::schema::types::SchemaDescriptor;
use stagetrace_analyze::load::{Cell, FilePart, LoadError, LoadOptions, Row};
use stagetrace_schema::{Field, FIELDS, HOP_KEYS};

use super::contain::contain;
use super::view::{not_finite, views, View};
use super::{batches, ReadError, Selection};

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
    let damaged = |reason: String| {
        PartError::Damaged(ReadError {
            path: path.to_path_buf(),
            reason,
        })
    };
    let file = File::open(path).map_err(|e| damaged(format!("cannot read: {e}")))?;
    let range = (sel.since_ms, sel.until_ms);
    let reader = batches(path, file, move |builder| {
        let columns = projection(builder.parquet_schema(), opts);
        let groups = row_groups(builder.metadata(), range);
        Ok(builder
            .with_projection(columns)
            .with_row_groups(groups)
            .with_batch_size(BATCH_ROWS))
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
    let all = views(batch).map_err(|e| BatchError::Damaged(e.to_string()))?;
    // Only the columns present: a row visits what the file holds.
    let present: Vec<(usize, View<'_>)> = all
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !matches!(v, View::Absent))
        .collect();
    let ts = batch
        .column_by_name(Field::TsUnix.name())
        .and_then(|c| c.as_primitive_opt::<Float64Type>());
    for r in 0..batch.num_rows() {
        if let Some(ts) = ts.filter(|t| t.is_valid(r)) {
            if !sel.keeps_time(ts.value(r)) {
                continue;
            }
        }
        row.clear();
        for (field, view) in &present {
            set(row, *field, view, r).map_err(BatchError::Damaged)?;
        }
        part.push(row).map_err(BatchError::Load)?;
    }
    Ok(())
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
