//! The WebSocket policy server: [`PolicyServer`]'s builder, the accept loop
//! and one task per connection that stamps, runs the [`Handler`] and
//! answers with the action map plus the `server_timing` map.

use std::fmt;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use futures_util::{FutureExt, SinkExt, StreamExt};
use rmpv::Value;
use stagetrace::wire::{
    TimingMap, TraceContext, TraceParent, SERVER_TIMING_KEY, TRACEPARENT, TRACESTATE,
};
use stagetrace::{ServerRecord, ServiceRole};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{watch, Semaphore};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tracing::Instrument;

use super::handler::{Handler, HandlerError};
use super::limits::DEFAULT_MAX_MESSAGE_BYTES;
use crate::first_bytes::FirstBytes;
use crate::msg::{MapWriter, MsgMap};
use crate::server::{
    handler_span, server_record, take_context, RequestHook, RequestStamps, ServerClock,
    ServerCounters, ServerStats,
};
use crate::timing_map::TimingMsgpackExt;

/// Why a server could not start or stopped.
#[derive(Debug)]
pub enum ServeError {
    /// Binding the listening address failed.
    Bind(std::io::Error),
    /// Accepting connections failed.
    Accept(std::io::Error),
    /// `spawn` was awaited outside a tokio runtime.
    NoRuntime,
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Bind(e) => write!(
                f,
                "policy server could not bind its address ({e}); pick a free port or stop the process holding it"
            ),
            ServeError::Accept(e) => write!(
                f,
                "policy server stopped accepting connections ({e}); check the process's file descriptor limit"
            ),
            ServeError::NoRuntime => f.write_str(
                "policy server needs a tokio runtime; await spawn/serve inside one (e.g. #[tokio::main])",
            ),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Bind(e) | ServeError::Accept(e) => Some(e),
            ServeError::NoRuntime => None,
        }
    }
}

/// A policy server speaking the openpi / LingBot-VA WebSocket protocol, with
/// stagetrace's server timing in every response. Build with
/// [`PolicyServer::builder`].
#[derive(Debug)]
pub struct PolicyServer;

impl PolicyServer {
    /// Start building a server.
    pub fn builder() -> PolicyServerBuilder {
        PolicyServerBuilder {
            metadata: MsgMap::new(),
            hook: None,
            clock: ServerClock::system(),
            max_concurrency: 1,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            report_timing: true,
            role: ServiceRole::PolicyServer,
        }
    }
}

/// Settings of a [`PolicyServer`].
pub struct PolicyServerBuilder {
    metadata: MsgMap,
    hook: Option<RequestHook>,
    clock: ServerClock,
    max_concurrency: usize,
    max_message_bytes: usize,
    report_timing: bool,
    role: ServiceRole,
}

impl fmt::Debug for PolicyServerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyServerBuilder")
            .field("metadata_entries", &self.metadata.len())
            .field("hook", &self.hook.is_some())
            .field("clock", &self.clock)
            .field("max_concurrency", &self.max_concurrency)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("report_timing", &self.report_timing)
            .field("role", &self.role)
            .finish()
    }
}

impl PolicyServerBuilder {
    /// What the records handed to the hook say this service is (a relay
    /// or an executor built on this server).
    pub(crate) fn role(mut self, role: ServiceRole) -> Self {
        self.role = role;
        self
    }

    /// The map sent to each client on connect (openpi's policy metadata).
    pub fn metadata(mut self, metadata: MsgMap) -> Self {
        self.metadata = metadata;
        self
    }

    /// Called once per request with what the server saw (see [`RequestHook`]).
    pub fn on_request(mut self, hook: impl Fn(&ServerRecord) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// The clock that stamps `recv_unix_ns` (default: the host clock).
    pub fn clock(mut self, clock: ServerClock) -> Self {
        self.clock = clock;
        self
    }

    /// How many requests may run the handler at once, across connections
    /// (default 1: one model, one request at a time). Waiting for a slot is
    /// reported as `queue`. 0 is taken as 1.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    /// Largest request accepted, in bytes (default [`DEFAULT_MAX_MESSAGE_BYTES`]).
    pub fn max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = n.max(1024);
        self
    }

    /// Whether responses carry the `server_timing` map (default `true`).
    /// `false` answers as an unmodified openpi server without it does — the
    /// request is still stamped and reported to the hook — so a client
    /// shows what it can tell without: the black box cut at the first byte
    /// (`ttfb`, `rx`).
    pub fn report_timing(mut self, on: bool) -> Self {
        self.report_timing = on;
        self
    }

    /// Bind `addr` and serve until an accept error.
    pub async fn serve<H: Handler>(
        self,
        addr: impl ToSocketAddrs,
        handler: H,
    ) -> Result<(), ServeError> {
        tokio::runtime::Handle::try_current().map_err(|_| ServeError::NoRuntime)?;
        let listener = TcpListener::bind(addr).await.map_err(ServeError::Bind)?;
        let (_tx, rx) = watch::channel(false);
        self.into_shared(handler).accept_loop(listener, rx).await
    }

