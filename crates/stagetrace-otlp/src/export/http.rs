//! OTLP/HTTP with protobuf bodies, over a blocking client (no async runtime).

use async_trait::async_trait;
use http::{HeaderName, HeaderValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;

use super::transport::{export_error, Sdk, Transport};
use crate::config::{BuildError, Protocol, Settings};

/// The OTLP/HTTP transport `settings` describe.
pub(super) fn transport(settings: &Settings) -> Result<Box<dyn Transport>, BuildError> {
    let mut client = reqwest::blocking::Client::builder().timeout(settings.timeout);
    if let Some(pem) = &settings.ca_pem {
        let cert =
            reqwest::Certificate::from_pem(pem).map_err(|e| BuildError::InvalidCertificate {
                reason: e.to_string(),
            })?;
        client = client.add_root_certificate(cert);
    }
    let client = client.build().map_err(|e| BuildError::Client {
        reason: e.to_string(),
    })?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(HeaderClient {
            inner: client,
            headers: settings.headers.clone(),
        })
        .with_endpoint(settings.endpoint.clone())
        .with_protocol(match settings.protocol {
            Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
            _ => opentelemetry_otlp::Protocol::HttpBinary,
        })
        .with_timeout(settings.timeout)
        .build()
        .map_err(|e| BuildError::Client {
            reason: e.to_string(),
        })?;
    Ok(Box::new(Http {
        inner: Sdk(exporter),
        endpoint: settings.endpoint.clone(),
    }))
}

/// The OTLP/HTTP exporter, with errors that name the endpoint.
struct Http {
    inner: Sdk<opentelemetry_otlp::SpanExporter>,
    endpoint: String,
}

impl Transport for Http {
    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }

    fn export(&mut self, batch: Vec<SpanData>) -> Result<(), String> {
        self.inner
            .export(batch)
            .map_err(|e| export_error(&self.endpoint, &e, "OTLP/HTTP"))
    }

    fn shutdown(&mut self) {
        self.inner.shutdown();
    }
}

/// A blocking reqwest client that sets the resolved headers on every request.
///
/// Set last, they beat any header of the same name the OTLP exporter took
/// from the environment itself: an explicit setting wins over
/// `OTEL_EXPORTER_OTLP_HEADERS`.
#[derive(Debug)]
struct HeaderClient {
    inner: reqwest::blocking::Client,
    headers: Vec<(HeaderName, HeaderValue)>,
}

#[async_trait]
impl HttpClient for HeaderClient {
    async fn send_bytes(&self, mut request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        for (name, value) in &self.headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        self.inner.send_bytes(request).await
    }
}
