//! The client side: [`TracedHttpClient`], a reqwest client whose calls run
//! in a `transport` span, and the readers of the timing headers.

use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use stagetrace::StageSpanExt;
use stagetrace_wire::{
    Hops, TimingChain, SERVER_TIMING_HEADER, TIMING_CHAIN_HEADER, TIMING_HEADER, TRACEPARENT,
    TRACESTATE,
};
use stagetrace_wire::{ServerTiming, TraceParent};
use tracing::{Instrument, Span};

use crate::transport;

/// Why a traced HTTP call failed. Every failure also flags the call's record.
#[derive(Debug)]
pub enum HttpCallError {
    /// The reqwest client could not be built or the request is invalid.
    Request(String),
    /// No whole response within the call timeout.
    Timeout(Duration),
    /// The connection failed or broke before the whole response arrived.
    Transport(String),
    /// The server answered with a non-success status.
    Status {
        /// The status code.
        status: StatusCode,
        /// The response body.
        body: Bytes,
    },
}

impl fmt::Display for HttpCallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpCallError::Request(e) => write!(f, "invalid HTTP request ({e}); check the URL and headers"),
            HttpCallError::Timeout(d) => write!(
                f,
                "policy server did not answer within {d:?}; raise the call timeout or check the server's load"
            ),
            HttpCallError::Transport(e) => write!(
                f,
                "HTTP call to the policy server failed mid-call ({e}); check that the server runs and is reachable"
            ),
            HttpCallError::Status { status, body } => write!(
                f,
                "policy server answered {status}: {}",
                String::from_utf8_lossy(body.get(..body.len().min(200)).unwrap_or_default())
            ),
        }
    }
}

impl std::error::Error for HttpCallError {}

/// One HTTP response, read whole.
#[derive(Clone, Debug)]
pub struct HttpReply {
    /// Status code.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// Response body.
    pub body: Bytes,
    /// The server's timing, from `stagetrace-timing` or, degraded, from a
    /// standard `Server-Timing` header; `None` when absent or malformed
    /// (malformed ones are counted as rejected headers). Through relays
    /// (a `stagetrace-timing-chain` header), the policy server's.
    pub server_timing: Option<ServerTiming>,
    /// The relays the response came through, outermost first, from the
    /// `stagetrace-timing-chain` header (empty without relays).
    pub hops: Hops,
    /// The parent id this call sent in `traceparent` (its transport span's,
    /// or the one the request already carried); `None` when it sent none.
    /// A relay's record names it, so its exported forward span is the
    /// downstream server's parent.
    pub sent_parent_id: Option<[u8; 8]>,
}

/// A reqwest client whose calls are traced: each runs in a `transport`
/// span, sends `traceparent` (and the `tracestate` of the trace it continues,
/// when made by a handler run under a remote parent), reads the whole body
/// inside the span and attaches the server's timing headers.
#[derive(Clone, Debug)]
pub struct TracedHttpClient {
    client: reqwest::Client,
    timeout: Duration,
}

impl TracedHttpClient {
    /// A client with reqwest's defaults and a 10 s call timeout.
    pub fn new() -> Result<Self, HttpCallError> {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .map_err(|e| HttpCallError::Request(e.to_string()))?;
        Ok(TracedHttpClient::from_client(client))
    }

    /// Wrap an existing reqwest client.
    pub fn from_client(client: reqwest::Client) -> Self {
        TracedHttpClient {
            client,
            timeout: crate::ws::DEFAULT_CALL_TIMEOUT,
        }
    }

    /// Limit on one call, send → whole response body.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The wrapped client, to build requests with.
    pub fn inner(&self) -> &reqwest::Client {
        &self.client
    }

    /// Send a request built with [`inner`](Self::inner) and read the whole
    /// response, traced.
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Result<HttpReply, HttpCallError> {
        let mut request = match request.build() {
            Ok(r) => r,
            Err(e) => {
                transport::fail(&Span::current(), "bad request");
                return Err(HttpCallError::Request(e.to_string()));
            }
        };
        let span = transport::transport_span(&peer(request.url()));
        send_trace_context(&span, request.headers_mut());
        let sent_parent_id = request
            .headers()
            .get(TRACEPARENT)
            .and_then(|v| TraceParent::parse_bytes(v.as_bytes()).ok())
            .map(|tp| tp.parent_id);
        let (status, headers, body) = self.exchange(request, &span).await?;
        let (server_timing, hops) = attach_server_timing(&span, &headers);
        if !status.is_success() {
            transport::fail(&span, "http error status");
            return Err(HttpCallError::Status { status, body });
        }
        Ok(HttpReply {
            status,
            headers,
            body,
            server_timing,
            hops,
            sent_parent_id,
        })
    }

