//! The executor helper: an actuator controller that receives action chunks
//! over the network acknowledges each one when it **starts** executing it,
//! so the robot's `dispatch` stage ends there and its wait behind the
//! previous action is a figure of its own (`exec_wait_ms`).
//!
//! The wire is the policy server's (WebSocket + msgpack,
//! `docs/protocol.md`, "Executor ack"): the chunk is a request map (with
//! `traceparent`), the ack a response map `{"started": true}` plus the same
//! `server_timing` map a policy server sends, where `queue_ns` is the wait
//! from the whole chunk's arrival to the start. So the executor side is a
//! [`PolicyServer`](crate::ws::PolicyServer) whose handler hands each chunk to
//! the controller and answers when the controller calls
//! [`Ticket::started`]; the client side is a
//! [`PolicyClient`](crate::ws::PolicyClient) exchange run in the `dispatch` span,
//! whose ack goes to the call with
//! [`StageSpanExt::record_executor_ack`](stagetrace::StageSpanExt::record_executor_ack).
//! A gateway in between relays the ack like any response: its timing sits
//! next to the executor's `server_timing`, as for a policy call.
//!
//! Executor (the controller's loop), a few lines:
//!
//! ```no_run
//! use stagetrace_net::executor::ExecutorServer;
//!
//! # async fn run() -> Result<(), stagetrace_net::ws::ServeError> {
//! let (server, mut chunks) = ExecutorServer::builder().spawn("0.0.0.0:8100").await?;
//! std::thread::spawn(move || {
//!     while let Some(chunk) = chunks.blocking_recv() {
//!         // … wait until the previous action is done, then:
//!         chunk.ticket.started(); // acks: the robot's dispatch ends here
//!         let _actions = chunk.action.array("actions"); // … execute them
//!     }
//! });
//! # drop(server); Ok(()) }
//! ```
//!
//! Robot, inside the call span:
//!
//! ```no_run
//! use stagetrace_net::executor::ExecutorClient;
//! use stagetrace_net::{msg::MsgMap, msg::NdArray};
//!
//! # async fn run() -> Result<(), stagetrace_net::ws::ClientError> {
//! let mut executor = ExecutorClient::connect("ws://10.0.0.7:8100").await?;
//! let chunk = MsgMap::new().with("actions", NdArray::from_f32(&[0.0; 14], &[2, 7]));
//! let ack = executor.dispatch(&chunk).await?; // in a `dispatch` span
//! assert!(ack.started);
//! # Ok(()) }
//! ```
//!
//! One file per side: [`ExecutorServer`] (`server`), [`ExecutorClient`]
//! (`client`) and its blocking wrapper [`BlockingExecutorClient`]
//! (`blocking`, for synchronous robot loops). This file only names things.

mod blocking;
mod client;
mod server;

pub use blocking::BlockingExecutorClient;
pub use client::{Ack, ExecutorClient};
pub use server::{Chunk, Chunks, ExecutorServer, ExecutorServerBuilder, Ticket, DEFAULT_QUEUE};

/// Key of the ack map saying whether the executor started the chunk
/// (`false`: it dropped it, e.g. as stale; then `reason` says why).
pub const STARTED_KEY: &str = "started";
/// Key of the ack map with the reason a chunk was not started.
pub const REASON_KEY: &str = "reason";
