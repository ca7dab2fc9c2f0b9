//! The public API: span names, the `stage` field, server timing, trace
//! context, failures, digests, deadlines, and isolation from other layers.
#![allow(missing_docs, clippy::unwrap_used)]

use stagetrace_schema::Figure;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stagetrace::{ServerTiming, Stage, StageLayer, StageSpanExt};
use stagetrace_test_support::{read_records, run_collecting, spin_for, timing, Collect};
use tracing::info_span;
use tracing_subscriber::layer::Context;
use tracing_subscriber::prelude::*;

#[test]
fn renamed_spans_stage_field_and_custom_call_name() {
    let dir = tempfile::tempdir().unwrap();
    let (layer, guard) = StageLayer::builder()
        .output_dir(dir.path())
        .call_span_name("tick")
        .map_span("grab_frames", Stage::Capture)
        .build()
        .unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        let _tick = info_span!("tick", kind = "reset", seq = 42u64).entered();
        info_span!("grab_frames").in_scope(|| spin_for(Duration::from_millis(2)));
        info_span!("policy", stage = "infer").in_scope(|| spin_for(Duration::from_millis(3)));
        info_span!("actuate", stage = "dispatch").in_scope(|| spin_for(Duration::from_millis(1)));
    });
    guard.finish();
    let r = &read_records(dir.path())[0];
    assert_eq!((r.seq, r.kind.as_str()), (42, "reset"));
    assert!(r.ms(Figure::Capture).unwrap() >= 2.0, "{r:?}");
    assert!(r.ms(Figure::Infer).unwrap() >= 3.0);
    assert!(r.ms(Figure::Dispatch).unwrap() >= 1.0);
    // A stage that did not happen is absent, not 0.
    assert!(r.ms(Figure::Roundtrip).is_none() && r.ms(Figure::Queue).is_none());
}

#[test]
fn async_style_spans_count_from_creation_to_close() {
    let (_, recs) = run_collecting(StageLayer::builder(), || {
        let call = info_span!("call");
        let capture = call.in_scope(|| info_span!("capture"));
        // Polled twice with a wait in between, like a future awaiting I/O.
        capture.in_scope(|| spin_for(Duration::from_millis(1)));
        std::thread::sleep(Duration::from_millis(3));
        capture.in_scope(|| spin_for(Duration::from_millis(1)));
        drop(capture);
        drop(call);
    });
    let r = &recs[0];
    assert!(
        r.ms(Figure::Capture).unwrap() >= 5.0,
        "{:?}",
        r.ms(Figure::Capture)
    );
}

