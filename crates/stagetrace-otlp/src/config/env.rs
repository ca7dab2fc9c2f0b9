//! The standard OpenTelemetry environment variables the exporter reads.

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
