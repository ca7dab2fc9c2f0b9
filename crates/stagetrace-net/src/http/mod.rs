//! HTTP: a tower layer for axum servers, a reqwest client wrapper and a
//! relay made of both.
//!
//! The server side, [`TimingLayer`](crate::tower::TimingLayer), buffers the request body so the receive
//! time is stamped when the *whole* request has arrived, takes the remote
//! parent from `traceparent`, and adds the `stagetrace-timing` and standard
//! `Server-Timing` headers to the response:
//!
//! ```no_run
//! use axum::{routing::post, Router};
//! use stagetrace_net::tower::TimingLayer;
//!
//! # async fn run() -> std::io::Result<()> {
//! let app = Router::new()
//!     .route("/infer", post(|body: axum::body::Bytes| async move { body }))
//!     .layer(TimingLayer::new());
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8000").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! The client side, [`TracedHttpClient`], runs a request in a `transport`
//! span, injects `traceparent` and attaches the timing headers it reads back:
//!
//! ```no_run
//! use stagetrace_net::http::TracedHttpClient;
//!
//! # async fn run() -> Result<(), stagetrace_net::http::HttpCallError> {
//! let client = TracedHttpClient::new()?;
//! let reply = client
//!     .send(client.inner().post("http://127.0.0.1:8000/infer").body(vec![1u8, 2, 3]))
//!     .await?;
//! assert!(reply.status.is_success());
//! # Ok(()) }
//! ```
//!
//! The relay, [`HttpRelay`], forwards every request to a downstream HTTP
//! server (a policy server, or another relay), continues the trace and
//! answers with its own timing and the downstream's nested
//! (`docs/protocol.md`, "Relays").
//!
//! One file per part: the server layer (`server`, public in
//! [`crate::tower`]), the client (`client`), the relay (`relay`, both of
//! them); this file only names things.

mod client;
mod relay;
pub(crate) mod server;

pub use client::{
    read_timing_chain, read_timing_headers, HttpCallError, HttpReply, TracedHttpClient,
};
pub use relay::{HttpRelay, HttpRelayBuilder, HttpRelayHandle};
pub use server::extract_trace_context;

/// Largest request body the layer buffers by default (32 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 << 20;

/// The request kind header (`reset`, `infer`, ...); `"call"` when absent.
pub const KIND_HEADER: &str = "stagetrace-kind";
