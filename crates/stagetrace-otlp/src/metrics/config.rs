//! [`MetricsBuilder`]: the metrics pipeline's settings. Each resolves as:
//! the builder call, else the standard OpenTelemetry environment variable
//! (the metrics-specific one first, then the generic one), else the default.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::Resource;

use super::OtlpMetrics;
use crate::config::{
    BuildError, EnvLookup, Origin, Protocol, DEFAULT_HTTP_ENDPOINT, ENV_ENDPOINT, ENV_PROTOCOL,
};

/// `OTEL_METRICS_EXPORTER`: `otlp` (the default) or `none` (record nothing, send nothing).
pub const ENV_METRICS_EXPORTER: &str = "OTEL_METRICS_EXPORTER";
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`: the whole metrics URL (used as is).
const ENV_METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`: beats `OTEL_EXPORTER_OTLP_PROTOCOL` for metrics.
const ENV_METRICS_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL";
const METRICS_PATH: &str = "/v1/metrics";

/// How figures are bucketed.
#[derive(Clone, Debug, PartialEq)]
pub enum Histograms {
    /// Base-2 exponential buckets (OTLP `ExponentialHistogram`, a native
    /// histogram in Prometheus): at most `max_size` buckets, resolution
    /// `scale` at most `max_scale` (the SDK lowers it until the values fit).
    /// Relative error of a quantile: at most `2^(2^-scale) − 1` (scale 5:
    /// 2.2 %, scale 3: 9 %). Merges exactly across robots of equal scale.
    Exponential {
        /// Most buckets per histogram (default 160).
        max_size: u32,
        /// Finest scale (default 20; Prometheus keeps at most 8).
        max_scale: i8,
    },
    /// Fixed bucket bounds, in milliseconds (a classic Prometheus histogram).
    Explicit {
        /// Upper bounds, ms, increasing.
        bounds_ms: Vec<f64>,
    },
}

impl Default for Histograms {
    fn default() -> Self {
        Histograms::Exponential {
            max_size: 160,
            max_scale: 20,
        }
    }
}

/// Builds an [`OtlpMetrics`].
///
/// Environment (each only when the builder did not set the same thing):
/// `OTEL_METRICS_EXPORTER` (`otlp` | `none`),
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (used as is) or
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (+ `/v1/metrics`),
/// `OTEL_EXPORTER_OTLP_{METRICS_,}PROTOCOL` (`http/protobuf`, `http/json`),
/// `OTEL_EXPORTER_OTLP_{METRICS_,}HEADERS`, `OTEL_EXPORTER_OTLP_{METRICS_,}TIMEOUT`,
/// `OTEL_METRIC_EXPORT_INTERVAL` (ms, default 60 000),
/// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` (`cumulative`, the
/// default, `delta`, `lowmemory`), and the resource:
/// `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` (its `service.name` too).
#[derive(Clone, Debug, Default)]
pub struct MetricsBuilder {
    endpoint: Option<String>,
    protocol: Option<Protocol>,
    headers: Vec<(String, String)>,
    timeout: Option<Duration>,
    interval: Option<Duration>,
    temporality: Option<Temporality>,
    service_name: Option<String>,
    attributes: Vec<(String, String)>,
    histograms: Histograms,
}

/// Resolved settings.
pub(super) struct Settings {
    /// `None`: `OTEL_METRICS_EXPORTER=none`.
    pub(super) exporter: Option<opentelemetry_otlp::MetricExporter>,
    pub(super) endpoint: String,
    pub(super) interval: Option<Duration>,
    pub(super) resource: Resource,
    pub(super) histograms: Histograms,
}

impl MetricsBuilder {
    /// The collector's base URL (`http://host:4318`); `/v1/metrics` is
    /// appended unless the URL already ends with it. For Prometheus's own
    /// receiver: `http://host:9090/api/v1/otlp`.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// `HttpProtobuf` (default) or `HttpJson`.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// A header sent with every export.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Upper bound on one export request.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Time between two exports (default 60 s, or `OTEL_METRIC_EXPORT_INTERVAL`).
    pub fn export_interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Cumulative (default: what Prometheus takes) or delta.
    pub fn temporality(mut self, temporality: Temporality) -> Self {
        self.temporality = Some(temporality);
        self
    }

