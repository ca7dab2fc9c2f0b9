//! The HTTP header parsers of the core (`stagetrace::wire`): `traceparent`,
//! `tracestate`, `stagetrace-timing` and `Server-Timing`.

use stagetrace_wire::ServerTiming;
use stagetrace_wire::{
    TraceParent, TraceState, MAX_BATCH_SIZE, MAX_DURATION_NS, MAX_TIMING_HEADER_LEN,
    MAX_TRACEPARENT_LEN, MAX_TRACESTATE_INPUT, MAX_TRACESTATE_LEN, MAX_TRACESTATE_MEMBERS,
    MAX_UNIX_NS,
};

use super::{ensure, Outcome, Target, DEFAULT_TEST_INPUTS};
use crate::alloc::peak_during;

fn outcome(accepted: bool, peak_bytes: usize) -> Result<Outcome, String> {
    Ok(Outcome {
        accepted,
        peak_bytes,
    })
}

/// The three header parsers below work on the input slice and fixed-size
/// values: they run on every request and must not allocate at all.
fn no_allocation(_len: usize) -> usize {
    0
}

// ---------------------------------------------------------------- traceparent

fn traceparent_seeds() -> Vec<Vec<u8>> {
    let mut s: Vec<Vec<u8>> = [
        TraceParent::new([0x4b; 16], [0x01; 8], true),
        TraceParent::new([1; 16], [0xff; 8], false),
    ]
    .into_iter()
    .flatten()
    .map(|tp| tp.to_bytes().to_vec())
    .collect();
    for edge in [
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        " \t00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    ] {
        s.push(edge.as_bytes().to_vec());
    }
    s
}

fn traceparent_check(input: &[u8]) -> Result<Outcome, String> {
    let (r, peak) = peak_during(|| TraceParent::parse_bytes(input));
    let Ok(tp) = r else {
        return outcome(false, peak);
    };
    ensure(tp.version != 0xff, || "accepted version ff".into())?;
    ensure(tp.trace_id != [0; 16] && tp.parent_id != [0; 8], || {
        "accepted an all-zero id".into()
    })?;
    ensure(input.len() <= MAX_TRACEPARENT_LEN, || {
        "accepted an over-long input".into()
    })?;
    let bytes = tp.to_bytes();
    let again = TraceParent::parse_bytes(&bytes)
        .map_err(|e| format!("re-encoded {tp:?} does not parse: {e}"))?;
    ensure(again == TraceParent { version: 0, ..tp }, || {
        format!("round trip changed {tp:?} into {again:?}")
    })?;
    if tp.version == 0 {
        let trimmed = input
            .iter()
            .position(|c| !matches!(c, b' ' | b'\t'))
            .map_or(&[][..], |i| &input[i..]);
        ensure(trimmed.starts_with(&bytes), || {
            "version 00 accepted but not re-emitted as given".into()
        })?;
    }
    outcome(true, peak)
}

/// `traceparent` (`TraceParent::parse_bytes`).
pub(super) const TRACEPARENT: Target = Target {
    name: "traceparent",
    max_len: MAX_TRACEPARENT_LEN + 8,
    seeds: traceparent_seeds,
    dict: &[
        b"00-",
        b"-01",
        b"-00",
        b"ff-",
        b"cc-",
        b"-",
        b"0000000000000000",
        b"ffffffff",
        b"A",
        b"g",
        b" ",
        b"\t",
        b"-extra",
    ],
    check: traceparent_check,
    mem_bound: no_allocation,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};

// ---------------------------------------------------------------- tracestate

fn tracestate_seeds() -> Vec<Vec<u8>> {
    let mut ts = TraceState::new();
    let _ = ts.insert("congo", "t61rcWkgMzE");
    let _ = ts.insert("rojo", "00f067aa0ba902b7");
    let _ = ts.insert("tenant@sys", "a value with spaces!");
    let mut full = TraceState::new();
    for i in 0..MAX_TRACESTATE_MEMBERS {
        let _ = full.insert(&format!("k{i}"), &"v".repeat(i + 1));
    }
    vec![
        ts.to_header().into_bytes(),
        full.to_header().into_bytes(),
        b"a=1,,b=2 , c=3".to_vec(),
        b"0tenant@x=1".to_vec(),
        b"a=1,a=2".to_vec(),
    ]
}

