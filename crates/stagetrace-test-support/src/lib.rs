//! What the stagetrace integration tests share, once (as `tracing-mock` is
//! for tracing): a sink that keeps every record and summary window, a stage
//! layer installed for the current thread, readers of the files a run
//! wrote that check every record against `docs/record.schema.json`, and
//! the app's own log kept in memory ([`app_log`]).
//!
//! Test code: it panics with a message on anything unexpected.
//!
//! # Public API
//!
//! At the root, a layer and what it wrote:
//!
//! - [`Collect`]: a sink keeping every record and window in memory; hand
//!   [`Collect::sink`] to the builder, or [`Collect::build`] a layer with
//!   it.
//! - [`run_collecting`]: run a closure under a layer with a [`Collect`]
//!   sink; returns the cumulative summary and the records.
//! - [`Observed`]: a layer installed for the current thread, writing to a
//!   temporary directory; [`Observed::finish`] checks files against memory.
//! - [`rt`]: the current-thread Tokio runtime the network tests run on.
//! - [`read_records`], [`read_summaries`], [`jsonl_lines`]: the records,
//!   summary windows and lines of a run directory, records checked against
//!   [`record_schema`] (`docs/record.schema.json`).
//! - [`spin_for`]: busy-wait a duration precisely; [`quantile`]: the
//!   nearest-rank quantile of a sample.
//! - [`ThreadCpu`]: a Criterion measurement of the thread's CPU time;
//!   [`thread_cpu_ns`]: that time now, ns.
//!
//! [`alone`]: a test kept apart from its binary's other tests:
//!
//! - [`in_own_process!`]: run the test again, by itself, in a child
//!   process (its name found by [`test_name!`]).
//!
//! [`app_log`]: the app's own log in memory:
//!
//! - [`app_log::AppLog`]: what the app's `fmt` layer wrote.
//!
//! [`busy`]: rival threads that keep cores busy:
//!
//! - [`busy::Busy`]: busy loops until dropped; [`busy::cores`]: the cores
//!   this process may run on; [`busy::pin_to_cpu`]: pin the calling thread.
//!
//! [`collector`]: collectors that misbehave, for export tests:
//!
//! - [`collector::silent_collector`]: an OTLP/HTTP endpoint that never
//!   answers.
//!
//! [`prereq`]: prerequisites a machine may lack (Jaeger, Chromium, …):
//!
//! - [`prereq::have`]: skip a test when its prerequisite is missing, or
//!   fail it when the run must be complete ([`prereq::missing`], decided by
//!   [`prereq::Policy`]); [`prereq::allowed_in`]: whether a list names one.
//!
//! [`ports`]: loopback ports for a server a test starts as a child:
//!
//! - [`ports::reserve`]: free ports outside the kernel's ephemeral range,
//!   never handed out twice in one process.
//!
//! [`strategies`]: proptest strategies for the wire's values:
//!
//! - [`strategies::server_timing`]: any server timing the wire may carry.
//!
//! [`timing`]: the timing tests' error report (`cargo xtask timing`):
//!
//! - [`timing::error`], [`timing::worst`], [`timing::worst_pair`]: report a
//!   measured error against its bound; [`timing::PREFIX`] starts each line.
//! - [`timing::realtime`], [`timing::at_realtime`]: run at real-time
//!   priority.

#![allow(clippy::unwrap_used)]

pub mod alone;
pub mod app_log;
mod bench;
pub mod busy;
pub mod collector;
pub mod ports;
pub mod prereq;
pub mod strategies;
pub mod timing;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace::{
    record::CallRecord, sink::RecordSink, summary::WindowSummary, FlushGuard, StageLayer,
    StageLayerBuilder,
};
use tracing_subscriber::layer::SubscriberExt;

/// A sink that keeps every record and every summary window in memory.
#[derive(Clone, Debug, Default)]
pub struct Collect {
    records: Arc<Mutex<Vec<CallRecord>>>,
    windows: Arc<Mutex<Vec<WindowSummary>>>,
}

impl Collect {
    /// A boxed clone, to hand to [`StageLayerBuilder::sink`].
    pub fn sink(&self) -> Box<dyn RecordSink> {
        Box::new(self.clone())
    }

    /// Builds `builder` with this sink added last.
    pub fn build(builder: StageLayerBuilder) -> (StageLayer, FlushGuard, Collect) {
        let kept = Collect::default();
        let (layer, guard) = builder.sink(kept.sink()).build().unwrap();
        (layer, guard, kept)
    }

    /// Every record so far, in the order they arrived.
    pub fn records(&self) -> Vec<CallRecord> {
        self.records.lock().unwrap().clone()
    }

    /// The last record so far.
    pub fn last(&self) -> Option<CallRecord> {
        self.records.lock().unwrap().last().cloned()
    }

    /// Every rolling window so far.
    pub fn windows(&self) -> Vec<WindowSummary> {
        self.windows.lock().unwrap().clone()
    }

