//! WebSocket + msgpack in the openpi / LingBot-VA protocol.
//!
//! On connect the server sends one metadata frame (a msgpack map). Then each
//! request is one binary frame holding a msgpack map (the observation; numpy
//! arrays as [`NdArray`](crate::NdArray) maps, `traceparent` as a string key)
//! and each response one binary frame holding the action map plus a
//! `server_timing` map: openpi's `infer_ms` / `prev_total_ms` and
//! stagetrace's `recv_unix_ns`, `total_ns`, `queue_ns`, `infer_ns`, `pre_ns`,
//! `post_ns`. A failing request is answered, as openpi does, with one text
//! frame (the error) and a close.
//!
//! Server, a few lines:
//!
//! ```no_run
//! use stagetrace_net::{MsgMap, NdArray, PolicyServer};
//!
//! # async fn run() -> Result<(), stagetrace_net::ServeError> {
//! PolicyServer::builder()
//!     .metadata(MsgMap::new().with("model", "my-policy"))
//!     .serve("0.0.0.0:8000", |obs: MsgMap, _timer| async move {
//!         let _image = obs.array("observation/image");
//!         Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.0; 14], &[2, 7])))
//!     })
//!     .await
//! # }
//! ```
//!
//! Client, inside the app's `call` span (the `transport` span, the
//! `traceparent` and the server timing are handled):
//!
//! ```no_run
//! use stagetrace_net::{MsgMap, PolicyClient};
//!
//! # async fn run() -> Result<(), stagetrace_net::ClientError> {
//! let mut client = PolicyClient::connect("ws://127.0.0.1:8000").await?;
//! let reply = client.infer(&MsgMap::new().with("prompt", "pick up the cup")).await?;
//! let _actions = reply.action.array("actions");
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{FutureExt, SinkExt, StreamExt};
use rmpv::Value;
use stagetrace::wire::{TimingMap, TraceParent, SERVER_TIMING_KEY, TRACEPARENT, TRACESTATE};
use stagetrace::{ServerRecord, ServerTiming};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{watch, Semaphore};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tracing::Instrument;

use crate::msg::{key_is, DecodeError, MapWriter, MsgMap};
use crate::server::{
    server_record, InferTimer, RequestHook, RequestStamps, ServerClock, ServerCounters, ServerStats,
};
use crate::timing_map::TimingMsgpackExt;
use crate::transport;

/// Largest message accepted by default (32 MiB): a few camera frames.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 << 20;

/// Default limit on one call (send → whole response).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// server
// ---------------------------------------------------------------------------

/// A handler failed: the client gets the message as a text frame and the
/// connection is closed (openpi's behaviour).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerError(String);

impl HandlerError {
    /// A failure with this message.
    pub fn new(msg: impl fmt::Display) -> Self {
        HandlerError(msg.to_string())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HandlerError {}

/// The future a [`Handler`] returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<MsgMap, HandlerError>> + Send>>;

/// Turns one request (observation) into one response (action).
///
/// Implemented for every `Fn(MsgMap, InferTimer) -> impl Future<Output =
/// Result<MsgMap, HandlerError>>`. The request map no longer holds
/// `traceparent` / `tracestate`; the response must not hold `server_timing`
/// (the server adds it).
pub trait Handler: Send + Sync + 'static {
    /// Handle one request.
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture;
}

impl<F, Fut> Handler for F
where
    F: Fn(MsgMap, InferTimer) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<MsgMap, HandlerError>> + Send + 'static,
{
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        Box::pin(self(request, timer))
    }
}

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
}

impl fmt::Debug for PolicyServerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyServerBuilder")
            .field("metadata_entries", &self.metadata.len())
            .field("hook", &self.hook.is_some())
            .field("clock", &self.clock)
            .field("max_concurrency", &self.max_concurrency)
            .field("max_message_bytes", &self.max_message_bytes)
            .finish()
    }
}