    /// `service.name` of the resource. Beats `OTEL_SERVICE_NAME` and a
    /// `service.name` in `OTEL_RESOURCE_ATTRIBUTES`; default `stagetrace`.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// A resource attribute naming the robot (`service.instance.id`,
    /// `robot.site`, …); beats the same key in `OTEL_RESOURCE_ATTRIBUTES`.
    /// Without one, `service.instance.id` is `<host.name>-<pid>`.
    pub fn resource_attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.push((key.into(), value.into()));
        self
    }

    /// Exponential (default) or explicit buckets.
    pub fn histograms(mut self, histograms: Histograms) -> Self {
        self.histograms = histograms;
        self
    }

    /// Starts the metrics pipeline.
    pub fn build(self) -> Result<OtlpMetrics, BuildError> {
        let settings = self.resolve(&|v| std::env::var(v).ok())?;
        OtlpMetrics::start(settings)
    }

    fn resolve(self, env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, BuildError> {
        let env = EnvLookup(env);
        let resource = self.resource();
        let histograms = self.histograms.clone();
        if env.exporter_off(ENV_METRICS_EXPORTER)? {
            return Ok(Settings {
                exporter: None,
                endpoint: String::new(),
                interval: None,
                resource,
                histograms,
            });
        }
        let protocol = match self.protocol {
            Some(p) => p,
            None => env.protocol(ENV_METRICS_PROTOCOL, ENV_PROTOCOL)?,
        };
        let sdk_protocol = match protocol {
            Protocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
            Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
            Protocol::Grpc => {
                return Err(BuildError::UnsupportedProtocol {
                    value: "grpc (for metrics: use http/protobuf or http/json)".into(),
                    origin: if self.protocol.is_some() {
                        Origin::Builder
                    } else {
                        Origin::Env(ENV_METRICS_PROTOCOL)
                    },
                })
            }
        };
        let endpoint = match (
            &self.endpoint,
            env.either(ENV_METRICS_ENDPOINT, ENV_ENDPOINT),
        ) {
            (Some(e), _) => with_metrics_path(e),
            // The signal-specific variable is the whole URL (OTLP spec).
            (None, Some((ENV_METRICS_ENDPOINT, e))) => e.trim().to_owned(),
            (None, Some((_, e))) => with_metrics_path(&e),
            (None, None) => with_metrics_path(DEFAULT_HTTP_ENDPOINT),
        };
        let mut builder = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(sdk_protocol)
            .with_endpoint(endpoint.clone());
        if let Some(t) = self.temporality {
            builder = builder.with_temporality(t);
        }
        if let Some(t) = self.timeout {
            builder = builder.with_timeout(t);
        }
        if !self.headers.is_empty() {
            let headers: HashMap<String, String> = self.headers.iter().cloned().collect();
            builder = builder.with_headers(headers);
        }
        // The SDK's blocking HTTP client must not be made inside an async
        // runtime the host may be running: make it on a thread of its own.
        let exporter = std::thread::spawn(move || builder.build())
            .join()
            .map_err(|_| BuildError::Client {
                reason: "the metrics exporter's set-up panicked".into(),
            })?
            .map_err(|e| BuildError::Client {
                reason: e.to_string(),
            })?;
        Ok(Settings {
            exporter: Some(exporter),
            endpoint,
            interval: self.interval,
            resource,
            histograms,
        })
    }

    /// The resource: the SDK's (with `OTEL_RESOURCE_ATTRIBUTES` and
    /// `OTEL_SERVICE_NAME`), the builder's attributes over it, and the
    /// defaults for what neither gave.
    fn resource(&self) -> Resource {
        crate::resource::resource(self.service_name.as_deref(), &self.attributes)
    }
}

fn with_metrics_path(base: &str) -> String {
    let trimmed = base.trim().trim_end_matches('/');
    if trimmed.ends_with(METRICS_PATH) {
        trimmed.to_owned()
    } else {
        format!("{trimmed}{METRICS_PATH}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn endpoint_from_the_builder_then_metrics_then_generic_variable() {
        let s = MetricsBuilder::default().resolve(&env_of(&[])).unwrap();
        assert_eq!(s.endpoint, "http://localhost:4318/v1/metrics");
        let env = env_of(&[
            (ENV_ENDPOINT, "http://generic:4318/"),
            (
                ENV_METRICS_ENDPOINT,
                "http://prom:9090/api/v1/otlp/v1/metrics",
            ),
        ]);
        let s = MetricsBuilder::default().resolve(&env).unwrap();
        assert_eq!(s.endpoint, "http://prom:9090/api/v1/otlp/v1/metrics");
        let s = MetricsBuilder::default()
            .resolve(&env_of(&[(ENV_ENDPOINT, "http://generic:4318/")]))
            .unwrap();
        assert_eq!(s.endpoint, "http://generic:4318/v1/metrics");
        let s = MetricsBuilder::default()
            .endpoint("http://explicit:9090/api/v1/otlp")
            .resolve(&env)
            .unwrap();
        assert_eq!(s.endpoint, "http://explicit:9090/api/v1/otlp/v1/metrics");
    }

    #[test]
    fn exporter_none_and_protocols() {
        let s = MetricsBuilder::default()
            .resolve(&env_of(&[(ENV_METRICS_EXPORTER, "none")]))
            .unwrap();
        assert!(s.exporter.is_none());
        let e = MetricsBuilder::default()
            .resolve(&env_of(&[(ENV_METRICS_EXPORTER, "prometheus")]))
            .err()
            .unwrap();
        assert!(matches!(e, BuildError::UnsupportedExporter { .. }), "{e}");
        let s = MetricsBuilder::default()
            .resolve(&env_of(&[(ENV_METRICS_PROTOCOL, "http/json")]))
            .unwrap();
        assert!(s.exporter.is_some());
        let e = MetricsBuilder::default()
            .resolve(&env_of(&[(ENV_PROTOCOL, "grpc")]))
            .err()
            .unwrap();
        assert!(matches!(e, BuildError::UnsupportedProtocol { .. }), "{e}");
        let e = MetricsBuilder::default()
            .resolve(&env_of(&[(ENV_METRICS_PROTOCOL, "http/xml")]))
            .err()
            .unwrap();
        assert_eq!(
            e,
            BuildError::UnsupportedProtocol {
                value: "http/xml".into(),
                origin: Origin::Env(ENV_METRICS_PROTOCOL)
            }
        );
    }
}
