//! The columnar reader: a Parquet file's columns load to the same dataset
//! as the JSON lines of the same calls, and a row group the time range
//! rules out is never decoded.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
        let mut r = record(i);
        // Calls through a gateway in the first two row groups only: the
        // groups after them go column by column, these two row by row.
        if i >= 2 * GROUP_ROWS as u64 {
            r.hops.clear();
        }
        sink.on_record(&r);
        sink.on_drained();
    }
    sink.flush();
    let listing = read::list(dir, &Selection::default()).expect("list");
    assert_eq!(listing.files.len(), 1, "{:?}", listing.files);
    listing.files[0].clone()
}

fn columnar(path: &Path, sel: &Selection, opts: LoadOptions) -> Result<Dataset, String> {
    columnar_counted(path, sel, opts).map(|(ds, _)| ds)
}

/// The dataset, and the batches that went column by column.
fn columnar_counted(
    path: &Path,
    sel: &Selection,
    opts: LoadOptions,
) -> Result<(Dataset, u64), String> {
    let whole = AtomicU64::new(0);
    let ds = Dataset::load_parts(vec![path.to_path_buf()], 1, |p| {
        match read::load_part(&p, sel, opts) {
            Ok(part) => {
                whole.store(part.whole_batches(), Ordering::Relaxed);
                Ok(Some(part))
            }
            Err(PartError::Load(e)) => Err(e),
            Err(PartError::Damaged(e)) => Err(LoadError::Io {
                path: p,
                source: std::io::Error::other(e.reason),
            }),
        }
    })
    .map_err(|e| e.to_string())?;
    Ok((ds, whole.load(Ordering::Relaxed)))
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
    // All six groups, then the last three and a half: one decoded batch
    // each, the range's run of rows column by column.
    for (sel, whole) in [(Selection::default(), 1), (since, 1)] {
        let want = via_json_lines(&file, &sel, opts);
        let (got, batches) = columnar_counted(&file, &sel, opts).expect("columnar");
        assert_eq!(batches, whole);
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

#[test]
fn a_batch_with_a_corrupt_record_goes_row_by_row_and_skips_it_as_json_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::builder(dir.path())
        .robot("arm")
        .build()
        .expect("sink");
    for i in 0..300 {
        let mut r = record(i);
        if i == 150 {
            // Two days: no latency is that long.
            r.set(stagetrace_schema::Figure::E2e, 172_800_000_000_000);
        }
        sink.on_record(&r);
    }
    sink.flush();
    let file = read::list(dir.path(), &Selection::default())
        .expect("list")
        .files[0]
        .clone();
    let sel = Selection::default();

    let strict = read::load_part(&file, &sel, LoadOptions::default()).expect_err("corrupt");
    match strict {
        PartError::Load(LoadError::Corrupt { line, reason, .. }) => {
            assert_eq!(line, 151);
            assert!(
                reason.starts_with("e2e_ms = 172800000 is not a latency"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }

    let opts = LoadOptions {
        skip_bad: true,
        keep_digests: true,
    };
    let (got, whole) = columnar_counted(&file, &sel, opts).expect("columnar");
    assert_eq!(whole, 0);
    assert_eq!((got.len(), got.notes.skipped), (299, 1));
    let want = via_json_lines(&file, &sel, opts);
    let shown = |ds: &Dataset| {
        let examples = format!("skipped_examples: {:?}", ds.notes.skipped_examples);
        format!("{ds:?}").replace(&examples, "")
    };
    assert_eq!(shown(&got), shown(&want));
}

#[test]
fn a_file_read_a_few_row_groups_at_a_time_is_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = written(dir.path());
    let groups = read::group_rows(&file).expect("footer");
    assert_eq!(groups, vec![GROUP_ROWS as u64; 6]);
    let sel = Selection::default();
    let opts = LoadOptions::default();
    let chunks: Vec<_> = [0..2, 2..4, 4..6]
        .into_iter()
        .map(|g| read::load_part_groups(&file, &sel, opts, g).expect("part"))
        .collect();
    assert_eq!(chunks[1].len(), 2 * GROUP_ROWS);
    let pieced = Dataset::load_parts(chunks, 1, |p| Ok(Some(p))).expect("pieced");
    let whole = columnar(&file, &sel, opts).expect("whole");
    // The same calls, the file named once per piece.
    assert_eq!(pieced.len(), whole.len());
    assert_eq!(pieced.files.len(), 3);
    for i in [0, 199, 200, 599] {
        assert_eq!(pieced.seq(i), whole.seq(i));
        assert_eq!(
            pieced.value(stagetrace_schema::Figure::E2e, i),
            whole.value(stagetrace_schema::Figure::E2e, i)
        );
    }
}
