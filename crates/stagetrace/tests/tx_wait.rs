//! The robot's own time inside the uplink (`tx_wait_ms`): from the
//! transport span's start to the return of the write that took the
//! request's first bytes, which the transport tells the span
//! (`record_request_written`). The uplink ends on the server's clock, so
//! without this figure a robot thread that lost its core before the write
//! reads as a slow network. A retry's write, a stamp from before the span
//! or a transport that stamps none gives no figure, never 0.
#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use stagetrace::{StageLayer, StageSpanExt};
use stagetrace_schema::Figure;
use stagetrace_test_support::{run_collecting, spin_for, timing};
use tracing::info_span;

/// How the transport span tells its write.
#[derive(Clone, Copy)]
enum Write {
    /// The robot works `before` inside the span, then the write returns.
    After(Duration),
    /// A stamp from before the span began (a stale one): ignored.
    Stale,
    /// Two attempts, each with its write: the first span's start is not the
    /// last write's.
    Retried,
    /// A transport that does not stamp its writes.
    None,
}

/// Instants around the span's start and the write's return.
#[derive(Clone, Copy, Debug)]
struct Stamps {
    /// Before the span was created.
    before: Instant,
    /// First thing inside the span.
    inside: Instant,
    written: Instant,
}

fn call(seq: u64, write: Write) -> Option<Stamps> {
    let _call = info_span!("call", seq = seq).entered();
    let attempts = if matches!(write, Write::Retried) {
        2
    } else {
        1
    };
    let mut stamps = None;
    for _ in 0..attempts {
        let before = Instant::now();
        let transport = info_span!("transport");
        transport.in_scope(|| {
            let inside = Instant::now();
            match write {
                Write::After(work) => {
                    spin_for(work);
                    let written = Instant::now();
                    transport.record_request_written(written);
                    stamps = Some(Stamps {
                        before,
                        inside,
                        written,
                    });
                }
                // The previous message's, a millisecond before this span.
                Write::Stale => transport
                    .record_request_written(before.checked_sub(Duration::from_millis(1)).unwrap()),
                Write::Retried => {
                    spin_for(Duration::from_micros(300));
                    transport.record_request_written(Instant::now());
                }
                Write::None => {}
            }
            // The wait for the response.
            spin_for(Duration::from_millis(1));
        });
    }
    stamps
}

#[test]
fn the_robots_time_before_its_write_returned_is_tx_wait() {
    let work = Duration::from_millis(3);
    let mut stamps = None;
    let (_, recs) = run_collecting(StageLayer::builder(), || {
        stamps = call(0, Write::After(work));
    });
    let st = stamps.unwrap();
    let tx = recs[0].figures.get(Figure::TxWait).unwrap();
    // The span began between `before` and `inside`: tx_wait is the write's
    // return less that start (10 µs for the layer's own clock conversion).
    let slack = 10_000;
    let lo = st.written.duration_since(st.inside).as_nanos() as i64 - slack;
    let hi = st.written.duration_since(st.before).as_nanos() as i64 + slack;
    timing::error(
        "tx_wait in its window (µs)",
        (tx as f64 - (lo + hi) as f64 / 2.0) / 1e3,
        (hi - lo) as f64 / 2e3,
    );
    assert!(lo <= tx && tx <= hi, "tx_wait {tx} ns outside [{lo}, {hi}]");
    // Inside the uplink's start → the response, and in the record's JSON.
    assert!(tx <= recs[0].figures.get(Figure::Roundtrip).unwrap());
    assert!(recs[0].to_json_line().contains("\"tx_wait_ms\":"));
}

#[test]
fn a_stale_stamp_a_retry_or_no_stamp_leave_no_tx_wait() {
    let (_, recs) = run_collecting(StageLayer::builder(), || {
        call(0, Write::Stale);
        call(1, Write::Retried);
        call(2, Write::None);
    });
    assert_eq!(recs.len(), 3);
    for r in &recs {
        assert_eq!(r.figures.get(Figure::TxWait), None, "{r:?}");
        assert!(r.figures.get(Figure::Roundtrip).is_some(), "{r:?}");
    }
}
