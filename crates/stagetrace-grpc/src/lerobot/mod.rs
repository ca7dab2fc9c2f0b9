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

use std::time::Duration;

pub mod payload;
mod robot;
mod server;
mod spawn;

pub use robot::{Robot, RobotConfig, RobotReport};
pub use server::{PolicyConfig, PolicyServer, ServerEvent};
pub use spawn::SpawnedServer;

/// The longest time a config sets (longer ones are cut to it): adding a
/// larger one to an `Instant` could overflow, a panic, and an hour is no
/// control loop's wait.
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// `fps` as a usable rate: a non-finite or non-positive one is LeRobot's
/// default 30, the rest kept within 0.1 … 10 000 Hz.
fn sane_fps(fps: f64) -> f64 {
    if fps.is_finite() && fps > 0.0 {
        fps.clamp(0.1, 10_000.0)
    } else {
        30.0
    }
}