    /// Sends `request` and reads its whole response in `span`, within the
    /// call timeout; a broken connection or the timeout fails the span.
    async fn exchange(
        &self,
        request: reqwest::Request,
        span: &Span,
    ) -> Result<(StatusCode, HeaderMap, Bytes), HttpCallError> {
        let client = &self.client;
        let exchange = async move {
            let resp = client
                .execute(request)
                .await
                .map_err(|e| HttpCallError::Transport(e.to_string()))?;
            // The response's head has arrived: its first byte, as near as
            // reqwest tells (the body follows).
            transport::first_bytes(&Span::current(), None, Some(Instant::now()));
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = resp
                .bytes()
                .await
                .map_err(|e| HttpCallError::Transport(e.to_string()))?;
            Ok::<_, HttpCallError>((status, headers, body))
        };
        match tokio::time::timeout(self.timeout, exchange.instrument(span.clone())).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                transport::fail(span, "disconnected");
                Err(e)
            }
            Err(_) => {
                transport::fail(span, "timeout");
                Err(HttpCallError::Timeout(self.timeout))
            }
        }
    }
}

/// The peer a request goes to, `host:port` (one clock-offset estimate per
/// peer).
fn peer(url: &reqwest::Url) -> String {
    match (url.host_str(), url.port_or_known_default()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        _ => String::new(),
    }
}

/// Puts the transport span's `traceparent` and `tracestate` into the
/// request's headers (ours replace any the app set).
fn send_trace_context(span: &Span, headers: &mut HeaderMap) {
    let Some(tp) = transport::traceparent(span) else {
        return;
    };
    if let Ok(v) = HeaderValue::from_bytes(&tp) {
        headers.insert(HeaderName::from_static(TRACEPARENT), v);
    }
    // Ours replaces any the app set: a tracestate goes with its parent.
    headers.remove(TRACESTATE);
    if let Some(v) = transport::tracestate(span).and_then(|ts| HeaderValue::from_str(&ts).ok()) {
        headers.insert(HeaderName::from_static(TRACESTATE), v);
    }
}

/// Reads the server's timing from the response's headers and attaches it,
/// and the relays' stamps, to `span`. Through relays the chain holds the
/// policy server's timing and every relay's stamps; else the server's own
/// headers.
fn attach_server_timing(span: &Span, headers: &HeaderMap) -> (Option<ServerTiming>, Hops) {
    let (server_timing, hops) = match read_timing_chain(headers) {
        Some(chain) => (Some(chain.map.timing).filter(|t| !t.is_empty()), chain.hops),
        None => (read_timing_headers(headers), Hops::new()),
    };
    if let Some(t) = server_timing {
        transport::attach(span, t);
    }
    if !hops.is_empty() {
        span.record_hops(hops);
    }
    (server_timing, hops)
}

/// The timing chain a relay's response carries (`stagetrace-timing-chain`,
/// `docs/protocol.md`, "Relays"): `None` when absent, or malformed (then
/// counted as a rejected header, and the plain timing headers are read).
pub fn read_timing_chain(headers: &HeaderMap) -> Option<TimingChain> {
    let v = headers.get(TIMING_CHAIN_HEADER)?;
    match TimingChain::from_header_bytes(v.as_bytes()) {
        Ok(chain) => Some(chain),
        Err(_) => {
            transport::reject();
            None
        }
    }
}

/// The server timing a response carries: `stagetrace-timing`, else the
/// standard `Server-Timing` (degraded). Malformed headers are counted.
pub fn read_timing_headers(headers: &HeaderMap) -> Option<ServerTiming> {
    if let Some(v) = headers.get(TIMING_HEADER) {
        match ServerTiming::parse_timing_header_bytes(v.as_bytes()) {
            Ok(t) if !t.is_empty() => return Some(t),
            Ok(_) => {}
            Err(_) => transport::reject(),
        }
    }
    // Several Server-Timing headers are one comma-separated list.
    let mut joined = Vec::new();
    for v in headers.get_all(SERVER_TIMING_HEADER) {
        if !joined.is_empty() {
            joined.push(b',');
        }
        joined.extend_from_slice(v.as_bytes());
    }
    if joined.is_empty() {
        return None;
    }
    match ServerTiming::parse_server_timing_header_bytes(&joined) {
        Ok(t) if !t.is_empty() => Some(t),
        Ok(_) => None,
        Err(_) => {
            transport::reject();
            None
        }
    }
}
