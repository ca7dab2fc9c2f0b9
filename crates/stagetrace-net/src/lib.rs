//! stagetrace transport integrations: the pieces that carry trace context to
//! a policy server and its timing back, so the client's stage layer can tell
//! inference from communication.
//!
//! # Core concepts
//!
//! - The client runs each exchange in a `transport` span, sends the span's
//!   W3C `traceparent` with the request, and attaches the server's timing
//!   (`recv_unix_ns`, `total_ns`, `queue_ns`, `infer_ns`, ...) to the span.
//!   The stage layer then derives `uplink`, `downlink`, `net`, `server`,
//!   `queue` and `infer` for the call.
//! - The server stamps its receive time when the *whole* request has arrived,
//!   times the handler (`infer`, optionally split with an [`InferTimer`]),
//!   stamps `total` just before sending, and reports each request to an
//!   optional hook as a [`stagetrace::record::ServerRecord`] (for an exporter).
//! - A server that receives a valid W3C trace context runs its handler under
//!   that remote parent ([`stagetrace::remote_parent_span`]): the calls the
//!   handler makes with [`TracedHttpClient`](http::TracedHttpClient) or [`PolicyClient`](ws::PolicyClient) continue the
//!   caller's trace (same trace id, the caller's flags and `tracestate`, the
//!   calling span as parent), so a gateway or relay in the middle keeps one
//!   trace end to end (`docs/protocol.md`, "Trace continuation").
//! - Anything a peer sends is untrusted: malformed `traceparent` or timing
//!   maps are ignored and counted, never a panic; a peer that disconnects
//!   mid-call gives an error and a call record flagged as failed, never a hang.
//!
//! # Transports
//!
//! - [`ws`]: WebSocket + msgpack in the openpi / LingBot-VA protocol:
//!   [`PolicyServer`](ws::PolicyServer), [`PolicyClient`](ws::PolicyClient), [`BlockingPolicyClient`](ws::BlockingPolicyClient).
//!   The client also works, degraded (`infer` and `net`, no split), against an
//!   unmodified openpi server that only returns `server_timing.infer_ms`.
//! - [`ws::Relay`]: a [`Relay`](ws::Relay) (gateway) between robots and a policy server
//!   that continues the trace and nests the downstream's timing in its own,
//!   so the client's record carries per-hop figures.
//! - [`http`]: a reqwest [`TracedHttpClient`](http::TracedHttpClient) and an [`HttpRelay`](http::HttpRelay); the
//!   server side is a tower layer for axum servers,
//!   [`tower::TimingLayer`].
//! - [`executor`]: an actuator controller receiving action chunks over the
//!   network ([`executor::ExecutorServer`]) acknowledges each when it starts
//!   it; [`executor::ExecutorClient`] sends them in the robot's `dispatch`
//!   span, which then ends at the executor's start (`exec_tx`, `exec_wait`).
//! - [`TimingMsgpackExt`]: the `server_timing` map in msgpack, for servers
//!   and clients that build their own frames.
//!
//! # Usage
//!
//! ```no_run
//! use stagetrace_net::{msg::MsgMap, msg::NdArray, ws::PolicyClient, ws::PolicyServer};
//! use tracing::Instrument;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let server = PolicyServer::builder()
//!     .on_request(|rec| println!("server saw {:?}", rec.timing))
//!     .spawn("127.0.0.1:0", |_obs: MsgMap, _timer| async move {
//!         Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.0; 7], &[1, 7])))
//!     })
//!     .await?;
//!
//! let mut client = PolicyClient::connect(&server.url()).await?;
//! let call = tracing::info_span!("call");
//! let obs = MsgMap::new().with("prompt", "wave");
//! let reply = client.infer(&obs).instrument(call).await?;
//! println!("{:?}", reply.server_timing);
//! # Ok(()) }
//! ```
//!
//! # Public API
//!
//! At the root (the request timer every server shares, `server/`):
//! - [`RequestMarks`], [`RequestMark`]: the one table of a request's marks
//!   (inference start, pre/post, ready, …) and how it fills a
//!   [`ServerTiming`](stagetrace_wire::ServerTiming); [`InferTimer`]: the
//!   WebSocket / HTTP servers' timer on it, handed to a handler.
//! - [`ServerClock`]: the wall clock that stamps `recv_unix_ns`;
//!   [`ServerStats`]: a server's counters; [`RequestHook`]: each request's
//!   own record, for an exporter.
//! - [`TimingMsgpackExt`]: the `server_timing` map to and from msgpack.
//!
//! [`ws`]: the openpi / LingBot-VA WebSocket + msgpack transport —
//! [`PolicyServer`](ws::PolicyServer) with [`PolicyServerBuilder`](ws::PolicyServerBuilder)
//! and [`ServerHandle`](ws::ServerHandle), a [`Handler`](ws::Handler)
//! ([`HandlerError`](ws::HandlerError), [`HandlerFuture`](ws::HandlerFuture),
//! [`ConnectionGuard`](ws::ConnectionGuard)), [`PolicyClient`](ws::PolicyClient)
//! ([`ClientOptions`](ws::ClientOptions), [`Reply`](ws::Reply),
//! [`ClientError`](ws::ClientError)), [`BlockingPolicyClient`](ws::BlockingPolicyClient),
//! the relay [`Relay`](ws::Relay) ([`RelayBuilder`](ws::RelayBuilder),
//! [`RelayError`](ws::RelayError)), [`ServeError`](ws::ServeError) and the
//! limits `DEFAULT_CALL_TIMEOUT`, `DEFAULT_MAX_MESSAGE_BYTES`.
//!
//! [`http`]: the same over HTTP — [`TracedHttpClient`](http::TracedHttpClient)
//! ([`HttpReply`](http::HttpReply), [`HttpCallError`](http::HttpCallError),
//! [`read_timing_headers`](http::read_timing_headers),
//! [`read_timing_chain`](http::read_timing_chain)), the relay
//! [`HttpRelay`](http::HttpRelay) ([`HttpRelayBuilder`](http::HttpRelayBuilder),
//! [`HttpRelayHandle`](http::HttpRelayHandle)),
//! [`extract_trace_context`](http::extract_trace_context) and the constants
//! `DEFAULT_MAX_BODY_BYTES`, `KIND_HEADER`.
//!
//! [`tower`]: the HTTP server's layer, [`TimingLayer`](tower::TimingLayer)
//! and its [`TimingService`](tower::TimingService).
//!
//! [`msg`]: the message map [`MsgMap`](msg::MsgMap), arrays
//! [`NdArray`](msg::NdArray), [`DecodeError`](msg::DecodeError) and the
//! decoder's limits `MAX_DEPTH`, `MAX_DIMS`, `MAX_ELEMENTS`.
//!
//! [`executor`]: action chunks to a remote executor and its ack —
//! [`ExecutorServer`](executor::ExecutorServer) ([`ExecutorServerBuilder`](executor::ExecutorServerBuilder),
//! [`Chunk`](executor::Chunk), [`Chunks`](executor::Chunks), [`Ticket`](executor::Ticket)),
//! [`ExecutorClient`](executor::ExecutorClient) ([`Ack`](executor::Ack)),
//! [`BlockingExecutorClient`](executor::BlockingExecutorClient) and the keys
//! `STARTED_KEY`, `REASON_KEY`, `DEFAULT_QUEUE`.
//!
//! [`proxy`]: the delay proxy the tests and the demo put on a link —
//! [`Proxy`](proxy::Proxy), [`ProxyHandle`](proxy::ProxyHandle),
//! [`ProxyConfig`](proxy::ProxyConfig), [`LinkConfig`](proxy::LinkConfig),
//! [`Jitter`](proxy::Jitter), [`Stall`](proxy::Stall),
//! [`ProxyStats`](proxy::ProxyStats), [`ProxyLateness`](proxy::ProxyLateness).

// The test harness shared with the integration tests
// (`tests/support/policy_server.rs`) names this crate as they do.
#[cfg(test)]
extern crate self as stagetrace_net;

mod budget;
mod dtype;
pub mod executor;
mod first_bytes;
pub mod http;
mod kernel_rx;
pub mod msg;
pub mod proxy;
mod server;
mod timing_msgpack;
pub mod tower;
mod transport;
pub mod ws;

pub use server::{InferTimer, RequestHook, RequestMark, RequestMarks, ServerClock, ServerStats};
pub use timing_msgpack::TimingMsgpackExt;
