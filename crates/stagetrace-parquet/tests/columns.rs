//! The columnar reader: a Parquet file's columns load to the same dataset
//! as the JSON lines of the same calls, and a row group the time range
//! rules out is never decoded.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use parquet::file::reader::{FileReader, SerializedFileReader};
use stagetrace::sink::RecordSink;
use stagetrace_analyze::load::{Dataset, LoadError, LoadOptions};
use stagetrace_parquet::read::{self, PartError, Selection};
use stagetrace_parquet::ParquetSink;

use common::{record, T0_NS};

const CALLS: u64 = 600;
const GROUP_ROWS: usize = 100;

/// One Parquet file of `CALLS` calls in row groups of `GROUP_ROWS`.
fn written(dir: &Path) -> PathBuf {
    let mut sink = ParquetSink::builder(dir)
        .robot("arm")
        .row_group_rows(GROUP_ROWS)
        .build()
        .expect("sink");
    for i in 0..CALLS {
        sink.on_record(&record(i));
        sink.on_drained();
    }
    sink.flush();
    let listing = read::list(dir, &Selection::default()).expect("list");
    assert_eq!(listing.files.len(), 1, "{:?}", listing.files);
    listing.files[0].clone()
}

fn columnar(path: &Path, sel: &Selection, opts: LoadOptions) -> Result<Dataset, String> {
    Dataset::load_parts(vec![path.to_path_buf()], 1, |p| {
        match read::load_part(&p, sel, opts) {
            Ok(part) => Ok(Some(part)),
            Err(PartError::Load(e)) => Err(e),
            Err(PartError::Damaged(e)) => Err(LoadError::Io {
                path: p,
                source: std::io::Error::other(e.reason),
            }),
        }
    })
    .map_err(|e| e.to_string())
}

fn via_json_lines(path: &Path, sel: &Selection, opts: LoadOptions) -> Dataset {
    let lines = read::open(path, sel).expect("open");
    Dataset::load_sources([Ok((path.to_path_buf(), lines))], opts).expect("load")
}

#[test]
fn columns_load_the_dataset_the_json_lines_of_the_same_calls_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = written(dir.path());
    let opts = LoadOptions {
        keep_digests: true,
        ..LoadOptions::default()
    };
    let since = Selection {
        since_ms: Some((T0_NS / 1_000_000) as f64 + 250.0 * 33.333_333),
        ..Selection::default()
    };
    for sel in [Selection::default(), since] {
        let want = via_json_lines(&file, &sel, opts);
        let got = columnar(&file, &sel, opts).expect("columnar");
        assert!(got.len() > 300, "{}", got.len());
        // Every column, flag, kind, hop, digest and note, value for value.
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }
}

#[test]
fn a_row_group_before_since_is_not_decoded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = written(dir.path());
    // Zero every byte of the first row group's column chunks: decoding any
    // of its pages fails.
    let meta = SerializedFileReader::new(fs::File::open(&file).expect("open"))
        .expect("footer")
        .metadata()
        .clone();
    assert_eq!(meta.num_row_groups(), (CALLS as usize).div_ceil(GROUP_ROWS));
    let mut bytes = fs::read(&file).expect("read");
    for col in meta.row_group(0).columns() {
        let start = col
            .dictionary_page_offset()
            .unwrap_or(col.data_page_offset()) as usize;
        let end = start + col.compressed_size() as usize;
        bytes[start..end].fill(0);
    }
    fs::write(&file, &bytes).expect("write");

    let whole = columnar(&file, &Selection::default(), LoadOptions::default());
    let err = whole.expect_err("the damaged group is read without a range");
    assert!(err.contains("damaged Parquet data"), "{err}");

    // The second group starts at call GROUP_ROWS, 33 ms after the first
    // group's last call.
    let second_ms = (T0_NS + GROUP_ROWS as u64 * 33_333_333) as f64 / 1e6 - 1.0;
    let sel = Selection {
        since_ms: Some(second_ms),
        ..Selection::default()
    };
    let ds = columnar(&file, &sel, LoadOptions::default()).expect("group 0 skipped");
    assert_eq!(ds.len(), (CALLS - GROUP_ROWS as u64) as usize);
    assert_eq!(ds.seq(0), GROUP_ROWS as u64);
}
