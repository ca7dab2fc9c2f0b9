//! A server that reports no timing: the response's first byte
//! cuts the black-box roundtrip into `ttfb` (the wait for it) and `rx` (the
//! response's transfer), both on the client's clock; a server that sends
//! timing keeps the full split and gets neither.
#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stagetrace::{record::CallRecord, ServerTiming, StageLayer, StageSpanExt};
use stagetrace_schema::Figure;
use stagetrace_test_support::{run_collecting, spin_for, timing};
use tracing::info_span;

/// How the transport span of a call ends.
#[derive(Clone, Copy)]
enum Reply {
    /// No timing; the first byte after `wait`, the last after `wait + rx`.
    Silent { wait: Duration, rx: Duration },
    /// Full server timing, and a first byte too.
    Timed,
    /// No timing, a first-byte stamp from before the span began (a stale
    /// stamp of a transport's own: ignored).
    StaleStamp,
    /// No timing, two attempts (a retry): the roundtrip is both attempts.
    Retried,
}

/// Instants around a silent call's transport span: before it was created,
/// first thing inside it, the first byte, last thing inside it, after it.
#[derive(Clone, Copy, Debug)]
struct Stamps {
    before: Instant,
    inside: Instant,
    first_byte: Instant,
    last: Instant,
    after: Instant,
}

fn call(seq: u64, reply: Reply) -> Option<Stamps> {
    let _call = info_span!("call", seq = seq).entered();
    let before = Instant::now();
    let attempts = if matches!(reply, Reply::Retried) {
        2
    } else {
        1
    };
    let mut stamps = None;
    for _ in 0..attempts {
        let created = Instant::now();
        let transport = info_span!("transport");
        transport.in_scope(|| match reply {
            Reply::Silent { wait, rx } => {
                let inside = Instant::now();
                spin_for(wait);
                let first_byte = Instant::now();
                transport.record_response_first_byte(first_byte);
                spin_for(rx);
                stamps = Some(Stamps {
                    before: created,
                    inside,
                    first_byte,
                    last: Instant::now(),
                    after: inside,
                });
            }
            Reply::Timed => {
                spin_for(Duration::from_millis(1));
                transport.record_response_first_byte(Instant::now());
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
                transport.record_server_timing(ServerTiming {
                    recv_unix_ns: Some(now.as_nanos() as u64 - 500_000),
                    total_ns: Some(400_000),
                    infer_ns: Some(300_000),
                    ..ServerTiming::default()
                });
            }
            Reply::StaleStamp => {
                transport.record_response_first_byte(before);
                spin_for(Duration::from_millis(1));
            }
            Reply::Retried => {
                spin_for(Duration::from_millis(1));
                transport.record_response_first_byte(Instant::now());
                spin_for(Duration::from_millis(1));
            }
        });
        // The span ends when its last handle goes: read `after` once it has
        // (read before the drop, a preemption in between put the span's end
        // after `after`).
        drop(transport);
        if let Some(s) = &mut stamps {
            s.after = Instant::now();
        }
    }
    stamps
}

/// `a − b` in ns.
fn diff(a: Instant, b: Instant) -> i64 {
    a.duration_since(b).as_nanos() as i64
}

fn ns(r: &CallRecord, f: Figure) -> Option<i64> {
    r.figures.get(f)
}

#[test]
fn the_first_byte_splits_a_silent_servers_roundtrip_into_ttfb_and_rx() {
    let (wait, rx) = (Duration::from_millis(4), Duration::from_millis(2));
    let mut stamps = None;
    let (summary, recs) = run_collecting(StageLayer::builder(), || {
        stamps = call(0, Reply::Silent { wait, rx });
    });
    let st = stamps.unwrap();
    let r = &recs[0];
    let tl = &r.timeline;
    let tr = tl.transport.unwrap();
    let fb = tl.response_first_byte_ns.unwrap();
    // The figures are the timeline's own cut, to the nanosecond, and sum to
    // the roundtrip.
    assert_eq!(
        ns(r, Figure::Ttfb),
        Some((fb - tr.start_ns) as i64),
        "{r:?}"
    );
    assert_eq!(
        ns(r, Figure::Rx),
        Some((tr.start_ns + tr.dur_ns - fb) as i64),
        "{r:?}"
    );
    assert_eq!(
        ns(r, Figure::Ttfb).unwrap() + ns(r, Figure::Rx).unwrap(),
        ns(r, Figure::Roundtrip).unwrap()
    );
    // The span began between `before` and `inside` and ended between `last`
    // and `after`: the cut lies at the stamped first byte (10 µs for the
    // layer's own clock conversion).
    let (t, x) = (ns(r, Figure::Ttfb).unwrap(), ns(r, Figure::Rx).unwrap());
    let slack = 10_000;
    // Each window as its middle ± (half its width + the slack), in µs.
    let report = |what: &str, v: i64, lo: i64, hi: i64| {
        let mid = (lo + hi) as f64 / 2.0;
        let half = (hi - lo) as f64 / 2.0 + slack as f64;
        timing::error(what, (v as f64 - mid) / 1e3, half / 1e3);
    };
    let first = st.first_byte;
    report(
        "ttfb in its window (µs)",
        t,
        diff(first, st.inside),
        diff(first, st.before),
    );
    report(
        "rx in its window (µs)",
        x,
        diff(st.last, first),
        diff(st.after, first),
    );
    assert!(
        diff(st.first_byte, st.inside) - slack <= t && t <= diff(st.first_byte, st.before) + slack,
        "ttfb {t} ns, {st:?}"
    );
    assert!(
        diff(st.last, st.first_byte) - slack <= x && x <= diff(st.after, st.first_byte) + slack,
        "rx {x} ns, {st:?}"
    );
    // A black box: nothing of it is called inference, queue or a one-way stage.
    for f in [Figure::Infer, Figure::Queue, Figure::Server, Figure::Net] {
        assert!(r.ms(f).is_none(), "{f} on a silent server's call: {r:?}");
    }
    let line = r.to_json_line();
    assert!(
        line.contains("\"ttfb_ms\":") && line.contains("\"rx_ms\":"),
        "{line}"
    );
    // The summary's table: both rows, and the note that says what they are.
    let table = summary.table();
    let row = |name: &str| table.lines().any(|l| l.starts_with(&format!("{name} ")));
    assert!(row("ttfb") && row("rx") && !row("infer"), "{table}");
    assert!(table.contains(stagetrace_schema::BLACK_BOX_NOTE), "{table}");
}

#[test]
fn timing_a_stale_stamp_or_a_retry_leave_no_black_box_figures() {
    let (_, recs) = run_collecting(StageLayer::builder(), || {
        call(0, Reply::Timed);
        call(1, Reply::StaleStamp);
        call(2, Reply::Retried);
    });
    assert_eq!(recs.len(), 3);
    // Server timing keeps today's full split.
    assert_eq!(recs[0].ms(Figure::Infer), Some(0.3));
    assert_eq!(recs[0].ms(Figure::Server), Some(0.4));
    for r in &recs {
        assert!(
            ns(r, Figure::Ttfb).is_none() && ns(r, Figure::Rx).is_none(),
            "{r:?}"
        );
        assert!(ns(r, Figure::Roundtrip).is_some());
    }
}