impl PolicyServerBuilder {
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
        let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await
        else {
            return;
        };
        self.counters.connections.fetch_add(1, Ordering::Relaxed);
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
            // The whole message has arrived: this is the server's receive time.
            let mut stamps = RequestStamps::received(&self.clock);
            let bytes = match msg {
                Some(Ok(Message::Binary(b))) => b,
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(Message::Text(_))) => {
                    let err = "the openpi protocol expects binary msgpack frames, got a text frame";
                    self.fail(&mut ws, &stamps, None, None, err.to_owned())
                        .await;
                    break;
                }
            };
            let mut request = match MsgMap::from_msgpack(&bytes) {
                Ok(m) => m,
                Err(e) => {
                    self.fail(&mut ws, &stamps, None, None, e.to_string()).await;
                    break;
                }
            };
            drop(bytes);
            let trace_parent = self.take_trace_parent(&mut request);
            let kind = request.get_str("kind").map(str::to_owned);

            let timer = stamps.timer();
            let Ok(permit) = self.permits.acquire().await else {
                break;
            };
            let start = Instant::now();
            // A panicking handler fails its request (openpi answers an
            // exception the same way) instead of silently dropping the link.
            let result = AssertUnwindSafe(self.handler.call(request, timer.clone()))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err(HandlerError::new("the policy handler panicked")));
            let end = Instant::now();
            drop(permit);
            stamps.handled(start, end, timer);

            let mut action = match result {
                Ok(a) => a,
                Err(e) => {
                    self.fail(&mut ws, &stamps, trace_parent, kind.as_deref(), e.0)
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
            out.entry(SERVER_TIMING_KEY, &map.to_msgpack());
            let sent = ws.send(Message::Binary(out.finish())).await;
            prev_total_ms = Some(stamps.recv.elapsed().as_secs_f64() * 1e3);
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            let error = sent.as_ref().err().map(|e| format!("send failed: {e}"));
            if error.is_some() {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
            }
            self.emit(server_record(trace_parent, kind.as_deref(), timing, error));
            if sent.is_err() {
                break;
            }
        }
    }

    /// Remove `traceparent` / `tracestate` from the request; parse the former
    /// (a malformed one is ignored and counted).
    fn take_trace_parent(&self, request: &mut MsgMap) -> Option<TraceParent> {
        let _ = request.remove(TRACESTATE);
        let raw = request.remove(TRACEPARENT)?;
        let parsed = match &raw {
            Value::String(s) => TraceParent::parse_bytes(s.as_bytes()).ok(),
            Value::Binary(b) => TraceParent::parse_bytes(b).ok(),
            _ => None,
        };
        if parsed.is_none() {
            self.counters.reject_header();
        }
        parsed
    }

    async fn fail(
        &self,
        ws: &mut WebSocketStream<TcpStream>,
        stamps: &RequestStamps,
        trace_parent: Option<TraceParent>,
        kind: Option<&str>,
        error: String,
    ) {
        let timing = stamps.timing_now();
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        let _ = ws.send(Message::text(error.clone())).await;
        let _ = ws
            .close(Some(CloseFrame {
                code: CloseCode::Error,
                reason: "request failed".into(),
            }))
            .await;
        self.emit(server_record(trace_parent, kind, timing, Some(error)));
    }

    fn emit(&self, record: ServerRecord) {
        if let Some(hook) = &self.hook {
            hook(&record);
        }
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    )
}

// ---------------------------------------------------------------------------
// client
// ---------------------------------------------------------------------------

/// Why a client call failed. Every failure of [`PolicyClient::infer`] also
/// flags the call's record as failed.
#[derive(Debug)]
pub enum ClientError {
    /// The URL or the WebSocket handshake failed.
    Connect(String),
    /// No response within the call timeout.
    Timeout(Duration),
    /// The server closed the connection or the connection broke mid-call.
    Disconnected(String),
    /// The server answered with an error (openpi sends a text frame).
    Server(String),
    /// The server's message is not a msgpack map.
    Decode(DecodeError),
    /// The connection broke on an earlier call; call `reconnect()`.
    NotConnected,
    /// A blocking client was used from inside a tokio runtime.
    InsideRuntime,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Connect(e) => write!(
                f,
                "could not connect to the policy server ({e}); check the ws:// URL and that the server runs"
            ),
            ClientError::Timeout(d) => write!(
                f,
                "policy server did not answer within {d:?}; raise the call timeout or check the server's load"
            ),
            ClientError::Disconnected(e) => write!(
                f,
                "policy server connection lost mid-call ({e}); call reconnect() once the server is back"
            ),
            ClientError::Server(e) => write!(f, "policy server failed the request: {e}"),
            ClientError::Decode(e) => write!(f, "policy server sent a bad response: {e}"),
            ClientError::NotConnected => f.write_str(
                "policy client is not connected (an earlier call broke the connection); call reconnect()",
            ),
            ClientError::InsideRuntime => f.write_str(
                "BlockingPolicyClient used inside a tokio runtime; use PolicyClient (async) there",
            ),
        }
    }
}

impl std::error::Error for ClientError {}

