//! LeRobot's async inference, traced: a [`PolicyServer`] and a [`Robot`]
//! speaking `transport.AsyncInference` (lerobot 0.4.4's service) over
//! tonic, with the wire the Python package's `stagetrace.lerobot` uses, so
//! each side also works with a traced LeRobot peer's timing trailers.
//!
//! The robot streams each observation to the server (`SendObservations`),
//! the server keeps at most one (a newer one replaces it; one too similar
//! to the last one run, or of a timestep already predicted, is skipped) and
//! runs the policy when the robot's `GetActions` asks. Each observation
//! that became a chunk is one record keyed by its timestep: capture →
//! uplink → queue → infer → poll_wait → downlink → dispatch, with
//! `margin_ms` and `dry_ticks`; one that never did is a failed call whose
//! reason says why (`replaced`, `skipped`).
//!
//! The messages carry this crate's msgpack payload ([`payload`]), not
//! LeRobot's pickle: a Rust robot talks to a Rust server.

pub mod payload;
mod robot;
mod server;

pub use robot::{Robot, RobotConfig, RobotReport};
pub use server::{PolicyConfig, PolicyServer, ServerEvent};
