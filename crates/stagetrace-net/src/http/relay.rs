//! The HTTP relay (gateway) between robots and a policy server:
//! [`HttpRelay`], the HTTP twin of the WebSocket
//! [`Relay`](crate::ws::Relay).
//!
//! It is an axum server behind a [`TimingLayer`] whose one handler forwards
//! every request (any method and path, the body and the end-to-end headers)
//! to the downstream base URL with a [`TracedHttpClient`] and answers with
//! the downstream's status, headers and body. What it adds:
//!
//! - the trace continues: the layer runs the handler under the caller's
//!   remote parent, so the forwarded request carries the same trace id, the
//!   caller's flags and `tracestate`, and a new parent id (the relay's
//!   transport span with a stage layer installed; a random span id without);
//! - its own timing, on its own clock, through the layer: the
//!   `stagetrace-timing` header of its own level (received, total, transfer)
//!   and the whole chain in `stagetrace-timing-chain` (JSON: its
//!   `forward_ns` / `reply_ns` with the downstream's timing nested as
//!   `downstream`; `docs/protocol.md`, "Relays"). A client's record then
//!   carries per-hop figures (`hops`) and the relay's time (`relay_ms`).
//!
//! A downstream that answers an error status is passed through as it
//! answered; one that cannot be reached or does not answer in time gets
//! `502` / `504` with the reason in the body. Either fails the request
//! (counted in [`HttpRelayHandle::stats`]).

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response, StatusCode};
use stagetrace::{record::ServerRecord, record::ServiceRole};
use stagetrace_wire::{
    TimingChain, TimingMap, TraceContext, SERVER_TIMING_HEADER, TIMING_CHAIN_HEADER, TIMING_HEADER,
    TRACEPARENT, TRACESTATE,
};
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::oneshot;

use super::client::{HttpCallError, TracedHttpClient};
use super::server::TimingLayer;
use crate::server::{Downstream, InferTimer, ServerClock, ServerStats};
use crate::ws::RelayError;
use crate::ws::ServeError;

/// A relay in HTTP. Build with [`HttpRelay::builder`].
#[derive(Debug)]
pub struct HttpRelay;

impl HttpRelay {
    /// Start building an HTTP relay.
    pub fn builder() -> HttpRelayBuilder {
        HttpRelayBuilder {
            layer: TimingLayer::new().role(ServiceRole::Relay),
            timeout: crate::ws::DEFAULT_CALL_TIMEOUT,
        }
    }
}

/// Settings of an [`HttpRelay`].
#[derive(Debug)]
pub struct HttpRelayBuilder {
    layer: TimingLayer,
    timeout: Duration,
}

impl HttpRelayBuilder {
    /// The relay's wall clock, stamped into its `recv_unix_ns` (default: the
    /// host clock; tests and the demo skew and drift it).
    pub fn clock(mut self, clock: ServerClock) -> Self {
        self.layer = self.layer.clock(clock);
        self
    }

    /// Called once per request with the relay's own timing.
    pub fn on_request(mut self, hook: impl Fn(&ServerRecord) + Send + Sync + 'static) -> Self {
        self.layer = self.layer.on_request(hook);
        self
    }

    /// Largest request body relayed (default 32 MiB); larger ones get `413`.
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.layer = self.layer.max_body_bytes(n);
        self
    }

    /// Requests forwarded at once; waiting for a slot is the relay's own time.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.layer = self.layer.max_concurrency(n);
        self
    }

    /// Limit on one forwarded call, request sent → whole reply (default
    /// 10 s); past it the caller gets `504`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Bind `addr` and relay every request to `downstream` (an `http://`
    /// base URL: the request's path and query are appended) in a task on
    /// the current tokio runtime.
    pub async fn spawn(
        self,
        addr: impl ToSocketAddrs,
        downstream: &str,
    ) -> Result<HttpRelayHandle, RelayError> {
        let base = reqwest::Url::parse(downstream)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
            .ok_or_else(|| {
                RelayError::Downstream(format!(
                    "{downstream:?} is not an http:// URL of the downstream server"
                ))
            })?;
        let client = TracedHttpClient::new()
            .map_err(|e| RelayError::Downstream(e.to_string()))?
            .timeout(self.timeout);
        let forward = Arc::new(Forward {
            base: base.as_str().trim_end_matches('/').to_owned(),
            client,
        });
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RelayError::Serve(ServeError::NoRuntime));
        }
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| RelayError::Serve(ServeError::Bind(e)))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| RelayError::Serve(ServeError::Bind(e)))?;
        let app = axum::Router::new()
            .fallback(relay_request)
            .with_state(forward)
            .layer(self.layer.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(HttpRelayHandle {
            local_addr,
            stop,
            task,
            layer: self.layer,
        })
    }
}

