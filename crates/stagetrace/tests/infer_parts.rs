//! Inference's parts timed in-process: a robot that runs its policy itself
//! names `pre`, `model` and `post` spans inside its `infer` span (by name,
//! by a `stage` field or by `map_span`), and each record carries the three
//! parts, each what its span spun, summing to `infer` less the time between
//! the spans.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use stagetrace::{Stage, StageLayer};
use stagetrace_schema::Figure;
use stagetrace_test_support::{spin_for, Collect};
use tracing::info_span;
use tracing_subscriber::layer::SubscriberExt;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// (spun, bracket) of a span made by `span` that spins `d`, in ms.
fn timed(span: impl FnOnce() -> tracing::Span, d: Duration) -> (f64, f64) {
    let outer = Instant::now();
    let s = span();
    let inner = s.in_scope(|| spin_for(d));
    drop(s);
    (ms(inner), ms(outer.elapsed()))
}

#[test]
fn a_policy_run_in_process_gives_infers_parts_on_its_records() {
    let kept = Collect::default();
    let (layer, guard) = StageLayer::builder()
        .sink(kept.sink())
        .map_span("postprocess", Stage::Post)
        .build()
        .unwrap();
    let mut truth = Vec::new();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        for seq in 0..4u64 {
            let _call = info_span!("call", seq).entered();
            let infer = info_span!("infer").entered();
            let infer_start = Instant::now();
            // By default name, by field, by mapped name.
            let pre = timed(|| info_span!("pre"), Duration::from_millis(1));
            let model = timed(
                || info_span!("jitted_forward", stage = "model"),
                Duration::from_millis(3),
            );
            let post = timed(|| info_span!("postprocess"), Duration::from_millis(2));
            let infer_ms = ms(infer_start.elapsed());
            drop(infer);
            truth.push((pre, model, post, infer_ms));
        }
    });
    guard.finish();
    let records = kept.records();
    assert_eq!(records.len(), 4);
    for (r, (pre, model, post, infer_ms)) in records.iter().zip(&truth) {
        for (figure, (spun, bracket)) in [
            (Figure::Pre, pre),
            (Figure::Model, model),
            (Figure::Post, post),
        ] {
            let got = r.ms(figure).unwrap();
            assert!(
                got >= spun - 0.01 && got <= bracket + 0.01,
                "call {}: {figure:?} {got} ms outside [{spun}, {bracket}]",
                r.seq
            );
        }
        let parts: f64 = [Figure::Pre, Figure::Model, Figure::Post]
            .iter()
            .map(|f| r.ms(*f).unwrap())
            .sum();
        let infer = r.ms(Figure::Infer).unwrap();
        // The parts fill infer but for the moments between the spans: at
        // most what the infer bracket held beyond the three spins.
        let spun = pre.0 + model.0 + post.0;
        assert!(
            parts <= infer + 0.01,
            "call {}: parts {parts} > infer {infer}",
            r.seq
        );
        assert!(
            infer - parts <= infer_ms - spun + 0.01,
            "call {}: parts {parts} ms fall {:.3} ms short of infer {infer} ms, more than the {:.3} ms outside the spins",
            r.seq,
            infer - parts,
            infer_ms - spun
        );
        // Parts are inside infer: the gap is not made smaller by them.
        let gap = r.ms(Figure::Gap).unwrap();
        let e2e = r.ms(Figure::E2e).unwrap();
        assert!(
            (e2e - infer - gap).abs() < 0.01,
            "call {}: e2e {e2e} infer {infer} gap {gap}",
            r.seq
        );
    }
}
