//! Data lost for good is said once, when the flush guard finishes, as a
//! warning through the app's own `tracing` (stderr without a subscriber),
//! and the same numbers are in the cumulative summary: the file sink's
//! unwritten records, the calls the layer's queue dropped, any sink's own
//! loss (issue 40: "the library never loses data silently").

use std::process::{Command, Stdio};
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender};
use stagetrace::direct::Mark;
use stagetrace::sink::Loss;
use stagetrace::{record::CallRecord, sink::RecordSink, summary::Summary, Stage, StageLayer};
use stagetrace_test_support::app_log::AppLog;
use tracing_subscriber::prelude::*;

/// `calls` one-stage calls.
fn calls(n: u64) {
    for seq in 0..n {
        let _call = tracing::info_span!("call", seq).entered();
        tracing::info_span!("capture").in_scope(|| {});
    }
}

/// Runs `app` with the stage layer and a fmt layer writing to the returned
/// log as the thread's subscriber, the guard finished inside it (as a guard
/// dropped at the end of `main` is).
fn with_log(builder: stagetrace::StageLayerBuilder, app: impl FnOnce()) -> (Summary, AppLog) {
    let (stages, guard) = builder.build().expect("layer");
    let log = AppLog::default();
    let subscriber = tracing_subscriber::registry()
        .with(stages)
        .with(log.layer());
    let summary = tracing::subscriber::with_default(subscriber, || {
        app();
        guard.finish()
    });
    (summary, log)
}

/// An output directory that cannot be made: its parent is a file.
fn unwritable_dir() -> (tempfile::NamedTempFile, std::path::PathBuf) {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let dir = file.path().join("runs");
    (file, dir)
}

#[test]
fn records_the_file_sink_could_not_write_are_one_warning_with_their_number() {
    let (_file, dir) = unwritable_dir();
    let (summary, log) = with_log(StageLayer::builder().output_dir(&dir), || calls(7));

    let warnings = log.warnings();
    assert_eq!(warnings.len(), 1, "{}", log.text());
    let w = &warnings[0];
    assert!(w.contains("7 of 7 call records and "), "{w}");
    assert!(
        w.contains(&format!("were not written to {}", dir.display())),
        "{w}"
    );
    assert!(w.contains("cannot create output directory"), "{w}");
    assert!(w.contains("Fix: make the directory writable"), "{w}");
    assert!(w.ends_with("lost=7"), "{w}");
    assert_eq!(
        summary.records_lost, 7,
        "the cumulative summary counts the same"
    );
}

/// Holds the worker in its first record until released, so the queue
/// behind it fills up: a known number of calls is dropped.
struct Gate {
    entered: Sender<()>,
    release: Receiver<()>,
    first: bool,
}

impl RecordSink for Gate {
    fn on_record(&mut self, _rec: &CallRecord) {
        if std::mem::take(&mut self.first) {
            let _ = self.entered.send(());
            let _ = self.release.recv_timeout(Duration::from_secs(30));
        }
    }
}

#[test]
fn calls_the_full_queue_dropped_are_one_warning_with_their_number() {
    let (entered_tx, entered) = bounded(1);
    let (release, release_rx) = bounded(1);
    let gate = Gate {
        entered: entered_tx,
        release: release_rx,
        first: true,
    };
    let builder = StageLayer::builder().queue_capacity(1).sink(Box::new(gate));
    let (summary, log) = with_log(builder, || {
        calls(1);
        entered
            .recv_timeout(Duration::from_secs(30))
            .expect("the worker took the first call");
        // The worker is held: the second call fills the queue of one, the
        // other eight find it full.
        calls(9);
        release.send(()).expect("release the worker");
    });

    assert_eq!(summary.queue_drops, 8, "{}", log.text());
    let warnings = log.warnings();
    assert_eq!(warnings.len(), 1, "{}", log.text());
    let w = &warnings[0];
    assert!(
        w.contains(
            "8 calls were dropped because the queue to the worker thread was full (capacity 1)"
        ),
        "{w}"
    );
    assert!(w.contains("raise .queue_capacity(...)"), "{w}");
    assert!(w.ends_with("lost=8"), "{w}");
}

/// A sink that says it lost some calls.
struct Lossy;

impl RecordSink for Lossy {
    fn on_record(&mut self, _rec: &CallRecord) {}

    fn loss_report(&self) -> Option<Loss> {
        Some(Loss {
            lost: 5,
            message: "5 of 3 calls never reached the lossy sink".to_owned(),
        })
    }
}

#[test]
fn a_sinks_loss_is_warned_once_and_the_stage_layer_records_nothing_of_it() {
    let (summary, log) = with_log(StageLayer::builder().sink(Box::new(Lossy)), || calls(3));

    let warnings = log.warnings();
    assert_eq!(warnings.len(), 1, "{}", log.text());
    assert!(
        warnings[0].ends_with("WARN stagetrace: 5 of 3 calls never reached the lossy sink lost=5"),
        "{}",
        warnings[0]
    );
    // The warning is an event on the app's thread: no call, no ignored
    // span, nothing the layer counts.
    assert_eq!(summary.calls, 3);
    assert_eq!(summary.ignored_spans, 0);
    assert_eq!(summary.empty_calls, 0);
}

const CHILD_ENV: &str = "STAGETRACE_LOSS_REPORT_CHILD";

/// In the child process: an app with no `tracing` subscriber at all (the
/// layer used directly, as the Python package does), whose records cannot
/// be written.
#[test]
fn child_without_a_subscriber() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (stages, guard) = StageLayer::builder()
        .output_dir(dir)
        .build()
        .expect("layer");
    let direct = stages.direct_calls();
    for seq in 0..4 {
        let mut call = direct.start(None, Some(seq));
        call.add_stage(Stage::Capture, Mark::now(), false);
        direct.submit(&call);
    }
    drop(guard);
}

#[test]
fn without_a_subscriber_the_loss_goes_to_stderr() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let (_file, dir) = unwritable_dir();
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_without_a_subscriber",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run the child");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lost: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("stagetrace: 4 of 4 call records and "))
        .collect();
    assert_eq!(lost.len(), 1, "{stderr}");
}
