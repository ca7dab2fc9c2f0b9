//! HTTP: a tower layer for axum servers and a reqwest client wrapper.
//!
//! The server side, [`TimingLayer`], buffers the request body so the receive
//! time is stamped when the *whole* request has arrived, takes the remote
//! parent from `traceparent`, and adds the `stagetrace-timing` and standard
//! `Server-Timing` headers to the response:
//!
//! ```no_run
//! use axum::{routing::post, Router};
//! use stagetrace_net::TimingLayer;
//!
//! # async fn run() -> std::io::Result<()> {
//! let app = Router::new()
//!     .route("/infer", post(|body: axum::body::Bytes| async move { body }))
//!     .layer(TimingLayer::new());
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8000").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! The client side, [`TracedHttpClient`], runs a request in a `transport`
//! span, injects `traceparent` and attaches the timing headers it reads back:
//!
//! ```no_run
//! use stagetrace_net::TracedHttpClient;
//!
//! # async fn run() -> Result<(), stagetrace_net::HttpCallError> {
//! let client = TracedHttpClient::new()?;
//! let reply = client
//!     .send(client.inner().post("http://127.0.0.1:8000/infer").body(vec![1u8, 2, 3]))
//!     .await?;
//! assert!(reply.status.is_success());
//! # Ok(()) }
//! ```

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use stagetrace::wire::{TraceParent, SERVER_TIMING_HEADER, TIMING_HEADER, TRACEPARENT, TRACESTATE};
use stagetrace::{ServerRecord, ServerTiming};
use tokio::sync::Semaphore;
use tracing::{Instrument, Span};

use crate::server::{
    handler_span, server_record, take_context, RequestHook, RequestStamps, ServerClock,
    ServerCounters, ServerStats,
};
use crate::transport;

/// Largest request body the layer buffers by default (32 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 << 20;

/// The request kind header (`reset`, `infer`, ...); `"call"` when absent.
pub const KIND_HEADER: &str = "stagetrace-kind";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

// ---------------------------------------------------------------------------
// server: tower layer
// ---------------------------------------------------------------------------

/// A tower [`Layer`](tower::Layer) for axum (or any tower HTTP) servers that
/// stamps server timing on every request.
///
/// Per request it buffers the body (receive time = whole body arrived),
/// takes the trace context from the `traceparent` and `tracestate` headers
/// (W3C Trace Context Level 2: a malformed or repeated `traceparent` is
/// ignored and counted, `tracestate` lines are combined; see
/// [`TraceContext::extract`](stagetrace::wire::TraceContext::extract)), runs the inner service under that remote
/// parent ([`stagetrace::remote_parent_span`]: a [`TracedHttpClient`] or
/// [`PolicyClient`](crate::PolicyClient) call made by the handler continues
/// the caller's trace), puts the [`TraceParent`], the [`TraceContext`](stagetrace::wire::TraceContext) and an
/// [`InferTimer`](crate::InferTimer) into the request extensions (a handler
/// may mark its pre / infer / post split), and adds
/// `stagetrace-timing` and `Server-Timing` to the response. The inner service's
/// time is `infer` unless the handler marks otherwise; waiting for a
/// concurrency slot ([`TimingLayer::max_concurrency`]) is `queue`.
#[derive(Clone)]
pub struct TimingLayer {
    shared: Arc<LayerShared>,
}

struct LayerShared {
    clock: ServerClock,
    hook: Option<RequestHook>,
    max_body_bytes: usize,
    permits: Option<Semaphore>,
    counters: ServerCounters,
    report_timing: bool,
}

impl fmt::Debug for TimingLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimingLayer")
            .field("clock", &self.shared.clock)
            .field("hook", &self.shared.hook.is_some())
            .field("max_body_bytes", &self.shared.max_body_bytes)
            .field(
                "max_concurrency",
                &self
                    .shared
                    .permits
                    .as_ref()
                    .map(Semaphore::available_permits),
            )
            .finish()
    }
}

impl Default for TimingLayer {
    fn default() -> Self {
        TimingLayer::new()
    }
}

