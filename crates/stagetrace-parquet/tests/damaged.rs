//! A damaged Parquet file never panics the reader (issue 42): each class of
//! panic the fuzzer found in the third-party decoders, as bytes changed at
//! fixed places of the sample file this crate's writer makes
//! (`stagetrace_parquet::sample::file`).
//!
//! Each test first shows that its damage still hits its panic site in the
//! parquet / arrow crates read the way the reader read before (schema from
//! the stored Arrow IPC blob, no `catch_unwind`): if the writer's bytes
//! move, that check fails and says so, and the places are found again with
//! `cargo run --release -p stagetrace-fuzz --example parquet_panic_classes`.
//! Then it reads the file with the reader: the calls, or an error that names
//! the file and what is wrong.

#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use stagetrace_parquet::read::{self, Selection};

/// The sample file with `patch` (position, new byte) applied.
fn damaged(patch: &[(usize, u8)]) -> Vec<u8> {
    let mut bytes = stagetrace_parquet::sample::file();
    for &(at, b) in patch {
        assert_ne!(
            bytes[at], b,
            "the patch at {at} changes nothing: re-find it"
        );
        bytes[at] = b;
    }
    bytes
}

/// Reads `bytes` with the parquet crate alone, as the reader did before
/// issue 42; the panic's message, if it panicked.
fn raw_panic(bytes: &[u8]) -> Option<String> {
    let bytes = Bytes::copy_from_slice(bytes);
    let r = panic::catch_unwind(AssertUnwindSafe(|| {
        let Ok(reader) = ParquetRecordBatchReaderBuilder::try_new(bytes).and_then(|b| b.build())
        else {
            return;
        };
        for batch in reader {
            if batch.is_err() {
                return;
            }
        }
    }));
    r.err().map(|p| {
        p.downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    })
}

fn assert_hits(bytes: &[u8], panic_says: &str) {
    let msg = raw_panic(bytes).unwrap_or_else(|| {
        panic!("the damage no longer panics the decoders ({panic_says:?}): re-find it")
    });
    assert!(
        msg.contains(panic_says),
        "the damage panics elsewhere now ({msg}), not at {panic_says:?}: re-find it"
    );
}

fn write(dir: &Path, bytes: &[u8]) -> PathBuf {
    let path = dir.join("part-damaged.parquet");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The reader on `path`: the JSON lines, or its error.
fn read_all(path: &Path) -> Result<String, String> {
    let mut lines = read::open(path, &Selection::default()).map_err(|e| e.to_string())?;
    let mut text = String::new();
    lines.read_to_string(&mut text).map_err(|e| e.to_string())?;
    Ok(text)
}

fn intact_lines() -> String {
    let dir = tempfile::tempdir().unwrap();
    read_all(&write(dir.path(), &stagetrace_parquet::sample::file())).unwrap()
}

/// Damage to the stored Arrow schema only: the reader takes the schema from
/// the Parquet schema and reads every call as from the intact file.
fn arrow_blob_damage_is_ignored(patch: &[(usize, u8)], panic_says: &str) {
    let bytes = damaged(patch);
    assert_hits(&bytes, panic_says);
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &bytes);
    let text = read_all(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text, intact_lines());
    assert_eq!(read::verify(&path).unwrap(), 40);
}

/// Damage in pages or footer: an error naming the file and saying `says`,
/// from `open` and reading, and from `verify`.
fn decoder_damage_is_an_error(patch: &[(usize, u8)], panic_says: &str, says: &str) {
    let bytes = damaged(patch);
    assert_hits(&bytes, panic_says);
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &bytes);
    let name = path.display().to_string();
    let e = read_all(&path).expect_err("a damaged file is refused");
    assert!(e.contains(&name) && e.contains(says), "{e}");
    let e = read::verify(&path)
        .expect_err("verify refuses it too")
        .to_string();
    assert!(e.contains(&name) && e.contains(says), "{e}");
}

// ------------------------------------------------ arrow-ipc: the stored schema

#[test]
fn an_unwrap_on_none_in_the_stored_arrow_schema_does_not_panic() {
    arrow_blob_damage_is_ignored(
        &[(50292, 117)],
        "called `Option::unwrap()` on a `None` value",
    );
}

#[test]
fn an_unknown_type_in_the_stored_arrow_schema_does_not_panic() {
    arrow_blob_damage_is_ignored(&[(50728, 109)], "not implemented: Type");
}

#[test]
fn an_unexpected_union_mode_in_the_stored_arrow_schema_does_not_panic() {
    arrow_blob_damage_is_ignored(&[(47508, 52)], "Unexpected union mode");
}

#[test]
fn a_bad_int_bit_width_in_the_stored_arrow_schema_does_not_panic() {
    arrow_blob_damage_is_ignored(&[(52363, 55)], "Unexpected bitwidth and signed");
}