    /// Waits (at most 30 s) until `n` records have reached the sinks.
    #[track_caller]
    pub fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.records.lock().unwrap().len() < n {
            assert!(
                Instant::now() < deadline,
                "the layer never handed over {n} records"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
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
/// cumulative summary and every record the sink got.
pub fn run_collecting(
    builder: StageLayerBuilder,
    f: impl FnOnce(),
) -> (WindowSummary, Vec<CallRecord>) {
    let collect = Collect::default();
    let (layer, guard) = builder.sink(collect.sink()).build().unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), f);
    (guard.finish(), collect.records())
}

/// A stage layer installed for the current thread (use [`rt`], a
/// current-thread runtime, so every task sees it), keeping records in memory
/// and writing `records-*.jsonl` to a temporary directory as an app would.
#[derive(Debug)]
pub struct Observed {
    kept: Collect,
    guard: Option<FlushGuard>,
    dir: tempfile::TempDir,
    _default: tracing::subscriber::DefaultGuard,
}

impl Observed {
    /// A default layer writing to a fresh temporary directory.
    pub fn new() -> Self {
        Self::with(StageLayer::builder())
    }

    /// `builder` (its output directory replaced by a temporary one).
    pub fn with(builder: StageLayerBuilder) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kept = Collect::default();
        let (layer, guard) = builder
            .sink(kept.sink())
            .output_dir(dir.path())
            .build()
            .unwrap();
        let default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
        Observed {
            kept,
            guard: Some(guard),
            dir,
            _default: default,
        }
    }

    /// Drains the worker and returns every record, by seq, after checking
    /// that the records files hold the same records, each valid against
    /// `docs/record.schema.json`.
    #[track_caller]
    pub fn finish(&mut self) -> Vec<CallRecord> {
        if let Some(g) = self.guard.take() {
            g.finish();
        }
        let mut r = self.kept.records();
        let mut in_memory: Vec<String> = r.iter().map(CallRecord::to_json_line).collect();
        let mut in_files: Vec<String> = read_records(self.dir.path())
            .iter()
            .map(CallRecord::to_json_line)
            .collect();
        in_memory.sort();
        in_files.sort();
        assert_eq!(in_files, in_memory, "the files and the sink disagree");
        r.sort_by_key(|r| r.seq);
        r
    }
}

impl Default for Observed {
    fn default() -> Self {
        Self::new()
    }
}

/// The current-thread runtime the network tests run on (the thread-default
/// subscriber of [`Observed`] reaches every task).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Busy-waits until `d` has passed (sub-ms precision; sleeps the bulk first).
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

/// The q-quantile (0..=1) of `v` (nearest rank); NaN when empty.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

/// The published record schema, `docs/record.schema.json`.
pub fn record_schema() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/record.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Lines of every `PREFIX*.jsonl` in `dir`, files in name order; each file
/// must end with a newline (no torn last line) or be empty: a daily
/// appender creates today's file when it opens, so a run that opens just
/// before midnight and writes just after it leaves yesterday's file empty.
#[track_caller]
pub fn jsonl_lines(dir: &Path, prefix: &str) -> Vec<String> {
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
            assert!(
                text.is_empty() || text.ends_with('\n'),
                "{} ends mid-line",
                f.display()
            );
            text.lines().map(str::to_owned).collect::<Vec<_>>()
        })
        .collect()
}

/// Every record line in `dir`, each checked against `docs/record.schema.json`.
#[track_caller]
pub fn read_records(dir: &Path) -> Vec<CallRecord> {
    let schema = record_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    jsonl_lines(dir, "records-")
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
#[track_caller]
pub fn read_summaries(dir: &Path) -> Vec<WindowSummary> {
    jsonl_lines(dir, "summary.")
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

pub use bench::{thread_cpu_ns, ThreadCpu};

#[cfg(test)]
mod tests {
    use super::jsonl_lines;

    /// A run that opened its daily files at 23:59:59 and wrote after
    /// midnight leaves yesterday's file empty: no line of it is torn.
    #[test]
    fn an_empty_file_from_before_midnight_has_no_lines_and_no_torn_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("summary.2026-12-04.jsonl"), "").unwrap();
        std::fs::write(
            dir.path().join("summary.2026-12-05.jsonl"),
            "{\"a\":1}\n{\"a\":2}\n",
        )
        .unwrap();
        assert_eq!(
            jsonl_lines(dir.path(), "summary"),
            ["{\"a\":1}", "{\"a\":2}"]
        );
    }

    #[test]
    #[should_panic(expected = "ends mid-line")]
    fn a_file_whose_last_line_has_no_newline_is_torn() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("summary.2026-12-05.jsonl"),
            "{\"a\":1}\n{\"a\"",
        )
        .unwrap();
        jsonl_lines(dir.path(), "summary");
    }
}
