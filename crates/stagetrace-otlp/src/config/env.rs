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
