//! OTLP/gRPC (crate feature `grpc`): tonic needs a Tokio runtime; a small
//! one of our own lives on the export thread, apart from any runtime of the
//! host.

use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

use super::transport::{export_error, Transport};
use crate::config::{BuildError, Settings};

/// The OTLP/gRPC transport `settings` describe.
pub(super) fn transport(settings: &Settings) -> Result<Box<dyn Transport>, BuildError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BuildError::Client {
            reason: e.to_string(),
        })?;
    let _enter = rt.enter();
    let mut headers = http::HeaderMap::new();
    for (k, v) in &settings.headers {
        headers.insert(k.clone(), v.clone());
    }
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(settings.endpoint.clone())
        .with_timeout(settings.timeout)
        .with_metadata(
            opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers),
        );
    if settings.endpoint.starts_with("https://") {
        let mut tls =
            opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new().with_webpki_roots();
        if let Some(pem) = &settings.ca_pem {
            tls = tls.ca_certificate(
                opentelemetry_otlp::tonic_types::transport::Certificate::from_pem(pem),
            );
        }
        builder = builder.with_tls_config(tls);
    }
    let exporter = builder.build().map_err(|e| BuildError::Client {
        reason: e.to_string(),
    })?;
    drop(_enter);
    Ok(Box::new(Grpc {
        rt,
        exporter,
        endpoint: settings.endpoint.clone(),
    }))
}

/// The OTLP/gRPC exporter and the runtime it runs on.
struct Grpc {
    rt: tokio::runtime::Runtime,
    exporter: opentelemetry_otlp::SpanExporter,
    endpoint: String,
}

impl Transport for Grpc {
    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }

    fn export(&mut self, batch: Vec<SpanData>) -> Result<(), String> {
        self.rt
            .block_on(self.exporter.export(batch))
            .map_err(|e| export_error(&self.endpoint, &e.to_string(), "OTLP/gRPC"))
    }

    fn shutdown(&mut self) {
        let _enter = self.rt.enter();
        let _ = self.exporter.shutdown();
    }
}
