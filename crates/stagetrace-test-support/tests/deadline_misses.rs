//! One definition of a deadline miss across the tools: a
//! steady call that ended after its tick's deadline (`deadline_miss: true`
//! on its record). The cumulative summary (what the quickstart prints and
//! the demo reports), `stagetrace report` over the same run's files and the
//! records count the same calls; skipped ticks are counted apart.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use stagetrace::StageLayer;
use stagetrace_analyze::analysis::AnalyzeOptions;
use stagetrace_test_support::{read_records, spin_for};
use tracing::info_span;
use tracing_subscriber::layer::SubscriberExt;

#[test]
fn summary_report_and_records_count_the_same_misses() {
    let dir = tempfile::tempdir().unwrap();
    let period = Duration::from_millis(10);
    let (layer, guard) = StageLayer::builder()
        .target_hz(100.0)
        .warmup_calls(3)
        .output_dir(dir.path())
        .build()
        .unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        let mut next = Instant::now();
        for i in 0..60u64 {
            let call = info_span!("call", seq = i).entered();
            // Two calls overrun by 1.5 periods: each misses, and the loop
            // skips the ticks it lost (as the quickstart does).
            let work = if i == 20 || i == 40 { 25 } else { 1 };
            info_span!("capture").in_scope(|| spin_for(Duration::from_millis(work)));
            drop(call);
            next += period;
            while next < Instant::now() {
                next += period;
            }
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    });
    let summary = guard.finish();
    let d = summary.deadline.unwrap();

    let records = read_records(dir.path());
    let late: Vec<u64> = records
        .iter()
        .filter(|r| {
            r.warmup != Some(true) && r.failed != Some(true) && r.deadline_miss == Some(true)
        })
        .map(|r| r.seq)
        .collect();
    assert!(late.contains(&20) && late.contains(&40), "{late:?}");
    assert!(d.skipped_ticks >= 2, "{d:?}");
    // The summary: calls that missed, skipped ticks not added.
    assert_eq!(d.misses, late.len() as u64, "{d:?}");
    assert_eq!(summary.calls, 57);
    let line = format!(
        "{} of 57 calls missed (ended after their tick's deadline), {} ticks skipped",
        d.misses, d.skipped_ticks
    );
    assert!(summary.table().contains(&line), "{}", summary.table());

    // `stagetrace report` over the same run's record files.
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("records-")
        })
        .collect();
    let report = stagetrace_analyze::report_files(&files, &AnalyzeOptions::default()).unwrap();
    let rd = report.groups[0].rate.deadline.as_ref().unwrap();
    assert_eq!((rd.misses, rd.calls), (d.misses, 57));
    let v = report
        .verdicts
        .iter()
        .find(|v| v.code == "deadline_misses")
        .unwrap();
    assert!(
        v.text.starts_with(&format!("{} of 57 calls", d.misses)),
        "{}",
        v.text
    );
}
