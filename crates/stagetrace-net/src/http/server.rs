//! The server side: [`TimingLayer`], a tower layer that stamps every
//! request's timing and answers with the timing headers (a relay's with its
//! downstream's chain nested: `docs/protocol.md`, "Relays").

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use stagetrace::{record::ServerRecord, record::ServiceRole};
use stagetrace_wire::ServerTiming;
use stagetrace_wire::{
    Extracted, TimingChain, TraceContext, TraceParent, SERVER_TIMING_HEADER, TIMING_CHAIN_HEADER,
    TIMING_HEADER, TRACEPARENT, TRACESTATE,
};
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::{DEFAULT_MAX_BODY_BYTES, KIND_HEADER};
use crate::server::{
    handler_span, server_record, take_context, RequestHook, RequestStamps, ServerClock,
    ServerCounters, ServerStats,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A tower [`Layer`](tower::Layer) for axum (or any tower HTTP) servers that
/// stamps server timing on every request.
///
/// Per request it buffers the body (receive time = whole body arrived),
/// takes the trace context from the `traceparent` and `tracestate` headers
/// (W3C Trace Context Level 2: a malformed or repeated `traceparent` is
/// ignored and counted, `tracestate` lines are combined; see
/// [`TraceContext::extract`](stagetrace_wire::TraceContext::extract)), runs the inner service under that remote
/// parent ([`stagetrace::remote_parent_span`]: a [`TracedHttpClient`](super::TracedHttpClient) or
/// [`PolicyClient`](crate::ws::PolicyClient) call made by the handler continues
/// the caller's trace), puts the [`TraceParent`], the [`TraceContext`](stagetrace_wire::TraceContext) and an
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
    /// Whether the timing carries the host figures.
    host_figures: bool,
    /// What the records say this service is (`HttpRelay` sets `Relay`).
    role: ServiceRole,
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
                host_figures: true,
                role: ServiceRole::PolicyServer,
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
                    host_figures: self.shared.host_figures,
                    role: self.shared.role,
                };
                f(&mut shared);
                self.shared = Arc::new(shared);
            }
        }
        self
    }

    /// What this service's records say it is (the relay sets `Relay`).
    pub(crate) fn role(self, role: ServiceRole) -> Self {
        self.edit(|s| s.role = role)
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

    /// Whether the timing carries what the host did to each request —
    /// run-queue wait, CPU stall, involuntary switches, page faults
    /// (`docs/protocol.md`, "Host figures"; default `true`, where the
    /// kernel offers them). `false` saves their few µs per request.
    pub fn host_figures(self, on: bool) -> Self {
        self.edit(|s| s.host_figures = on)
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
    /// The whole request has arrived now (its head at `head`): the
    /// receive stamps, with the host's counters when they are sent.
    fn received(&self, head: Instant) -> RequestStamps {
        RequestStamps::received(&self.clock)
            .first_byte(Some(head))
            .with_host(self.host_figures)
    }

    /// One request: read it whole, run the handler on it, answer with its
    /// timing.
    async fn handle<S, ReqB, ResB>(
        &self,
        inner: S,
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
        let (parts, body) = req.into_parts();
        let collected = Limited::new(body, self.max_body_bytes).collect().await;
        // The whole request has arrived (or failed to): the receive time.
        let mut stamps = self.received(head);
        let context = self.take_context(&parts.headers);
        let trace_parent = context.as_ref().map(|c| c.parent);
        let kind = request_kind(&parts.headers);
        let body = match collected {
            Ok(c) => c.to_bytes(),
            Err(e) => {
                let (status, msg) = self.unread_body(&e);
                return self.finish_error(&stamps, trace_parent, kind.as_deref(), status, msg);
            }
        };
        let resp = self
            .run_handler(inner, parts, body, context, &mut stamps)
            .await;
        self.answer(resp, &stamps, trace_parent, kind.as_deref())
    }

    /// The request's trace context, each rejected header counted.
    fn take_context(&self, headers: &HeaderMap) -> Option<TraceContext> {
        take_context(&self.counters, extract_trace_context(headers))
    }

    /// The status and message for a request body that could not be read
    /// whole.
    fn unread_body(&self, e: &BoxError) -> (StatusCode, String) {
        let too_large = e
            .downcast_ref::<http_body_util::LengthLimitError>()
            .is_some();
        if too_large {
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
        }
    }

    /// Runs the inner service on the request (with its trace context and
    /// timer in the extensions, under its remote parent, holding a
    /// concurrency slot when there is a limit) and stamps the handler's run.
    async fn run_handler<S, ResB>(
        &self,
        mut inner: S,
        mut parts: http::request::Parts,
        body: Bytes,
        context: Option<TraceContext>,
        stamps: &mut RequestStamps,
    ) -> Response<ResB>
    where
        S: tower::Service<Request<axum::body::Body>, Response = Response<ResB>, Error = Infallible>,
    {
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
        resp
    }

    /// The handler's response with the timing headers (ending now), the
    /// request counted and its record handed to the hook.
    fn answer<ResB>(
        &self,
        resp: Response<ResB>,
        stamps: &RequestStamps,
        trace_parent: Option<TraceParent>,
        kind: Option<&str>,
    ) -> Response<axum::body::Body>
    where
        ResB: http_body::Body<Data = Bytes> + Send + 'static,
        ResB::Error: Into<BoxError>,
    {
        let (mut parts, body) = resp.into_parts();
        let timing = stamps.timing_now();
        if self.report_timing {
            // A relay (its handler forwarded: `HttpRelay`) answers with its
            // own stamps and the downstream's chain nested.
            match stamps.relayed(&timing) {
                Some(chain) => insert_chain_headers(&mut parts.headers, &chain),
                None => insert_timing_headers(&mut parts.headers, &timing),
            }
        }
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let error = if parts.status.is_server_error() {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            Some(format!("handler answered {}", parts.status))
        } else {
            None
        };
        let mut record = server_record(trace_parent, kind, timing, error);
        record.forward = stamps.forwarded();
        self.emit(record);
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

    fn emit(&self, mut record: ServerRecord) {
        record.role = self.role;
        if let Some(hook) = &self.hook {
            hook(&record);
        }
    }
}

/// A relay's headers: `stagetrace-timing` and `Server-Timing` of its own
/// level (a client that does not know relays sees the relay as its server,
/// as over WebSocket), and the whole chain in `stagetrace-timing-chain`.
fn insert_chain_headers(headers: &mut HeaderMap, chain: &TimingChain) {
    if let Some(relay) = chain.hops.as_slice().first() {
        insert_timing_headers(headers, &relay.as_server());
    }
    if let Ok(v) = HeaderValue::from_str(&chain.to_header()) {
        headers.insert(HeaderName::from_static(TIMING_CHAIN_HEADER), v);
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

/// The W3C trace context of a request's HTTP headers (or gRPC metadata):
/// all its `traceparent` values and `tracestate` lines, in the order
/// received, read as [`TraceContext::extract`] reads them, with the count
/// of those rejected. The HTTP layer and `stagetrace-grpc`'s server layer
/// both read their requests' with it.
pub fn extract_trace_context(headers: &HeaderMap) -> Extracted {
    let parents: Vec<&[u8]> = headers
        .get_all(TRACEPARENT)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    let states: Vec<&[u8]> = headers
        .get_all(TRACESTATE)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    TraceContext::extract(&parents, &states)
}

/// The request's kind, from its `stagetrace-kind` header.
fn request_kind(headers: &HeaderMap) -> Option<String> {
    headers
        .get(KIND_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}
