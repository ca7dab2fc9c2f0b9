//! The client side: [`ClientLayer`], a tower layer on a tonic `Channel`
//! that sends the W3C trace context in the request's metadata and reads the
//! server's timing (and an async server's outcome) back from the trailers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response};
use stagetrace::StageSpanExt;
use stagetrace_wire::{TRACEPARENT, TRACESTATE};
use tracing::Span;

mod body;
mod slot;

pub use body::{ReadTrailers, TrailerReader};
pub use slot::{SendTrace, TrailerSlot, Trailers};

/// A tower [`Layer`](tower::Layer) for a tonic client's `Channel`:
///
/// - sends a `traceparent`: the request's [`SendTrace`] when it has one (a
///   call timed without spans), else the current `transport` span's — a
///   call made inside a `call` span but no `transport` span gets a
///   `transport` span of its own, ended when the response's trailers
///   arrive — with the `tracestate` of the trace it continues;
/// - reads the trailers `stagetrace-timing-bin` and `stagetrace-obs-bin`:
///   into the request's [`TrailerSlot`] when it has one, and the timing onto
///   that transport span ([`StageSpanExt::record_server_timing`]), which
///   the stage layer splits into uplink, queue, infer and downlink;
/// - flags the span's call failed on a non-zero `grpc-status` or a broken
///   connection.
///
/// A malformed trailer is ignored and counted ([`ClientStats`], and the
/// current stage layer's `rejected_headers`); the reply is delivered as
/// usual. A request with neither a [`SendTrace`] nor a call around it goes
/// through untouched but for the trailers read into its slot.
#[derive(Clone, Default)]
pub struct ClientLayer {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
pub(crate) struct Shared {
    calls: AtomicU64,
    rejected_trailers: AtomicU64,
}

impl Shared {
    pub(crate) fn reject(&self) {
        self.rejected_trailers.fetch_add(1, Ordering::Relaxed);
        stagetrace::health::count_rejected_header();
    }
}

/// What a [`ClientLayer`] has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Requests sent through it.
    pub calls: u64,
    /// Trailer entries it could not read (ignored).
    pub rejected_trailers: u64,
}

impl fmt::Debug for ClientLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientLayer")
            .field("stats", &self.stats())
            .finish()
    }
}

impl ClientLayer {
    /// A layer with its own counters.
    pub fn new() -> Self {
        ClientLayer::default()
    }

    /// Requests and rejected trailers so far (shared by every service made
    /// from this layer).
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            calls: self.shared.calls.load(Ordering::Relaxed),
            rejected_trailers: self.shared.rejected_trailers.load(Ordering::Relaxed),
        }
    }
}

impl<S> tower::Layer<S> for ClientLayer {
    type Service = ClientService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientService {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`ClientLayer`] wraps around a `Channel`.
#[derive(Clone)]
pub struct ClientService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> fmt::Debug for ClientService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientService").finish_non_exhaustive()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqB, ResB> tower::Service<Request<ReqB>> for ClientService<S>
where
    S: tower::Service<Request<ReqB>, Response = Response<ResB>>,
    S::Future: Send + 'static,
    ResB: http_body::Body + Unpin,
{
    type Response = Response<ReadTrailers<ResB>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        let slot = req.extensions().get::<TrailerSlot>().cloned();
        let span = match req.extensions().get::<SendTrace>().copied() {
            Some(SendTrace(tp)) => {
                set_trace(req.headers_mut(), &tp.to_bytes(), None);
                None
            }
            None => {
                let span = transport_span(req.uri());
                if let Some(span) = &span {
                    if let Some(tp) = span.trace_parent() {
                        let state = span.trace_state().map(|s| s.to_header());
                        set_trace(req.headers_mut(), &tp.to_bytes(), state.as_deref());
                    }
                }
                span
            }
        };
        let reader = body::Reader::new(span, slot, Arc::clone(&self.shared));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = match fut.await {
                Ok(r) => r,
                Err(e) => {
                    reader.failed("disconnected");
                    return Err(e);
                }
            };
            reader.head_arrived(Instant::now());
            let (parts, inner) = resp.into_parts();
            // A trailers-only response (an error status): its headers are
            // the trailers, and no trailers frame follows.
            if parts.headers.contains_key("grpc-status") {
                reader.trailers(&parts.headers);
                return Ok(Response::from_parts(parts, TrailerReader::done(inner)));
            }
            Ok(Response::from_parts(
                parts,
                TrailerReader::body(inner, reader),
            ))
        })
    }
}

/// The span this call's timing goes to: the current span when it is a
/// `transport` span, a new `transport` span when the current one belongs to
/// a call (or a handler continuing a trace), else none: a request outside
/// any call is no stage of one.
fn transport_span(uri: &http::Uri) -> Option<Span> {
    let current = Span::current();
    if current.metadata().is_some_and(|m| m.name() == "transport") {
        return Some(current);
    }
    current.trace_parent()?;
    let peer = uri.authority().map_or("", |a| a.as_str());
    Some(tracing::info_span!("transport", peer = %format_args!("grpc://{peer}")))
}

/// Replace the request's trace context with ours: a `tracestate` goes with
/// its parent, so an app's own one is dropped.
fn set_trace(headers: &mut HeaderMap, traceparent: &[u8], tracestate: Option<&str>) {
    let Ok(v) = HeaderValue::from_bytes(traceparent) else {
        return;
    };
    headers.insert(HeaderName::from_static(TRACEPARENT), v);
    headers.remove(TRACESTATE);
    if let Some(v) = tracestate
        .filter(|s| !s.is_empty())
        .and_then(|s| HeaderValue::from_str(s).ok())
    {
        headers.insert(HeaderName::from_static(TRACESTATE), v);
    }
}
