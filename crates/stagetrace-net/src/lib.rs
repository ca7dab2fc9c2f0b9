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
//!   handler makes with [`TracedHttpClient`] or [`PolicyClient`] continue the
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
//!   [`PolicyServer`], [`PolicyClient`], [`BlockingPolicyClient`].
//!   The client also works, degraded (`infer` and `net`, no split), against an
//!   unmodified openpi server that only returns `server_timing.infer_ms`.
//! - [`ws::relay`]: a [`Relay`] (gateway) between robots and a policy server
//!   that continues the trace and nests the downstream's timing in its own,
//!   so the client's record carries per-hop figures.
//! - [`http`]: a reqwest [`TracedHttpClient`] and an [`HttpRelay`]; the
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
