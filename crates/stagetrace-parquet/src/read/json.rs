//! One Parquet file as the JSON lines of the same calls: each row written
//! as the record's JSON object, field by field of the record's table, so
//! `stagetrace report` reads both formats through one parser.

use std::io::{self, Read};
use std::path::PathBuf;

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReader;
use stagetrace_schema::{FIELDS, HOP_KEYS};

use super::contain::contain;
use super::view::{check_batch, not_finite, views, View};
use super::Selection;

/// A [`Read`] of one Parquet file's calls as JSON lines (one batch of rows
/// in memory at a time).
pub struct JsonLines {
    path: PathBuf,
    batches: ParquetRecordBatchReader,
    sel: Selection,
    text: Vec<u8>,
    at: usize,
    /// Why the file could not be read further, once it could not.
    failed: Option<String>,
}

impl std::fmt::Debug for JsonLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonLines")
            .field("path", &self.path)
            .finish()
    }
}

impl JsonLines {
    pub(crate) fn new(path: PathBuf, batches: ParquetRecordBatchReader, sel: Selection) -> Self {
        JsonLines {
            path,
            batches,
            sel,
            text: Vec::new(),
            at: 0,
            failed: None,
        }
    }

    /// The next batch of rows, decoded by the third-party decoders inside
    /// [`contain`]: a damaged page is an error naming the file, never a
    /// panic. After one error every call returns it again.
    fn next_batch(&mut self) -> io::Result<Option<RecordBatch>> {
        let broken = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: damaged Parquet data ({why})", self.path.display()),
            )
        };
        if let Some(why) = &self.failed {
            return Err(broken(why));
        }
        let batches = &mut self.batches;
        let why = match contain(|| batches.next()) {
            Ok(None) => return Ok(None),
            Ok(Some(Ok(batch))) => return Ok(Some(batch)),
            Ok(Some(Err(e))) => format!("a corrupt row group: {e}"),
            Err(panic) => panic,
        };
        let e = broken(&why);
        self.failed = Some(why);
        Err(e)
    }

    /// Decodes every remaining batch and checks its columns' types,
    /// writing nothing: the number of rows.
    pub(crate) fn verify(&mut self) -> io::Result<u64> {
        let mut rows = 0u64;
        while let Some(batch) = self.next_batch()? {
            check_batch(&batch)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))?;
            rows += batch.num_rows() as u64;
        }
        Ok(rows)
    }

    /// Fills `text` with the next batch's lines; false at the end.
    fn refill(&mut self) -> io::Result<bool> {
        self.text.clear();
        self.at = 0;
        while self.text.is_empty() {
            let Some(batch) = self.next_batch()? else {
                return Ok(false);
            };
            write_batch(&batch, &self.sel, &mut self.text)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))?;
        }
        Ok(true)
    }
}

impl Read for JsonLines {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at >= self.text.len() && !self.refill()? {
            return Ok(0);
        }
        let n = buf.len().min(self.text.len() - self.at);
        buf[..n].copy_from_slice(&self.text[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn write_batch(batch: &RecordBatch, sel: &Selection, out: &mut Vec<u8>) -> io::Result<()> {
    let views = views(batch)?;
    let ts = batch
        .column_by_name("ts_unix_ms")
        .and_then(|c| c.as_primitive_opt::<Float64Type>());
    for row in 0..batch.num_rows() {
        if let Some(ts) = ts.filter(|t| t.is_valid(row)) {
            if !sel.keeps_time(ts.value(row)) {
                continue;
            }
        }
        out.push(b'{');
        let mut first = true;
        for (info, v) in FIELDS.iter().zip(&views) {
            let at = out.len();
            if !first {
                out.push(b',');
            }
            json(out, info.name)?;
            out.push(b':');
            if write_value(out, v, row, info.name)? {
                first = false;
            } else {
                out.truncate(at);
            }
        }
        out.extend_from_slice(b"}\n");
    }
    Ok(())
}

fn json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) -> io::Result<()> {
    serde_json::to_writer(&mut *out, v).map_err(io::Error::other)
}

/// Writes the value at `row`; false when the field is absent there.
fn write_value(out: &mut Vec<u8>, v: &View<'_>, row: usize, name: &str) -> io::Result<bool> {
    match v {
        View::Absent => return Ok(false),
        View::Count(a) if a.is_valid(row) => json(out, &a.value(row))?,
        View::Number(a) if a.is_valid(row) => {
            let v = a.value(row);
            if !v.is_finite() {
                return Err(not_finite(name, v));
            }
            json(out, &v)?;
        }
        View::Text(a) if a.is_valid(row) => json(out, a.value(row))?,
        View::Bool(a) if a.is_valid(row) => json(out, &a.value(row))?,
        View::Label(d, values) if d.is_valid(row) => {
            let key = d.keys().value(row);
            let Some(i) = usize::try_from(key).ok().filter(|i| *i < values.len()) else {
                return Ok(false);
            };
            json(out, values.value(i))?;
        }
        View::Hops(list) if list.is_valid(row) => write_hops(out, list, row)?,
        _ => return Ok(false),
    }
    Ok(true)
}

fn write_hops(out: &mut Vec<u8>, list: &arrow_array::ListArray, row: usize) -> io::Result<()> {
    let entries = list.value(row);
    let entries = entries.as_struct();
    out.push(b'[');
    for i in 0..entries.len() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        let mut first = true;
        for key in HOP_KEYS {
            let Some(col) = entries
                .column_by_name(key)
                .and_then(|c| c.as_primitive_opt::<Float64Type>())
            else {
                continue;
            };
            if col.is_valid(i) {
                if !col.value(i).is_finite() {
                    return Err(not_finite(key, col.value(i)));
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                json(out, key)?;
                out.push(b':');
                json(out, &col.value(i))?;
            }
        }
        out.push(b'}');
    }
    out.push(b']');
    Ok(())
}
