//! What the exporter has done: counters the export thread bumps and the
//! host reads, and their public snapshot [`ExportStats`].

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

// 0: no export attempted yet.
const COLLECTOR_OK: u8 = 1;
const COLLECTOR_FAILING: u8 = 2;

/// Totals shared by the host's threads (queued, dropped) and the export
/// thread (exported, failed).
#[derive(Default)]
pub(super) struct Counters {
    accepted: AtomicU64,
    dropped: AtomicU64,
    exported_records: AtomicU64,
    exported_spans: AtomicU64,
    failed_records: AtomicU64,
    failed_exports: AtomicU64,
    collector: AtomicU8,
    last_error: Mutex<Option<String>>,
}

impl Counters {
    // The two the host's threads bump on every hand-over: inlined so the
    // hand-over costs what a bare atomic add does.
    #[inline]
    pub(super) fn accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub(super) fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// The collector took a batch of `spans` spans from `records` records.
    pub(super) fn exported(&self, records: u64, spans: u64) {
        self.exported_records.fetch_add(records, Ordering::Relaxed);
        self.exported_spans.fetch_add(spans, Ordering::Relaxed);
        self.collector.store(COLLECTOR_OK, Ordering::Relaxed);
    }

    /// A batch of `records` records was lost; `error` says what to check.
    pub(super) fn failed(&self, records: u64, error: String) {
        self.failed_records.fetch_add(records, Ordering::Relaxed);
        self.failed_exports.fetch_add(1, Ordering::Relaxed);
        self.collector.store(COLLECTOR_FAILING, Ordering::Relaxed);
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(error);
        }
    }

    pub(super) fn snapshot(&self) -> ExportStats {
        ExportStats {
            queued_records: self.accepted.load(Ordering::Relaxed),
            dropped_records: self.dropped.load(Ordering::Relaxed),
            exported_records: self.exported_records.load(Ordering::Relaxed),
            exported_spans: self.exported_spans.load(Ordering::Relaxed),
            failed_records: self.failed_records.load(Ordering::Relaxed),
            failed_exports: self.failed_exports.load(Ordering::Relaxed),
            collector_ok: match self.collector.load(Ordering::Relaxed) {
                COLLECTOR_OK => Some(true),
                COLLECTOR_FAILING => Some(false),
                _ => None,
            },
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }
}

/// What the exporter has done so far (totals since it was built).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Records taken into the queue.
    pub queued_records: u64,
    /// Records dropped because the queue was full (the collector is down or
    /// slower than the calls), never waited for.
    pub dropped_records: u64,
    /// Records whose spans the collector accepted.
    pub exported_records: u64,
    /// Spans the collector accepted.
    pub exported_spans: u64,
    /// Records lost in export requests that failed.
    pub failed_records: u64,
    /// Export requests that failed (after the exporter's own retries).
    pub failed_exports: u64,
    /// Outcome of the latest export request: `None` before the first one.
    pub collector_ok: Option<bool>,
    /// The latest export error, with what to check.
    pub last_error: Option<String>,
}

impl ExportStats {
    /// Records not exported: dropped at the queue plus lost in failed requests.
    pub fn lost_records(&self) -> u64 {
        self.dropped_records + self.failed_records
    }

    /// Records queued but not yet exported or failed.
    pub fn pending_records(&self) -> u64 {
        self.queued_records
            .saturating_sub(self.exported_records + self.failed_records)
    }
}

impl ExportStats {
    /// The counters as `(name, total)` pairs, for a summary line:
    /// `otlp.queued`, `otlp.exported`, `otlp.dropped`, `otlp.failed`,
    /// `otlp.failed_exports` (they appear in every summary window under `sink_counters`).
    pub fn counters(&self) -> [(&'static str, u64); 5] {
        [
            ("otlp.queued", self.queued_records),
            ("otlp.exported", self.exported_records),
            ("otlp.dropped", self.dropped_records),
            ("otlp.failed", self.failed_records),
            ("otlp.failed_exports", self.failed_exports),
        ]
    }
}

impl fmt::Display for ExportStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "otlp: {} exported ({} spans), {} dropped (queue full), {} lost in {} failed exports",
            self.exported_records,
            self.exported_spans,
            self.dropped_records,
            self.failed_records,
            self.failed_exports
        )?;
        if let Some(e) = &self.last_error {
            if self.collector_ok == Some(false) {
                write!(f, "; collector failing: {e}")?;
            }
        }
        Ok(())
    }
}