/// A running [`HttpRelay`].
pub struct HttpRelayHandle {
    local_addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    layer: TimingLayer,
}

impl fmt::Debug for HttpRelayHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpRelayHandle")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl HttpRelayHandle {
    /// The address the relay listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The relay's `http://` base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// Requests relayed, failed (an error status or no reply from the
    /// downstream) and rejected trace headers so far.
    pub fn stats(&self) -> ServerStats {
        self.layer.stats()
    }

    /// Stop accepting and finish the requests in flight (bounded: after
    /// 5 s the serving task is dropped).
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(5), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

struct Forward {
    /// The downstream's base URL, without a trailing `/`.
    base: String,
    client: TracedHttpClient,
}

/// Headers that belong to one connection, or that the relay sets itself: not
/// forwarded in either direction (RFC 9110 §7.6.1, plus the trace context
/// and the timing headers).
fn forwarded(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
            | TRACEPARENT
            | TRACESTATE
            | TIMING_HEADER
            | SERVER_TIMING_HEADER
            | TIMING_CHAIN_HEADER
    )
}

fn copy_headers(from: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(from.len());
    for (name, value) in from {
        if forwarded(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// The continued trace context, for when no stage layer gives the transport
/// span one (the client then leaves these headers as they are).
fn continued(headers: &mut HeaderMap, context: &TraceContext) {
    let mut id = [0u8; 8];
    while id == [0; 8] {
        id = rand::random();
    }
    if let Some(tp) = context.parent.continued(id) {
        if let Ok(v) = HeaderValue::from_bytes(&tp.to_bytes()) {
            headers.insert(HeaderName::from_static(TRACEPARENT), v);
        }
    }
    let state = context.state.to_header();
    if !state.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&state) {
            headers.insert(HeaderName::from_static(TRACESTATE), v);
        }
    }
}

fn error_response(status: StatusCode, msg: String) -> Response<Body> {
    let mut resp = Response::new(Body::from(msg));
    *resp.status_mut() = status;
    resp
}

async fn relay_request(State(f): State<Arc<Forward>>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    // The layer buffered the body already (bounded by its max_body_bytes).
    let body: Bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            return error_response(StatusCode::BAD_REQUEST, format!("relay: request body: {e}"))
        }
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut headers = copy_headers(&parts.headers);
    if let Some(context) = parts.extensions.get::<TraceContext>() {
        continued(&mut headers, context);
    }
    let request = f
        .client
        .inner()
        .request(parts.method.clone(), format!("{}{path}", f.base))
        .headers(headers)
        .body(body);
    // Handed to the downstream client: the hop's send stamp (the client's
    // own request building, µs, falls in the hop, on the safe side of its
    // bound), and its whole reply read: the reply stamp.
    let forward = Instant::now();
    let result = f.client.send(request).await;
    let reply_at = Instant::now();
    match result {
        Ok(reply) => {
            if let Some(timer) = parts.extensions.get::<InferTimer>() {
                timer.set_downstream(Downstream {
                    forward,
                    reply: reply_at,
                    chain: TimingChain {
                        map: TimingMap::from(reply.server_timing.unwrap_or_default()),
                        hops: reply.hops,
                    },
                    span_id: reply.sent_parent_id,
                });
            }
            let mut resp = Response::new(Body::from(reply.body));
            *resp.status_mut() = reply.status;
            *resp.headers_mut() = copy_headers(&reply.headers);
            resp
        }
        Err(HttpCallError::Status { status, body }) => {
            let mut resp = Response::new(Body::from(body));
            *resp.status_mut() = status;
            resp
        }
        Err(HttpCallError::Timeout(d)) => error_response(
            StatusCode::GATEWAY_TIMEOUT,
            format!("relay: the downstream server did not answer within {d:?}"),
        ),
        Err(e) => error_response(StatusCode::BAD_GATEWAY, format!("relay: {e}")),
    }
}