impl TimingLayer {
    /// A layer with the host clock, no hook, no concurrency limit.
    pub fn new() -> Self {
        TimingLayer {
            shared: Arc::new(LayerShared {
                clock: ServerClock::system(),
                hook: None,
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                permits: None,
                counters: ServerCounters::default(),
                report_timing: true,
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut LayerShared)) -> Self {
        // Settings are made before the layer is cloned into a router; a
        // clone made earlier keeps its own settings.
        match Arc::get_mut(&mut self.shared) {
            Some(shared) => f(shared),
            None => {
                let mut shared = LayerShared {
                    clock: self.shared.clock.clone(),
                    hook: self.shared.hook.clone(),
                    max_body_bytes: self.shared.max_body_bytes,
                    permits: self
                        .shared
                        .permits
                        .as_ref()
                        .map(|p| Semaphore::new(p.available_permits())),
                    counters: ServerCounters::default(),
                    report_timing: self.shared.report_timing,
                };
                f(&mut shared);
                self.shared = Arc::new(shared);
            }
        }
        self
    }

    /// Called once per request with what the server saw (see [`RequestHook`]).
    pub fn on_request(self, hook: impl Fn(&ServerRecord) + Send + Sync + 'static) -> Self {
        self.edit(|s| s.hook = Some(Arc::new(hook)))
    }

    /// The clock that stamps `recv_unix_ns` (default: the host clock).
    pub fn clock(self, clock: ServerClock) -> Self {
        self.edit(|s| s.clock = clock)
    }

    /// Largest request body buffered; larger requests get `413`.
    pub fn max_body_bytes(self, n: usize) -> Self {
        self.edit(|s| s.max_body_bytes = n)
    }

    /// Run at most `n` requests at once; waiting for a slot is `queue`.
    pub fn max_concurrency(self, n: usize) -> Self {
        self.edit(|s| s.permits = Some(Semaphore::new(n.clamp(1, Semaphore::MAX_PERMITS))))
    }

    /// Whether responses carry the timing headers (default `true`). `false`
    /// answers as an unmodified server does — the request is still stamped
    /// and reported to the hook — so a client shows what it can tell
    /// without them: the black box cut at the first byte (`ttfb`, `rx`).
    pub fn report_timing(self, on: bool) -> Self {
        self.edit(|s| s.report_timing = on)
    }

    /// Requests, failures and rejected headers so far.
    pub fn stats(&self) -> ServerStats {
        self.shared.counters.snapshot()
    }
}

impl<S> tower::Layer<S> for TimingLayer {
    type Service = TimingService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TimingService {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`TimingLayer`] wraps around an inner HTTP service.
#[derive(Clone)]
pub struct TimingService<S> {
    inner: S,
    shared: Arc<LayerShared>,
}

impl<S> fmt::Debug for TimingService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimingService").finish_non_exhaustive()
    }
}

impl<S, ReqB, ResB> tower::Service<Request<ReqB>> for TimingService<S>
where
    S: tower::Service<Request<axum::body::Body>, Response = Response<ResB>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    ReqB: http_body::Body<Data = Bytes> + Send + 'static,
    ReqB::Error: Into<BoxError>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<axum::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The clone is ready only after poll_ready; keep the ready one.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move { Ok(shared.handle(inner, req).await) })
    }
}

