//! The demo target's LeRobot pair (`transport = "grpc-async"`): the
//! LeRobot-style policy server and robot of `stagetrace-grpc` over real
//! gRPC on loopback, the proxy between them, started as `stagetrace demo
//! --transport grpc-async` starts them — but long-lived: the robot runs
//! until the experiment stops it, so a level changes the network or the CPU
//! under a running control loop. Each observation that became a chunk is
//! one record (capture, uplink, queue, infer, poll_wait, downlink,
//! dispatch, with the action queue's `margin_ms` and `dry_ticks`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use stagetrace::{clock::ClockMode, StageLayer};
use stagetrace_grpc::lerobot::{
    PolicyConfig, PolicyServer, Robot, RobotConfig, RobotReport, SpawnedServer,
};
use stagetrace_grpc::tower::ServerLayer;
use stagetrace_sim::{ms, Knobs, RobotStats};
use tonic::transport::Channel;

use super::robot::ChannelSink;
use super::{Client, Network, Pipeline, RECORD_QUEUE};
use crate::error::ExperimentError;
use crate::plan::Target;

/// How long a `GetActions` waits for an observation before it answers
/// empty: LeRobot's `obs_queue_timeout` default. (A short one leaves the
/// server without a poll while the next one travels, and an observation
/// arriving then waits in `queue`.)
const POLL_TIMEOUT: Duration = Duration::from_secs(2);

/// After the stop, how long the robot's ticks go on for the chunks of the
/// observations in flight; what is still open then ends `cancelled`.
const DRAIN: Duration = Duration::from_millis(500);

/// The policy server on a thread and runtime of its own, until stopped
/// (idempotent; `addr()` where it listens).
pub(super) type PolicyServed = SpawnedServer;

/// The robot on a thread of its own; `why` says what ended it early.
pub(super) struct RobotThread {
    thread: JoinHandle<Option<RobotReport>>,
    why: Arc<Mutex<Option<String>>>,
}

impl RobotThread {
    /// `None` while it runs; why it stopped otherwise.
    pub(super) fn stopped(&self) -> Option<String> {
        if !self.thread.is_finished() {
            return None;
        }
        let why = self.why.lock().ok().and_then(|w| w.clone());
        Some(format!(
            "the LeRobot robot stopped unexpectedly{}",
            why.map_or(String::new(), |w| format!(": {w}"))
        ))
    }

    /// Wait for the robot (its stop flag set): its report.
    pub(super) fn join(self) -> Option<RobotReport> {
        self.thread.join().ok().flatten()
    }
}

/// The robot's counts as the experiment's counters read them: a chunk's
/// call completed; an observation replaced, skipped, unanswered or
/// cancelled failed.
pub(super) fn stats_of(r: &RobotReport) -> RobotStats {
    RobotStats {
        completed: r.completed,
        failed: r.replaced + r.skipped + r.unanswered + r.cancelled,
        first_error: None,
    }
}

impl Pipeline {
    /// Start the LeRobot pair: server, proxy, robot.
    pub(super) fn start_lerobot(t: &Target, kernel: bool) -> Result<Pipeline, ExperimentError> {
        let mut policy = serve(t)?;
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let net = match Network::start(t, loopback, policy.addr(), kernel) {
            Ok(n) => n,
            Err(e) => {
                policy.stop();
                return Err(e);
            }
        };
        let proxy = net.proxy;
        let (tx, records) = std::sync::mpsc::sync_channel(RECORD_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let cfg = RobotConfig {
            fps: t.hz,
            chunk_size: t.chunk_size(),
            refill_threshold: t.refill_threshold(),
            ticks: u64::MAX,
            capture: ms(t.capture_ms),
            frame_bytes: usize::try_from(t.payload_kb.saturating_mul(1024)).unwrap_or(usize::MAX),
            drain: DRAIN,
        };
        let sink = ChannelSink {
            tx,
            dropped: Arc::clone(&dropped),
        };
        let robot = spawn_robot(cfg, proxy.local_addr(), Arc::clone(&stop), sink)
            .map_err(|e| ExperimentError::Start(format!("the LeRobot robot thread: {e}")))?;
        let server_addr = policy.addr();
        Ok(Pipeline {
            knobs: Arc::new(Knobs::new(t.payload_kb)),
            proxy: Some(proxy),
            kernel: net.kernel.map(Mutex::new),
            undone: Vec::new(),
            captured: Arc::new(Mutex::new(None)),
            http_replay: None,
            records,
            dropped,
            server_addr,
            server: None,
            policy: Some(policy),
            stop,
            client: Some(Client::LeRobot(robot)),
            pid: Arc::new(AtomicI32::new(std::process::id() as i32)),
            base_uplink: net.base_uplink,
            base_downlink: net.base_downlink,
            base_payload_kb: t.payload_kb,
            lerobot: None,
        })
    }
}

/// Start LeRobot's policy server behind the stage layer's gRPC server
/// layer on a loopback port.
fn serve(t: &Target) -> Result<PolicyServed, ExperimentError> {
    let policy = PolicyConfig {
        chunk_size: t.chunk_size(),
        pre: Duration::ZERO,
        model: ms(t.model_ms),
        post: Duration::ZERO,
        latency: ms(t.inference_latency_ms.unwrap_or(0.0)),
        similarity: 0.0,
        poll_timeout: POLL_TIMEOUT,
    };
    SpawnedServer::start(
        PolicyServer::new(policy),
        ServerLayer::new(),
        "lerobot-server",
    )
    .map_err(|e| ExperimentError::Start(format!("the LeRobot policy server: {e}")))
}

/// Start the robot thread: it runs until `stop` is set, its calls going to
/// `sink` through a stage layer of its own (the server's clock estimated).
fn spawn_robot(
    cfg: RobotConfig,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    sink: ChannelSink,
) -> std::io::Result<RobotThread> {
    let why = Arc::new(Mutex::new(None));
    let failed = Arc::clone(&why);
    let thread = std::thread::Builder::new()
        .name("lerobot-robot".into())
        .spawn(move || match robot_thread(cfg, addr, &stop, sink) {
            Ok(report) => Some(report),
            Err(e) => {
                if let Ok(mut w) = failed.lock() {
                    *w = Some(e);
                }
                None
            }
        })?;
    Ok(RobotThread { thread, why })
}

fn robot_thread(
    cfg: RobotConfig,
    addr: SocketAddr,
    stop: &AtomicBool,
    sink: ChannelSink,
) -> Result<RobotReport, String> {
    let (layer, guard) = StageLayer::builder()
        .clock_mode(ClockMode::Estimate)
        .sink(Box::new(sink))
        .build()
        .map_err(|e| format!("cannot build the stage layer: {e}"))?;
    let rt = stagetrace_sim::client_runtime()
        .map_err(|e| format!("cannot start the robot runtime: {e}"))?;
    let report = rt.block_on(async {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("bad proxy address {addr}: {e}"))?
            .connect()
            .await
            .map_err(|e| format!("cannot connect to the policy server through the proxy: {e}"))?;
        let robot = Robot::new(channel, layer.direct_calls(), cfg, format!("grpc://{addr}"));
        // The robot moves one step per action: its state is its timestep.
        Ok(robot.run_until(|ts| ts as f64, stopped(stop)).await)
    });
    drop(rt);
    let _ = guard.finish();
    report
}

/// Resolves once `stop` is set (looked at every 20 ms: the robot's ticks
/// end within a tick of the experiment's stop).
async fn stopped(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
