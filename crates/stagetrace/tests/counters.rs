//! Fault counters belong to a layer instance: two layers in one process keep
//! separate counts, and a count made by code running under a subscriber goes
//! to that subscriber's stage layer only.
#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stagetrace::{
    clock::ClockMode, health, summary::WindowSummary, ServerTiming, StageLayer, StageSpanExt,
};
use stagetrace_test_support::Collect;
use tracing::info_span;
use tracing_subscriber::prelude::*;

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// One call whose server claims to have worked for 10 s inside a roundtrip
/// of microseconds: with trusted clocks its network time is clamped to 0.
fn a_call_that_clamps() {
    let _call = info_span!("call").entered();
    let transport = info_span!("transport");
    transport.in_scope(|| {
        transport.record_server_timing(ServerTiming {
            recv_unix_ns: Some(now_unix_ns()),
            total_ns: Some(10_000_000_000),
            ..ServerTiming::default()
        });
    });
}

/// `f` summed over the rolling windows (the sink also gets the cumulative one).
fn sum(windows: &[WindowSummary], f: impl Fn(&WindowSummary) -> u64) -> u64 {
    windows
        .iter()
        .filter(|w| w.window == "rolling")
        .map(f)
        .sum()
}

#[test]
fn two_layers_in_one_process_keep_separate_counts() {
    let builder = || {
        StageLayer::builder()
            .clock_mode(ClockMode::Trusted)
            .window(Duration::from_secs(3600))
    };
    let (layer_a, guard_a, kept_a) = Collect::build(builder());
    let (layer_b, guard_b, kept_b) = Collect::build(builder());
    let a = tracing::Dispatch::new(tracing_subscriber::registry().with(layer_a));
    let b = tracing::Dispatch::new(tracing_subscriber::registry().with(layer_b));

    tracing::dispatcher::with_default(&a, || {
        stagetrace::health::count_rejected_header();
        stagetrace::health::count_rejected_header();
        assert_eq!(health::rejected_headers(), 2);
        a_call_that_clamps();
    });
    tracing::dispatcher::with_default(&b, || {
        assert_eq!(health::rejected_headers(), 0, "A's count leaked into B");
        stagetrace::health::count_rejected_header();
        stagetrace::health::count_clamped();
        assert_eq!((health::rejected_headers(), health::clamped()), (1, 1));
    });
    tracing::dispatcher::with_default(&a, || {
        assert_eq!(health::rejected_headers(), 2, "B's count leaked into A");
    });

    let (sum_a, sum_b) = (guard_a.finish(), guard_b.finish());
    assert_eq!((sum_a.rejected_headers, sum_a.clamped), (2, 1), "{sum_a:?}");
    assert_eq!((sum_b.rejected_headers, sum_b.clamped), (1, 1), "{sum_b:?}");
    // The rolling windows say the same: each layer's counts in its own.
    let (win_a, win_b) = (kept_a.windows(), kept_b.windows());
    assert!(!win_a.is_empty() && !win_b.is_empty());
    assert_eq!(sum(&win_a, |w| w.rejected_headers), 2);
    assert_eq!(sum(&win_b, |w| w.rejected_headers), 1);
    assert_eq!(sum(&win_a, |w| w.clamped), 1);
    assert_eq!(sum(&win_b, |w| w.clamped), 1);
}

#[test]
fn without_a_stage_layer_counts_go_nowhere() {
    stagetrace::health::count_rejected_header();
    stagetrace::health::count_clamped();
    assert_eq!((health::rejected_headers(), health::clamped()), (0, 0));
    // A subscriber without a stage layer: the same.
    tracing::subscriber::with_default(tracing_subscriber::registry(), || {
        stagetrace::health::count_rejected_header();
        assert_eq!(health::rejected_headers(), 0);
    });
}

/// Takes an interest in every span, like an app's own layer.
struct AppLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for AppLayer {}

#[test]
fn the_layer_is_found_unfiltered_and_behind_other_layers() {
    let kept = Collect::default();
    let (layer, guard) = StageLayer::builder().sink(kept.sink()).build().unwrap();
    let subscriber = tracing_subscriber::registry().with(AppLayer).with(layer);
    tracing::subscriber::with_default(subscriber, || {
        stagetrace::health::count_rejected_header();
        assert_eq!(health::rejected_headers(), 1);
    });
    assert_eq!(guard.finish().rejected_headers, 1);

    let (layer, guard, _kept) = Collect::build(StageLayer::builder());
    let subscriber = tracing_subscriber::registry().with(layer).with(AppLayer);
    tracing::subscriber::with_default(subscriber, stagetrace::health::count_rejected_header);
    assert_eq!(guard.finish().rejected_headers, 1);
}
