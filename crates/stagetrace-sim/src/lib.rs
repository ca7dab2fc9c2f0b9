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
//! - The robot: one control cycle ([`Robot`]: `capture`, `transport`,
//!   `dispatch` inside a `call` span), the paced [`ControlLoop`] with
//!   runtime [`Knobs`], and the closed-loop [`Fleet`] of the mitigation
//!   scenario.
//! - [`SimGateway`] and [`SimExecutor`]: a gateway (the WebSocket relay)
//!   between robot and server, and a remote executor whose controller is
//!   busy a known time on every n-th chunk, each on a thread and a clock of
//!   its own ([`ControlLoop::run_with_executor`] dispatches to it).
//! - Precise waits ([`ms`], [`Spin`]), a deterministic pseudo-random source
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
//!
//! # Public API
//!
//! At the root, the policy server:
//!
//! - [`SimServer`]: a running simulated policy server
//!   ([`SimServer::start`]); [`SimServerStats`]: what it has done so far.
//! - [`ServerConfig`]: what a server starts with (model, transport, clock
//!   skew, concurrency, batcher, admission), with a result cache
//!   ([`CacheConfig`]).
//! - [`SimModel`]: the simulated policy and its batch cost model;
//!   [`ClockStep`]: a step of the server's clock mid-run;
//!   [`ACTION_CHUNK`]: the shape of the chunk it answers.
//!
//! The robot:
//!
//! - [`ControlLoop`]: a robot calling the server at a fixed rate, paced by
//!   a [`Pacer`], changed at run time through [`Knobs`]; reports
//!   [`CallProgress`] after each call and [`RobotStats`] at the end.
//! - [`Robot`]: one control cycle (camera, connection, actuator), what its
//!   calls cost in [`RobotConfig`].
//! - [`Fleet`]: N unpaced clients over WebSocket (the mitigation
//!   scenario); [`FleetStats`]: what it counted.
//! - [`Camera`]: the simulated camera, renewing its frame as [`Refresh`]
//!   says.
//! - [`Connection`]: the robot's connection to the server over a
//!   [`Transport`] (WebSocket or HTTP).
//! - [`observation`], [`scene`], [`PROMPT`]: the requests the robot sends.
//!
//! Between them and around them:
//!
//! - [`SimGateway`] ([`GatewayConfig`]): a relay between robot and server.
//! - [`SimExecutor`] ([`ExecutorConfig`]): a remote executor; [`ExecStart`]
//!   is its controller's record of one chunk.
//! - [`SimError`]: why a server or robot could not start, or a call failed.
//! - [`client_runtime`]: the single-threaded runtime a simulated client runs
//!   on.
//! - [`default_out_dir`]: `runs/<kind>-<unix seconds>`, the default output
//!   directory of a demo or experiment.
//! - [`ms`]: milliseconds as a `Duration`; [`Spin`]: how a precise wait
//!   ends (hot or yielding).
//!
//! [`checksum`]: the simulated stages' work:
//!
//! - [`checksum::fnv1a`], [`checksum::fnv1a_strided`]: 64-bit FNV-1a over
//!   all or every n-th byte.
//!
//! [`random`]: a cheap deterministic pseudo-random source:
//!
//! - [`random::xorshift`], [`random::fill_random`],
//!   [`random::pseudo_actions`]: one step, a filled buffer, an action chunk.

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