#[test]
fn server_timing_is_stitched_and_trace_context_matches_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut sent = None;
    let (_, recs) = run_collecting(StageLayer::builder().output_dir(dir.path()), || {
        let _call = info_span!("call").entered();
        let transport = info_span!("transport", peer = "127.0.0.1:9000");
        transport.in_scope(|| {
            // trace_parent works from a child span that is not a stage.
            let send = info_span!("send_request").entered();
            sent = send.trace_parent();
            drop(send);
            spin_for(Duration::from_millis(1)); // uplink
            let recv = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            spin_for(Duration::from_millis(3)); // server
            spin_for(Duration::from_millis(1)); // downlink
            transport.record_server_timing(ServerTiming {
                recv_unix_ns: Some(recv),
                total_ns: Some(3_000_000),
                queue_ns: Some(200_000),
                infer_ns: Some(2_500_000),
                ..ServerTiming::default()
            });
        });
    });
    let r = &recs[0];
    assert_eq!(r.ms(Figure::Server), Some(3.0));
    assert_eq!(r.ms(Figure::Infer), Some(2.5));
    assert_eq!(r.ms(Figure::Queue), Some(0.2));
    let (rt, net) = (r.ms(Figure::Roundtrip).unwrap(), r.ms(Figure::Net).unwrap());
    assert!(
        (net - (rt - 3.0)).abs() < 0.002,
        "net {net} vs roundtrip {rt}"
    );
    // Same host, same clock: an estimated split of the injected 1 ms each way.
    let (up, down) = (
        r.ms(Figure::Uplink).unwrap(),
        r.ms(Figure::Downlink).unwrap(),
    );
    assert!((up + down - net).abs() < 0.003, "{up} + {down} vs {net}");
    assert_eq!(r.clock, Some(stagetrace::record::ClockBasis::Estimate));
    assert!(r.ms(Figure::SplitErr).is_some(), "{r:?}");
    let tl = r.timeline;
    let (t, u, d) = (
        tl.transport.unwrap(),
        tl.uplink.unwrap(),
        tl.downlink.unwrap(),
    );
    assert_eq!(u.start_ns, t.start_ns);
    assert_eq!(d.start_ns + d.dur_ns, t.start_ns + t.dur_ns);
    let (q, i) = (tl.queue.unwrap(), tl.infer.unwrap());
    assert_eq!(q.start_ns, u.start_ns + u.dur_ns);
    assert_eq!(i.start_ns, q.start_ns + q.dur_ns);
    let tp = sent.unwrap();
    let hex: String = tp.trace_id.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(r.trace_id.as_deref(), Some(hex.as_str()));
    assert_eq!(r.timeline.transport_span_id, Some(tp.parent_id));
    assert_ne!(r.timeline.call_span_id, Some(tp.parent_id));
    // The file agrees with the sink and validates against the schema.
    assert_eq!(read_records(dir.path())[0].to_json_line(), r.to_json_line());
}

#[test]
fn failures_and_digests_reach_the_call_from_any_inner_span() {
    let (summary, recs) = run_collecting(StageLayer::builder(), || {
        for i in 0..2u64 {
            let _call = info_span!("call", seq = i).entered();
            let dispatch = info_span!("dispatch").entered();
            let decode = info_span!("decode").entered();
            decode.record_output_digest(0xabc + i);
            if i == 1 {
                tracing::Span::current().mark_failed("actuator timeout");
            }
            drop(decode);
            drop(dispatch);
        }
        // Outside a call: nothing to attach to, no panic.
        assert!(tracing::Span::current().trace_parent().is_none());
        tracing::Span::current().mark_failed("ignored");
    });
    assert_eq!(recs[0].output_digest.as_deref(), Some("0000000000000abc"));
    assert_eq!(recs[0].failed, None);
    assert_eq!(recs[1].failed, Some(true));
    assert_eq!(recs[1].error.as_deref(), Some("actuator timeout"));
    assert_eq!((summary.calls, summary.failed_calls), (1, 1));
}

