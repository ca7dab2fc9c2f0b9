//! The instruments and what a record or a summary window adds to them.
//!
//! Names come from the schema's figure table: every call-time figure
//! (`Figure::is_call_time`) is a histogram `stagetrace.<figure>` in seconds
//! (`stagetrace_<figure>_seconds` in Prometheus), attribute `kind`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableCounter};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::{Aggregation, Instrument, InstrumentKind, Stream};
use stagetrace::{record::CallRecord, summary::WindowSummary};
use stagetrace_schema::Figure;

use super::config::Histograms;
use super::counting::MetricsCounters;

/// Kinds given their own attribute set; later kinds are reported as `other`
/// (bounded series count, bounded memory).
const MAX_KINDS: usize = 32;

/// The `kind` attribute of each kind seen, made once.
#[derive(Clone, Debug, Default)]
pub(super) struct KindAttrs {
    kinds: Vec<(String, [KeyValue; 1])>,
}

impl KindAttrs {
    pub(super) fn get(&mut self, kind: &str) -> &[KeyValue; 1] {
        if let Some(i) = self.kinds.iter().position(|(k, _)| k == kind) {
            return &self.kinds[i].1;
        }
        let name = if self.kinds.len() < MAX_KINDS - 1 {
            kind
        } else {
            "other"
        };
        if let Some(i) = self.kinds.iter().position(|(k, _)| k == name) {
            return &self.kinds[i].1;
        }
        self.kinds
            .push((name.to_owned(), [KeyValue::new("kind", name.to_owned())]));
        &self.kinds[self.kinds.len() - 1].1
    }
}

pub(super) struct Instruments {
    figures: Vec<(Figure, Histogram<f64>)>,
    calls: Counter<u64>,
    failed: Counter<u64>,
    deadline_misses: Counter<u64>,
    queue_drops: Counter<u64>,
    clamped: Counter<u64>,
    /// The trace exporter's losses (`otlp.dropped + failed + abandoned` of
    /// the summary's sink counters), a total.
    trace_losses: Arc<AtomicU64>,
    _export_failures: ObservableCounter<u64>,
}

impl Instruments {
    pub(super) fn new(meter: &Meter, counters: &Arc<MetricsCounters>) -> Self {
        let figures = Figure::ALL
            .into_iter()
            .filter(|f| f.is_call_time())
            .map(|f| {
                let h = meter
                    .f64_histogram(format!("stagetrace.{}", f.name()))
                    .with_unit("s")
                    .with_description(format!("stagetrace figure `{}` per call", f.name()))
                    .build();
                (f, h)
            })
            .collect();
        let counter = |name: &'static str, what: &'static str| {
            meter.u64_counter(name).with_description(what).build()
        };
        let trace_losses = Arc::new(AtomicU64::new(0));
        let observed = (Arc::clone(counters), Arc::clone(&trace_losses));
        let export_failures = meter
            .u64_observable_counter("stagetrace.export.losses")
            .with_description(
                "metrics: failed metric exports; traces: call records the trace exporter \
                 dropped, failed to send or abandoned",
            )
            .with_callback(move |o| {
                o.observe(
                    observed.0.failed_exports(),
                    &[KeyValue::new("signal", "metrics")],
                );
                o.observe(
                    observed.1.load(Ordering::Relaxed),
                    &[KeyValue::new("signal", "traces")],
                );
            })
            .build();
        Instruments {
            figures,
            calls: counter(
                "stagetrace.calls",
                "calls completed (warm-up and failed included)",
            ),
            failed: counter("stagetrace.calls.failed", "failed calls"),
            deadline_misses: counter(
                "stagetrace.deadline.misses",
                "steady calls that ended after their tick's deadline",
            ),
            queue_drops: counter(
                "stagetrace.queue.drops",
                "calls dropped because the queue to stagetrace's worker was full",
            ),
            clamped: counter(
                "stagetrace.clamped",
                "negative durations (clock splits) clamped to 0",
            ),
            trace_losses,
            _export_failures: export_failures,
        }
    }

    /// One call: its counters, and its figures when it is a steady call
    /// (warm-up and failed calls stay out of the distributions, as in the
    /// summaries).
    pub(super) fn record(&self, rec: &CallRecord, attrs: &[KeyValue]) {
        self.calls.add(1, attrs);
        if rec.failed == Some(true) {
            self.failed.add(1, attrs);
            return;
        }
        if rec.warmup == Some(true) {
            return;
        }
        if rec.deadline_miss == Some(true) {
            self.deadline_misses.add(1, attrs);
        }
        for (f, h) in &self.figures {
            if let Some(ns) = rec.get(*f) {
                h.record(ns.max(0) as f64 / 1e9, attrs);
            }
        }
    }

    /// A rolling window: the layer's counters' increase, and the trace
    /// exporter's losses so far.
    pub(super) fn window(&self, w: &WindowSummary) {
        if w.queue_drops > 0 {
            self.queue_drops.add(w.queue_drops, &[]);
        }
        if w.clamped > 0 {
            self.clamped.add(w.clamped, &[]);
        }
        let c = |k: &str| w.sink_counters.get(k).copied().unwrap_or(0);
        let losses = c("otlp.dropped") + c("otlp.failed") + c("otlp.abandoned");
        self.trace_losses.fetch_max(losses, Ordering::Relaxed);
    }
}

/// The views choosing how figure histograms are bucketed.
pub(super) fn views(
    histograms: &Histograms,
) -> Vec<impl Fn(&Instrument) -> Option<Stream> + Send + Sync + 'static> {
    let aggregation = match histograms {
        Histograms::Exponential {
            max_size,
            max_scale,
        } => Aggregation::Base2ExponentialHistogram {
            max_size: *max_size,
            max_scale: (*max_scale).clamp(-10, 20),
            record_min_max: true,
        },
        Histograms::Explicit { bounds_ms } => Aggregation::ExplicitBucketHistogram {
            boundaries: bounds_ms.iter().map(|ms| ms / 1e3).collect(),
            record_min_max: true,
        },
    };
    vec![move |i: &Instrument| {
        if i.kind() == InstrumentKind::Histogram && i.name().starts_with("stagetrace.") {
            Stream::builder()
                .with_aggregation(aggregation.clone())
                .build()
                .ok()
        } else {
            None
        }
    }]
}
