//! Records shaped like a real run's, for the tests that write and read
//! Parquet: every kind of field, hops, failures and mitigations.

use stagetrace::hop_record::HopFigures;
use stagetrace::record::{CacheOutcome, CallRecord, ClockBasis};
use stagetrace_schema::Figure;

/// 2026-12-03 10:00:00 UTC.
pub(crate) const T0_NS: u64 = 1_796_292_000_000_000_000;

pub(crate) fn record(i: u64) -> CallRecord {
    let mut r = CallRecord {
        seq: i,
        ts_unix_ns: T0_NS + i * 33_333_333,
        kind: if i % 3 == 0 { "reset" } else { "infer" }.to_owned(),
        trace_id: Some(format!("{:032x}", 0xabc0_0000 + i)),
        clock: Some(ClockBasis::Estimate),
        ..CallRecord::default()
    };
    r.set(Figure::Capture, 1_234_567 + i as i64 * 1_001);
    r.set(Figure::Infer, 20_000_000 + (i as i64 % 17) * 98_765);
    r.set(Figure::E2e, 30_123_456 + i as i64 * 777);
    r.set(Figure::Offset, -1_500_000 + i as i64);
    r.set(Figure::Observer, 1_789);
    if i % 5 == 0 {
        r.failed = Some(true);
        r.error = Some("timeout \"x\"".to_owned());
        r.warmup = Some(true);
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