/// One response: the action map (without `server_timing`) and the timing
/// the server reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    /// The action map.
    pub action: MsgMap,
    /// The server's timing, `None` when it sent none or a malformed map
    /// (then counted as a rejected header). An openpi server that only sends
    /// `infer_ms` gives `infer_ns` alone (degraded: `net_ms`, no split).
    pub server_timing: Option<ServerTiming>,
    /// openpi's `prev_total_ms`, when sent.
    pub prev_total_ms: Option<f64>,
}

/// Options of a [`PolicyClient`].
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Limit on one call, send → whole response (default 10 s).
    pub call_timeout: Duration,
    /// Limit on connecting and receiving the metadata frame (default 10 s).
    pub connect_timeout: Duration,
    /// Largest response accepted (default [`DEFAULT_MAX_MESSAGE_BYTES`]).
    pub max_message_bytes: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: Duration::from_secs(10),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// An openpi / LingBot-VA policy client that traces each call: a
/// `transport` span around send → response, `traceparent` in the request,
/// the server's timing attached to the span.
pub struct PolicyClient {
    url: String,
    options: ClientOptions,
    ws: Option<Ws>,
    metadata: MsgMap,
}

impl fmt::Debug for PolicyClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyClient")
            .field("url", &self.url)
            .field("options", &self.options)
            .field("connected", &self.ws.is_some())
            .finish()
    }
}

impl PolicyClient {
    /// Connect (default options) and receive the server's metadata frame.
    pub async fn connect(url: &str) -> Result<Self, ClientError> {
        PolicyClient::connect_with(url, ClientOptions::default()).await
    }

    /// Connect with options.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self, ClientError> {
        let mut client = PolicyClient {
            url: url.to_owned(),
            options,
            ws: None,
            metadata: MsgMap::new(),
        };
        client.reconnect().await?;
        Ok(client)
    }

    /// Connect again (after a failed call broke the connection).
    pub async fn reconnect(&mut self) -> Result<(), ClientError> {
        self.ws = None;
        let config = WebSocketConfig::default()
            .max_message_size(Some(self.options.max_message_bytes))
            .max_frame_size(Some(self.options.max_message_bytes));
        let connect = async {
            let (mut ws, _) =
                tokio_tungstenite::connect_async_with_config(self.url.as_str(), Some(config), true)
                    .await
                    .map_err(|e| ClientError::Connect(e.to_string()))?;
            let metadata = loop {
                match ws.next().await {
                    Some(Ok(Message::Binary(b))) => {
                        break MsgMap::from_msgpack(&b).map_err(ClientError::Decode)?
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Text(t))) => return Err(ClientError::Server(t.to_string())),
                    Some(Ok(Message::Close(_))) | None => {
                        return Err(ClientError::Connect(
                            "closed before sending metadata".into(),
                        ))
                    }
                    Some(Err(e)) => return Err(ClientError::Connect(e.to_string())),
                }
            };
            Ok::<_, ClientError>((ws, metadata))
        };
        let (ws, metadata) = tokio::time::timeout(self.options.connect_timeout, connect)
            .await
            .map_err(|_| ClientError::Timeout(self.options.connect_timeout))??;
        self.ws = Some(ws);
        self.metadata = metadata;
        Ok(())
    }

    /// The metadata map the server sent on connect.
    pub fn metadata(&self) -> &MsgMap {
        &self.metadata
    }

    /// True while the connection is usable.
    pub fn is_connected(&self) -> bool {
        self.ws.is_some()
    }

    /// Send one observation and wait for the action.
    ///
    /// Runs in a `transport` span (the current one when it is a `transport`
    /// span, else a new child of the current span), sends its `traceparent`
    /// and attaches the server's timing to it. On timeout, disconnect or a
    /// server error the call is flagged failed and the connection dropped
    /// (call [`reconnect`](Self::reconnect)); it never waits longer than the
    /// call timeout.
    pub async fn infer(&mut self, observation: &MsgMap) -> Result<Reply, ClientError> {
        // Encode the payload first: the transport span (and with it the
        // roundtrip) starts only when the request is handed to the socket.
        let mut out = MapWriter::with_capacity(observation.encoded_len_hint());
        if observation.get(TRACEPARENT).is_some() {
            // The app put its own context in: ours replaces it.
            for entry in observation.entries() {
                if !key_is(&entry.0, TRACEPARENT) {
                    out.entries(std::slice::from_ref(entry));
                }
            }
        } else {
            out.entries(observation.entries());
        }
        let span = transport::transport_span(&self.url);
        let Some(ws) = self.ws.as_mut() else {
            transport::fail(&span, "not connected");
            return Err(ClientError::NotConnected);
        };
        if let Some(tp) = transport::traceparent(&span) {
            let s = std::str::from_utf8(&tp).unwrap_or_default();
            out.entry(TRACEPARENT, &Value::from(s));
        }
        let out = out.finish();

        let timeout = self.options.call_timeout;
        let exchange = async {
            ws.send(Message::Binary(out))
                .await
                .map_err(|e| ClientError::Disconnected(e.to_string()))?;
            loop {
                match ws.next().await {
                    Some(Ok(Message::Binary(b))) => return Ok(b),
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Text(t))) => return Err(ClientError::Server(t.to_string())),
                    Some(Ok(Message::Close(frame))) => {
                        return Err(ClientError::Disconnected(match frame {
                            Some(f) => {
                                format!("server closed the connection: {} {}", f.code, f.reason)
                            }
                            None => "server closed the connection".to_owned(),
                        }))
                    }
                    None => return Err(ClientError::Disconnected("connection closed".into())),
                    Some(Err(e)) => return Err(ClientError::Disconnected(e.to_string())),
                }
            }
        };
        let result = match tokio::time::timeout(timeout, exchange.instrument(span.clone())).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout(timeout)),
        };
        let bytes = match result {
            Ok(b) => b,
            Err(e) => {
                self.ws = None;
                transport::fail(&span, failure_reason(&e));
                return Err(e);
            }
        };
        let mut action = match MsgMap::from_msgpack(&bytes) {
            Ok(m) => m,
            Err(e) => {
                self.ws = None;
                transport::fail(&span, "bad response");
                return Err(ClientError::Decode(e));
            }
        };
        let (server_timing, prev_total_ms) = match action.remove(SERVER_TIMING_KEY) {
            None => (None, None),
            Some(v) => match TimingMap::from_msgpack(&v) {
                Ok(m) => (Some(m.timing).filter(|t| !t.is_empty()), m.prev_total_ms),
                Err(_) => {
                    transport::reject();
                    (None, None)
                }
            },
        };
        if let Some(t) = server_timing {
            transport::attach(&span, t);
        }
        Ok(Reply {
            action,
            server_timing,
            prev_total_ms,
        })
    }

    /// Close the connection politely.
    pub async fn close(mut self) {
        if let Some(mut ws) = self.ws.take() {
            let _ = ws.close(None).await;
        }
    }
}

