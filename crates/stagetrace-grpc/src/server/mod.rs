//! The server side: [`ServerLayer`], a tower layer for tonic servers
//! (`Server::builder().layer(...)`) that continues the caller's trace,
//! stamps each request and answers with the timing in its trailers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{HeaderMap, Request, Response};
use stagetrace::record::ServerRecord;
use stagetrace_net::http::extract_trace_context;
use stagetrace_net::{ServerClock, ServerStats};
use stagetrace_wire::ServerTiming;
use stagetrace_wire::{TraceContext, TraceParent};
use tonic::metadata::{MetadataMap, MetadataValue};
use tracing::Instrument;

use crate::trailers::with_trailer;
pub use crate::trailers::{AddTrailer, WithTrailer};
use crate::wire::{OUTCOME_KEY, TIMING_KEY};

mod arrival;
mod timer;

use arrival::AheadBudget;
pub use arrival::{Arrival, ArrivalStamps};
pub use timer::RequestTimer;

/// Called once per request when its trailers are sent, with what the
/// server saw (for an exporter's `queue` / `infer` spans). Runs on the
/// connection's task: keep it short.
pub type RequestHook = Arc<dyn Fn(&ServerRecord) + Send + Sync>;

/// A tower [`Layer`](tower::Layer) for tonic servers: per request it reads
/// the W3C `traceparent` / `tracestate` metadata (a malformed or repeated
/// one is ignored and counted, never an error), runs the handler under that
/// remote parent ([`stagetrace::remote_parent_span`]), hands the handler a
/// [`RequestTimer`] in the request's extensions, and adds the timing map to
/// the response's trailers as `stagetrace-timing-bin` (and a
/// [`RequestTimer::set_outcome`] as `stagetrace-obs-bin`), computed when the
/// trailers are due.
///
/// Receive = the request body's end was read (or
/// [`RequestTimer::received_now`]); send = the handler's response resolved.
/// A server-streaming method's trailers come after its last message: its
/// `total_ns` still ends at the response head.
///
/// A request that waits for the service inside the layer to be ready (a
/// `tower::limit::ConcurrencyLimitLayer` added after this layer, a pool of
/// handlers all busy) is read ahead meanwhile, so its receive is when it
/// came in; the wait until the service took it is `accept_wait_ns`, part
/// of `queue_ns` — the server's wait, not the uplink. A limit outside the
/// layer (tonic's `concurrency_limit_per_connection`, a layer added before
/// this one) holds the request where the layer cannot see it: its wait
/// still reads as uplink. Put the limit inside.
#[derive(Clone)]
pub struct ServerLayer {
    shared: Arc<Shared>,
}

struct Shared {
    clock: ServerClock,
    host_figures: bool,
    hook: Option<RequestHook>,
    requests: AtomicU64,
    failed: AtomicU64,
    rejected_headers: AtomicU64,
    /// Bytes read ahead of waiting requests (`arrival.rs`).
    ahead: Arc<AheadBudget>,
}

impl fmt::Debug for ServerLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerLayer")
            .field("clock", &self.shared.clock)
            .field("host_figures", &self.shared.host_figures)
            .field("hook", &self.shared.hook.is_some())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for ServerLayer {
    fn default() -> Self {
        ServerLayer::new()
    }
}

impl ServerLayer {
    /// The host clock, host figures on, no hook.
    pub fn new() -> Self {
        ServerLayer {
            shared: Arc::new(Shared {
                clock: ServerClock::system(),
                host_figures: true,
                hook: None,
                requests: AtomicU64::new(0),
                failed: AtomicU64::new(0),
                rejected_headers: AtomicU64::new(0),
                ahead: Arc::default(),
            }),
        }
    }

    fn edit(self, f: impl FnOnce(&mut Shared)) -> Self {
        // Settings are made before the layer serves; the counters start anew.
        let mut shared = Shared {
            clock: self.shared.clock.clone(),
            host_figures: self.shared.host_figures,
            hook: self.shared.hook.clone(),
            requests: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            rejected_headers: AtomicU64::new(0),
            ahead: Arc::default(),
        };
        f(&mut shared);
        ServerLayer {
            shared: Arc::new(shared),
        }
    }

    /// The clock that stamps `recv_unix_ns` (default: the host's); tests
    /// and the demo skew it.
    pub fn clock(self, clock: ServerClock) -> Self {
        self.edit(|s| s.clock = clock)
    }

    /// Whether the timing carries what the host did to each request
    /// (`docs/protocol.md`, "Host figures"; default `true`).
    pub fn host_figures(self, on: bool) -> Self {
        self.edit(|s| s.host_figures = on)
    }

    /// Called once per request with its [`ServerRecord`] (see [`RequestHook`]).
    pub fn on_request(self, hook: impl Fn(&ServerRecord) + Send + Sync + 'static) -> Self {
        self.edit(|s| s.hook = Some(Arc::new(hook)))
    }

    /// Requests, failures (a non-zero `grpc-status`) and rejected trace
    /// context headers so far (`connections` is always 0).
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            connections: 0,
            requests: self.shared.requests.load(Ordering::Relaxed),
            failed: self.shared.failed.load(Ordering::Relaxed),
            rejected_headers: self.shared.rejected_headers.load(Ordering::Relaxed),
        }
    }
}