fn tracestate_check(input: &[u8]) -> Result<Outcome, String> {
    let (r, peak) = peak_during(|| TraceState::parse_bytes(input));
    let Ok(ts) = r else {
        return outcome(false, peak);
    };
    ensure(ts.len() <= MAX_TRACESTATE_MEMBERS, || {
        format!("accepted {} members", ts.len())
    })?;
    // The grammar, checked by the public validator: each member must be
    // insertable as it is, and no key may repeat.
    let mut rebuilt = TraceState::new();
    for (k, v) in ts.iter() {
        rebuilt
            .insert(k, v)
            .map_err(|e| format!("accepted member {k:?}={v:?} breaks the grammar: {e}"))?;
    }
    ensure(rebuilt.len() == ts.len(), || {
        "accepted a repeated key".into()
    })?;
    let header = ts.to_header();
    ensure(header.len() <= MAX_TRACESTATE_LEN, || {
        format!("to_header wrote {} characters", header.len())
    })?;
    let again = TraceState::parse(&header)
        .map_err(|e| format!("re-encoded {header:?} does not parse: {e}"))?;
    let full_len: usize = ts.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if full_len <= MAX_TRACESTATE_LEN {
        ensure(again == ts, || {
            format!("round trip changed {ts:?} into {again:?}")
        })?;
    } else {
        // Truncated by the spec's rules: what is left is members of the
        // original, in order, with their values.
        let mut it = ts.iter();
        for (k, v) in again.iter() {
            ensure(it.any(|m| m == (k, v)), || {
                format!("truncation invented or reordered {k}={v}")
            })?;
        }
    }
    outcome(true, peak)
}

/// The accepted members' strings (at most the input's bytes) and the member
/// list (at most 32 pairs of `String`, 48 bytes each, with the doubling
/// growth's old and new buffers alive at once): twice the input plus 4 KiB.
fn tracestate_bound(len: usize) -> usize {
    2 * len + 4096
}

/// `tracestate` (`TraceState::parse_bytes`).
pub(super) const TRACESTATE: Target = Target {
    name: "tracestate",
    max_len: MAX_TRACESTATE_INPUT + 16,
    seeds: tracestate_seeds,
    dict: &[
        b",", b"=", b"@", b"a", b"0", b"*", b"/", b" ", b"\t", b",,", b"k=v", b"A", b"~", b"\x7f",
    ],
    check: tracestate_check,
    mem_bound: tracestate_bound,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};

// ---------------------------------------------------------------- timing headers

fn timings() -> Vec<ServerTiming> {
    vec![
        ServerTiming {
            recv_unix_ns: Some(1_700_000_000_123_456_789),
            total_ns: Some(13_000_000),
            transfer_ns: Some(2_000_001),
            queue_ns: Some(120_000),
            infer_ns: Some(12_300_000),
            pre_ns: Some(1_000_000),
            post_ns: Some(500_000),
            model_ns: Some(10_800_000),
            device_ns: Some(10_000_000),
            accept_wait_ns: Some(6),
            loop_wait_ns: Some(7),
            prev_tx_wait_ns: Some(8),
            recv_at_pickup: true,
            poll_wait_ns: Some(20_000_000),
            batch_size: Some(4),
            cache_hit: Some(false),
            host: stagetrace_wire::HostShare::default()
                .with(stagetrace_wire::HostFigure::RunWait, 40)
                .with(stagetrace_wire::HostFigure::MajorFaults, 1),
        },
        ServerTiming {
            infer_ns: Some(7),
            cache_hit: Some(true),
            ..Default::default()
        },
        ServerTiming {
            recv_unix_ns: Some(MAX_UNIX_NS),
            total_ns: Some(MAX_DURATION_NS),
            batch_size: Some(MAX_BATCH_SIZE),
            ..Default::default()
        },
    ]
}

/// Every field within the wire's documented range.
fn in_range(t: &ServerTiming) -> Result<(), String> {
    let durations = [
        t.total_ns, t.queue_ns, t.infer_ns, t.pre_ns, t.model_ns, t.post_ns,
    ];
    ensure(
        t.recv_unix_ns.is_none_or(|v| v <= MAX_UNIX_NS)
            && durations
                .iter()
                .all(|d| d.is_none_or(|v| v <= MAX_DURATION_NS))
            && t.batch_size
                .is_none_or(|b| (1..=MAX_BATCH_SIZE).contains(&b)),
        || format!("accepted out of range: {t:?}"),
    )
}

fn timing_header_seeds() -> Vec<Vec<u8>> {
    let mut s: Vec<Vec<u8>> = timings()
        .iter()
        .map(|t| t.to_timing_header().into_bytes())
        .collect();
    s.push(b" v=1 ; infer=5 ;future=abc;".to_vec());
    s.push(b"v=1;total=3600000000001".to_vec());
    s
}

