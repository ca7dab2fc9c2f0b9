//! Calls the Parquet sink could not write are its loss report, which the
//! layer's flush guard turns into the app's one warning (issue 40).

use stagetrace::{record::CallRecord, sink::RecordSink};
use stagetrace_parquet::ParquetSink;
use stagetrace_schema::Figure;

fn record(seq: u64) -> CallRecord {
    let mut r = CallRecord {
        seq,
        ts_unix_ns: 1_764_000_000_000_000_000 + seq * 33_333_333,
        kind: "infer".to_owned(),
        ..CallRecord::default()
    };
    r.set(Figure::E2e, 30_000_000);
    r
}

#[test]
fn calls_lost_to_an_unwritable_directory_are_the_loss_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("out");
    let mut sink = ParquetSink::builder(&root)
        .row_group_rows(10)
        .build()
        .expect("sink");
    assert_eq!(sink.loss_report(), None, "nothing lost yet");
    // A file takes the directory's name (root ignores permission bits).
    std::fs::remove_dir_all(&root).expect("rm");
    std::fs::write(&root, b"not a directory").expect("file");
    for seq in 0..25 {
        sink.on_record(&record(seq));
        sink.on_drained();
    }
    sink.flush();
    let loss = sink.loss_report().expect("a loss to report");
    assert_eq!(loss.lost, 25);
    let m = &loss.message;
    let head = format!(
        "25 of 25 calls were not written as Parquet under {}",
        root.display()
    );
    assert!(m.starts_with(&head), "{m}");
    assert!(m.contains("counted as parquet.dropped"), "{m}");
    assert!(m.contains("Fix: free disk space"), "{m}");
}
