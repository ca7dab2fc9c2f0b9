//! Property tests of the wire codecs: every codec round-trips, and every
//! parser survives arbitrary bytes (returns, never panics, never accepts
//! what it cannot re-emit). The `server_timing` map's properties are in
//! `stagetrace-net` (`tests/timing_map_props.rs`), next to its msgpack codec.

#![allow(missing_docs, clippy::unwrap_used)]

use proptest::prelude::*;
use stagetrace_test_support::strategies::server_timing as timing;
use stagetrace_wire::{
    ServerTiming, TraceParent, TraceState, MAX_BATCH_SIZE, MAX_DURATION_NS, MAX_TRACESTATE_LEN,
};

fn to_us(t: ServerTiming) -> ServerTiming {
    let r = |v: Option<u64>| v.map(|ns| (ns + 500) / 1000 * 1000);
    ServerTiming {
        recv_unix_ns: None,
        total_ns: r(t.total_ns),
        queue_ns: r(t.queue_ns),
        infer_ns: r(t.infer_ns),
        pre_ns: r(t.pre_ns),
        model_ns: r(t.model_ns),
        post_ns: r(t.post_ns),
        poll_wait_ns: None,
        // `Server-Timing` carries the stage durations only.
        transfer_ns: None,
        batch_size: None,
        cache_hit: None,
        host: Default::default(),
        ..ServerTiming::default()
    }
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9_*/-]{0,20}",
        "[a-z0-9][a-z0-9_*/-]{0,10}@[a-z][a-z0-9_*/-]{0,13}",
    ]
}

fn value() -> impl Strategy<Value = String> {
    // Printable ASCII except ',' and '=', spaces inside but not at the ends
    // (a member's surrounding spaces are optional whitespace).
    "[!-+\\--<>-~]([ !-+\\--<>-~]{0,30}[!-+\\--<>-~])?"
}

/// Well-formed traceparents with a slip here and there: a digit too many or
/// too few in the trace id, upper-case hex, a future version's suffix.
const TRACEPARENT_NEAR_MISS: &str =
    "[0-9a-f]{2}-[0-9a-f]{31}[0-9a-fA-F]{0,2}-[0-9a-f]{16}[0-9A-F]?-0[0-3](-[0-9a-z]{0,3})?";
/// `stagetrace-timing` values: known and unknown keys, numbers and non-numbers.
const TIMING_NEAR_MISS: &str =
    "(v=1;)?((recv|total|queue|infer|pre|post|transfer|[a-z]{1,3})=[0-9]{0,12}-?;?){0,6}";
/// `Server-Timing` lists: known and unknown metrics, quoted or bare `dur`.
const SERVER_TIMING_NEAR_MISS: &str =
    "((total|queue|infer|pre|post|[a-z]{1,4})(;(dur|DUR|desc)=(\"[0-9.]{0,5}\"?|[0-9.e-]{0,8}))*, ?){0,5}";

/// How many of `n` values drawn from `pattern` `parse` accepts.
fn accepted(pattern: &str, n: usize, parse: impl Fn(&str) -> bool) -> usize {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    (0..n)
        .filter(|_| parse(&pattern.new_tree(&mut runner).unwrap().current()))
        .count()
}

