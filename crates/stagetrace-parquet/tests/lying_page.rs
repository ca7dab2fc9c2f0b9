//! A page header that lies about its size (issue 42's fuzz target, seed
//! 103: a 36 kB mutant made the reader hold 17.7 MB). The parquet decoder
//! reserves a page's `uncompressed_page_size` before it decompresses, so a
//! header that claims 128 MiB makes it ask for 128 MiB — and an
//! allocation the machine refuses aborts the process, which no
//! `catch_unwind` contains. The reader checks every page header it will
//! decode against its zstd frame's stated size first (`read/pages.rs`).
//!
//! This binary counts the bytes allocated (its own global allocator), so
//! the test shows both: the decoder alone reserves the claim; the reader
//! refuses the file, naming the page, holding a few MB.

#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::metadata::ParquetMetaDataReader;
use stagetrace_parquet::read::{self, Selection};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Most bytes held at once while `f` ran, above what was held before.
fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let r = f();
    (r, PEAK.load(Ordering::Relaxed).saturating_sub(before))
}

/// What the damaged header claims: 128 MiB − 1 (a zigzag varint of 4
/// bytes, `fe ff ff 7f`).
const CLAIM: usize = (1 << 27) - 1;

/// A file of one row group of 150 000 calls, whose first page of at least
/// 1 MiB (a 4-byte size varint) now claims [`CLAIM`] bytes: the file, and
/// the column whose page lies.
fn lying_file() -> (Vec<u8>, String) {
    let records = stagetrace_parquet::sample::records(150_000);
    let mut bytes = stagetrace_parquet::file_bytes(&records, records.len()).unwrap();
    let meta = ParquetMetaDataReader::new()
        .parse_and_finish(&Bytes::from(bytes.clone()))
        .unwrap();
    for col in meta.row_group(0).columns() {
        let at = col
            .dictionary_page_offset()
            .unwrap_or(col.data_page_offset()) as usize;
        // Field 1 (type: an i32), its value, then field 2 (the size).
        let h = &bytes[at..at + 8];
        if h[0] != 0x15 || h[1] & 0x80 != 0 || h[2] != 0x15 {
            continue;
        }
        let varint = &h[3..];
        let len = varint.iter().position(|b| b & 0x80 == 0).unwrap() + 1;
        if len == 4 {
            bytes[at + 3..at + 7].copy_from_slice(&[0xfe, 0xff, 0xff, 0x7f]);
            return (bytes, col.column_path().string());
        }
    }
    panic!("no page of 1 MiB or more in the file: write more calls");
}

#[test]
fn a_page_that_claims_128_mib_is_refused_before_the_decoder_reserves_it() {
    let (bytes, column) = lying_file();
    let input = Bytes::from(bytes);

    // The parquet crate alone reserves what the header claims.
    let (_, raw_peak) = peak_during(|| {
        let reader = ParquetRecordBatchReaderBuilder::try_new(input.clone())
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            if batch.is_err() {
                break;
            }
        }
    });
    assert!(
        raw_peak >= CLAIM,
        "the decoder held {raw_peak} bytes: the damage no longer reaches its reservation"
    );

    // The reader refuses the file, naming it, the column and the claim,
    // before any page is decoded.
    let (result, peak) = peak_during(|| {
        let mut lines = read::open_reader(
            Path::new("lying.parquet"),
            input.clone(),
            &Selection::default(),
        )?;
        let mut text = String::new();
        lines
            .read_to_string(&mut text)
            .map_err(|e| read::ReadError {
                path: "lying.parquet".into(),
                reason: e.to_string(),
            })?;
        Ok::<_, read::ReadError>(text)
    });
    let err = result.expect_err("a lying page is refused").to_string();
    assert!(
        err.starts_with("lying.parquet: damaged Parquet data"),
        "{err}"
    );
    assert!(
        err.contains(&format!("column {column} of row group 0")),
        "{err}"
    );
    assert!(
        err.contains(&format!("claims {CLAIM} bytes once decompressed")),
        "{err}"
    );
    assert!(peak < 16 << 20, "the reader held {peak} bytes");

    // The columnar path (`report`, `summarize`) refuses it the same way.
    let part = read::load_part_reader(
        Path::new("lying.parquet"),
        input,
        &Selection::default(),
        stagetrace_analyze::load::LoadOptions::default(),
    );
    match part {
        Err(read::PartError::Damaged(e)) => {
            assert!(
                e.to_string().contains(&format!("claims {CLAIM} bytes")),
                "{e}"
            )
        }
        Err(read::PartError::Load(e)) => panic!("{e}"),
        Ok(_) => panic!("the columnar path read a lying page"),
    }
}