#[test]
fn a_bad_float_precision_in_the_stored_arrow_schema_does_not_panic() {
    arrow_blob_damage_is_ignored(&[(47114, 55)], "FloatingPoint type with precision");
}

#[test]
fn a_time_of_a_bad_width_in_the_stored_arrow_schema_does_not_panic() {
    arrow_blob_damage_is_ignored(&[(51508, 107)], "Time type with bit width of 32");
}

#[test]
fn a_list_without_its_child_in_the_stored_arrow_schema_does_not_panic() {
    arrow_blob_damage_is_ignored(&[(50291, 66)], "expect a large list to have one child");
}

#[test]
fn a_map_without_its_child_in_the_stored_arrow_schema_does_not_panic() {
    arrow_blob_damage_is_ignored(&[(4461, 20), (50089, 82)], "expect a map to have one child");
}

// ------------------------------------------------ parquet: footer and pages

#[test]
fn a_negative_column_start_is_refused_before_any_page_is_read() {
    // Checked in the footer (no panic to catch): the decoder's assert is
    // never reached.
    decoder_damage_is_an_error(
        &[(36781, 113)],
        "column start and length should not be negative",
        "outside the file's",
    );
}

#[test]
fn a_dictionary_page_missing_before_dictionary_indices_is_an_error() {
    decoder_damage_is_an_error(
        &[(7830, 16), (7832, 16)],
        "Decoder for dict should have been set",
        "damaged Parquet data",
    );
}

#[test]
fn an_index_beyond_a_byte_array_dictionary_is_an_error() {
    decoder_damage_is_an_error(
        &[
            (7963, 14),
            (7965, 32),
            (7968, 16),
            (7982, 7),
            (7983, 57),
            (9021, 255),
            (9022, 255),
        ],
        "index out of bounds",
        "damaged Parquet data",
    );
}

#[test]
fn a_byte_stream_split_page_of_the_wrong_width_is_an_error() {
    decoder_damage_is_an_error(
        &[(10862, 18)],
        "index out of bounds",
        "damaged Parquet data",
    );
}

#[test]
fn a_bit_width_beyond_the_type_in_a_page_is_an_error() {
    decoder_damage_is_an_error(
        &[(5517, 164)],
        // `<= T::BIT_CAPACITY` in a release build, `<= size_of::<T>() * 8`
        // (a debug_assert before it) in a debug one.
        "assertion failed: num_bits <=",
        "damaged Parquet data",
    );
}

#[test]
fn a_validity_bitmap_beyond_its_buffer_is_an_error() {
    decoder_damage_is_an_error(
        &[(3639, 39)],
        "offset + len out of bounds",
        "damaged Parquet data",
    );
}

#[test]
fn a_zero_width_fixed_byte_array_is_an_error() {
    decoder_damage_is_an_error(
        &[(4922, 255), (4923, 255), (9492, 0)],
        "attempt to divide by zero",
        "damaged Parquet data",
    );
}

/// The last line is reached: these decoder asserts cannot be checked for
/// before decoding, and the reader's `catch_unwind` turns them into an
/// error that says where the decoder panicked, printed by no panic hook.
#[test]
fn the_readers_catch_unwind_is_reached_and_says_where_the_decoder_panicked() {
    for (patch, site) in [
        (&[(10862usize, 18u8)][..], "byte_stream_split_decoder.rs"),
        (&[(5517, 164)][..], "bit_util.rs"),
        (&[(3639, 39)][..], "bit_chunk_iterator.rs"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &damaged(patch));
        let e = read_all(&path).unwrap_err();
        assert!(
            e.contains("the Parquet decoder panicked at") && e.contains(site),
            "{e}"
        );
    }
}

/// Found by the fuzzer (a page damaged into a NaN): the reader wrote
/// `"infer_ms":null`, which no record holds. A non-finite number is damage,
/// refused by name, column and value. (The sink never writes one, so the
/// file is written here with a NaN in its `infer_ms` column.)
#[test]
fn a_nan_in_a_number_column_is_an_error_not_a_null() {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};

    let schema = Arc::new(Schema::new(vec![
        Field::new("seq", DataType::UInt64, false),
        Field::new("ts_unix_ms", DataType::Float64, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("infer_ms", DataType::Float64, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from(vec![1, 2])),
        Arc::new(Float64Array::from(vec![1.7e12, 1.7e12 + 33.0])),
        Arc::new(StringArray::from(vec!["infer", "infer"])),
        Arc::new(Float64Array::from(vec![Some(20.5), Some(f64::NAN)])),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(Vec::new(), schema, None).unwrap();
    w.write(&batch).unwrap();
    let bytes = w.into_inner().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &bytes);
    let name = path.display().to_string();
    let e = read_all(&path).expect_err("NaN is no record's value");
    assert!(e.contains(&name) && e.contains("infer_ms holds NaN"), "{e}");
    let e = read::verify(&path).unwrap_err().to_string();
    assert!(e.contains(&name) && e.contains("infer_ms holds NaN"), "{e}");
}
