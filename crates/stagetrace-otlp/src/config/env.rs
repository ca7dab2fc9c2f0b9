//! The standard OpenTelemetry environment variables the exporter reads, and
//! how traces and metrics alike read them.

use super::error::{BuildError, Origin};
use super::protocol::Protocol;

/// `OTEL_EXPORTER_OTLP_ENDPOINT`: base URL of the collector.
pub const ENV_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` or `grpc`.
pub const ENV_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// `OTEL_EXPORTER_OTLP_HEADERS`: `key=value,key2=value2`, values URL-encoded.
pub const ENV_HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
/// `OTEL_EXPORTER_OTLP_TIMEOUT`: export timeout in milliseconds.
pub const ENV_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
/// `OTEL_SERVICE_NAME`: the service the spans are shown under.
pub const ENV_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: the whole traces URL (used as is, no path added).
pub const ENV_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`: beats `OTEL_EXPORTER_OTLP_PROTOCOL` for traces.
pub const ENV_TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`: laid over `OTEL_EXPORTER_OTLP_HEADERS` for traces.
pub const ENV_TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`: beats `OTEL_EXPORTER_OTLP_TIMEOUT` for traces.
pub const ENV_TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
/// `OTEL_TRACES_EXPORTER`: `otlp` (default) or `none` (export no trace).
pub const ENV_TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value,…`; its `service.name` names the
/// service when neither the builder nor `OTEL_SERVICE_NAME` does.
pub const ENV_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// A lookup of environment variables as every setting reads them: a
/// variable set to blanks counts as unset.
#[derive(Clone, Copy)]
pub(crate) struct EnvLookup<'a>(pub(crate) &'a dyn Fn(&str) -> Option<String>);

impl EnvLookup<'_> {
    /// The value of `var`, unless it is unset or blank.
    pub(crate) fn get(&self, var: &str) -> Option<String> {
        (self.0)(var).filter(|v| !v.trim().is_empty())
    }

    /// The signal-specific variable, else the generic one (OTLP spec), with
    /// the name of the one that gave the value.
    pub(crate) fn either(
        &self,
        specific: &'static str,
        generic: &'static str,
    ) -> Option<(&'static str, String)> {
        self.get(specific)
            .map(|v| (specific, v))
            .or_else(|| self.get(generic).map(|v| (generic, v)))
    }

    /// Whether the exporter variable `var` (`OTEL_TRACES_EXPORTER`,
    /// `OTEL_METRICS_EXPORTER`) turns its signal off: `otlp` or unset keeps
    /// it, `none` turns it off, any other exporter is refused.
    pub(crate) fn exporter_off(&self, var: &'static str) -> Result<bool, BuildError> {
        match self.get(var).as_deref().map(str::trim) {
            None | Some("otlp") => Ok(false),
            Some("none") => Ok(true),
            Some(other) => Err(BuildError::UnsupportedExporter {
                value: other.to_owned(),
                origin: Origin::Env(var),
            }),
        }
    }

    /// The protocol the signal-specific variable names, else the generic
    /// one; HTTP/protobuf when neither is set.
    pub(crate) fn protocol(
        &self,
        specific: &'static str,
        generic: &'static str,
    ) -> Result<Protocol, BuildError> {
        match self.either(specific, generic) {
            Some((var, v)) => Protocol::parse(&v).ok_or(BuildError::UnsupportedProtocol {
                value: v.trim().to_owned(),
                origin: Origin::Env(var),
            }),
            None => Ok(Protocol::HttpProtobuf),
        }
    }
}
