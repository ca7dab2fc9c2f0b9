//! A stage is a stage however it is named and however the layer is attached:
//! by its default name, by `map_span`, by a `stage` field, or nested under the
//! app's own spans inside the call; behind the per-layer filter, as a plain
//! layer that skips the app's spans itself, and next to an app layer; and
//! whichever way the stage reaches its call (an explicit parent, another
//! thread, the app's spans in between). And a plain layer that keeps more
//! spans open than its table of live spans holds still measures every call.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use stagetrace::{Stage, StageLayer, StageLayerBuilder};
use stagetrace_schema::Figure;
use stagetrace_test_support::{spin_for, Collect};
use tracing::info_span;
use tracing_subscriber::layer::SubscriberExt;

/// How long each stage of `app` took: what it spun inside the span (the least
/// the span can hold) and the span from before its creation to after its
/// close (the most).
#[derive(Default, Debug)]
struct Truth {
    capture: Vec<(f64, f64)>,
    infer: Vec<(f64, f64)>,
    dispatch: Vec<(f64, f64)>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs `f` inside a span made by `span`, returning (spun, bracket) in ms.
fn timed(span: impl FnOnce() -> tracing::Span, spin: Duration) -> (f64, f64) {
    let outer = Instant::now();
    let s = span();
    let inner = s.in_scope(|| spin_for(spin));
    drop(s);
    (ms(inner), ms(outer.elapsed()))
}

/// Three calls named `tick`, among many spans of the app's own: capture by a
/// mapped name, infer by a `stage` field, dispatch by its default name but
/// nested two app spans deep inside the call.
fn app(truth: &mut Truth) {
    for seq in 0..3u64 {
        for i in 0..50 {
            info_span!("app_work", i).in_scope(|| std::hint::black_box(i));
        }
        let _tick = info_span!("tick", seq).entered();
        truth.capture.push(timed(
            || info_span!("grab_frames"),
            Duration::from_millis(2),
        ));
        for i in 0..50 {
            info_span!("app_work", i).in_scope(|| std::hint::black_box(i));
        }
        truth.infer.push(timed(
            || info_span!("policy", stage = "infer"),
            Duration::from_millis(3),
        ));
        let outer = info_span!("bookkeeping").entered();
        let inner = info_span!("encode").entered();
        truth
            .dispatch
            .push(timed(|| info_span!("dispatch"), Duration::from_millis(1)));
        drop(inner);
        drop(outer);
    }
}

fn builder(kept: &Collect) -> StageLayerBuilder {
    StageLayer::builder()
        .sink(kept.sink())
        .call_span_name("tick")
        .map_span("grab_frames", Stage::Capture)
}

/// No-op app layer that wants every span.
struct AppLayer;
impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for AppLayer {}

fn check(kept: &Collect, truth: &Truth, how: &str) {
    let records = kept.records();
    assert_eq!(records.len(), 3, "{how}: one record per call");
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.seq, i as u64, "{how}");
        for (figure, (spun, bracket)) in [
            (Figure::Capture, truth.capture[i]),
            (Figure::Infer, truth.infer[i]),
            (Figure::Dispatch, truth.dispatch[i]),
        ] {
            let got = r
                .ms(figure)
                .unwrap_or_else(|| panic!("{how}: call {i} has no {figure:?}: {r:?}"));
            assert!(
                got >= spun - 0.01 && got <= bracket + 0.01,
                "{how}: call {i} {figure:?} {got} ms outside [{spun}, {bracket}]"
            );
        }
    }
}

#[test]
fn stages_by_mapped_name_field_and_nesting_behind_the_per_layer_filter() {
    let kept = Collect::default();
    let (layer, guard) = builder(&kept).build_filtered().unwrap();
    let mut truth = Truth::default();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        app(&mut truth)
    });
    guard.finish();
    check(&kept, &truth, "build_filtered()");
}

#[test]
fn stages_by_mapped_name_field_and_nesting_as_a_plain_layer() {
    let kept = Collect::default();
    let (layer, guard) = builder(&kept).build().unwrap();
    let mut truth = Truth::default();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        app(&mut truth)
    });
    guard.finish();
    check(&kept, &truth, "build()");
}

#[test]
fn stages_by_mapped_name_field_and_nesting_as_a_plain_layer_next_to_an_app_layer() {
    let kept = Collect::default();
    let (layer, guard) = builder(&kept).build().unwrap();
    let mut truth = Truth::default();
    let subscriber = tracing_subscriber::registry().with(layer).with(AppLayer);
    tracing::subscriber::with_default(subscriber, || app(&mut truth));
    guard.finish();
    check(&kept, &truth, "build() + app layer");
}