impl<S> tower::Layer<S> for ServerLayer {
    type Service = ServerService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ServerService {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`ServerLayer`] wraps around tonic's routes.
#[derive(Clone)]
pub struct ServerService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> fmt::Debug for ServerService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerService").finish_non_exhaustive()
    }
}

/// What [`ServerService`] adds to a response's trailers, when they are due.
pub type AddTrailers = Box<dyn FnOnce(&mut HeaderMap) + Send>;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqB, ResB> tower::Service<Request<ReqB>> for ServerService<S>
where
    S: tower::Service<Request<Arrival<ReqB>>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqB: http_body::Body + Unpin + Send + 'static,
    ReqB::Data: Send,
    ReqB::Error: Send,
    ResB: http_body::Body + Unpin,
{
    type Response = Response<WithTrailer<ResB, AddTrailers>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Always ready: each request waits for the inner service in its own
        // future (`call`), where the layer sees it arrive while it waits.
        // hyper serves each request with a fresh clone, so nothing is held
        // up that would not be anyway.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let head = Instant::now();
        let mut inner = self.inner.clone();
        let shared = Arc::clone(&self.shared);
        let (mut parts, body) = req.into_parts();
        let context = shared.take_context(&parts.headers);
        let timer = RequestTimer::new(
            head,
            shared.clock.clone(),
            shared.host_figures,
            context.as_ref().map(|c| c.parent),
        );
        if let Some(c) = &context {
            parts.extensions.insert(c.parent);
            parts.extensions.insert(c.clone());
        }
        parts.extensions.insert(timer.clone());
        let kind = method_name(parts.uri.path());
        let mut body = ArrivalStamps::body(body, timer.clone(), Arc::clone(&shared.ahead));
        let span = context.map_or_else(tracing::Span::none, stagetrace::remote_parent_span);
        Box::pin(async move {
            // Wait for the inner service (a concurrency limit, a busy
            // pool), reading the request ahead meanwhile: its arrival is
            // stamped when it comes, whoever is busy.
            std::future::poll_fn(|cx| loop {
                if let Poll::Ready(r) = inner.poll_ready(cx) {
                    return Poll::Ready(r);
                }
                if !body.read_ahead(cx) {
                    return Poll::Pending;
                }
            })
            .await?;
            timer.handler_started();
            let req = Request::from_parts(parts, body);
            let fut = span.in_scope(|| inner.call(req)).instrument(span);
            let resp = fut.await?;
            timer.sent_now();
            let (mut parts, body) = resp.into_parts();
            let add: AddTrailers = Box::new(move |map| shared.add_trailers(&timer, &kind, map));
            // A trailers-only response (an error status) has no trailers
            // frame: its headers are the trailers.
            if parts.headers.contains_key(GRPC_STATUS) {
                add(&mut parts.headers);
                let nothing: AddTrailers = Box::new(|_| {});
                return Ok(Response::from_parts(parts, with_trailer(body, nothing)));
            }
            Ok(Response::from_parts(parts, with_trailer(body, add)))
        })
    }
}

const GRPC_STATUS: &str = "grpc-status";

/// The method's name, the record's `kind` (`/pkg.Service/Method` → `Method`).
fn method_name(path: &str) -> String {
    path.rsplit('/')
        .next()
        .filter(|m| !m.is_empty() && m.len() <= 64)
        .unwrap_or("call")
        .to_owned()
}

impl Shared {
    /// The request's trace context (W3C Trace Context Level 2, as
    /// `stagetrace-net`'s servers read it); each rejected header counted.
    fn take_context(&self, headers: &HeaderMap) -> Option<TraceContext> {
        let found = extract_trace_context(headers);
        for _ in 0..found.rejected() {
            self.rejected_headers.fetch_add(1, Ordering::Relaxed);
            stagetrace::health::count_rejected_header();
        }
        found.context
    }

    /// The trailers are due: add the timing and the outcome, count the
    /// request, hand its record to the hook.
    fn add_trailers(&self, timer: &RequestTimer, kind: &str, map: &mut HeaderMap) {
        let reply = timer.reply_timing();
        let mut md = MetadataMap::new();
        if let Some((t, _)) = &reply {
            md.insert_bin(TIMING_KEY, MetadataValue::from_bytes(&t.to_bytes()));
        }
        if let Some(o) = timer.outcome() {
            md.insert_bin(OUTCOME_KEY, MetadataValue::from_bytes(&o.to_bytes()));
        }
        for (k, v) in md.into_headers() {
            if let Some(k) = k {
                map.insert(k, v);
            }
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let status = map.get(GRPC_STATUS).map(|v| v.as_bytes());
        let error = match status {
            Some(b"0") | None => None,
            Some(code) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                Some(format!("grpc-status {}", String::from_utf8_lossy(code)))
            }
        };
        if let Some(hook) = &self.hook {
            let (timing, trace_parent) =
                reply.map_or((ServerTiming::default(), None), |(t, p)| (t.timing, p));
            hook(&record(trace_parent, kind, timing, error));
        }
    }
}

fn record(
    trace_parent: Option<TraceParent>,
    kind: &str,
    timing: ServerTiming,
    error: Option<String>,
) -> ServerRecord {
    ServerRecord {
        trace_parent,
        kind: kind.to_owned(),
        timing,
        error,
        ..ServerRecord::default()
    }
}