    /// Bind `addr` and serve in a task on the current tokio runtime; the
    /// handle gives the bound address (bind port 0 for a free one) and stops it.
    pub async fn spawn<H: Handler>(
        self,
        addr: impl ToSocketAddrs,
        handler: H,
    ) -> Result<ServerHandle, ServeError> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| ServeError::NoRuntime)?;
        let listener = TcpListener::bind(addr).await.map_err(ServeError::Bind)?;
        let local_addr = listener.local_addr().map_err(ServeError::Bind)?;
        let (stop, rx) = watch::channel(false);
        let shared = self.into_shared(handler);
        let counters = Arc::clone(&shared.counters);
        let task = rt.spawn(async move { shared.accept_loop(listener, rx).await });
        Ok(ServerHandle {
            local_addr,
            stop,
            task,
            counters,
        })
    }

    fn into_shared<H: Handler>(self, handler: H) -> Arc<Shared> {
        Arc::new(Shared {
            metadata: self.metadata.to_msgpack(),
            hook: self.hook,
            clock: self.clock,
            permits: Semaphore::new(self.max_concurrency),
            max_message_bytes: self.max_message_bytes,
            handler: Box::new(handler),
            counters: Arc::new(ServerCounters::default()),
            report_timing: self.report_timing,
            role: self.role,
        })
    }
}

/// A running server started with [`PolicyServerBuilder::spawn`].
///
/// Dropping the handle stops the server, like [`ServerHandle::shutdown`]
/// without waiting: keep it for as long as the server should run.
#[derive(Debug)]
#[must_use = "dropping the handle stops the server"]
pub struct ServerHandle {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
    counters: Arc<ServerCounters>,
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The `ws://` URL of the server.
    pub fn url(&self) -> String {
        format!("ws://{}", self.local_addr)
    }

    /// Requests, failures and rejected headers so far.
    pub fn stats(&self) -> ServerStats {
        self.counters.snapshot()
    }

    /// Stop accepting and close every connection (in-flight requests are
    /// dropped: their clients see a disconnect).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

struct Shared {
    metadata: Vec<u8>,
    hook: Option<RequestHook>,
    clock: ServerClock,
    permits: Semaphore,
    max_message_bytes: usize,
    handler: Box<dyn Handler>,
    counters: Arc<ServerCounters>,
    /// [`PolicyServerBuilder::report_timing`].
    report_timing: bool,
    /// What this service's records say it is.
    role: ServiceRole,
}

impl Shared {
    async fn accept_loop(
        self: Arc<Self>,
        listener: TcpListener,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), ServeError> {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                accepted = listener.accept() => {
                    let (stream, _) = match accepted {
                        Ok(a) => a,
                        // Per-connection failures (e.g. reset before accept) are not fatal.
                        Err(e) if is_transient(&e) => continue,
                        Err(e) => return Err(ServeError::Accept(e)),
                    };
                    let shared = Arc::clone(&self);
                    let stop = stop.clone();
                    conns.spawn(async move { shared.connection(stream, stop).await });
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        conns.shutdown().await;
        Ok(())
    }

    async fn connection(&self, stream: TcpStream, mut stop: watch::Receiver<bool>) {
        let _ = stream.set_nodelay(true);
        let config = WebSocketConfig::default()
            .max_message_size(Some(self.max_message_bytes))
            .max_frame_size(Some(self.max_message_bytes));
        let Ok(mut ws) =
            tokio_tungstenite::accept_async_with_config(FirstBytes::new(stream), Some(config))
                .await
        else {
            return;
        };
        // The handshake's bytes are not a request's.
        let _ = ws.get_mut().take_first();
        self.counters.connections.fetch_add(1, Ordering::Relaxed);
        // Held until this function returns, however the connection ends
        // (close, error, failed request, server stop): the handler's count
        // of open connections never keeps one that left.
        let _connection = self.handler.connect();
        if ws
            .send(Message::Binary(self.metadata.clone().into()))
            .await
            .is_err()
        {
            return;
        }
        let mut prev_total_ms: Option<f64> = None;
        loop {
            let msg = tokio::select! {
                _ = stop.changed() => break,
                msg = ws.next() => msg,
            };
            // The whole message has arrived: this is the server's receive
            // time; its first byte came with the first read since the last
            // message (a control frame in between restarts that stamp).
            let mut stamps =
                RequestStamps::received(&self.clock).first_byte(ws.get_mut().take_first());
            let bytes = match msg {
                Some(Ok(Message::Binary(b))) => b,
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(Message::Text(_))) => {
                    let err = "the openpi protocol expects binary msgpack frames, got a text frame";
                    self.fail(&mut ws, &stamps, None, None, err.to_owned(), Bad::Request)
                        .await;
                    break;
                }
            };
            // Arrays are checked here, before the handler runs (1007 as the
            // Python server answers): a handler never reads an impossible one.
            let mut request = match MsgMap::from_msgpack(&bytes) {
                Ok(m) => m,
                Err(e) => {
                    self.fail(&mut ws, &stamps, None, None, e.to_string(), Bad::Request)
                        .await;
                    break;
                }
            };
            drop(bytes);
            let context = self.take_context(&mut request);
            let trace_parent = context.as_ref().map(|c| c.parent);
            let kind = request.get_str("kind").map(str::to_owned);

            let timer = stamps.timer();
            let Ok(permit) = self.permits.acquire().await else {
                break;
            };
            // Under the caller's context: the calls the handler makes
            // continue its trace.
            let span = handler_span(context);
            let start = Instant::now();
            // A panicking handler fails its request (openpi answers an
            // exception the same way) instead of silently dropping the link.
            let call = span.in_scope(|| self.handler.call(request, timer.clone()));
            let result = AssertUnwindSafe(call.instrument(span))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err(HandlerError::new("the policy handler panicked")));
            let end = Instant::now();
            drop(permit);
            stamps.handled(start, end, timer);

            let mut action = match result {
                Ok(a) => a,
                Err(e) => {
                    self.fail(
                        &mut ws,
                        &stamps,
                        trace_parent,
                        kind.as_deref(),
                        e.0,
                        Bad::Handler,
                    )
                    .await;
                    break;
                }
            };
            action.remove(SERVER_TIMING_KEY);
            let mut out = MapWriter::with_capacity(action.encoded_len_hint());
            out.entries(action.entries());
            drop(action);
            // Stamp `total` as late as possible: only the timing map itself is
            // encoded after it.
            let timing = stamps.timing_now();
            let map = TimingMap {
                timing,
                prev_total_ms,
            };
            if self.report_timing {
                // A relay nests the downstream's timing in its own.
                match stamps.relayed(&timing) {
                    Some(chain) => out.entry(SERVER_TIMING_KEY, &chain.to_msgpack()),
                    None => out.entry(SERVER_TIMING_KEY, &map.to_msgpack()),
                }
            }
            let sent = ws.send(Message::Binary(out.finish())).await;
            prev_total_ms = Some(stamps.recv.elapsed().as_secs_f64() * 1e3);
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            let error = sent.as_ref().err().map(|e| format!("send failed: {e}"));
            if error.is_some() {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
            }
            let mut record = server_record(trace_parent, kind.as_deref(), timing, error);
            record.forward = stamps.forwarded();
            self.emit(record);
            if sent.is_err() {
                break;
            }
        }
    }