#[test]
fn more_open_calls_than_the_live_table_holds_are_all_measured() {
    // 6000 calls open at once, each with a capture span inside: more ids
    // than some of the table's buckets hold, so some go the registry's way.
    const CALLS: usize = 6000;
    let kept = Collect::default();
    let (layer, guard) = StageLayer::builder()
        .sink(kept.sink())
        .queue_capacity(CALLS)
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(layer).with(AppLayer);
    tracing::subscriber::with_default(subscriber, || {
        let calls: Vec<tracing::Span> = (0..CALLS as u64)
            .map(|seq| {
                let call = info_span!("call", seq);
                call.in_scope(|| {
                    info_span!("capture").in_scope(|| std::hint::black_box(seq));
                    info_span!("app_work").in_scope(|| std::hint::black_box(seq));
                });
                call
            })
            .collect();
        // Close them in another order than they opened.
        for call in calls.into_iter().rev() {
            drop(call);
        }
    });
    let summary = guard.finish();
    assert_eq!(summary.queue_drops, 0);
    let mut seqs: Vec<u64> = kept
        .records()
        .iter()
        .filter(|r| r.ms(Figure::Capture).is_some())
        .map(|r| r.seq)
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..CALLS as u64).collect::<Vec<_>>());
}

/// The parent paths a stage can take to its call, each a different way to
/// find it when the stage opens (the layer looks once and carries it down):
/// an explicit `parent:`, a span opened and closed on another thread, a
/// stage under the app's own span under another stage (nested: counted in
/// the gap once), and a stage under no call at all.
fn parent_paths(truth: &mut Truth) {
    let call = info_span!("tick", seq = 0u64);
    truth.capture.push(timed(
        || info_span!(parent: &call, "grab_frames"),
        Duration::from_millis(2),
    ));
    let on_another_thread = {
        let call = call.clone();
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                call.in_scope(|| {
                    timed(
                        || info_span!("policy", stage = "infer"),
                        Duration::from_millis(3),
                    )
                })
            })
        })
    };
    truth.infer.push(on_another_thread.join().unwrap());
    call.in_scope(|| {
        let outer = Instant::now();
        let dispatch = info_span!("dispatch").entered();
        let spun = info_span!("app_work").in_scope(|| {
            // Nested in dispatch through the app's span: its time is
            // already dispatch's.
            info_span!("queue").in_scope(|| spin_for(Duration::from_millis(1)))
        });
        drop(dispatch);
        truth.dispatch.push((ms(spun), ms(outer.elapsed())));
    });
    drop(call);
    info_span!(parent: None, "dispatch").in_scope(|| std::hint::black_box(0));
}

fn check_parent_paths(
    kept: &Collect,
    summary: &stagetrace::summary::WindowSummary,
    truth: &Truth,
    how: &str,
) {
    let records = kept.records();
    assert_eq!(records.len(), 1, "{how}: {records:?}");
    let r = &records[0];
    for (figure, (spun, bracket)) in [
        (Figure::Capture, truth.capture[0]),
        (Figure::Infer, truth.infer[0]),
        (Figure::Dispatch, truth.dispatch[0]),
    ] {
        let got = r
            .ms(figure)
            .unwrap_or_else(|| panic!("{how}: no {figure:?}: {r:?}"));
        assert!(
            got >= spun - 0.01 && got <= bracket + 0.01,
            "{how}: {figure:?} {got} ms outside [{spun}, {bracket}]"
        );
    }
    let queue = r
        .ms(Figure::Queue)
        .unwrap_or_else(|| panic!("{how}: no queue: {r:?}"));
    assert!(queue >= 1.0, "{how}: {r:?}");
    // The nested queue is inside dispatch: e2e = the three top-level
    // stages + gap, not four.
    let top: f64 = [Figure::Capture, Figure::Infer, Figure::Dispatch]
        .iter()
        .filter_map(|f| r.ms(*f))
        .sum();
    let residual = (r.ms(Figure::E2e).unwrap() - top - r.ms(Figure::Gap).unwrap()).abs();
    assert!(residual <= 0.003, "{how}: {r:?}");
    // The dispatch under no call is not a stage of any call.
    assert_eq!(summary.ignored_spans, 1, "{how}");
}

#[test]
fn stages_by_explicit_parent_another_thread_and_nesting_through_app_spans() {
    for (how, filtered, app_layer) in [
        ("build()", false, false),
        ("build() + app layer", false, true),
        ("build_filtered() + app layer", true, true),
    ] {
        let kept = Collect::default();
        let mut truth = Truth::default();
        let summary = if filtered {
            let (layer, guard) = builder(&kept).build_filtered().unwrap();
            let subscriber = tracing_subscriber::registry().with(layer).with(AppLayer);
            tracing::subscriber::with_default(subscriber, || parent_paths(&mut truth));
            guard.finish()
        } else {
            let (layer, guard) = builder(&kept).build().unwrap();
            let registry = tracing_subscriber::registry().with(layer);
            if app_layer {
                tracing::subscriber::with_default(registry.with(AppLayer), || {
                    parent_paths(&mut truth)
                });
            } else {
                tracing::subscriber::with_default(registry, || parent_paths(&mut truth));
            }
            guard.finish()
        };
        check_parent_paths(&kept, &summary, &truth, how);
    }
}
