//! The sink's files, read back: the same JSON lines as the JSON-line sink
//! writes for the same calls; a damaged file refused by name; a directory
//! that cannot be written counted, not fatal.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use stagetrace::{record::CallRecord, sink::RecordSink};
use stagetrace_parquet::read::{self, Selection};
use stagetrace_parquet::ParquetSink;

mod common;

use common::{record, T0_NS};

fn read_all(root: &Path, sel: &Selection) -> (Vec<String>, Vec<PathBuf>) {
    let listing = read::list(root, sel).expect("list");
    let mut lines = Vec::new();
    for f in &listing.files {
        let mut text = String::new();
        read::open(f, sel)
            .expect("open")
            .read_to_string(&mut text)
            .expect("read");
        lines.extend(text.lines().map(str::to_owned));
    }
    (lines, listing.files)
}

#[test]
fn rows_read_back_as_the_json_lines_of_the_same_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::builder(dir.path())
        .robot("arm 3")
        .row_group_rows(100)
        .build()
        .expect("sink");
    let records: Vec<CallRecord> = (0..1_000).map(record).collect();
    for (i, r) in records.iter().enumerate() {
        sink.on_record(r);
        if i % 64 == 0 {
            sink.on_drained();
        }
    }
    sink.flush();
    sink.flush();
    let counters: Vec<_> = sink.counters();
    assert!(counters.contains(&("parquet.rows", 1_000)), "{counters:?}");
    assert!(counters.contains(&("parquet.dropped", 0)), "{counters:?}");

    let (lines, files) = read_all(dir.path(), &Selection::default());
    let want: Vec<String> = records.iter().map(CallRecord::to_json_line).collect();
    assert_eq!(lines, want);
    assert_eq!(files.len(), 1);
    let rel = files[0].strip_prefix(dir.path()).expect("under root");
    assert!(
        rel.starts_with("robot=arm_3/date=2026-12-03"),
        "{}",
        rel.display()
    );
}

#[test]
fn files_close_by_day_and_size_and_the_partitions_prune() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::builder(dir.path())
        .robot("arm-1")
        .row_group_rows(50)
        .max_file_bytes(20_000)
        .build()
        .expect("sink");
    let day_ns = 86_400 * 1_000_000_000;
    for i in 0..2_000u64 {
        let mut r = record(i);
        // The second half of the calls on the next day.
        r.ts_unix_ns += (i / 1_000) * day_ns;
        sink.on_record(&r);
        sink.on_drained();
    }
    sink.flush();
    let (all, files) = read_all(dir.path(), &Selection::default());
    assert_eq!(all.len(), 2_000);
    assert!(files.len() > 2, "size rotation: {files:?}");
    let next_day = Selection {
        since_ms: Some(((T0_NS + day_ns) / 1_000_000 - 10 * 3_600_000) as f64),
        ..Selection::default()
    };
    let listing = read::list(dir.path(), &next_day).expect("list");
    assert!(listing.pruned > 0);
    assert!(listing
        .files
        .iter()
        .all(|f| f.to_string_lossy().contains("date=2026-12-04")));
    let (lines, _) = read_all(dir.path(), &next_day);
    assert_eq!(lines.len(), 1_000);
    let other_robot = Selection {
        robots: vec!["arm-2".into()],
        ..Selection::default()
    };
    assert!(read::list(dir.path(), &other_robot)
        .expect("list")
        .files
        .is_empty());
}

#[test]
fn a_cut_short_file_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::builder(dir.path()).build().expect("sink");
    for i in 0..100 {
        sink.on_record(&record(i));
    }
    sink.flush();
    let (_, files) = read_all(dir.path(), &Selection::default());
    let file = &files[0];
    let bytes = std::fs::read(file).expect("read");
    std::fs::write(file, &bytes[..bytes.len() / 2]).expect("truncate");
    let err = read::open(file, &Selection::default()).expect_err("a truncated file");
    let msg = err.to_string();
    assert!(msg.contains(&file.display().to_string()), "{msg}");
    assert!(msg.contains("not a readable Parquet file"), "{msg}");
    std::fs::write(file, b"PAR1 this is not parquet").expect("garbage");
    let msg = read::open(file, &Selection::default())
        .expect_err("garbage")
        .to_string();
    assert!(msg.contains(&file.display().to_string()), "{msg}");
}

#[test]
fn a_directory_that_cannot_be_written_counts_the_lost_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("out");
    let mut sink = ParquetSink::builder(&root)
        .row_group_rows(10)
        .build()
        .expect("sink");
    // The directory goes away and a file takes its name (root ignores
    // permission bits, so a mode would not stop these tests under root).
    std::fs::remove_dir_all(&root).expect("rm");
    std::fs::write(&root, b"not a directory").expect("file");
    for i in 0..25 {
        sink.on_record(&record(i));
        sink.on_drained();
    }
    sink.flush();
    let c = sink.counters();
    let get = |k: &str| c.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    assert!(get("parquet.write_errors") >= Some(1), "{c:?}");
    assert_eq!(get("parquet.rows"), Some(0), "{c:?}");
    assert_eq!(get("parquet.dropped"), Some(25), "{c:?}");

    // The directory comes back: after the retry delay the sink writes again.
    std::fs::remove_file(&root).expect("rm file");
    std::fs::create_dir(&root).expect("mkdir");
    std::thread::sleep(Duration::from_millis(1_100));
    for i in 25..35 {
        sink.on_record(&record(i));
    }
    sink.flush();
    let c = sink.counters();
    assert!(c.contains(&("parquet.rows", 10)), "{c:?}");
}

#[test]
fn a_file_that_cannot_be_closed_counts_every_row_it_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::builder(dir.path())
        .robot("arm-1")
        .row_group_rows(10)
        .build()
        .expect("sink");
    for i in 0..15 {
        sink.on_record(&record(i));
    }
    // One row group is in the open file, five rows are buffered; then the
    // partition goes away, so the finished file cannot be given its name.
    std::fs::remove_dir_all(dir.path().join("robot=arm-1")).expect("rm");
    sink.flush();
    let c = sink.counters();
    assert!(c.contains(&("parquet.dropped", 15)), "{c:?}");
    assert!(c.contains(&("parquet.write_errors", 1)), "{c:?}");
    assert!(c.contains(&("parquet.rows", 0)), "{c:?}");
}
