//! Stage histograms as OTLP metrics, through the OpenTelemetry SDK's metrics
//! pipeline: a [`RecordSink`](stagetrace::sink::RecordSink) that records every
//! call's figures into one histogram per figure (exponential, base-2, by
//! default: they merge across robots and windows with a known relative
//! error), with the call's `kind` as attribute and the robot named by the
//! resource, plus counters. The SDK's periodic reader exports them from a
//! thread of its own; a collector that is down costs the robot nothing but
//! counted failed exports, and the cumulative totals sent after it is back
//! hold every call.
//!
//! `config` holds the builder and the resolved settings, `instruments` the
//! histograms and counters and what a record adds to them, `counting` the
//! exporter wrapper that counts failed exports.

mod config;
mod counting;
mod instruments;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use stagetrace::{record::CallRecord, summary::WindowSummary};

pub use self::config::{Histograms, MetricsBuilder, ENV_METRICS_EXPORTER};
pub use self::counting::MetricsStats;
use self::counting::{Counting, MetricsCounters};
use self::instruments::{Instruments, KindAttrs};
use crate::config::BuildError;

/// Exports stage histograms and counters as OTLP metrics.
///
/// Register it as a sink: `StageLayer::builder().sink(Box::new(metrics.clone()))`.
/// Cheap to clone (clones share one pipeline).
///
/// ```no_run
/// use stagetrace_otlp::OtlpMetrics;
///
/// let metrics = OtlpMetrics::builder()
///     .endpoint("http://127.0.0.1:4318")
///     .service_name("robot-7")
///     .build()?;
/// let layer_builder = stagetrace::StageLayer::builder().sink(Box::new(metrics.clone()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct OtlpMetrics {
    shared: Arc<Shared>,
    kinds: KindAttrs,
}

struct Shared {
    /// `None` when `OTEL_METRICS_EXPORTER=none`: records cost a lookup.
    provider: Option<SdkMeterProvider>,
    instruments: Instruments,
    counters: Arc<MetricsCounters>,
    endpoint: String,
}

impl fmt::Debug for OtlpMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtlpMetrics")
            .field("endpoint", &self.shared.endpoint)
            .field("enabled", &self.shared.provider.is_some())
            .field("stats", &self.stats())
            .finish()
    }
}

impl OtlpMetrics {
    /// A builder; see [`MetricsBuilder`] for every setting.
    pub fn builder() -> MetricsBuilder {
        MetricsBuilder::default()
    }

    /// Failed and successful exports so far.
    pub fn stats(&self) -> MetricsStats {
        self.shared.counters.snapshot()
    }

    /// The URL metrics go to (empty when disabled by `OTEL_METRICS_EXPORTER=none`).
    pub fn endpoint(&self) -> &str {
        &self.shared.endpoint
    }

    /// Exports what was recorded now (bounded by the export timeout);
    /// `true` when the collector took it.
    pub fn flush(&self) -> bool {
        match &self.shared.provider {
            Some(p) => {
                let before = self.stats().failed_exports;
                p.force_flush().is_ok() && self.stats().failed_exports == before
            }
            None => true,
        }
    }

    /// Exports what is left and stops the pipeline. Later records are ignored.
    pub fn shutdown(&self) -> MetricsStats {
        if let Some(p) = &self.shared.provider {
            let _ = p.shutdown_with_timeout(Duration::from_secs(3));
        }
        self.stats()
    }

    fn start(settings: config::Settings) -> Result<OtlpMetrics, BuildError> {
        let counters = Arc::new(MetricsCounters::default());
        let Some(exporter) = settings.exporter else {
            let provider = SdkMeterProvider::builder().build();
            let instruments = Instruments::new(&provider.meter("stagetrace"), &counters);
            // No reader: recording goes nowhere, and nothing is ever sent.
            return Ok(OtlpMetrics {
                shared: Arc::new(Shared {
                    provider: None,
                    instruments,
                    counters,
                    endpoint: String::new(),
                }),
                kinds: KindAttrs::default(),
            });
        };
        let endpoint = settings.endpoint.clone();
        let counting = Counting::new(exporter, Arc::clone(&counters), endpoint.clone());
        let mut reader = PeriodicReader::builder(counting);
        if let Some(interval) = settings.interval {
            reader = reader.with_interval(interval);
        }
        let mut builder = SdkMeterProvider::builder()
            .with_resource(settings.resource)
            .with_reader(reader.build());
        for view in instruments::views(&settings.histograms) {
            builder = builder.with_view(view);
        }
        let provider = builder.build();
        let instruments = Instruments::new(&provider.meter("stagetrace"), &counters);
        Ok(OtlpMetrics {
            shared: Arc::new(Shared {
                provider: Some(provider),
                instruments,
                counters,
                endpoint,
            }),
            kinds: KindAttrs::default(),
        })
    }
}

impl stagetrace::sink::RecordSink for OtlpMetrics {
    fn on_record(&mut self, rec: &CallRecord) {
        if self.shared.provider.is_some() {
            let attrs = self.kinds.get(&rec.kind);
            self.shared.instruments.record(rec, attrs);
        }
    }

    fn on_window(&mut self, summary: &WindowSummary) {
        // Rolling windows carry the counters' increase; the cumulative line
        // repeats their totals.
        if self.shared.provider.is_some() && summary.window == "rolling" {
            self.shared.instruments.window(summary);
        }
    }

    fn flush(&mut self) {
        if let Some(p) = &self.shared.provider {
            let _ = p.force_flush();
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![
            ("metrics.exports", s.exports),
            ("metrics.failed_exports", s.failed_exports),
        ]
    }
}
