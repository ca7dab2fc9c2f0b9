//! WebSocket + msgpack in the openpi / LingBot-VA protocol.
//!
//! On connect the server sends one metadata frame (a msgpack map). Then each
//! request is one binary frame holding a msgpack map (the observation; numpy
//! arrays as [`NdArray`](crate::msg::NdArray) maps, `traceparent` as a string key)
//! and each response one binary frame holding the action map plus a
//! `server_timing` map: openpi's `infer_ms` / `prev_total_ms` and
//! stagetrace's `recv_unix_ns`, `total_ns`, `queue_ns`, `infer_ns`, `pre_ns`,
//! `model_ns`, `post_ns` (`docs/protocol.md`), and `prev_tx_wait_ns`: the
//! server's own wait before the write of the previous response on the
//! connection. A failing request is answered, as openpi does, with one text
//! frame (the error) and a close.
//!
//! Server, a few lines:
//!
//! ```no_run
//! use stagetrace_net::{msg::MsgMap, msg::NdArray, ws::PolicyServer};
//!
//! # async fn run() -> Result<(), stagetrace_net::ws::ServeError> {
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
//! use stagetrace_net::{msg::MsgMap, ws::PolicyClient};
//!
//! # async fn run() -> Result<(), stagetrace_net::ws::ClientError> {
//! let mut client = PolicyClient::connect("ws://127.0.0.1:8000").await?;
//! let reply = client.infer(&MsgMap::new().with("prompt", "pick up the cup")).await?;
//! let _actions = reply.action.array("actions");
//! # Ok(()) }
//! ```
//!
//! One file per side: [`PolicyServer`] (`server`) runs a [`Handler`]
//! (`handler`) on each of its connections (`connection`); [`PolicyClient`] (`client`) and its blocking wrapper
//! [`BlockingPolicyClient`] (`blocking`); a [`Relay`] (`relay`) is a server
//! whose handler is a client; `limits` holds the defaults both sides share. This file only names things: no file below imports it.

pub(crate) mod blocking;
mod client;
mod connection;
mod error;
mod handler;
mod limits;
mod relay;
mod server;

pub use blocking::BlockingPolicyClient;
pub use client::{ClientError, ClientOptions, PolicyClient, Reply};
pub use error::ServeError;
pub use handler::{ConnectionGuard, Handler, HandlerError, HandlerFuture};
pub use limits::{DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_MESSAGE_BYTES};
pub use relay::{Relay, RelayBuilder, RelayError};
pub use server::{PolicyServer, PolicyServerBuilder, ServerHandle};

#[cfg(test)]
mod send_wait_tests;
