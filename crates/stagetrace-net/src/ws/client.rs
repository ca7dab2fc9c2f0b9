//! The WebSocket policy client: [`PolicyClient`] sends an observation with
//! the `traceparent` inside a `transport` span and attaches the server's
//! timing from the reply to that span.

use std::fmt;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use rmpv::Value;
use stagetrace::StageSpanExt;
use stagetrace_wire::ServerTiming;
use stagetrace_wire::{Hops, TimingChain, SERVER_TIMING_KEY, TRACEPARENT, TRACESTATE};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tokio_tungstenite::WebSocketStream;
use tracing::Instrument;

use super::limits::{DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_MESSAGE_BYTES};
use crate::first_bytes::FirstBytes;
use crate::kernel_rx::KernelRx;
use crate::msg::{key_is, DecodeError, MapWriter, MsgMap};
use crate::timing_msgpack::TimingMsgpackExt;
use crate::transport;

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
    /// The relays the response came through, outermost first (empty for a
    /// direct call); `server_timing` is then the policy server's.
    pub hops: Hops,
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

/// The client's WebSocket: its stream stamps first bytes both ways and asks
/// the kernel when the response's bytes arrived.
type Ws = WebSocketStream<FirstBytes<KernelRx>>;

/// What one [`PolicyClient::exchange`] gave: the reply without its
/// `server_timing` map, that map when valid, and the client's stamps.
#[derive(Debug)]
pub(crate) struct Exchanged {
    pub(crate) reply: MsgMap,
    /// The innermost server's timing and the relays' hops on the way.
    pub(crate) timing: Option<TimingChain>,
    /// Just before the request was handed to the socket.
    pub(crate) sent: Instant,
    /// Just after the whole reply had arrived.
    pub(crate) received: Instant,
    /// The request's first byte left (the transport's stamp).
    pub(crate) sent_first_byte: Option<Instant>,
    /// The write that took the request's first byte returned.
    pub(crate) written: Option<Instant>,
    /// The reply's first byte arrived (the transport's stamp).
    pub(crate) first_byte: Option<Instant>,
    /// The kernel had the reply's last byte (its receive stamp), where the
    /// kernel stamps this socket.
    pub(crate) kernel_rx: Option<Instant>,
}

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
            let request = self
                .url
                .as_str()
                .into_client_request()
                .map_err(|e| ClientError::Connect(e.to_string()))?;
            let uri = request.uri();
            if uri.scheme_str() != Some("ws") {
                return Err(ClientError::Connect(format!(
                    "{}: only ws:// URLs are supported",
                    self.url
                )));
            }
            let host = uri.host().unwrap_or_default();
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let port = uri.port_u16().unwrap_or(80);
            let tcp = TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| ClientError::Connect(e.to_string()))?;
            let _ = tcp.set_nodelay(true);
            // Our own TCP stream, wrapped to stamp each response's first
            // byte and to read the kernel's receive stamps.
            let (mut ws, _) = tokio_tungstenite::client_async_with_config(
                request,
                FirstBytes::new(KernelRx::new(tcp)),
                Some(config),
            )
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
        let url = self.url.clone();
        let (span, x) = self
            .exchange(observation, || transport::transport_span(&url))
            .await?;
        transport::first_bytes(&span, x.sent_first_byte, x.first_byte);
        transport::written(&span, x.written);
        transport::kernel_rx(&span, x.kernel_rx);
        let (server_timing, prev_total_ms, hops) = match x.timing {
            Some(c) => (
                Some(c.map.timing).filter(|t| !t.is_empty()),
                c.map.prev_total_ms,
                c.hops,
            ),
            None => (None, None, Hops::new()),
        };
        if let Some(t) = server_timing {
            transport::attach(&span, t);
        }
        if !hops.is_empty() {
            span.record_hops(hops);
        }
        Ok(Reply {
            action: x.reply,
            server_timing,
            prev_total_ms,
            hops,
        })
    }

    /// One request → one reply, in the span `make_span` opens once the
    /// payload is encoded (so the span starts when the request is handed to
    /// the socket): the span's `traceparent` goes with the request, a
    /// failure flags the call and drops the connection, the reply's
    /// `server_timing` map is parsed (a malformed one counted, ignored).
    /// Shared by [`infer`](Self::infer) and the executor client.
    pub(crate) async fn exchange(
        &mut self,
        message: &MsgMap,
        make_span: impl FnOnce() -> tracing::Span,
    ) -> Result<(tracing::Span, Exchanged), ClientError> {
        // Encode the payload first: the span (and with it the roundtrip)
        // starts only when the request is handed to the socket.
        let mut out = payload(message);
        let span = make_span();
        let Some(ws) = self.ws.as_mut() else {
            transport::fail(&span, "not connected");
            return Err(ClientError::NotConnected);
        };
        add_context(&mut out, &span);
        let out = out.finish();

        let timeout = self.options.call_timeout;
        let exchange = roundtrip(ws, out).instrument(span.clone());
        let result = match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout(timeout)),
        };
        let trip = match result {
            Ok(r) => r,
            Err(e) => {
                self.ws = None;
                transport::fail(&span, failure_reason(&e));
                return Err(e);
            }
        };
        let mut reply = match MsgMap::from_msgpack(&trip.bytes) {
            Ok(m) => m,
            Err(e) => {
                self.ws = None;
                transport::fail(&span, "bad response");
                return Err(ClientError::Decode(e));
            }
        };
        let timing = take_timing(&mut reply);
        Ok((
            span,
            Exchanged {
                reply,
                timing,
                sent: trip.sent,
                received: trip.received,
                sent_first_byte: trip.sent_first_byte,
                written: trip.written,
                first_byte: trip.first_byte,
                kernel_rx: trip.kernel_rx,
            },
        ))
    }

    /// The URL this client connects to.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Close the connection politely.
    pub async fn close(mut self) {
        if let Some(mut ws) = self.ws.take() {
            let _ = ws.close(None).await;
        }
    }
}

