//! Calls in flight at once on different threads never mix their stages.
#![allow(missing_docs, clippy::unwrap_used)]

use stagetrace_schema::Figure;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use stagetrace::{StageLayer, StageSpanExt};
use stagetrace_test_support::{read_records, Collect};
use tracing::info_span;
use tracing_subscriber::prelude::*;

#[test]
fn four_threads_never_mix_stages() {
    let dir = tempfile::tempdir().unwrap();
    let collect = Collect::default();
    let (layer, guard) = StageLayer::builder()
        .output_dir(dir.path())
        .sink(collect.sink())
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let calls = 40u64;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let dispatch = dispatch.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    barrier.wait();
                    let mut ids = Vec::new();
                    let mut outer = Vec::new();
                    for i in 0..calls {
                        let call =
                            info_span!("call", kind = format!("t{t}").as_str(), seq = t * 1000 + i);
                        let _e = call.enter();
                        // Even threads: capture + dispatch; odd threads: transport + infer.
                        // Thread t's stages last (t+1) ms, so a borrowed span shows.
                        let cost = Duration::from_millis(t + 1);
                        let t0 = Instant::now();
                        if t % 2 == 0 {
                            info_span!("capture").in_scope(|| std::thread::sleep(cost));
                            let t1 = Instant::now();
                            info_span!("dispatch").in_scope(|| std::thread::sleep(cost));
                            outer.push((t * 1000 + i, [t1 - t0, t1.elapsed()]));
                        } else {
                            let tr = info_span!("transport");
                            tr.in_scope(|| {
                                ids.push((t * 1000 + i, tr.trace_parent().unwrap()));
                                std::thread::sleep(cost);
                            });
                            drop(tr);
                            let t1 = Instant::now();
                            info_span!("infer").in_scope(|| std::thread::sleep(cost));
                            outer.push((t * 1000 + i, [t1 - t0, t1.elapsed()]));
                        }
                    }
                    (ids, outer)
                })
            })
        })
        .collect();
    let mut parents = HashMap::new();
    let mut outer = HashMap::new();
    for h in handles {
        let (ids, o) = h.join().unwrap();
        parents.extend(ids);
        outer.extend(o);
    }
    let summary = guard.finish();
    let records = read_records(dir.path());
    assert_eq!(records.len() as u64, 4 * calls);
    assert_eq!(summary.calls, 4 * calls);
    assert_eq!(summary.ignored_spans, 0);
    let sunk = collect.records();
    for rec in &records {
        let t = rec.seq / 1000;
        assert_eq!(rec.kind, format!("t{t}"), "seq {}", rec.seq);
        let cost = (t + 1) as f64;
        let bounds: [Duration; 2] = outer[&rec.seq];
        // Each stage is at least its sleep and at most what this thread saw
        // around it: a span borrowed from another thread would exceed that.
        let within = |v: Option<f64>, i: usize| {
            let v = v.unwrap_or_else(|| panic!("seq {}: stage missing", rec.seq));
            let max = bounds[i].as_secs_f64() * 1e3;
            assert!(
                v >= cost - 0.001 && v <= max + 0.001,
                "seq {}: {v} ms vs [{cost}, {max}] ms",
                rec.seq
            );
        };
        if t % 2 == 0 {
            within(rec.ms(Figure::Capture), 0);
            within(rec.ms(Figure::Dispatch), 1);
            assert!(
                rec.ms(Figure::Roundtrip).is_none() && rec.ms(Figure::Infer).is_none(),
                "seq {}",
                rec.seq
            );
        } else {
            within(rec.ms(Figure::Roundtrip), 0);
            within(rec.ms(Figure::Infer), 1);
            assert!(
                rec.ms(Figure::Capture).is_none() && rec.ms(Figure::Dispatch).is_none(),
                "seq {}",
                rec.seq
            );
            // The context sent inside the call names this call's trace and transport span.
            let tp = parents[&rec.seq];
            let hex: String = tp.trace_id.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(rec.trace_id.as_deref(), Some(hex.as_str()));
            let full = sunk.iter().find(|r| r.seq == rec.seq).unwrap();
            assert_eq!(full.timeline.transport_span_id, Some(tp.parent_id));
        }
    }
    // Trace ids are unique per call.
    let mut ids: Vec<_> = records
        .iter()
        .map(|r| r.trace_id.clone().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), records.len());
}
