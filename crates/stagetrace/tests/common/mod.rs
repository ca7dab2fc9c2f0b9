//! Shared helpers for the stagetrace integration tests.
#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace::{CallRecord, RecordSink, StageLayerBuilder, Summary, WindowSummary};
use tracing_subscriber::prelude::*;

/// Busy-wait until `d` has passed (sub-ms precision; sleeps the bulk first).
pub fn spin_for(d: Duration) -> Duration {
    let start = Instant::now();
    if d > Duration::from_millis(2) {
        std::thread::sleep(d - Duration::from_millis(1));
    }
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
    start.elapsed()
}

/// A sink that keeps every record and window in memory.
#[derive(Clone, Debug, Default)]
pub struct Collect {
    pub records: Arc<Mutex<Vec<CallRecord>>>,
    pub windows: Arc<Mutex<Vec<WindowSummary>>>,
}

impl Collect {
    pub fn sink(&self) -> Box<dyn RecordSink> {
        Box::new(self.clone())
    }

    pub fn records(&self) -> Vec<CallRecord> {
        self.records.lock().unwrap().clone()
    }
}

impl RecordSink for Collect {
    fn on_record(&mut self, rec: &CallRecord) {
        self.records.lock().unwrap().push(rec.clone());
    }

    fn on_window(&mut self, summary: &WindowSummary) {
        self.windows.lock().unwrap().push(summary.clone());
    }
}

/// Builds `builder` with a [`Collect`] sink added, runs `f` on this thread
/// under a registry with that layer, then drains the worker; returns the
/// summary and every record the sink got.
pub fn run_collecting(builder: StageLayerBuilder, f: impl FnOnce()) -> (Summary, Vec<CallRecord>) {
    let collect = Collect::default();
    let (layer, guard) = builder.sink(collect.sink()).build().unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), f);
    (guard.finish(), collect.records())
}

fn lines_of(dir: &Path, prefix: &str) -> Vec<String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with(prefix) && name.ends_with(".jsonl")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no {prefix}*.jsonl in {}", dir.display());
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            assert!(text.ends_with('\n'), "{} ends mid-line", f.display());
            text.lines().map(str::to_owned).collect::<Vec<_>>()
        })
        .collect()
}

/// Every record line in `dir`, each checked against `docs/record.schema.json`.
pub fn read_records(dir: &Path) -> Vec<CallRecord> {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/record.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    lines_of(dir, "records-")
        .iter()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Err(e) = validator.validate(&value) {
                panic!("record violates the schema: {e}\n{line}");
            }
            serde_json::from_value(value).unwrap()
        })
        .collect()
}

/// Every summary line in `dir`.
pub fn read_summaries(dir: &Path) -> Vec<WindowSummary> {
    lines_of(dir, "summary.")
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}
