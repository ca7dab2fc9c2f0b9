//! Where batches go: an OpenTelemetry `SpanExporter`, driven to completion
//! on the export thread.

use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

/// One way of sending batches of spans.
pub(super) trait Transport: Send {
    fn set_resource(&mut self, resource: &Resource);
    /// Sends one batch; `Err` carries a message that says what to check.
    fn export(&mut self, batch: Vec<SpanData>) -> Result<(), String>;
    fn shutdown(&mut self);
}

/// Any SDK exporter whose futures complete without a runtime (the OTLP
/// HTTP exporter with a blocking client, the in-memory exporter).
pub(super) struct Sdk<E>(pub(super) E);

impl<E: SpanExporter + 'static> Transport for Sdk<E> {
    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }

    fn export(&mut self, batch: Vec<SpanData>) -> Result<(), String> {
        futures_executor::block_on(self.0.export(batch)).map_err(|e| e.to_string())
    }

    fn shutdown(&mut self) {
        let _ = self.0.shutdown();
    }
}

/// An export error that names the endpoint and what to check.
pub(super) fn export_error(endpoint: &str, error: &str, protocol: &str) -> String {
    let has = |s: &str| error.contains(s);
    let hint = if has("status code: 401")
        || has("status code: 403")
        || has("Unauthenticated")
        || has("PermissionDenied")
    {
        "the collector refused the credentials: check the authorization header \
         (OtlpBuilder::header or OTEL_EXPORTER_OTLP_HEADERS)"
            .to_owned()
    } else if has("status code: 404") {
        "nothing receives traces at that URL: give the collector's base URL (for \
         HTTP, /v1/traces is appended)"
            .to_owned()
    } else if has("status code") {
        "the collector rejected the batch: see its log".to_owned()
    } else {
        format!("is the collector (e.g. Jaeger) running at {endpoint}, listening for {protocol}?")
    };
    format!("export to {endpoint} failed ({error}): {hint}")
}
