//! A small Parquet file of varied calls, the same bytes on every run: the
//! seed of the reader's fuzz target (`stagetrace-fuzz`, target `parquet`)
//! and the file the reader's damaged-file regression tests mutate at fixed
//! places; and calls shaped like a real run's ([`shaped_like_a_run`]),
//! which the size test and the fleet generator
//! (`examples/fleet_records.rs`) write. Not part of the stable API.

use stagetrace::record::{CacheOutcome, ClockBasis};
use stagetrace::{hop_record::HopFigures, record::CallRecord};
use stagetrace_schema::Figure;

/// 2026-12-03 10:00:00 UTC: the first call's start.
pub const T0_NS: u64 = 1_796_292_000_000_000_000;

/// Rows per row group of [`file`]: three row groups, each with its own
/// dictionary pages.
pub const ROW_GROUP_ROWS: usize = 16;

/// Calls of every shape the writer knows: stages, clock fields, labels,
/// failures, hops through a gateway.
pub fn records(n: u64) -> Vec<CallRecord> {
    (0..n).map(record).collect()
}

/// Call `i` of [`records`], 33 ms apart from [`T0_NS`].
pub fn record(i: u64) -> CallRecord {
    let mut r = CallRecord {
        seq: i,
        ts_unix_ns: T0_NS + i * 33_333_333,
        kind: if i % 3 == 0 { "reset" } else { "infer" }.to_owned(),
        trace_id: Some(format!("{:032x}", 0xabc0_0000 + i)),
        clock: Some(ClockBasis::Estimate),
        ..CallRecord::default()
    };
    r.set(Figure::Capture, 1_234_567 + i as i64 * 1_001);
    r.set(Figure::Uplink, 2_000_000 + (i as i64 % 5) * 12_345);
    r.set(Figure::Infer, 20_000_000 + (i as i64 % 17) * 98_765);
    r.set(Figure::E2e, 30_123_456 + i as i64 * 777);
    r.set(Figure::Offset, -1_500_000 + i as i64);
    r.set(Figure::Observer, 1_789);
    if i % 5 == 0 {
        r.failed = Some(true);
        r.error = Some("timeout \"x\"".to_owned());
    }
    if i % 7 == 0 {
        r.deadline_miss = Some(i % 2 == 0);
        r.batch_size = Some(3);
        r.cache = Some(CacheOutcome::Hit);
        r.output_digest = Some("deadbeef".to_owned());
        r.hops = vec![
            HopFigures {
                up_ns: Some(1_000_001),
                down_ns: Some(2_000_500),
                offset_ns: Some(-3_000_000),
                drift_ppm: Some(12.3456),
                drift_err_ppm: Some(2.5),
                ..HopFigures::default()
            },
            HopFigures {
                net_ns: Some(4_000_000),
                ..HopFigures::default()
            },
        ];
    }
    r
}

/// The sample file: 40 calls of [`records`] in row groups of
/// [`ROW_GROUP_ROWS`], as the sink writes them.
pub fn file() -> Vec<u8> {
    #[allow(clippy::expect_used)]
    crate::file::file_bytes(&records(40), ROW_GROUP_ROWS).expect("an in-memory write cannot fail")
}

/// A small deterministic generator (xorshift): no dependency, same bytes every run.
#[derive(Debug)]
pub struct Noise(u64);

impl Noise {
    /// The generator every run starts from: the same calls each time.
    pub fn new() -> Noise {
        Noise(0x9e37_79b9_7f4a_7c15)
    }

    /// A generator of its own, for one robot of a fleet.
    pub fn seeded(seed: u64) -> Noise {
        Noise((0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0xbf58_476d_1ce4_e5b9)) | 1)
    }

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

/// Call `i` of a run shaped like a real one: every client and server
/// stage, the clock split, a trace id, figures with microsecond noise;
/// one call every 33 ms from 2026-12-03 10:00 UTC.
pub fn shaped_like_a_run(i: u64, noise: &mut Noise) -> CallRecord {
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

impl Default for Noise {
    fn default() -> Noise {
        Noise::new()
    }
}
