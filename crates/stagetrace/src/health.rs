//! Fault counters of one stage layer, reported in every summary window.
//!
//! Each layer built by [`StageLayer::builder`](crate::StageLayer::builder)
//! owns one set of counters, shared by the layer on the app thread, its
//! worker and its file sink: two layers (or two tests) in one process never
//! mix their counts. The counters are plain atomics, so counting costs one
//! relaxed add and never blocks. Each summary window reports the increase
//! since the previous window.
//!
//! Code that is not handed the layer — the parsers in `stagetrace-net`, an
//! app's own codec — counts with [`count_rejected_header`], which finds the
//! stage layer of the current default subscriber (`tracing`'s thread-local
//! default, else the global one). Without a stage layer there, the count goes
//! nowhere.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::summary::Counters;

/// The counters of one layer instance.
///
/// The layer hands out its own through `downcast_raw`, so
/// [`count_rejected_header`] reaches it through the subscriber without this
/// module knowing the layer type.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// Calls dropped because the queue to the worker was full.
    pub(crate) queue_drops: AtomicU64,
    /// Stage spans that closed outside any call span.
    pub(crate) ignored_spans: AtomicU64,
    /// Of [`ignored_spans`](Self::ignored_spans), those inside a service's
    /// handler (a remote parent): a traced server's or relay's own stage
    /// spans, which continue someone else's call. Counted like the others,
    /// but nothing for the app to fix, so no warning about them.
    pub(crate) service_spans: AtomicU64,
    /// Spans whose `stage` field named no stage.
    pub(crate) unknown_stage: AtomicU64,
    /// Call / transport spans for which the trace-context hook found nothing.
    pub(crate) context_misses: AtomicU64,
    /// Rejected `traceparent` / server-timing inputs.
    pub(crate) rejected_headers: AtomicU64,
    /// Negative (or impossible) durations clamped before they were reported.
    pub(crate) clamped: AtomicU64,
    /// Record lines the file sink could not write (one per record).
    pub(crate) records_lost: AtomicU64,
    /// Summary lines the file sink could not write.
    pub(crate) summary_write_failures: AtomicU64,
    /// Call spans that closed with no stage span inside.
    pub(crate) empty_calls: AtomicU64,
}

impl Health {
    /// Adds one to `counter`.
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n` to `counter`.
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The value of `counter` now.
    pub(crate) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// The cumulative values a summary reports.
    pub(crate) fn counters(&self) -> Counters {
        Counters {
            queue_drops: Self::get(&self.queue_drops),
            write_failures: Self::get(&self.records_lost) + Self::get(&self.summary_write_failures),
            records_lost: Self::get(&self.records_lost),
            summary_write_failures: Self::get(&self.summary_write_failures),
            rejected_headers: Self::get(&self.rejected_headers),
            clamped: Self::get(&self.clamped),
            ignored_spans: Self::get(&self.ignored_spans) + Self::get(&self.unknown_stage),
            empty_calls: Self::get(&self.empty_calls),
        }
    }
}

/// Runs `f` on the counters of the stage layer in the current default
/// subscriber; `None` when there is none.
fn with_current<T>(mut f: impl FnMut(&Health) -> T) -> Option<T> {
    tracing::dispatcher::get_default(|dispatch| dispatch.downcast_ref::<Health>().map(&mut f))
}

/// Count one rejected `traceparent` / server-timing header (malformed,
/// oversized, unknown version) on the stage layer of the current default
/// subscriber. Reported as `rejected_headers`; without a stage layer it is
/// not counted anywhere.
pub fn count_rejected_header() {
    with_current(|h| Health::bump(&h.rejected_headers));
}

/// Count one negative duration that was clamped to 0 before it was reported,
/// on the stage layer of the current default subscriber. Reported as
/// `clamped`; without a stage layer it is not counted anywhere. (The layer's
/// own clamps, when it stitches a call, are counted on that layer directly.)
pub fn count_clamped() {
    with_current(|h| Health::bump(&h.clamped));
}

/// Rejected headers counted so far by the stage layer of the current default
/// subscriber (0 without one).
pub fn rejected_headers() -> u64 {
    with_current(|h| Health::get(&h.rejected_headers)).unwrap_or(0)
}

/// Clamped negative durations counted so far by the stage layer of the
/// current default subscriber (0 without one).
pub fn clamped() -> u64 {
    with_current(|h| Health::get(&h.clamped)).unwrap_or(0)
}