fn timing_header_check(input: &[u8]) -> Result<Outcome, String> {
    let (r, peak) = peak_during(|| ServerTiming::parse_timing_header_bytes(input));
    let Ok(t) = r else {
        return outcome(false, peak);
    };
    in_range(&t)?;
    let h = t.to_timing_header();
    let again = ServerTiming::parse_timing_header(&h)
        .map_err(|e| format!("re-encoded {h:?} does not parse: {e}"))?;
    ensure(again == t, || {
        format!("round trip changed {t:?} into {again:?}")
    })?;
    outcome(true, peak)
}

/// `stagetrace-timing` (`ServerTiming::parse_timing_header_bytes`).
pub(super) const TIMING_HEADER: Target = Target {
    name: "timing-header",
    max_len: MAX_TIMING_HEADER_LEN + 16,
    seeds: timing_header_seeds,
    dict: &[
        b";",
        b"=",
        b"v=1",
        b"v=2",
        b";recv=",
        b";total=",
        b";queue=",
        b";infer=",
        b";pre=",
        b";post=",
        b";batch=",
        b";cache=hit",
        b";cache=miss",
        b"18446744073709551615",
        b"18446744073709551616",
        b"9223372036854775807",
        b"3600000000000",
        b"3600000000001",
        b"4294967296",
        b"1048577",
        b"-1",
        b"1.5",
        b"NaN",
        b"1e309",
        b" ",
    ],
    check: timing_header_check,
    mem_bound: no_allocation,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};

fn server_timing_seeds() -> Vec<Vec<u8>> {
    let mut s: Vec<Vec<u8>> = timings()
        .iter()
        .map(|t| t.to_server_timing_header().into_bytes())
        .collect();
    s.push(
        br#"cache;desc="hit, \"warm\"", infer;desc=gpu;dur=12.3, total ; dur = 13, infer;dur=99,db"#
            .to_vec(),
    );
    s.push(b"infer;dur=.0000015, total;DUR=\"13.5\"".to_vec());
    s
}

/// What a value becomes through `Server-Timing`: ms with three decimals,
/// so nanoseconds rounded half up to the microsecond.
fn to_us(ns: Option<u64>) -> Option<u64> {
    ns.map(|v| v.saturating_add(500) / 1000 * 1000)
}

fn server_timing_check(input: &[u8]) -> Result<Outcome, String> {
    let (r, peak) = peak_during(|| ServerTiming::parse_server_timing_header_bytes(input));
    let Ok(t) = r else {
        return outcome(false, peak);
    };
    in_range(&t)?;
    ensure(
        t.recv_unix_ns.is_none() && t.batch_size.is_none() && t.cache_hit.is_none(),
        || format!("Server-Timing set a field it does not carry: {t:?}"),
    )?;
    let h = t.to_server_timing_header();
    let again = ServerTiming::parse_server_timing_header(&h)
        .map_err(|e| format!("re-encoded {h:?} does not parse: {e}"))?;
    let want = ServerTiming {
        total_ns: to_us(t.total_ns),
        queue_ns: to_us(t.queue_ns),
        infer_ns: to_us(t.infer_ns),
        pre_ns: to_us(t.pre_ns),
        model_ns: to_us(t.model_ns),
        post_ns: to_us(t.post_ns),
        ..Default::default()
    };
    // Rounding may carry a value just under the limit over it; the header
    // then is refused, which is the documented range check at work.
    if in_range(&want).is_ok() {
        ensure(again == want, || {
            format!("round trip of {t:?} gave {again:?}, want {want:?}")
        })?;
    }
    outcome(true, peak)
}

/// `Server-Timing` (`ServerTiming::parse_server_timing_header_bytes`).
pub(super) const SERVER_TIMING: Target = Target {
    name: "server-timing",
    max_len: MAX_TIMING_HEADER_LEN + 16,
    seeds: server_timing_seeds,
    dict: &[
        b",",
        b";",
        b"=",
        b";dur=",
        b";DUR=",
        b"\"",
        b"\\",
        b"total",
        b"transfer",
        b"queue",
        b"infer",
        b"pre",
        b"post",
        b";desc=",
        b".",
        b".0000005",
        b"3600000",
        b"3600000.0005",
        b"18446744073709551615",
        b"-1",
        b"1e3",
        b"NaN",
        b" ",
        b"\t",
    ],
    check: server_timing_check,
    mem_bound: no_allocation,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};
