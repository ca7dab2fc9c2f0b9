//! The clock figures a summary window carries: the drift of a server clock
//! that runs fast, estimated with its bound, from real calls through the
//! layer (the estimate needs five one-second buckets; the test runs 10.5 s so ten
//! buckets back the fit and its ±3σ bound rests on more than a handful of points).

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stagetrace::{ServerTiming, StageLayer, StageSpanExt};
use stagetrace_test_support::{run_collecting, spin_for, timing};
use tracing::info_span;

/// The server's clock gains this much on ours.
const DRIFT_PPM: f64 = 300.0;

#[test]
fn a_server_clock_that_runs_fast_shows_its_drift_in_the_summary() {
    let start = Instant::now();
    let (summary, records) = run_collecting(StageLayer::builder(), || {
        let mut seq = 0u64;
        while start.elapsed() < Duration::from_millis(10_500) {
            let _call = info_span!("call", seq = seq).entered();
            let transport = info_span!("transport", peer = "127.0.0.1:9000");
            transport.in_scope(|| {
                spin_for(Duration::from_micros(200));
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
                // 300 µs gained per second since the start of the run.
                let gained = start.elapsed().as_secs_f64() * DRIFT_PPM * 1e-6;
                let recv = now.as_nanos() as u64 + (gained * 1e9) as u64;
                spin_for(Duration::from_micros(500));
                spin_for(Duration::from_micros(200));
                transport.record_server_timing(ServerTiming {
                    recv_unix_ns: Some(recv),
                    total_ns: Some(500_000),
                    infer_ns: Some(400_000),
                    ..ServerTiming::default()
                });
            });
            drop(_call);
            seq += 1;
            std::thread::sleep(Duration::from_millis(15));
        }
    });
    assert!(records.len() > 200, "{} calls", records.len());
    assert!(records.iter().all(|r| r.clock_step.is_none()));
    let clock = summary.clock.unwrap();
    assert_eq!(clock.steps, 0);
    let drift = clock.drift_ppm.expect("drift estimated after 10.5 s");
    timing::error("drift vs truth (ppm)", drift.value - DRIFT_PPM, drift.err);
    timing::error("drift bound (ppm)", drift.err, 30.0);
    assert!(
        (drift.value - DRIFT_PPM).abs() <= drift.err,
        "drift {} ± {} ppm vs {DRIFT_PPM}",
        drift.value,
        drift.err
    );
    assert!(drift.err <= 30.0, "drift bound {} ppm", drift.err);
    eprintln!("drift {} ± {} ppm", drift.value, drift.err);
}