/// The near-miss properties check round trips only when a value is
/// accepted: their generators must reach the accepting branch, and the
/// rejecting one, often.
#[test]
fn near_misses_reach_both_branches() {
    let n = 2000;
    for (name, ok) in [
        (
            "traceparent",
            accepted(TRACEPARENT_NEAR_MISS, n, |s| TraceParent::parse(s).is_ok()),
        ),
        (
            "stagetrace-timing",
            accepted(TIMING_NEAR_MISS, n, |s| {
                ServerTiming::parse_timing_header(s).is_ok()
            }),
        ),
        (
            "Server-Timing",
            accepted(SERVER_TIMING_NEAR_MISS, n, |s| {
                ServerTiming::parse_server_timing_header(s).is_ok()
            }),
        ),
    ] {
        eprintln!("{name}: {ok} of {n} near misses accepted");
        assert!(
            ok >= n / 20 && ok <= n - n / 20,
            "{name}: {ok} of {n} accepted"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn traceparent_round_trips(
        trace_id in any::<[u8; 16]>(),
        parent_id in any::<[u8; 8]>(),
        flags in any::<u8>(),
    ) {
        prop_assume!(trace_id != [0; 16] && parent_id != [0; 8]);
        let tp = TraceParent { version: 0, trace_id, parent_id, flags };
        let h = tp.to_header();
        prop_assert_eq!(h.len(), 55);
        prop_assert_eq!(TraceParent::parse(&h), Ok(tp));
    }

    #[test]
    fn traceparent_future_versions(
        version in 1u8..0xff,
        trace_id in any::<[u8; 16]>(),
        parent_id in any::<[u8; 8]>(),
        tail in proptest::option::of("-[ -~]{0,40}"),
    ) {
        prop_assume!(trace_id != [0; 16] && parent_id != [0; 8]);
        let v0 = TraceParent { version: 0, trace_id, parent_id, flags: 1 }.to_header();
        let h = format!("{version:02x}{}{}", &v0[2..], tail.unwrap_or_default());
        let tp = TraceParent::parse(&h).unwrap();
        prop_assert_eq!(tp.version, version);
        prop_assert_eq!(tp.to_header(), v0);
    }

    #[test]
    fn traceparent_survives_garbage(b in proptest::collection::vec(any::<u8>(), 0..700)) {
        if let Ok(tp) = TraceParent::parse_bytes(&b) {
            // Whatever is accepted re-emits as a valid version-00 header.
            prop_assert_eq!(TraceParent::parse(&tp.to_header()), Ok(TraceParent { version: 0, ..tp }));
        }
    }

    #[test]
    fn traceparent_survives_near_misses(s in TRACEPARENT_NEAR_MISS) {
        if let Ok(tp) = TraceParent::parse(&s) {
            // Accepted: re-emits as a valid version-00 header.
            prop_assert_eq!(TraceParent::parse(&tp.to_header()), Ok(TraceParent { version: 0, ..tp }));
        }
    }

    #[test]
    fn tracestate_round_trips(members in proptest::collection::btree_map(key(), value(), 0..32)) {
        let mut ts = TraceState::new();
        for (k, v) in &members {
            ts.insert(k, v).unwrap();
        }
        let h = ts.to_header();
        prop_assert!(h.len() <= MAX_TRACESTATE_LEN);
        let back = TraceState::parse(&h).unwrap();
        if h.len() < MAX_TRACESTATE_LEN - 64 || back.len() == ts.len() {
            prop_assert_eq!(&back, &ts);
        }
        // A second pass changes nothing.
        prop_assert_eq!(back.to_header(), h);
    }

    #[test]
    fn tracestate_survives_garbage(b in proptest::collection::vec(any::<u8>(), 0..1200)) {
        if let Ok(ts) = TraceState::parse_bytes(&b) {
            prop_assert!(ts.len() <= 32);
            let h = ts.to_header();
            prop_assert!(TraceState::parse(&h).is_ok());
        }
    }

    #[test]
    fn tracestate_survives_listy_garbage(s in "[a-z0-9@=, \t*/_-]{0,600}") {
        let _ = TraceState::parse(&s);
    }

    #[test]
    fn timing_header_round_trips(t in timing()) {
        let h = t.to_timing_header();
        prop_assert_eq!(ServerTiming::parse_timing_header(&h), Ok(t));
    }

    #[test]
    fn timing_header_survives_garbage(b in proptest::collection::vec(any::<u8>(), 0..1200)) {
        if let Ok(t) = ServerTiming::parse_timing_header_bytes(&b) {
            prop_assert_eq!(ServerTiming::parse_timing_header(&t.to_timing_header()), Ok(t));
        }
    }

    #[test]
    fn timing_header_survives_near_misses(s in TIMING_NEAR_MISS) {
        if let Ok(t) = ServerTiming::parse_timing_header(&s) {
            prop_assert!(t.total_ns.is_none_or(|v| v <= MAX_DURATION_NS));
            prop_assert_eq!(ServerTiming::parse_timing_header(&t.to_timing_header()), Ok(t));
        }
    }

    #[test]
    fn timing_header_batch_and_cache_survive_near_misses(
        s in "v=1(;(batch|cache)=(hit|miss|[0-9a-z-]{0,12}))(;(batch|cache)=(hit|miss|[0-9a-z-]{0,12}))?",
    ) {
        if let Ok(t) = ServerTiming::parse_timing_header(&s) {
            prop_assert!(t.batch_size.is_none_or(|b| (1..=MAX_BATCH_SIZE).contains(&b)));
            prop_assert_eq!(ServerTiming::parse_timing_header(&t.to_timing_header()), Ok(t));
        }
    }

    #[test]
    fn server_timing_header_round_trips(t in timing()) {
        let h = t.to_server_timing_header();
        prop_assert_eq!(ServerTiming::parse_server_timing_header(&h), Ok(to_us(t)));
    }

    #[test]
    fn server_timing_header_survives_garbage(b in proptest::collection::vec(any::<u8>(), 0..1200)) {
        let _ = ServerTiming::parse_server_timing_header_bytes(&b);
    }

    #[test]
    fn server_timing_header_survives_near_misses(s in SERVER_TIMING_NEAR_MISS) {
        if let Ok(t) = ServerTiming::parse_server_timing_header(&s) {
            prop_assert!(t.infer_ns.is_none_or(|v| v <= MAX_DURATION_NS));
            // Accepted: what it kept re-emits and parses to the same (µs resolution).
            prop_assert_eq!(
                ServerTiming::parse_server_timing_header(&t.to_server_timing_header()),
                Ok(to_us(t))
            );
        }
    }
}
