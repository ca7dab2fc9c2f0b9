//! Bad input and faults: the host app keeps running, problems are counted.
#![allow(missing_docs, clippy::unwrap_used)]

use stagetrace_schema::Figure;
use std::time::Duration;

use stagetrace::{record::CallRecord, sink::RecordSink, StageLayer};
use stagetrace_test_support::{read_records, read_summaries, run_collecting};
use tracing::info_span;
use tracing_subscriber::prelude::*;

/// A sink slow enough to let the queue fill up.
struct Slow;

impl RecordSink for Slow {
    fn on_record(&mut self, _rec: &CallRecord) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_full_queue_drops_and_counts_never_blocks() {
    let (layer, guard) = StageLayer::builder()
        .queue_capacity(2)
        .sink(Box::new(Slow))
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let calls = 200u64;
    let started = std::time::Instant::now();
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..calls {
            let _call = info_span!("call").entered();
            info_span!("capture").in_scope(|| {});
        }
    });
    // 200 calls against a 20 ms/record sink: blocking would take ≥ 4 s.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the app thread was blocked"
    );
    let summary = guard.finish();
    assert!(summary.queue_drops > 0, "{summary:?}");
    assert_eq!(summary.calls + summary.queue_drops, calls);
}

#[test]
fn an_unwritable_dir_keeps_the_app_running_and_counts_failures() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let builder = StageLayer::builder().output_dir(blocker.join("runs"));
    let (summary, recs) = run_collecting(builder, || {
        for _ in 0..10 {
            let _call = info_span!("call").entered();
            info_span!("capture").in_scope(|| {});
        }
    });
    // Every call still reached the summary and the sinks.
    assert_eq!(summary.calls, 10);
    assert_eq!(recs.len(), 10);
    // 10 record lines and the summary lines could not be written.
    assert!(summary.write_failures >= 10, "{summary:?}");
}

#[test]
fn a_panicking_call_is_recorded_as_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (layer, guard) = StageLayer::builder()
        .output_dir(dir.path())
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let d = dispatch.clone();
    let joined = std::thread::spawn(move || {
        tracing::dispatcher::with_default(&d, || {
            let _call = info_span!("call", kind = "doomed").entered();
            let _capture = info_span!("capture").entered();
            panic!("host app bug");
        })
    })
    .join();
    assert!(joined.is_err());
    // The layer still works afterwards.
    tracing::dispatcher::with_default(&dispatch, || {
        let _call = info_span!("call").entered();
        info_span!("capture").in_scope(|| {});
    });
    let summary = guard.finish();
    let records = read_records(dir.path());
    assert_eq!(records.len(), 2);
    let doomed = records.iter().find(|r| r.kind == "doomed").unwrap();
    assert_eq!(doomed.failed, Some(true));
    assert_eq!(doomed.error.as_deref(), Some("panic"));
    assert!(doomed.ms(Figure::Capture).is_some());
    assert_eq!((summary.calls, summary.failed_calls), (1, 1));
}

#[test]
fn stray_spans_and_empty_calls_are_counted_not_mixed() {
    let dir = tempfile::tempdir().unwrap();
    let (layer, guard) = StageLayer::builder()
        .output_dir(dir.path())
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        // A server task in the same process: stage spans outside any call.
        info_span!("infer").in_scope(|| std::thread::sleep(Duration::from_millis(2)));
        info_span!("queue").in_scope(|| {});
        // A span naming no stage.
        let _ = info_span!("work", stage = "teleport").entered();
        // A call with no stage span.
        drop(info_span!("call", kind = "empty").entered());
        // A normal call: the stray spans must not show up in it.
        let call = info_span!("call").entered();
        info_span!("capture").in_scope(|| {});
        drop(call);
    });
    let summary = guard.finish();
    let records = read_records(dir.path());
    assert_eq!(records.len(), 2);
    assert!(records
        .iter()
        .all(|r| r.ms(Figure::Infer).is_none() && r.ms(Figure::Queue).is_none()));
    let empty = records.iter().find(|r| r.kind == "empty").unwrap();
    assert_eq!(empty.ms(Figure::Gap), empty.ms(Figure::E2e));
    assert_eq!(summary.ignored_spans, 3, "{summary:?}");
    assert_eq!(summary.empty_calls, 1);
    let lines = read_summaries(dir.path());
    assert_eq!(lines.last().unwrap().ignored_spans, 3);
}

#[test]
fn a_panicking_sink_is_disabled_and_the_files_keep_going() {
    struct Bomb;
    impl RecordSink for Bomb {
        fn on_record(&mut self, _rec: &CallRecord) {
            panic!("sink bug");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    // The bomb first: the sink after it must still get every record.
    let builder = StageLayer::builder()
        .output_dir(dir.path())
        .sink(Box::new(Bomb));
    let (summary, recs) = run_collecting(builder, || {
        for _ in 0..3 {
            let _call = info_span!("call").entered();
            info_span!("capture").in_scope(|| {});
        }
    });
    assert_eq!(summary.calls, 3);
    assert_eq!(recs.len(), 3);
    assert_eq!(read_records(dir.path()).len(), 3);
}

#[test]
fn bad_configuration_is_rejected_with_a_fix() {
    let e = StageLayer::builder()
        .window(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains(".window("), "{e}");
    let e = StageLayer::builder().target_hz(-1.0).build().unwrap_err();
    assert!(e.to_string().contains("target_hz"), "{e}");
    let e = StageLayer::builder().queue_capacity(0).build().unwrap_err();
    assert!(e.to_string().contains("queue_capacity"), "{e}");
    let e = StageLayer::builder()
        .call_span_name("step")
        .map_span("step", stagetrace::Stage::Capture)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("\"step\""), "{e}");
}
