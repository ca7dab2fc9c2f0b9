//! The host's wall clock against its monotonic clock. An NTP daemon may
//! slew the wall clock (one CI machine's ran 5 ms/s fast): each call must
//! still sit where the wall clock read at its start, and the summary states
//! the rate. On a host whose clocks agree both hold trivially; on a slewed
//! one a once-a-second anchor misplaces calls by up to 5 ms.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use stagetrace::clock::Anchor;
use stagetrace::StageLayer;
use stagetrace_test_support::{run_collecting, spin_for};
use tracing::info_span;

/// The wall clock and the monotonic clock read together ([`Anchor::now`]:
/// the closest of a few tries).
fn pair() -> (i128, Instant) {
    let read = Anchor::now();
    (i128::from(read.wall_unix_ns()), read.instant())
}

#[test]
fn calls_sit_where_the_wall_clock_read_at_their_start_and_the_summary_states_its_rate() {
    let first = pair();
    let mut brackets = Vec::new();
    let (summary, recs) = run_collecting(StageLayer::builder(), || {
        for seq in 0..60u64 {
            let (before, _) = pair();
            let call = info_span!("call", seq = seq).entered();
            let (after, _) = pair();
            info_span!("capture").in_scope(|| spin_for(Duration::from_millis(1)));
            drop(call);
            brackets.push((before, after));
            std::thread::sleep(Duration::from_millis(24));
        }
    });
    let last = pair();
    let mono = last.1.duration_since(first.1).as_nanos() as f64;
    let truth_ppm = ((last.0 - first.0) as f64 - mono) / mono * 1e6;
    assert_eq!(recs.len(), brackets.len());
    // 20 µs: the layer's fast clock against `Instant` and the rate's error
    // over the call's conversion lag. A stale anchor on a slewed clock
    // misses by up to its age times the slew (5 ms at 5000 ppm).
    let misses: Vec<i128> = recs
        .iter()
        .zip(&brackets)
        .map(|(r, (before, after))| {
            let at = i128::from(r.timeline.call_start_unix_ns);
            (before - at).max(at - after).max(0)
        })
        .collect();
    assert!(
        misses.iter().all(|m| *m <= 20_000),
        "ns outside the wall clock's bracket: {misses:?} (wall runs {truth_ppm:.1} ppm fast)"
    );
    let ppm = summary
        .wall_slew_ppm
        .expect("the rate is measured after 1.5 s of calls");
    // Two 200 ms baselines with reads good to a few µs: tens of ppm.
    assert!(
        (ppm - truth_ppm).abs() <= 30.0,
        "wall_slew_ppm {ppm} against {truth_ppm:.1} measured by the test"
    );
}