    /// Remove every `traceparent` / `tracestate` entry from the request and
    /// take the trace context from them, as from HTTP header lines (a
    /// repeated key is a repeated header; a value that is neither a string
    /// nor bytes is malformed). Rejections are counted.
    fn take_context(&self, request: &mut MsgMap) -> Option<TraceContext> {
        let parents = remove_all(request, TRACEPARENT);
        let states = remove_all(request, TRACESTATE);
        if parents.is_empty() && states.is_empty() {
            return None;
        }
        let parents: Vec<&[u8]> = parents.iter().map(value_bytes).collect();
        let states: Vec<&[u8]> = states.iter().map(value_bytes).collect();
        take_context(&self.counters, &parents, &states)
    }

    async fn fail(
        &self,
        ws: &mut WebSocketStream<FirstBytes<TcpStream>>,
        stamps: &RequestStamps,
        trace_parent: Option<TraceParent>,
        kind: Option<&str>,
        error: String,
        bad: Bad,
    ) {
        let timing = stamps.timing_now();
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        // The text frame carries the whole message (openpi's client raises
        // it); the close code says whose fault it was.
        let _ = ws.send(Message::text(error.clone())).await;
        let close = match bad {
            Bad::Request => CloseFrame {
                code: CloseCode::Invalid,
                reason: close_reason(&error).into(),
            },
            Bad::Handler => CloseFrame {
                code: CloseCode::Error,
                reason: "request failed".into(),
            },
        };
        let _ = ws.close(Some(close)).await;
        let mut record = server_record(trace_parent, kind, timing, Some(error));
        record.forward = stamps.forwarded();
        self.emit(record);
    }

    fn emit(&self, mut record: ServerRecord) {
        record.role = self.role;
        if let Some(hook) = &self.hook {
            hook(&record);
        }
    }
}

/// A trace context entry's bytes: a string or bytes; anything else reads as
/// empty, which no valid header is (rejected like a malformed one).
fn value_bytes(v: &Value) -> &[u8] {
    match v {
        Value::String(s) => s.as_bytes(),
        Value::Binary(b) => b,
        _ => &[],
    }
}

/// Every value of `key`, in wire order, removed from `map` (at most the
/// map's own length).
fn remove_all(map: &mut MsgMap, key: &str) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(v) = map.remove(key) {
        out.push(v);
    }
    out
}

/// Whose fault a failed request was.
#[derive(Clone, Copy, Debug)]
enum Bad {
    /// The peer sent something that is not a request (WebSocket 1007).
    Request,
    /// The handler failed or panicked (1011, as openpi).
    Handler,
}

/// `error` cut to fit a close frame's reason (123 bytes of UTF-8).
fn close_reason(error: &str) -> String {
    let mut end = error.len().min(120);
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    error[..end].to_owned()
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    )
}
