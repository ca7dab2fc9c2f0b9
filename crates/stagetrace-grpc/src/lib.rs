//! stagetrace for gRPC (tonic): a server layer that stamps each request's
//! timing into its trailers, a client layer that carries the W3C trace
//! context out and reads the timing back, and LeRobot's async inference
//! ([`lerobot`]) timed per observation.

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

pub mod client;
pub mod lerobot;
pub mod server;
mod trailers;
pub mod wire;

pub use client::{ClientLayer, ClientService, ClientStats, SendTrace, TrailerSlot, Trailers};
pub use server::{RequestTimer, ServerLayer, ServerService};
pub use wire::{Disposition, GrpcTiming, ObsOutcome, OUTCOME_KEY, TIMING_KEY};
