//! The server timing an HTTP response carries, as real servers send it:
//! several `Server-Timing` lines, quoted or upper-case `dur`, and a
//! malformed `stagetrace-timing` header that falls back to `Server-Timing`
//! and is counted on the stage layer.

#![allow(clippy::unwrap_used)]

use reqwest::header::{HeaderMap, HeaderValue};
use stagetrace::{ServerTiming, StageLayer};
use stagetrace_net::http::read_timing_headers;
use stagetrace_test_support::run_collecting;

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

#[test]
fn several_server_timing_lines_with_quoted_and_upper_case_dur() {
    let (summary, _) = run_collecting(StageLayer::builder(), || {
        let h = headers(&[
            ("server-timing", "cache;desc=\"miss\", total;dur=12.5"),
            ("server-timing", "infer;DUR=\"10.25\";desc=\"model\""),
            ("server-timing", "queue;Dur=1, total;dur=99"),
        ]);
        assert_eq!(
            read_timing_headers(&h),
            Some(ServerTiming {
                // The first `total` wins; the later one is ignored.
                total_ns: Some(12_500_000),
                infer_ns: Some(10_250_000),
                queue_ns: Some(1_000_000),
                ..ServerTiming::default()
            })
        );
    });
    assert_eq!(summary.rejected_headers, 0);
}

#[test]
fn a_malformed_stagetrace_timing_header_falls_back_and_is_counted() {
    let (summary, _) = run_collecting(StageLayer::builder(), || {
        let h = headers(&[
            ("stagetrace-timing", "v=1;recv=oops;total=5000000"),
            ("server-timing", "total;dur=5, infer;dur=4"),
        ]);
        assert_eq!(
            read_timing_headers(&h),
            Some(ServerTiming {
                total_ns: Some(5_000_000),
                infer_ns: Some(4_000_000),
                ..ServerTiming::default()
            })
        );
        // Both malformed: nothing, and two rejections.
        let h = headers(&[
            ("stagetrace-timing", "v=9;total=1"),
            ("server-timing", "total;dur"),
        ]);
        assert_eq!(read_timing_headers(&h), None);
    });
    assert_eq!(summary.rejected_headers, 3);
}
