//! Bytes per million calls, Parquet against JSON lines, for calls shaped
//! like a real run's (every client and server stage, the clock split, a
//! trace id, figures with microsecond noise). Prints the figures:
//! `cargo test -p stagetrace-parquet --release --test size -- --nocapture`.
//! With `STAGETRACE_SIZE_OUT=DIR` it keeps both (`DIR/lines/records-size.jsonl`,
//! `DIR/parquet/`) for timing `stagetrace report` on each;
//! `STAGETRACE_SIZE_CALLS=N` sets the number of calls (default 200 000).

use stagetrace::record::ClockBasis;
use stagetrace::{record::CallRecord, sink::RecordSink};
use stagetrace_parquet::read::{self, Selection};
use stagetrace_parquet::ParquetSink;
use stagetrace_schema::Figure;

/// A small deterministic generator (xorshift): no dependency, same bytes every run.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `median_ms` ± up to `spread_ms`, in ns.
    fn ms(&mut self, median_ms: f64, spread_ms: f64) -> i64 {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0 * 2.0 - 1.0;
        ((median_ms + u * spread_ms) * 1e6) as i64
    }
}

fn call(i: u64, noise: &mut Noise) -> CallRecord {
    let mut r = CallRecord {
        seq: i,
        ts_unix_ns: 1_796_292_000_000_000_000 + i * 33_333_333 + noise.next() % 200_000,
        kind: "infer".to_owned(),
        trace_id: Some(format!("{:016x}{:016x}", noise.next(), noise.next())),
        clock: Some(ClockBasis::Estimate),
        ..CallRecord::default()
    };
    let capture = noise.ms(2.0, 0.3);
    let uplink = noise.ms(4.0, 0.8);
    let queue = noise.ms(0.2, 0.05);
    let infer = noise.ms(30.0, 3.0);
    let downlink = noise.ms(1.5, 0.4);
    let dispatch = noise.ms(1.0, 0.1);
    let server = queue + infer + noise.ms(0.3, 0.05);
    let roundtrip = uplink + server + downlink;
    let e2e = capture + roundtrip + dispatch + noise.ms(0.2, 0.1);
    for (f, v) in [
        (Figure::Capture, capture),
        (Figure::Uplink, uplink),
        (Figure::Queue, queue),
        (Figure::Infer, infer),
        (Figure::Downlink, downlink),
        (Figure::Dispatch, dispatch),
        (Figure::Roundtrip, roundtrip),
        (Figure::Server, server),
        (Figure::Net, uplink + downlink),
        (Figure::E2e, e2e),
        (Figure::Gap, e2e - capture - roundtrip - dispatch),
        (Figure::Offset, noise.ms(-120.0, 0.05)),
        (Figure::SplitErr, noise.ms(0.08, 0.02)),
        (Figure::Observer, noise.ms(0.004, 0.001)),
    ] {
        r.set(f, v);
    }
    r
}

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
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    let mut json_bytes = 0u64;
    for i in 0..calls {
        let rec = call(i, &mut noise);
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
