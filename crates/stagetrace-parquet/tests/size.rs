//! Bytes per million calls, Parquet against JSON lines, for calls shaped
//! like a real run's (every client and server stage, the clock split, a
//! trace id, figures with microsecond noise). Prints the figures:
//! `cargo test -p stagetrace-parquet --release --test size -- --nocapture`.
//! With `STAGETRACE_SIZE_OUT=DIR` it keeps both (`DIR/lines/records-size.jsonl`,
//! `DIR/parquet/`) for timing `stagetrace report` on each;
//! `STAGETRACE_SIZE_CALLS=N` sets the number of calls (default 200 000).

use stagetrace::sink::RecordSink;
use stagetrace_parquet::read::{self, Selection};
use stagetrace_parquet::sample::{shaped_like_a_run, Noise};
use stagetrace_parquet::ParquetSink;

#[test]
fn parquet_takes_a_fraction_of_json_lines() {
    use std::io::Write;
    let calls: u64 = std::env::var("STAGETRACE_SIZE_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000);
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = std::env::var_os("STAGETRACE_SIZE_OUT")
        .map_or_else(|| tmp.path().to_path_buf(), std::path::PathBuf::from);
    let lines_dir = out.join("lines");
    std::fs::create_dir_all(&lines_dir).expect("mkdir");
    let mut lines = std::io::BufWriter::new(
        std::fs::File::create(lines_dir.join("records-size.jsonl")).expect("jsonl"),
    );
    let mut sink = ParquetSink::builder(out.join("parquet"))
        .robot("arm-1")
        .build()
        .expect("sink");
    let mut noise = Noise::new();
    let mut json_bytes = 0u64;
    for i in 0..calls {
        let rec = shaped_like_a_run(i, &mut noise);
        let line = rec.to_json_line();
        json_bytes += line.len() as u64 + 1;
        writeln!(lines, "{line}").expect("write");
        sink.on_record(&rec);
        if i % 1_000 == 0 {
            sink.on_drained();
        }
    }
    sink.flush();
    lines.flush().expect("flush");
    let listing = read::list(&out.join("parquet"), &Selection::default()).expect("list");
    let parquet_bytes: u64 = listing
        .files
        .iter()
        .map(|f| std::fs::metadata(f).expect("size").len())
        .sum();
    let per_million = |b: u64| b as f64 / calls as f64;
    println!(
        "bytes per million calls: JSON lines {:.1} MB, Parquet {:.1} MB ({:.1}x smaller, {} files)",
        per_million(json_bytes),
        per_million(parquet_bytes),
        json_bytes as f64 / parquet_bytes as f64,
        listing.files.len()
    );
    // 8.2x when written; the margin keeps a change of encoder from failing it.
    assert!(
        parquet_bytes * 6 < json_bytes,
        "{parquet_bytes} vs {json_bytes}"
    );
}
