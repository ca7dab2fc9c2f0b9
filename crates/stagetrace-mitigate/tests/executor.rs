//! Client / executor side through the real stage layer: a stale action is
//! dropped, counted, and its call's record says so (`stale_dropped`);
//! commands of one control period are merged.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use stagetrace_mitigate::{CommandMerger, StaleFilter, STALE_REASON};
use stagetrace_test_support::{timing, Observed};

#[test]
fn a_stale_action_is_dropped_counted_and_flagged_on_its_record() {
    let mut obs = Observed::new();
    let filter = StaleFilter::new(Duration::from_millis(20));
    for seq in 0..4u64 {
        let call = tracing::info_span!("call", seq = seq);
        let _e = call.enter();
        let captured = Instant::now();
        tracing::info_span!("capture").in_scope(|| {});
        // Calls 1 and 3 get their action back too late to execute.
        let took = if seq % 2 == 1 { 40 } else { 1 };
        tracing::info_span!("transport")
            .in_scope(|| std::thread::sleep(Duration::from_millis(took)));
        let fresh = filter.check_call(&tracing::Span::current(), captured);
        if seq % 2 == 0 {
            // An action back in 1 ms must be within the 20 ms age limit.
            let age = fresh.as_ref().map_or_else(|s| s.age, |age| *age);
            timing::error("fresh action's age (ms)", age.as_secs_f64() * 1e3, 20.0);
        }
        assert_eq!(fresh.is_ok(), seq % 2 == 0, "seq {seq}: {fresh:?}");
        if fresh.is_ok() {
            tracing::info_span!("dispatch").in_scope(|| {});
        }
    }
    let recs = obs.finish();
    assert_eq!((filter.passed(), filter.dropped()), (2, 2));
    assert_eq!(recs.len(), 4);
    // The records add up to the filter's own count.
    let on_records: u32 = recs.iter().filter_map(|r| r.stale_dropped).sum();
    assert_eq!(u64::from(on_records), filter.dropped());
    for r in &recs {
        if r.seq % 2 == 1 {
            assert_eq!(r.stale_dropped, Some(1));
            assert_eq!(r.failed, Some(true));
            assert_eq!(r.error.as_deref(), Some(STALE_REASON));
        } else {
            assert_eq!(r.stale_dropped, None);
            assert_eq!(r.failed, None);
        }
    }
}

#[test]
fn commands_within_one_period_become_one() {
    let period = Duration::from_millis(10);
    let mut m = CommandMerger::with_merge(period, |acc: &mut Vec<u32>, c: Vec<u32>| acc.extend(c));
    let t0 = Instant::now();
    let mut out = Vec::new();
    // 3 commands per period for 5 periods, the executor polling every ms.
    for ms in 0..50u64 {
        let now = t0 + Duration::from_millis(ms);
        if ms % 10 < 3 {
            m.push(vec![ms as u32], now);
        }
        if let Some(c) = m.take_due(now) {
            out.push(c);
        }
    }
    if let Some(c) = m.take_due(t0 + Duration::from_millis(100)) {
        out.push(c);
    }
    // At most one command per period; nothing lost, order kept.
    assert!(out.len() <= 6, "{out:?}");
    let sent: Vec<u32> = (0..50).filter(|ms| ms % 10 < 3).collect();
    assert_eq!(out.concat(), sent);
    assert_eq!(m.emitted(), out.len() as u64);
    assert_eq!(m.merged() + m.emitted(), sent.len() as u64);
}
