//! stagetrace for gRPC (tonic): a server layer that stamps each request's
//! timing into its trailers, a client layer that carries the W3C trace
//! context out and reads the timing back, and LeRobot's async inference
//! ([`lerobot`]) timed per observation.
//!
//! # Core concepts
//!
//! - **Request metadata** carries the caller's `traceparent` / `tracestate`
//!   (W3C Trace Context, as every stagetrace transport).
//! - **Trailing metadata** carries the server's timing of the request as
//!   `stagetrace-timing-bin`: the same msgpack map a WebSocket server puts in
//!   `server_timing` (`docs/protocol.md`), so the client splits the call into
//!   uplink, queue, infer, poll_wait and downlink like any other. A `-bin`
//!   entry is base64 on the HTTP/2 wire; the metadata API gives the bytes.
//!   The Python package (`stagetrace.grpc`) reads and writes the same.
//! - The timing is computed when the trailers are due: receive = the request
//!   body's end was read, send = the handler's response resolved. A request
//!   that waits for a handler (a concurrency limit inside the layer) is read
//!   ahead while it waits: its receive is when it came in, and the wait is
//!   `accept_wait`, part of `queue`
//!   ([`ServerLayer`](crate::tower::ServerLayer)). A handler marks the rest on its [`RequestTimer`]; an async server answers one
//!   request with another's timing ([`RequestTimer::answer_for`]) and says
//!   what it did with an observation in `stagetrace-obs-bin`
//!   ([`ObsOutcome`](wire::ObsOutcome)).
//! - Peers are untrusted: a malformed `traceparent` or trailer is ignored
//!   and counted ([`ServerLayer::stats`](crate::tower::ServerLayer::stats),
//!   [`ClientLayer::stats`](crate::tower::ClientLayer::stats), and the
//!   stage layer's `rejected_headers`), never an error or a panic.
//!
//! # Usage
//!
//! One layer on each side, in [`tower`]:
//! [`ServerLayer`](crate::tower::ServerLayer) around the server's services,
//! [`ClientLayer`](crate::tower::ClientLayer) on the client's `Channel`. A
//! call made inside a `call` span then gets its transport stage, split with the server's timing; the
//! handler gets a [`RequestTimer`] (`RequestTimer::of(&request)`) to mark
//! `infer_start`, `pre_done`, `post_start` and `ready`.
//!
//! ```no_run
//! use stagetrace_grpc::lerobot::{PolicyConfig, PolicyServer};
//! use stagetrace_grpc::proto::{async_inference_client::AsyncInferenceClient, Empty};
//! use stagetrace_grpc::tower::{ClientLayer, ServerLayer};
//! use tonic::transport::{Channel, Server};
//! use tracing::Instrument;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // Server: the layer wraps every service it serves.
//! let serving = Server::builder()
//!     .layer(ServerLayer::new())
//!     .add_service(PolicyServer::new(PolicyConfig::default()).into_service())
//!     .serve("127.0.0.1:50051".parse()?);
//! tokio::spawn(serving);
//!
//! // Client: the layer on the channel.
//! let channel = Channel::from_static("http://127.0.0.1:50051").connect().await?;
//! let channel = tower::ServiceBuilder::new().layer(ClientLayer::new()).service(channel);
//! let mut client = AsyncInferenceClient::new(channel);
//! let call = tracing::info_span!("call", kind = "ready");
//! client.ready(Empty {}).instrument(call).await?;
//! # Ok(()) }
//! ```
//!
//! A server started with `serve_with_incoming` and an incoming of its own
//! should set `TCP_NODELAY` (`TcpIncoming::with_nodelay(Some(true))`;
//! `serve` does): the trailers are written apart from the reply, and
//! without it they wait out the client's delayed ACK, 40 ms of downlink.
//!
//! Calls timed without spans ([`stagetrace::direct`], the async robot's:
//! one call spans two RPCs) put a [`SendTrace`] and a [`TrailerSlot`] into
//! the request's extensions: the layer sends that `traceparent` and fills
//! the slot with what the trailers said.
//!
//! # Supported Rust versions
//!
//! Built and tested on stable Rust; the minimum supported version is 1.85.
//!
//! # Public API
//!
//! - At the root: the client's [`ClientStats`], [`SendTrace`],
//!   [`Trailers`] and [`TrailerSlot`] (what a call's trailers said), the
//!   server's [`RequestTimer`] (on `stagetrace-net`'s `RequestMarks`) and
//!   [`RequestHook`].
//! - [`tower`]: the layers — [`ServerLayer`](tower::ServerLayer) /
//!   [`ServerService`](tower::ServerService) and
//!   [`ClientLayer`](tower::ClientLayer) / [`ClientService`](tower::ClientService),
//!   with the bodies in their signatures ([`Arrival`](tower::Arrival),
//!   [`ArrivalStamps`](tower::ArrivalStamps), [`AddTrailer`](tower::AddTrailer),
//!   [`AddTrailers`](tower::AddTrailers), [`WithTrailer`](tower::WithTrailer),
//!   [`ReadTrailers`](tower::ReadTrailers), [`TrailerReader`](tower::TrailerReader)).
//! - [`wire`]: the trailers' codecs — [`GrpcTiming`](wire::GrpcTiming),
//!   [`ObsOutcome`](wire::ObsOutcome), [`Disposition`](wire::Disposition),
//!   [`TrailerError`](wire::TrailerError) and the keys `TIMING_KEY`,
//!   `OUTCOME_KEY`, `TIMESTEP_KEY`, `MAX_TRAILER_BYTES`.
//! - [`watched`]: a body that watches its frames ([`Watch`](watched::Watch),
//!   [`Watched`](watched::Watched)).
//! - [`lerobot`]: LeRobot's `AsyncInference` — its
//!   [`PolicyServer`](lerobot::PolicyServer) ([`PolicyConfig`](lerobot::PolicyConfig),
//!   [`ServerEvent`](lerobot::ServerEvent), [`SpawnedServer`](lerobot::SpawnedServer)),
//!   [`Robot`](lerobot::Robot) ([`RobotConfig`](lerobot::RobotConfig),
//!   [`RobotReport`](lerobot::RobotReport)) and [`lerobot::payload`]
//!   (its messages and their limits).
//! - [`proto`]: the generated `AsyncInference` messages and services.

/// LeRobot's `transport.AsyncInference` messages and service (lerobot
/// 0.4.4's field numbers), generated from `proto/async_inference.proto`.
#[allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all
)]
pub mod proto {
    tonic::include_proto!("transport");
}

mod client;
pub mod lerobot;
mod server;
pub mod tower;
mod trailers;
pub mod watched;
pub mod wire;

pub use client::{ClientStats, SendTrace, TrailerSlot, Trailers};
pub use server::{RequestHook, RequestTimer};
