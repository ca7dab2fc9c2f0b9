//! Call records built by hand, for exporter tests that need no layer.

#![allow(dead_code, unreachable_pub)]

use stagetrace::record::CallRecord;
use stagetrace::record::{SpanTime, Timeline};
use stagetrace_schema::Figure;

/// Call `seq` of two spans, the call (2 ms) and its capture (1 ms).
pub fn two_span_call(seq: u64) -> CallRecord {
    CallRecord {
        seq,
        ts_unix_ns: 1_764_000_000_000_000_000,
        kind: "call".into(),
        figures: [(Figure::Capture, 1_000_000), (Figure::E2e, 2_000_000)]
            .into_iter()
            .collect(),
        timeline: Timeline {
            call_start_unix_ns: 1_764_000_000_000_000_000,
            call_dur_ns: 2_000_000,
            capture: Some(SpanTime {
                start_ns: 0,
                dur_ns: 1_000_000,
            }),
            ..Timeline::default()
        },
        ..CallRecord::default()
    }
}