/// `message` encoded for the wire, without any `traceparent` /
/// `tracestate` of its own: the client's context goes in instead.
fn payload(message: &MsgMap) -> MapWriter {
    let mut out = MapWriter::with_capacity(message.encoded_len_hint());
    if message.get(TRACEPARENT).is_some() || message.get(TRACESTATE).is_some() {
        // The app put its own context in: ours replaces it (a tracestate
        // goes with its traceparent).
        for entry in message.entries() {
            if !key_is(&entry.0, TRACEPARENT) && !key_is(&entry.0, TRACESTATE) {
                out.entries(std::slice::from_ref(entry));
            }
        }
    } else {
        out.entries(message.entries());
    }
    out
}

/// Add the `transport` span's `traceparent` (and `tracestate`, when it has
/// one) to the request.
fn add_context(out: &mut MapWriter, span: &tracing::Span) {
    if let Some(tp) = transport::traceparent(span) {
        let s = std::str::from_utf8(&tp).unwrap_or_default();
        out.entry(TRACEPARENT, &Value::from(s));
        if let Some(ts) = transport::tracestate(span) {
            out.entry(TRACESTATE, &Value::from(ts));
        }
    }
}

/// The reply to one request as it arrived, with the client's stamps.
struct Roundtrip {
    bytes: Bytes,
    /// Just before the request was handed to the socket.
    sent: Instant,
    /// Just after the whole reply had arrived.
    received: Instant,
    /// The request's first byte left (the transport's stamp).
    sent_first_byte: Option<Instant>,
    /// The write that took it returned.
    written: Option<Instant>,
    /// The reply's first byte arrived (the transport's stamp).
    first_byte: Option<Instant>,
    /// The kernel had the reply's last byte.
    kernel_rx: Option<Instant>,
}

/// Send the encoded request `out` and wait for the binary reply, skipping
/// control frames; a text frame is the server's error.
async fn roundtrip(ws: &mut Ws, out: Bytes) -> Result<Roundtrip, ClientError> {
    // Bytes read or written before are not this exchange's.
    let _ = ws.get_mut().take_first();
    let _ = ws.get_mut().take_first_write();
    let sent = Instant::now();
    ws.send(Message::Binary(out))
        .await
        .map_err(|e| ClientError::Disconnected(e.to_string()))?;
    loop {
        match ws.next().await {
            // The first read since the request (or since a control
            // frame) carried the response's frame header.
            Some(Ok(Message::Binary(bytes))) => {
                let received = Instant::now();
                let s = ws.get_mut();
                return Ok(Roundtrip {
                    bytes,
                    sent,
                    received,
                    written: s.written(),
                    sent_first_byte: s.take_first_write(),
                    first_byte: s.take_first(),
                    kernel_rx: s.get_ref().last_rx(),
                });
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {
                let _ = ws.get_mut().take_first();
                continue;
            }
            Some(Ok(Message::Text(t))) => return Err(ClientError::Server(t.to_string())),
            Some(Ok(Message::Close(frame))) => {
                return Err(ClientError::Disconnected(match frame {
                    Some(f) => format!("server closed the connection: {} {}", f.code, f.reason),
                    None => "server closed the connection".to_owned(),
                }))
            }
            None => return Err(ClientError::Disconnected("connection closed".into())),
            Some(Err(e)) => return Err(ClientError::Disconnected(e.to_string())),
        }
    }
}

/// Remove the reply's `server_timing` map and read it; a malformed one is
/// counted as rejected and ignored.
fn take_timing(reply: &mut MsgMap) -> Option<TimingChain> {
    match reply.remove(SERVER_TIMING_KEY) {
        None => None,
        Some(v) => match TimingChain::from_msgpack(&v) {
            Ok(c) => Some(c),
            Err(_) => {
                transport::reject();
                None
            }
        },
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
