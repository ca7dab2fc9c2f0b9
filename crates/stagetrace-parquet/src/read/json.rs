//! One Parquet file as the JSON lines of the same calls: each row written
//! as the record's JSON object, field by field of the record's table, so
//! `stagetrace report` reads both formats through one parser.

use std::io::{self, Read};
use std::path::PathBuf;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReader;
use stagetrace_schema::{FIELDS, HOP_KEYS};

use super::Selection;

/// A [`Read`] of one Parquet file's calls as JSON lines (one batch of rows
/// in memory at a time).
pub struct JsonLines {
    path: PathBuf,
    batches: ParquetRecordBatchReader,
    sel: Selection,
    text: Vec<u8>,
    at: usize,
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
        }
    }

    /// Fills `text` with the next batch's lines; false at the end.
    fn refill(&mut self) -> io::Result<bool> {
        self.text.clear();
        self.at = 0;
        while self.text.is_empty() {
            let Some(batch) = self.batches.next() else {
                return Ok(false);
            };
            let batch = batch.map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a corrupt row group in {} ({e})", self.path.display()),
                )
            })?;
            write_batch(&batch, &self.sel, &mut self.text)?;
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

/// A column of the file seen as the record field it holds.
enum View<'a> {
    Absent,
    Count(&'a arrow_array::UInt64Array),
    Number(&'a arrow_array::Float64Array),
    Label(
        &'a arrow_array::Int32DictionaryArray,
        &'a arrow_array::StringArray,
    ),
    Text(&'a arrow_array::StringArray),
    Bool(&'a arrow_array::BooleanArray),
    Hops(&'a arrow_array::ListArray),
}

fn view<'a>(col: Option<&'a ArrayRef>, name: &str) -> io::Result<View<'a>> {
    let Some(col) = col else {
        return Ok(View::Absent);
    };
    Ok(match col.data_type() {
        DataType::UInt64 => View::Count(col.as_primitive::<UInt64Type>()),
        DataType::Float64 => View::Number(col.as_primitive::<Float64Type>()),
        DataType::Utf8 => View::Text(col.as_string::<i32>()),
        DataType::Boolean => View::Bool(col.as_boolean()),
        DataType::List(_) => View::Hops(col.as_list::<i32>()),
        DataType::Dictionary(k, v) if **k == DataType::Int32 && **v == DataType::Utf8 => {
            let dict = col.as_dictionary::<Int32Type>();
            View::Label(dict, dict.values().as_string::<i32>())
        }
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("column {name} has type {other}, not a stagetrace record's"),
            ))
        }
    })
}

fn write_batch(batch: &RecordBatch, sel: &Selection, out: &mut Vec<u8>) -> io::Result<()> {
    let views: Vec<View<'_>> = FIELDS
        .iter()
        .map(|info| view(batch.column_by_name(info.name), info.name))
        .collect::<io::Result<_>>()?;
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
            if write_value(out, v, row)? {
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
fn write_value(out: &mut Vec<u8>, v: &View<'_>, row: usize) -> io::Result<bool> {
    match v {
        View::Absent => return Ok(false),
        View::Count(a) if a.is_valid(row) => json(out, &a.value(row))?,
        View::Number(a) if a.is_valid(row) => json(out, &a.value(row))?,
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
