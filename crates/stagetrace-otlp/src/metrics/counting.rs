//! The exporter wrapper that counts exports and failed exports, so a
//! collector that is down shows in the counters (and, once it is back, in
//! the exported `stagetrace.export.failures` counter itself).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::Temporality;

/// What the metrics exporter has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsStats {
    /// Export requests the collector took.
    pub exports: u64,
    /// Export requests that failed (collector down, slow or refusing). With
    /// cumulative temporality (the default) the next export that goes
    /// through carries every call again: what is lost is the time
    /// resolution of the failed intervals, not calls.
    pub failed_exports: u64,
    /// The latest export error, naming the endpoint.
    pub last_error: Option<String>,
}

impl fmt::Display for MetricsStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "otlp metrics: {} exports, {} failed",
            self.exports, self.failed_exports
        )?;
        if let Some(e) = &self.last_error {
            write!(f, "; last error: {e}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
pub(super) struct MetricsCounters {
    exports: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl MetricsCounters {
    pub(super) fn failed_exports(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    pub(super) fn snapshot(&self) -> MetricsStats {
        MetricsStats {
            exports: self.exports.load(Ordering::Relaxed),
            failed_exports: self.failed.load(Ordering::Relaxed),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }
}

/// Counts the outcome of every export of the wrapped exporter.
#[derive(Debug)]
pub(super) struct Counting<E> {
    inner: E,
    counters: Arc<MetricsCounters>,
    endpoint: String,
}

impl<E> Counting<E> {
    pub(super) fn new(inner: E, counters: Arc<MetricsCounters>, endpoint: String) -> Self {
        Counting {
            inner,
            counters,
            endpoint,
        }
    }
}

impl<E: PushMetricExporter> PushMetricExporter for Counting<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        match &result {
            Ok(()) => {
                self.counters.exports.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut last) = self.counters.last_error.lock() {
                    *last = Some(format!(
                        "exporting metrics to {} failed: {e} (is the collector up and \
                         listening there?)",
                        self.endpoint
                    ));
                }
            }
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
