//! What the exporter has done: counters the export thread bumps and the
//! host reads, and their public snapshot [`ExportStats`].
//!
//! Every record handed over ends in exactly one count: dropped (queue full),
//! exported, failed, or abandoned at shutdown. The export thread settles
//! records in queue order; when a shutdown flush stops waiting for it (the
//! thread is stuck on a collector that does not answer), the host settles
//! the rest as abandoned at once ([`Counters::give_up`]) and the thread,
//! when it comes back, skips the records already settled. So the last word
//! adds up whatever the thread is doing.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, PoisonError};

// 0: no export attempted yet.
const COLLECTOR_OK: u8 = 1;
const COLLECTOR_FAILING: u8 = 2;

/// How a batch of records ended.
pub(super) enum Outcome {
    /// The collector took them, as this many spans.
    Exported { spans: u64 },
    /// The request failed; the error says what to check.
    Failed(String),
    /// Never sent: the shutdown deadline passed.
    Abandoned,
}

/// Records settled so far, in queue order.
#[derive(Default)]
struct Settled {
    /// By the export thread.
    by_thread: u64,
    /// The first `given_up` records were settled (as abandoned) by the host.
    given_up: u64,
}

/// Totals shared by the host's threads (queued, dropped) and the export
/// thread (exported, failed, abandoned).
#[derive(Default)]
pub(super) struct Counters {
    accepted: AtomicU64,
    dropped: AtomicU64,
    exported_records: AtomicU64,
    exported_spans: AtomicU64,
    failed_records: AtomicU64,
    failed_exports: AtomicU64,
    abandoned: AtomicU64,
    collector: AtomicU8,
    last_error: Mutex<Option<String>>,
    settled: Mutex<Settled>,
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

    /// The export thread settles the next `records` records of the queue.
    /// Those the host already gave up on count nowhere again.
    pub(super) fn settle(&self, records: u64, outcome: Outcome) {
        let mut settled = self.settled.lock().unwrap_or_else(PoisonError::into_inner);
        let first = settled.by_thread;
        settled.by_thread += records;
        let counted = records - settled.given_up.saturating_sub(first).min(records);
        if counted == 0 {
            return;
        }
        match outcome {
            Outcome::Exported { spans } => {
                self.exported_records.fetch_add(counted, Ordering::Relaxed);
                self.exported_spans.fetch_add(spans, Ordering::Relaxed);
                self.collector.store(COLLECTOR_OK, Ordering::Relaxed);
            }
            Outcome::Failed(error) => {
                self.failed_records.fetch_add(counted, Ordering::Relaxed);
                self.failed_exports.fetch_add(1, Ordering::Relaxed);
                self.collector.store(COLLECTOR_FAILING, Ordering::Relaxed);
                if let Ok(mut last) = self.last_error.lock() {
                    *last = Some(error);
                }
            }
            Outcome::Abandoned => {
                self.abandoned.fetch_add(counted, Ordering::Relaxed);
            }
        }
    }

    /// A shutdown flush stopped waiting: every record taken so far and not
    /// settled yet is abandoned now.
    pub(super) fn give_up(&self) {
        let mut settled = self.settled.lock().unwrap_or_else(PoisonError::into_inner);
        let accepted = self.accepted.load(Ordering::Relaxed);
        let done = settled.by_thread.max(settled.given_up);
        if accepted > done {
            self.abandoned.fetch_add(accepted - done, Ordering::Relaxed);
            settled.given_up = accepted;
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
            abandoned_records: self.abandoned.load(Ordering::Relaxed),
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
    /// Records never sent because the shutdown deadline passed first (the
    /// collector was slow or did not answer); see
    /// [`OtlpBuilder::shutdown_timeout`](crate::OtlpBuilder::shutdown_timeout).
    pub abandoned_records: u64,
    /// Outcome of the latest export request: `None` before the first one.
    pub collector_ok: Option<bool>,
    /// The latest export error, with what to check.
    pub last_error: Option<String>,
}

impl ExportStats {
    /// Records handed to the exporter: queued plus dropped. After a
    /// shutdown, `exported + dropped + failed + abandoned` is this.
    pub fn produced_records(&self) -> u64 {
        self.queued_records.saturating_add(self.dropped_records)
    }

    /// Records not exported: dropped at the queue, lost in failed requests
    /// and abandoned at shutdown.
    pub fn lost_records(&self) -> u64 {
        self.dropped_records
            .saturating_add(self.failed_records)
            .saturating_add(self.abandoned_records)
    }

    /// Records queued but not yet exported, failed or abandoned.
    pub fn pending_records(&self) -> u64 {
        self.queued_records
            .saturating_sub(self.exported_records + self.failed_records + self.abandoned_records)
    }
}

impl ExportStats {
    /// The counters as `(name, total)` pairs, for a summary line:
    /// `otlp.queued`, `otlp.exported`, `otlp.dropped`, `otlp.failed`,
    /// `otlp.failed_exports`, `otlp.abandoned` and `otlp.lost` (dropped +
    /// failed + abandoned: [`lost_records`](Self::lost_records)); they
    /// appear in every summary window under `sink_counters`.
    pub fn counters(&self) -> [(&'static str, u64); 7] {
        [
            ("otlp.queued", self.queued_records),
            ("otlp.exported", self.exported_records),
            ("otlp.dropped", self.dropped_records),
            ("otlp.failed", self.failed_records),
            ("otlp.failed_exports", self.failed_exports),
            ("otlp.abandoned", self.abandoned_records),
            ("otlp.lost", self.lost_records()),
        ]
    }
}

impl fmt::Display for ExportStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "otlp: {} records: {} exported ({} spans), {} dropped (queue full), {} lost in {} \
             failed exports, {} abandoned at shutdown",
            self.produced_records(),
            self.exported_records,
            self.exported_spans,
            self.dropped_records,
            self.failed_records,
            self.failed_exports,
            self.abandoned_records
        )?;
        // Only while the exporter runs: after a shutdown nothing is pending.
        let pending = self.pending_records();
        if pending > 0 {
            write!(f, ", {pending} pending")?;
        }
        if let Some(e) = &self.last_error {
            if self.collector_ok == Some(false) {
                write!(f, "; collector failing: {e}")?;
            }
        }
        if self.abandoned_records > 0 {
            write!(
                f,
                "; the collector had not taken them when the shutdown timeout passed (is it \
                 answering? the bound is OtlpBuilder::shutdown_timeout)"
            )?;
        }
        Ok(())
    }
}
