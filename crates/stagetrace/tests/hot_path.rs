//! The hot path's per-span state: nesting seen through spans classified by
//! name or by a `stage` field, many stage spans open at once in one call,
//! and spans that are not stages after all.
#![allow(missing_docs, clippy::unwrap_used)]

use stagetrace_schema::Figure;
use std::time::Duration;

use stagetrace::StageLayer;
use stagetrace_test_support::{run_collecting, spin_for};
use tracing::info_span;

/// e2e − (sum of the top-level stages) − gap, ms: 0 when the gap subtracts
/// exactly the top-level stages.
fn gap_residual(r: &stagetrace::record::CallRecord, top_level_ms: f64) -> f64 {
    (r.ms(Figure::E2e).unwrap() - top_level_ms - r.ms(Figure::Gap).unwrap()).abs()
}

#[test]
fn stages_nested_in_other_stages_are_not_counted_twice_in_the_gap() {
    let (summary, recs) = run_collecting(StageLayer::builder(), || {
        let _call = info_span!("call").entered();
        info_span!("capture").in_scope(|| {
            spin_for(Duration::from_millis(1));
            info_span!("infer").in_scope(|| spin_for(Duration::from_millis(2)));
        });
        // Nested through a span classified by its `stage` field.
        info_span!("act", stage = "dispatch").in_scope(|| {
            spin_for(Duration::from_millis(1));
            info_span!("queue").in_scope(|| spin_for(Duration::from_millis(2)));
        });
    });
    let r = &recs[0];
    let (capture, infer, dispatch, queue) = (
        r.ms(Figure::Capture).unwrap(),
        r.ms(Figure::Infer).unwrap(),
        r.ms(Figure::Dispatch).unwrap(),
        r.ms(Figure::Queue).unwrap(),
    );
    assert!(infer >= 2.0 && capture >= infer + 1.0, "{r:?}");
    assert!(queue >= 2.0 && dispatch >= queue + 1.0, "{r:?}");
    assert!(gap_residual(r, capture + dispatch) <= 0.003, "{r:?}");
    assert_eq!((summary.ignored_spans, summary.empty_calls), (0, 0));
}

#[test]
fn many_stage_spans_open_at_once_are_all_counted() {
    let (summary, recs) = run_collecting(StageLayer::builder(), || {
        let call = info_span!("call");
        // Ten capture spans open at once (concurrent futures, say).
        let captures: Vec<_> = (0..10)
            .map(|_| call.in_scope(|| info_span!("capture")))
            .collect();
        spin_for(Duration::from_millis(2));
        drop(captures);
        call.in_scope(|| {
            info_span!("infer").in_scope(|| spin_for(Duration::from_millis(1)));
        });
        drop(call);
    });
    let r = &recs[0];
    // Each of the ten lasted at least 2 ms.
    assert!(r.ms(Figure::Capture).unwrap() >= 20.0, "{r:?}");
    assert!(r.ms(Figure::Infer).unwrap() >= 1.0, "{r:?}");
    assert_eq!((summary.calls, summary.ignored_spans), (1, 0));
}

#[test]
fn unknown_stage_values_and_stages_outside_calls_are_not_stages() {
    let (summary, recs) = run_collecting(StageLayer::builder(), || {
        // Outside any call: ignored, counted.
        info_span!("capture").in_scope(|| spin_for(Duration::from_micros(100)));
        let _call = info_span!("call").entered();
        info_span!("odd", stage = "nonsense").in_scope(|| {
            info_span!("infer").in_scope(|| spin_for(Duration::from_millis(1)));
        });
    });
    let r = &recs[0];
    let infer = r.ms(Figure::Infer).unwrap();
    assert!(infer >= 1.0 && r.ms(Figure::Capture).is_none(), "{r:?}");
    // The unknown-stage span is not a stage: infer is top-level.
    assert!(gap_residual(r, infer) <= 0.003, "{r:?}");
    // The stage outside a call and the unknown `stage` value.
    assert_eq!(summary.ignored_spans, 2);
}
