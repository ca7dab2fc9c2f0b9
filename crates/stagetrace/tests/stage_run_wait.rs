//! The robot's own stages carry the run-queue wait that fell inside them
//! (`capture_run_wait_ms`, `dispatch_run_wait_ms`): a thread that shares
//! its core with a busy rival waits for it inside its capture span, and the
//! record says how long — exactly what the thread's schedstat says between
//! the span's open and close, which the test brackets with reads of its own.
#![allow(missing_docs, clippy::unwrap_used)]
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use stagetrace::{clock::ClockMode, record::CallRecord, StageLayer};
use stagetrace_schema::Figure;
use stagetrace_test_support::busy::{pin_to_cpu, Busy};
use stagetrace_test_support::Collect;
use tracing::info_span;
use tracing_subscriber::prelude::*;

/// The calling thread's run-queue wait so far, ns (the second field of
/// its schedstat); `None` where the kernel has none.
fn schedstat_wait_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn spin(d: Duration) {
    let t0 = Instant::now();
    while t0.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// The thread's wait between two reads around a span: (inside the span,
/// around it) — the span's own reads lie between them.
#[derive(Debug)]
struct Bracket {
    inner: u64,
    outer: u64,
}

impl Bracket {
    fn holds(&self, ns: i64) -> bool {
        (self.inner as i64..=self.outer as i64).contains(&ns)
    }
}

/// One call on CPU 0: a capture span that spins 60 ms (a rival spins on
/// the same core, so the thread waits for it about half the time) and a
/// dispatch span that sleeps 5 ms (no wait worth the name). Returns the
/// record and the brackets of capture and dispatch.
fn one_call_beside_a_rival(host_figures: bool) -> Option<(CallRecord, Bracket, Bracket)> {
    schedstat_wait_ns()?;
    let (layer, guard, collect) = Collect::build(
        StageLayer::builder()
            .clock_mode(ClockMode::Trusted)
            .warmup_calls(0)
            .host_figures(host_figures),
    );
    let rival = Busy::pinned(0);
    let brackets = std::thread::spawn(move || {
        pin_to_cpu(0);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let _call = info_span!("call").entered();
            let r0 = schedstat_wait_ns().unwrap();
            let capture = info_span!("capture").entered();
            let r1 = schedstat_wait_ns().unwrap();
            spin(Duration::from_millis(60));
            let r2 = schedstat_wait_ns().unwrap();
            drop(capture);
            let r3 = schedstat_wait_ns().unwrap();
            let dispatch = info_span!("dispatch").entered();
            let d1 = schedstat_wait_ns().unwrap();
            std::thread::sleep(Duration::from_millis(5));
            let d2 = schedstat_wait_ns().unwrap();
            drop(dispatch);
            let d3 = schedstat_wait_ns().unwrap();
            (
                Bracket {
                    inner: r2 - r1,
                    outer: r3 - r0,
                },
                Bracket {
                    inner: d2 - d1,
                    outer: d3 - r3,
                },
            )
        })
    })
    .join()
    .unwrap();
    drop(rival);
    guard.finish();
    let rec = collect.records().pop().unwrap();
    Some((rec, brackets.0, brackets.1))
}

#[test]
fn a_capture_span_that_waits_for_a_core_carries_exactly_that_wait() {
    let Some((rec, capture, dispatch)) = one_call_beside_a_rival(true) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "no /proc/thread-self/schedstat on this CI machine"
        );
        return;
    };
    eprintln!("capture bracket {capture:?}, dispatch bracket {dispatch:?}");
    eprintln!("{}", rec.to_json_line());
    // The rival took a real share of the core inside capture.
    assert!(capture.inner > 10_000_000, "{capture:?}");
    let c = rec.get(Figure::CaptureRunWait).unwrap();
    assert!(
        capture.holds(c),
        "capture_run_wait {c} ns outside {capture:?}"
    );
    let d = rec.get(Figure::DispatchRunWait).unwrap();
    assert!(
        dispatch.holds(d),
        "dispatch_run_wait {d} ns outside {dispatch:?}"
    );
    // Both are parts of the call's whole wait (which a call's host share
    // keeps in whole µs: 1 µs of rounding).
    assert!(rec.get(Figure::RunWait).unwrap() + 1_000 >= c + d);
}

#[test]
fn with_host_figures_off_no_stage_carries_a_wait() {
    let Some((rec, _, _)) = one_call_beside_a_rival(false) else {
        return;
    };
    assert_eq!(rec.get(Figure::CaptureRunWait), None);
    assert_eq!(rec.get(Figure::DispatchRunWait), None);
    assert_eq!(rec.get(Figure::RunWait), None);
}
