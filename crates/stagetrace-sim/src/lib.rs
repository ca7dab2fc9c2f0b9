//! The simulated robot and policy server that `stagetrace demo` and the
//! experiments' demo target run: a camera, a model with a batch cost model,
//! a paced control loop, the connection between them — and one call that starts a
//! policy server with the chosen mitigations.
//!
//! # Core concepts
//!
//! - [`SimModel`]: the policy — a checksum of the frame (pre-processing),
//!   a cost of `a + b·batch` waited out precisely (the model), an action
//!   chunk derived from the checksum (post-processing), optionally a step of
//!   the server's clock mid-run.
//! - [`SimServer::start`]: serves a model over WebSocket or HTTP as a
//!   [`ServerConfig`] says — clock skew and step, how many requests the model
//!   runs at once, a batcher, a result cache, admission control (from
//!   `stagetrace-mitigate`) — on a runtime of its own; the handle gives the
//!   address, the counters and a stop.
//! - [`robot`]: one control cycle ([`Robot`]: `capture`, `transport`,
//!   `dispatch` inside a `call` span), the paced [`ControlLoop`] with
//!   runtime [`Knobs`], and the closed-loop [`Fleet`] of the mitigation
//!   scenario.
//! - [`SimGateway`] and [`SimExecutor`]: a gateway (the WebSocket relay)
//!   between robot and server, and a remote executor whose controller is
//!   busy a known time on every n-th chunk, each on a thread and a clock of
//!   its own ([`ControlLoop::run_with_executor`] dispatches to it).
//! - Precise waits ([`wait`]), a deterministic pseudo-random source
//!   ([`random`]) and the FNV-1a checksum ([`checksum`]) the simulated
//!   stages use as their work.
//!
//! What callers do differently is a parameter, not a copy: the spin mode of
//! the waits ([`Spin::Hot`] for the demo's short, precise runs;
//! [`Spin::Yielding`] for experiments, whose CPU factor shares the cores),
//! how the camera refreshes its frame ([`Refresh`]), the checksum stride.
//!
//! # Usage
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//! use stagetrace_sim::{
//!     ControlLoop, Knobs, Refresh, RobotConfig, ServerConfig, SimModel, SimServer, Spin,
//!     Transport,
//! };
//!
//! let server = SimServer::start(
//!     ServerConfig::new(SimModel::new(Duration::from_millis(12))).clock_skew_ns(40_000_000),
//! )?;
//! let robot = ControlLoop {
//!     hz: 30.0,
//!     calls: Some(100),
//!     robot: RobotConfig {
//!         capture: Duration::from_millis(2),
//!         dispatch: Duration::from_millis(1),
//!         spin: Spin::Hot,
//!         refresh: Refresh::Full,
//!     },
//!     skip_missed: false,
//!     call_timeout: Duration::from_secs(5),
//!     keep_observation: None,
//! };
//! let rt = stagetrace_sim::client_runtime()?;
//! let stats = rt.block_on(robot.run(
//!     Transport::Ws,
//!     server.addr(),
//!     &Knobs::new(100),
//!     &AtomicBool::new(false),
//!     |_| {},
//! ))?;
//! assert_eq!(stats.completed, 100);
//! server.stop();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Supported Rust versions
//!
//! The workspace's `rust-version` (1.85) and newer.

pub mod checksum;
mod error;
mod executor;
mod gateway;
mod model;
pub mod random;
mod robot;
mod run_dir;
mod server;
mod service;
mod wait;

pub use error::SimError;
pub use executor::{ExecStart, ExecutorConfig, SimExecutor};
pub use gateway::{GatewayConfig, SimGateway};
pub use model::{ClockStep, SimModel, ACTION_CHUNK};
pub use robot::{
    observation, scene, CallProgress, Camera, Connection, ControlLoop, Fleet, FleetStats, Knobs,
    Pacer, Refresh, Robot, RobotConfig, RobotStats, PROMPT,
};
pub use run_dir::default_out_dir;
pub use server::{CacheConfig, ServerConfig, SimServer, SimServerStats};
pub use wait::{ms, Spin};

/// Transport between the simulated robot and the policy server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// WebSocket + msgpack (the openpi protocol), `ws://ADDR`.
    Ws,
    /// HTTP POST of a msgpack body to `http://ADDR/infer`.
    Http,
}

/// The runtime a simulated client runs on: one thread (the caller's, in
/// `block_on`), timers and I/O. Spans of tasks spawned on it stay on that
/// thread, so a subscriber set as the thread's default sees them.
pub fn client_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

impl Transport {
    /// `"ws"` or `"http"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Ws => "ws",
            Transport::Http => "http",
        }
    }
}