fn failure_reason(e: &ClientError) -> &'static str {
    match e {
        ClientError::Timeout(_) => "timeout",
        ClientError::Disconnected(_) => "disconnected",
        ClientError::Server(_) => "server error",
        ClientError::Decode(_) => "bad response",
        ClientError::NotConnected => "not connected",
        ClientError::Connect(_) => "connect failed",
        ClientError::InsideRuntime => "inside runtime",
    }
}

/// A [`PolicyClient`] for synchronous robot loops: each call blocks the
/// calling thread (on a small runtime of its own), so the `transport` span
/// nests under the caller's current span as usual.
#[derive(Debug)]
pub struct BlockingPolicyClient {
    rt: tokio::runtime::Runtime,
    inner: PolicyClient,
}

impl BlockingPolicyClient {
    /// Connect with default options.
    pub fn connect(url: &str) -> Result<Self, ClientError> {
        BlockingPolicyClient::connect_with(url, ClientOptions::default())
    }

    /// Connect with options. Fails with [`ClientError::InsideRuntime`] when
    /// called from async code.
    pub fn connect_with(url: &str, options: ClientOptions) -> Result<Self, ClientError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(ClientError::InsideRuntime);
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ClientError::Connect(format!("could not start an I/O runtime: {e}")))?;
        let inner = rt.block_on(PolicyClient::connect_with(url, options))?;
        Ok(BlockingPolicyClient { rt, inner })
    }

    /// The metadata map the server sent on connect.
    pub fn metadata(&self) -> &MsgMap {
        self.inner.metadata()
    }

    /// See [`PolicyClient::infer`].
    pub fn infer(&mut self, observation: &MsgMap) -> Result<Reply, ClientError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(ClientError::InsideRuntime);
        }
        self.rt.block_on(self.inner.infer(observation))
    }

    /// See [`PolicyClient::reconnect`].
    pub fn reconnect(&mut self) -> Result<(), ClientError> {
        self.rt.block_on(self.inner.reconnect())
    }
}
