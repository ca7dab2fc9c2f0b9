//! Sinks: where finished calls go. The JSONL files are one
//! (`worker/files.rs`), registered first when `.output_dir(...)` is set.

use crate::record::CallRecord;
use crate::summary::WindowSummary;

/// Receives every finished call and every summary window, on the worker thread.
///
/// Register sinks with [`StageLayerBuilder::sink`](crate::StageLayerBuilder::sink).
/// The methods run on stagetrace's worker thread, never on the app thread, so
/// a sink may allocate, lock or do I/O; a slow sink delays only the worker
/// (and, when the queue fills up, makes the layer drop and count calls). A sink
/// that panics is disabled and reported once; the other outputs keep running.
///
/// ```
/// use stagetrace::{record::CallRecord, sink::RecordSink};
/// use stagetrace_schema::Figure;
///
/// #[derive(Debug, Default)]
/// struct Slowest(f64);
///
/// impl RecordSink for Slowest {
///     fn on_record(&mut self, rec: &CallRecord) {
///         self.0 = self.0.max(rec.ms(Figure::E2e).unwrap_or(0.0));
///     }
/// }
/// ```
pub trait RecordSink: Send + 'static {
    /// One finished call, with its clock-stitched stages and timeline.
    fn on_record(&mut self, rec: &CallRecord);

    /// One summary: every rolling window, then the cumulative one at shutdown
    /// (`summary.window == "cumulative"`).
    fn on_window(&mut self, summary: &WindowSummary) {
        let _ = summary;
    }

    /// The worker has handed over every call queued so far (it looks at the
    /// queue every 10 ms, and calls this after each batch that held at least
    /// one record, and before every summary window). A sink that buffers
    /// records writes them out here so they reach their destination within
    /// that delay.
    fn on_drained(&mut self) {}

    /// The worker is shutting down (flush guard dropped or finished): write out
    /// anything buffered. Called twice: once before the last window and the
    /// cumulative summary, so that the [`counters`](Self::counters) they
    /// report include what the flush delivered or gave up on, and once after
    /// them, for what they added. Bound the wait: the shutdown of the whole
    /// layer waits for it.
    fn flush(&mut self) {}

    /// The sink's own counters (cumulative), so what it dropped or failed to
    /// deliver shows in every summary window under `sink_counters`, e.g.
    /// `[("otlp.dropped", 3)]`. Names should be prefixed with the sink's name.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// What this sink lost for good since it started: how many calls, and
    /// a sentence that says so and what to check (`"20 of 20 calls were
    /// not exported … is the collector (e.g. Jaeger) running …?"`); `None`
    /// when it lost nothing. Asked once, at shutdown after the last
    /// [`flush`](Self::flush); the flush guard reports it as a warning
    /// ([`report_loss`]), so a sink never loses data silently. The numbers
    /// belong in [`counters`](Self::counters) too.
    fn loss_report(&self) -> Option<Loss> {
        None
    }
}

/// Data a sink (or the layer) lost for good: [`RecordSink::loss_report`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// Calls lost (records not delivered).
    pub lost: u64,
    /// What was lost, where, and what to check, in one sentence.
    pub message: String,
}

/// Reports data that was lost for good where the app looks: as a
/// `tracing` warning (target `stagetrace`, field `lost`) through the app's
/// own subscriber, so its fmt layer, journald or log file shows it; on
/// stderr instead when no subscriber is set (a plain program, the Python
/// package), where a warning would go nowhere. The flush guard calls it for
/// every [`RecordSink::loss_report`] and for the calls the layer's own queue
/// dropped; a sink with a last word of its own outside the layer (an
/// exporter dropped by the app) can call it too.
///
/// Emitted on the calling thread. The stage layer records no events, so it
/// neither records this one nor recurses; when this runs inside the
/// subscriber itself (a sink dropped while an event is being handled),
/// `tracing` hands a re-entrant call no subscriber, and the message goes to
/// stderr.
pub fn report_loss(loss: &Loss) {
    warn(Some(loss.lost), &loss.message);
}

/// [`report_loss`]'s way out; `lost` is `None` when the count is unknown
/// (the worker never finished).
pub(crate) fn warn(lost: Option<u64>, message: &str) {
    let no_subscriber =
        tracing::dispatcher::get_default(|d| d.is::<tracing_core::subscriber::NoSubscriber>());
    match lost {
        _ if no_subscriber => eprintln!("stagetrace: {message}"),
        Some(lost) => tracing::warn!(target: "stagetrace", lost, "{message}"),
        None => tracing::warn!(target: "stagetrace", "{message}"),
    }
}