#[test]
fn batch_cache_and_stale_drops_reach_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let (_, recs) = run_collecting(StageLayer::builder().output_dir(dir.path()), || {
        for i in 0..3u64 {
            let _call = info_span!("call", seq = i).entered();
            let transport = info_span!("transport");
            transport.in_scope(|| {
                spin_for(Duration::from_millis(1));
                let timing = match i {
                    // Full timing plus what the mitigations did.
                    0 => ServerTiming {
                        recv_unix_ns: Some(
                            SystemTime::now()
                                .duration_since(UNIX_EPOCH)
                                .unwrap()
                                .as_nanos() as u64,
                        ),
                        total_ns: Some(500_000),
                        infer_ns: Some(400_000),
                        batch_size: Some(4),
                        cache_hit: Some(false),
                        ..ServerTiming::default()
                    },
                    // Only the cache outcome: nothing to stitch.
                    1 => ServerTiming {
                        cache_hit: Some(true),
                        ..ServerTiming::default()
                    },
                    _ => ServerTiming::default(),
                };
                transport.record_server_timing(timing);
            });
            if i == 2 {
                let dispatch = info_span!("dispatch").entered();
                dispatch.record_stale_dropped(2);
                dispatch.record_stale_dropped(1);
            }
        }
        // Outside a call: nothing to count on, no panic.
        tracing::Span::current().record_stale_dropped(1);
    });
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[0].batch_size, Some(4));
    assert_eq!(recs[0].cache, Some(stagetrace::record::CacheOutcome::Miss));
    assert_eq!(recs[0].ms(Figure::Server), Some(0.5));
    assert_eq!(recs[0].stale_dropped, None);
    assert_eq!(recs[1].cache, Some(stagetrace::record::CacheOutcome::Hit));
    assert_eq!(recs[1].batch_size, None);
    // No time fields came back: no stitch, the roundtrip as a black box.
    assert!(recs[1].ms(Figure::Server).is_none() && recs[1].clock.is_none());
    assert!(recs[1].ms(Figure::Roundtrip).is_some());
    assert_eq!(recs[2].stale_dropped, Some(3));
    assert!(recs[2].batch_size.is_none() && recs[2].cache.is_none());
    // In the file: as named in the schema, absent where they do not apply.
    let lines: Vec<String> = read_records(dir.path())
        .iter()
        .map(|r| r.to_json_line())
        .collect();
    assert!(lines[0].contains(r#""batch_size":4"#) && lines[0].contains(r#""cache":"miss""#));
    assert!(lines[1].contains(r#""cache":"hit""#) && !lines[1].contains("batch_size"));
    assert!(lines[2].contains(r#""stale_dropped":3"#) && !lines[2].contains("cache"));
    assert!(!lines[0].contains("stale_dropped"));
}

#[test]
fn without_a_stage_layer_the_api_does_nothing() {
    tracing::subscriber::with_default(tracing_subscriber::registry(), || {
        let span = info_span!("transport");
        span.record_server_timing(ServerTiming::default());
        assert!(span.trace_parent().is_none());
    });
}

/// Counts the spans it sees.
struct Count(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
    fn on_new_span(
        &self,
        _: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: Context<'_, S>,
    ) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn other_layers_still_see_every_span() {
    let seen = Arc::new(AtomicUsize::new(0));
    let collect = Collect::default();
    let (layer, guard) = StageLayer::builder().sink(collect.sink()).build().unwrap();
    let subscriber = tracing_subscriber::registry()
        .with(layer)
        .with(Count(seen.clone()));
    tracing::subscriber::with_default(subscriber, || {
        let _call = info_span!("call").entered();
        for _ in 0..10 {
            info_span!("unrelated").in_scope(|| {
                info_span!("capture").in_scope(|| {});
            });
        }
    });
    guard.finish();
    assert_eq!(seen.load(Ordering::Relaxed), 21);
    // The capture spans nested in non-stage spans still count for the call.
    let r = &collect.records()[0];
    assert!(r.ms(Figure::Capture).is_some());
}

/// One call as the test's loop stamps it: just before the call span opens
/// and just after it is entered, just before it closes and just after.
#[derive(Clone, Copy, Debug)]
struct LoopCall {
    before_open: Instant,
    after_open: Instant,
    before_close: Instant,
    after_close: Instant,
}

/// The deadline tracker's state along one path of stamps the layer may
/// have taken (ns since the test's first stamp).
#[derive(Clone, Copy, Debug, PartialEq)]
struct TrackerPath {
    origin: f64,
    last_tick: Option<u64>,
    prev_end: Option<f64>,
    skipped: u64,
}

impl TrackerPath {
    fn same_as(&self, o: &TrackerPath) -> bool {
        (self.origin - o.origin).abs() < 1e3
            && self.last_tick == o.last_tick
            && self.prev_end == o.prev_end
            && self.skipped == o.skipped
    }
}

/// One call through the documented rule (`docs/stages.md`, deadlines): ticks
/// are `origin + k·period` from the first call's start, moved earlier when a
/// paced call (started more than 1 ms after the previous one ended) starts
/// less than half a period before its due tick, or under 1 ms before a later
/// one after a stall; a call serves the last tick at or before its start and
/// is late by its end − (its tick + period); ticks no call started in are
/// skipped. Returns the next state and the lateness (ns).
fn tracker_step(s: Option<TrackerPath>, start: f64, end: f64, p: f64) -> (TrackerPath, f64) {
    let mut origin = s.map_or(start, |s| s.origin);
    let last = s.and_then(|s| s.last_tick);
    let paced = s.and_then(|s| s.prev_end).is_some_and(|e| start > e + 1e6);
    if let (true, Some(l)) = (paced, last) {
        let since = (start - origin).max(0.0);
        let due = (l + 1) as f64;
        let next = (since / p).ceil().max(due);
        let limit = if next == due {
            p / 2.0
        } else {
            1e6_f64.min(p / 2.0)
        };
        let early = next * p - since.min(next * p);
        if early > 0.0 && early < limit {
            origin -= early;
        }
    }
    let floor = ((start - origin).max(0.0) / p).floor() as u64;
    let skipped = match last {
        Some(l) if floor > l + 1 => floor - l - 1,
        _ => 0,
    };
    let next = TrackerPath {
        origin,
        last_tick: Some(last.map_or(floor, |l| l.max(floor))),
        prev_end: Some(end),
        skipped: s.map_or(0, |s| s.skipped) + skipped,
    };
    (next, end - origin - (floor as f64 + 1.0) * p)
}

/// The lateness each call must get (a range, ms) and the skipped-tick totals
/// the run can have. The layer stamps each end of a call between the test's
/// two stamps of it, and the rule's choices (paced or not, which tick, an
/// early start moving the origin) may go either way inside those brackets:
/// so the rule runs along every path the brackets' ends allow, and a call's
/// truth is the hull of its lateness over them (lateness is linear in the
/// stamps between two choices, so the ends bound what lies between).
fn true_lateness_ms(calls: &[LoopCall], period: Duration) -> (Vec<(f64, f64)>, Vec<u64>) {
    let p = period.as_nanos() as f64;
    let t0 = calls[0].before_open;
    let ns = |a: Instant| {
        if a >= t0 {
            a.duration_since(t0).as_nanos() as f64
        } else {
            -(t0.duration_since(a).as_nanos() as f64)
        }
    };
    let mut paths: Vec<Option<TrackerPath>> = vec![None];
    let mut ranges = Vec::new();
    for c in calls {
        let mut next: Vec<Option<TrackerPath>> = Vec::new();
        let (mut least, mut most) = (f64::INFINITY, f64::NEG_INFINITY);
        let (lo, hi) = (ns(c.before_open), ns(c.after_open));
        for s in &paths {
            for start in candidate_starts(s.as_ref(), lo, hi, p) {
                for end in [ns(c.before_close), ns(c.after_close)] {
                    let (n, late) = tracker_step(*s, start, end, p);
                    least = least.min(late);
                    most = most.max(late);
                    // Origins within 1 µs are one path: the checks below
                    // allow the record's µs rounding anyway.
                    if !next.iter().flatten().any(|m| n.same_as(m)) {
                        next.push(Some(n));
                    }
                }
            }
        }
        ranges.push((least / 1e6, most / 1e6));
        paths = next;
    }
    let mut skipped: Vec<u64> = paths.iter().flatten().map(|s| s.skipped).collect();
    skipped.sort_unstable();
    skipped.dedup();
    (ranges, skipped)
}

/// Where the layer's start stamp may lie in `[lo, hi]` for the rule's
/// extremes: the two ends, and just past each point inside where a choice
/// flips (paced from 1 ms after the previous end on; an early start moves
/// the origin from `limit` before a tick boundary on, by up to `limit`).
fn candidate_starts(s: Option<&TrackerPath>, lo: f64, hi: f64, p: f64) -> Vec<f64> {
    let mut v = vec![lo, hi];
    let Some(s) = s else {
        return v;
    };
    let inside = |f: f64| f > lo && f < hi;
    if let Some(e) = s.prev_end.map(|e| e + 1e6 + 1.0).filter(|f| inside(*f)) {
        v.push(e);
    }
    if let Some(l) = s.last_tick {
        let tick_at = |t: f64| ((t - s.origin).max(0.0) / p).ceil() as u64;
        for k in tick_at(lo).max(l + 1)..=tick_at(hi).max(l + 1) {
            for limit in [p / 2.0, 1e6_f64.min(p / 2.0)] {
                let f = s.origin + k as f64 * p - limit + 1.0;
                if inside(f) {
                    v.push(f);
                }
            }
        }
    }
    v
}

#[test]
fn deadline_figures_without_coordinated_omission() {
    let period = Duration::from_millis(10);
    let mut calls: Vec<LoopCall> = Vec::new();
    let (summary, recs) = run_collecting(StageLayer::builder().target_hz(100.0), || {
        let mut next = Instant::now();
        for i in 0..30u64 {
            let before_open = Instant::now();
            let call = info_span!("call", seq = i).entered();
            let after_open = Instant::now();
            let work = if i == 15 { 25 } else { 2 };
            info_span!("capture").in_scope(|| spin_for(Duration::from_millis(work)));
            let before_close = Instant::now();
            drop(call);
            calls.push(LoopCall {
                before_open,
                after_open,
                before_close,
                after_close: Instant::now(),
            });
            // Skip missed ticks, like tokio's MissedTickBehavior::Skip.
            next += period;
            while next < Instant::now() {
                next += period;
            }
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    });
    // The truth comes from the loop's own stamps, not from how punctually
    // the machine woke the loop: on a loaded machine most calls may end
    // after their deadline, and the figures must say exactly that.
    let (truth, skipped_totals) = true_lateness_ms(&calls, period);
    assert_eq!(recs.len(), truth.len());
    let overrun = recs.iter().find(|r| r.seq == 15).unwrap();
    assert_eq!(overrun.deadline_miss, Some(true));
    assert!(
        overrun.ms(Figure::Late).unwrap() > 10.0,
        "{:?}",
        overrun.ms(Figure::Late)
    );
    // Each call's lateness inside its truth range; 1 µs: the record's
    // rounding.
    let outside: Vec<f64> = recs
        .iter()
        .zip(&truth)
        .map(|(r, (least, most))| {
            let late = r.ms(Figure::Late).unwrap();
            (least - late).max(late - most).max(0.0)
        })
        .collect();
    timing::worst(
        "late outside its truth range (ms)",
        outside.iter().copied(),
        0.001,
    );
    assert!(
        outside.iter().all(|o| *o <= 0.001),
        "ms outside: {outside:?}\n{truth:?}"
    );
    for (r, (least, most)) in recs.iter().zip(&truth) {
        // A call whose range straddles its deadline may go either way.
        if *least > 0.0 || *most <= 0.0 {
            assert_eq!(r.deadline_miss == Some(true), *least > 0.0, "seq {}", r.seq);
        }
    }
    let d = summary.deadline.unwrap();
    assert_eq!(d.target_hz, 100.0);
    // The 25 ms call skips at least two 10 ms ticks; the count is one the
    // truth's paths can have.
    assert!(skipped_totals.iter().all(|n| *n >= 2), "{skipped_totals:?}");
    assert!(
        skipped_totals.contains(&d.skipped_ticks),
        "{d:?}, truth {skipped_totals:?}"
    );
    // A miss is a call that ended late: the records' count, skipped ticks apart.
    let late = recs
        .iter()
        .filter(|r| r.warmup != Some(true) && r.deadline_miss == Some(true))
        .count() as u64;
    assert!(late >= 1);
    assert_eq!(d.misses, late, "{d:?}");
    // The summary's median lateness is the records' (the histogram keeps
    // three significant digits of the time since the tick: 10 µs here).
    let mut late_ms: Vec<f64> = recs.iter().map(|r| r.ms(Figure::Late).unwrap()).collect();
    late_ms.sort_by(f64::total_cmp);
    let p50 = stagetrace_test_support::quantile(&late_ms, 0.5);
    timing::error(
        "summary late p50 vs the records' (ms)",
        d.late_ms.p50 - p50,
        0.015,
    );
    assert!(
        (d.late_ms.p50 - p50).abs() <= 0.015,
        "p50 late {} vs the records' {p50}: {d:?}",
        d.late_ms.p50
    );
    // Completions per second over the run, between the test's stamps of
    // the first call's start and the last call's end.
    let most = 30.0
        / calls[29]
            .before_close
            .duration_since(calls[0].after_open)
            .as_secs_f64();
    let least = 30.0
        / calls[29]
            .after_close
            .duration_since(calls[0].before_open)
            .as_secs_f64();
    timing::error(
        "effective rate outside its truth range (Hz)",
        (least - d.effective_hz).max(d.effective_hz - most).max(0.0),
        0.001,
    );
    assert!(
        d.effective_hz >= least - 0.001 && d.effective_hz <= most + 0.001,
        "effective {} Hz, truth [{least:.3}, {most:.3}]: {d:?}",
        d.effective_hz
    );
    assert!(d.jitter_ms.p99 >= d.jitter_ms.p50);
}

#[test]
fn a_stage_nested_in_a_stage_is_reported_but_not_counted_twice_in_the_gap() {
    let (_, recs) = run_collecting(StageLayer::builder(), || {
        let _call = info_span!("call").entered();
        info_span!("transport").in_scope(|| {
            spin_for(Duration::from_millis(1));
            info_span!("infer").in_scope(|| spin_for(Duration::from_millis(3)));
        });
    });
    let r = &recs[0];
    let (rt, infer, gap) = (
        r.ms(Figure::Roundtrip).unwrap(),
        r.ms(Figure::Infer).unwrap(),
        r.ms(Figure::Gap).unwrap(),
    );
    assert!(infer >= 3.0 && rt >= infer + 1.0, "{r:?}");
    assert!(
        (r.ms(Figure::E2e).unwrap() - rt - gap).abs() <= 0.003,
        "gap must only subtract the outer span: {r:?}"
    );
    let tl = r.timeline;
    let (t, i) = (tl.transport.unwrap(), tl.infer.unwrap());
    assert!(i.start_ns >= t.start_ns && i.start_ns + i.dur_ns <= t.start_ns + t.dur_ns);
}

#[test]
fn the_unfiltered_layer_records_the_same_calls() {
    let collect = Collect::default();
    let (layer, guard) = StageLayer::builder().sink(collect.sink()).build().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let subscriber = tracing_subscriber::registry()
        .with(layer)
        .with(Count(seen.clone()));
    tracing::subscriber::with_default(subscriber, || {
        let _call = info_span!("call", kind = "k").entered();
        info_span!("unrelated", n = 1).in_scope(|| {
            info_span!("capture").in_scope(|| spin_for(Duration::from_millis(2)));
        });
        info_span!("work", stage = "dispatch").in_scope(|| spin_for(Duration::from_millis(1)));
    });
    let summary = guard.finish();
    assert_eq!(seen.load(Ordering::Relaxed), 4);
    let r = &collect.records()[0];
    assert_eq!(r.kind, "k");
    assert!(
        r.ms(Figure::Capture).unwrap() >= 2.0 && r.ms(Figure::Dispatch).unwrap() >= 1.0,
        "{r:?}"
    );
    assert_eq!(
        (summary.calls, summary.ignored_spans, summary.empty_calls),
        (1, 0, 0)
    );
}