impl LayerShared {
    async fn handle<S, ReqB, ResB>(
        &self,
        mut inner: S,
        req: Request<ReqB>,
    ) -> Response<axum::body::Body>
    where
        S: tower::Service<Request<axum::body::Body>, Response = Response<ResB>, Error = Infallible>,
        ReqB: http_body::Body<Data = Bytes>,
        ReqB::Error: Into<BoxError>,
        ResB: http_body::Body<Data = Bytes> + Send + 'static,
        ResB::Error: Into<BoxError>,
    {
        // The service is called once the request's head has arrived: the
        // request's first byte, as near as a tower layer sees it.
        let head = Instant::now();
        let (mut parts, body) = req.into_parts();
        let collected = Limited::new(body, self.max_body_bytes).collect().await;
        // The whole request has arrived (or failed to): the receive time.
        let mut stamps = RequestStamps::received(&self.clock).first_byte(Some(head));
        let context = {
            let h = &parts.headers;
            let parents: Vec<&[u8]> = h
                .get_all(TRACEPARENT)
                .iter()
                .map(|v| v.as_bytes())
                .collect();
            let states: Vec<&[u8]> = h.get_all(TRACESTATE).iter().map(|v| v.as_bytes()).collect();
            take_context(&self.counters, &parents, &states)
        };
        let trace_parent = context.as_ref().map(|c| c.parent);
        let kind = parts
            .headers
            .get(KIND_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = match collected {
            Ok(c) => c.to_bytes(),
            Err(e) => {
                let too_large = e
                    .downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some();
                let (status, msg) = if too_large {
                    (
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!(
                            "request body larger than {} bytes; raise TimingLayer::max_body_bytes",
                            self.max_body_bytes
                        ),
                    )
                } else {
                    (
                        StatusCode::BAD_REQUEST,
                        format!("request body could not be read: {e}"),
                    )
                };
                return self.finish_error(&stamps, trace_parent, kind.as_deref(), status, msg);
            }
        };
        if let Some(c) = &context {
            parts.extensions.insert(c.parent);
            parts.extensions.insert(c.clone());
        }
        let timer = stamps.timer();
        parts.extensions.insert(timer.clone());
        let req = Request::from_parts(parts, axum::body::Body::from(body));

        let permit = match &self.permits {
            Some(p) => p.acquire().await.ok(),
            None => None,
        };
        let span = handler_span(context);
        let start = Instant::now();
        let Ok(resp) = span.in_scope(|| inner.call(req)).instrument(span).await;
        let end = Instant::now();
        drop(permit);
        stamps.handled(start, end, timer);

        let (mut parts, body) = resp.into_parts();
        let timing = stamps.timing_now();
        if self.report_timing {
            insert_timing_headers(&mut parts.headers, &timing);
        }
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let error = if parts.status.is_server_error() {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            Some(format!("handler answered {}", parts.status))
        } else {
            None
        };
        self.emit(server_record(trace_parent, kind.as_deref(), timing, error));
        Response::from_parts(parts, axum::body::Body::new(body))
    }

    fn finish_error(
        &self,
        stamps: &RequestStamps,
        trace_parent: Option<TraceParent>,
        kind: Option<&str>,
        status: StatusCode,
        msg: String,
    ) -> Response<axum::body::Body> {
        let timing = stamps.timing_now();
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        let mut resp = Response::new(axum::body::Body::from(msg.clone()));
        *resp.status_mut() = status;
        if self.report_timing {
            insert_timing_headers(resp.headers_mut(), &timing);
        }
        self.emit(server_record(trace_parent, kind, timing, Some(msg)));
        resp
    }

    fn emit(&self, record: ServerRecord) {
        if let Some(hook) = &self.hook {
            hook(&record);
        }
    }
}

fn insert_timing_headers(headers: &mut HeaderMap, timing: &ServerTiming) {
    if let Ok(v) = HeaderValue::from_str(&timing.to_timing_header()) {
        headers.insert(HeaderName::from_static(TIMING_HEADER), v);
    }
    if let Ok(v) = HeaderValue::from_str(&timing.to_server_timing_header()) {
        headers.append(HeaderName::from_static(SERVER_TIMING_HEADER), v);
    }
}

// ---------------------------------------------------------------------------
// client: reqwest wrapper
// ---------------------------------------------------------------------------

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
    /// (malformed ones are counted as rejected headers).
    pub server_timing: Option<ServerTiming>,
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
        let peer = match (
            request.url().host_str(),
            request.url().port_or_known_default(),
        ) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            _ => String::new(),
        };
        let span = transport::transport_span(&peer);
        if let Some(tp) = transport::traceparent(&span) {
            let headers = request.headers_mut();
            if let Ok(v) = HeaderValue::from_bytes(&tp) {
                headers.insert(HeaderName::from_static(TRACEPARENT), v);
            }
            // Ours replaces any the app set: a tracestate goes with its parent.
            headers.remove(TRACESTATE);
            if let Some(v) =
                transport::tracestate(&span).and_then(|ts| HeaderValue::from_str(&ts).ok())
            {
                headers.insert(HeaderName::from_static(TRACESTATE), v);
            }
        }
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
        let (status, headers, body) =
            match tokio::time::timeout(self.timeout, exchange.instrument(span.clone())).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    transport::fail(&span, "disconnected");
                    return Err(e);
                }
                Err(_) => {
                    transport::fail(&span, "timeout");
                    return Err(HttpCallError::Timeout(self.timeout));
                }
            };
        let server_timing = read_timing_headers(&headers);
        if let Some(t) = server_timing {
            transport::attach(&span, t);
        }
        if !status.is_success() {
            transport::fail(&span, "http error status");
            return Err(HttpCallError::Status { status, body });
        }
        Ok(HttpReply {
            status,
            headers,
            body,
            server_timing,
        })
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
