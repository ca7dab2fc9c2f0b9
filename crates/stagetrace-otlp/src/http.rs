//! The blocking HTTP client the OTLP/HTTP exporter sends through.

use async_trait::async_trait;
use http::{HeaderName, HeaderValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// A blocking reqwest client that sets the resolved headers on every request.
///
/// Set last, they beat any header of the same name the OTLP exporter took
/// from the environment itself: an explicit setting wins over
/// `OTEL_EXPORTER_OTLP_HEADERS`.
#[derive(Debug)]
pub(crate) struct HeaderClient {
    inner: reqwest::blocking::Client,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl HeaderClient {
    pub(crate) fn new(
        inner: reqwest::blocking::Client,
        headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Self {
        HeaderClient { inner, headers }
    }
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
