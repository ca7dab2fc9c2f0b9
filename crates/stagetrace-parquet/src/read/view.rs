//! A batch's columns seen as the record fields they hold: one view per
//! field of the record's table, typed as the writer types it; a column of
//! a foreign type, or a number no record holds, is an error that names it.

use std::io;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use stagetrace_schema::{FIELDS, HOP_KEYS};

/// A column of the file seen as the record field it holds.
pub(super) enum View<'a> {
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

pub(super) fn view<'a>(col: Option<&'a ArrayRef>, name: &str) -> io::Result<View<'a>> {
    let Some(col) = col else {
        return Ok(View::Absent);
    };
    Ok(match col.data_type() {
        DataType::UInt64 => View::Count(col.as_primitive::<UInt64Type>()),
        DataType::Float64 => View::Number(col.as_primitive::<Float64Type>()),
        DataType::Utf8 => View::Text(col.as_string::<i32>()),
        DataType::Boolean => View::Bool(col.as_boolean()),
        DataType::List(f) if matches!(f.data_type(), DataType::Struct(_)) => {
            View::Hops(col.as_list::<i32>())
        }
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

/// Each column of `batch` seen as the record field it holds, in the order
/// of the record's table; an error names a column of a foreign type.
pub(super) fn views(batch: &RecordBatch) -> io::Result<Vec<View<'_>>> {
    FIELDS
        .iter()
        .map(|info| view(batch.column_by_name(info.name), info.name))
        .collect()
}

/// The columns' types, and every number finite: a damaged page can decode
/// to NaN or infinity, which no record holds (JSON has no such number).
pub(super) fn check_batch(batch: &RecordBatch) -> io::Result<()> {
    for (info, v) in FIELDS.iter().zip(views(batch)?) {
        match v {
            View::Number(a) => finite(info.name, a)?,
            View::Hops(list) => {
                let entries = list.values().as_struct();
                for key in HOP_KEYS {
                    if let Some(col) = entries
                        .column_by_name(key)
                        .and_then(|c| c.as_primitive_opt::<Float64Type>())
                    {
                        finite(info.name, col)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

pub(super) fn finite(name: &str, a: &arrow_array::Float64Array) -> io::Result<()> {
    // Every slot finite, the null ones' too (a vectorised pass): done.
    if a.values().iter().all(|v| v.is_finite()) {
        return Ok(());
    }
    match (0..a.len()).find(|&i| a.is_valid(i) && !a.value(i).is_finite()) {
        None => Ok(()),
        Some(i) => Err(not_finite(name, a.value(i))),
    }
}

pub(super) fn not_finite(name: &str, v: f64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("column {name} holds {v}, no record's value (damaged data)"),
    )
}
