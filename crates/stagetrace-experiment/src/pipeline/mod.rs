//! The built-in demo pipeline, long-lived and with knobs that change at
//! runtime: a robot client (camera → policy call → actuator) at a fixed
//! rate, the userspace proxy, and a policy server running a simulated model
//! — so a level changes exactly one factor while everything else stays.
//! The robot and the model are `stagetrace-sim`'s (shared with
//! `stagetrace demo`); this module keeps them running and turns the knobs.
//! The demo may instead run LeRobot's async pair over gRPC ([`lerobot`]),
//! and the target may be the user's own client ([`command`]).

mod command;
mod lerobot;
mod robot;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use stagetrace::record::CallRecord;
use stagetrace_grpc::lerobot::RobotReport;
use stagetrace_net::msg::MsgMap;
use stagetrace_net::proxy::{LinkConfig, Proxy, ProxyConfig, ProxyHandle};
use stagetrace_sim::{ms, Knobs, RobotStats, ServerConfig, SimModel, SimServer, Spin};

use crate::error::ExperimentError;
use crate::netns::KernelPath;
use crate::plan::{Target, TargetKind};
use command::{existing_sizes, tail_records, CommandClient};
use robot::{ChannelSink, RobotSetup};

/// Records waiting for the runner; beyond this they are dropped and counted.
const RECORD_QUEUE: usize = 65_536;

/// The network in front of the target's server: the proxy with the
/// target's standing path shaping and, optionally, a kernel bottleneck on
/// its upstream leg.
struct Network {
    proxy: ProxyHandle,
    kernel: Option<KernelPath>,
    base_uplink: LinkConfig,
    base_downlink: LinkConfig,
}

impl Network {
    fn start(
        t: &Target,
        listen: SocketAddr,
        upstream: SocketAddr,
        kernel: bool,
    ) -> Result<Network, ExperimentError> {
        let base_uplink = base_link(t.uplink_delay_ms, t.bandwidth_mbps);
        let base_downlink = base_link(t.downlink_delay_ms, t.bandwidth_mbps);
        let kernel = kernel.then(|| KernelPath::start(upstream)).transpose()?;
        let proxy = Proxy::spawn_in_thread(
            listen,
            kernel.as_ref().map_or(upstream, KernelPath::entry),
            ProxyConfig {
                uplink: base_uplink,
                downlink: base_downlink,
                ..ProxyConfig::default()
            },
        )
        .map_err(|e| ExperimentError::Start(format!("the network proxy on {listen}: {e}")))?;
        Ok(Network {
            proxy,
            kernel,
            base_uplink,
            base_downlink,
        })
    }
}

/// A running demo pipeline.
pub(crate) struct Pipeline {
    pub(crate) knobs: Arc<Knobs>,
    pub(crate) proxy: Option<ProxyHandle>,
    /// The kernel bottleneck the proxy's upstream leg crosses (`kernel = true`).
    pub(crate) kernel: Option<Mutex<KernelPath>>,
    /// What shutting down undid (namespaces deleted).
    pub(crate) undone: Vec<String>,
    /// The observation the robot sent last (for the infer factor's replay).
    pub(crate) captured: Arc<Mutex<Option<MsgMap>>>,
    /// A captured HTTP request to replay instead (command targets).
    pub(crate) http_replay: Option<Arc<HttpReplay>>,
    pub(crate) records: Receiver<CallRecord>,
    pub(crate) dropped: Arc<AtomicU64>,
    pub(crate) server_addr: SocketAddr,
    server: Option<SimServer>,
    /// The LeRobot pair's policy server (`transport = "grpc-async"`).
    policy: Option<lerobot::PolicyServed>,
    stop: Arc<AtomicBool>,
    client: Option<Client>,
    /// The process the sampler follows (this one, or the command's).
    pub(crate) pid: Arc<AtomicI32>,
    /// The standing shaping of the target (what "restore" returns to).
    pub(crate) base_uplink: LinkConfig,
    pub(crate) base_downlink: LinkConfig,
    pub(crate) base_payload_kb: u64,
    /// What the LeRobot robot counted (ticks, dry ticks, chunks, …), once
    /// it has stopped.
    pub(crate) lerobot: Option<RobotReport>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("server_addr", &self.server_addr)
            .field("proxy", &self.proxy.as_ref().map(ProxyHandle::local_addr))
            .finish()
    }
}

/// One captured HTTP request: POSTed as is by the infer factor.
#[derive(Debug)]
pub(crate) struct HttpReplay {
    pub(crate) url: String,
    pub(crate) body: bytes::Bytes,
    pub(crate) content_type: String,
}

/// The target's standing path shaping, one direction.
pub(crate) fn base_link(delay_ms: f64, bandwidth_mbps: Option<f64>) -> LinkConfig {
    let mut l = LinkConfig::delay(ms(delay_ms));
    if let Some(mbps) = bandwidth_mbps {
        l = l.with_bandwidth(mbps_to_bytes(mbps));
    }
    l
}

pub(crate) fn mbps_to_bytes(mbps: f64) -> u64 {
    ((mbps * 1e6 / 8.0).round() as u64).max(1)
}

/// A command target's addresses, argv and records directory, read from
/// the plan's `target` table.
struct CommandTarget {
    upstream: SocketAddr,
    listen: SocketAddr,
    argv: Vec<String>,
    records_dir: PathBuf,
}

impl CommandTarget {
    /// The fields a command target needs; the error names the one missing
    /// or invalid.
    fn of(t: &Target) -> Result<CommandTarget, ExperimentError> {
        let bad =
            |what: &str| ExperimentError::Plan(format!("target.{what} is missing or invalid"));
        let upstream: SocketAddr = t
            .upstream
            .as_deref()
            .and_then(|u| u.parse().ok())
            .ok_or_else(|| bad("upstream"))?;
        let listen: SocketAddr = match &t.listen {
            Some(l) => l.parse().map_err(|_| bad("listen"))?,
            None => SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let argv = t
            .command
            .clone()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| bad("command"))?;
        let records_dir = t.records_dir.clone().ok_or_else(|| bad("records_dir"))?;
        Ok(CommandTarget {
            upstream,
            listen,
            argv,
            records_dir,
        })
    }
}

/// What the infer factor replays against a command target, read from
/// `target.replay_file`: an observation map (msgpack), or with
/// `replay_http_path` an HTTP request body POSTed to `upstream`.
fn replay_of(
    t: &Target,
    upstream: SocketAddr,
) -> Result<(Option<MsgMap>, Option<Arc<HttpReplay>>), ExperimentError> {
    let Some(f) = &t.replay_file else {
        return Ok((None, None));
    };
    let bytes = std::fs::read(f).map_err(|e| ExperimentError::Io(f.clone(), e))?;
    if let Some(path) = &t.replay_http_path {
        let http = HttpReplay {
            url: format!("http://{upstream}{path}"),
            body: bytes.into(),
            content_type: t
                .replay_content_type
                .clone()
                .unwrap_or_else(|| "application/msgpack".into()),
        };
        return Ok((None, Some(Arc::new(http))));
    }
    let obs = MsgMap::from_msgpack(&bytes).map_err(|e| {
        ExperimentError::Plan(format!(
            "target.replay_file {} is not a msgpack observation map ({e}); save one request's map as sent by your client",
            f.display()
        ))
    })?;
    Ok((Some(obs), None))
}

/// The reader thread that follows the records files the command writes
/// under `dir` (from their current ends; the experiment's own file in `out`
/// left out) and sends each record to the runner.
fn follow_records(
    dir: &Path,
    out: &Path,
    stop: &Arc<AtomicBool>,
    dropped: &Arc<AtomicU64>,
    tx: SyncSender<CallRecord>,
) -> Result<JoinHandle<()>, ExperimentError> {
    let (stop, dropped) = (Arc::clone(stop), Arc::clone(dropped));
    let dir = dir.to_path_buf();
    let skip = out.join("records-experiment.jsonl");
    let offsets = existing_sizes(&dir);
    std::thread::Builder::new()
        .name("st-tail".into())
        .spawn(move || tail_records(&dir, &skip, offsets, &stop, &tx, &dropped))
        .map_err(|e| ExperimentError::Start(format!("the records reader: {e}")))
}

/// The client side of the target.
enum Client {
    /// The demo's robot, a thread of this process.
    Robot(JoinHandle<RobotStats>),
    /// The user's client, a child process whose records files are tailed.
    Command(CommandClient),
    /// LeRobot's async robot, a thread of this process.
    LeRobot(lerobot::RobotThread),
}

impl Pipeline {
    /// Start the target: the demo pipeline, or the user's command behind the proxy.
    /// With `kernel`, the proxy's upstream leg crosses a real kernel
    /// bottleneck (two network namespaces, a veth pair; needs root).
    pub(crate) fn start(t: &Target, out: &Path, kernel: bool) -> Result<Pipeline, ExperimentError> {
        match t.kind {
            TargetKind::Demo if t.is_async() => Pipeline::start_lerobot(t, kernel),
            TargetKind::Demo => Pipeline::start_demo(t, kernel),
            TargetKind::Command => Pipeline::start_command(t, out, kernel),
        }
    }

    /// Start the user's command behind the proxy, its records files followed.
    fn start_command(t: &Target, out: &Path, kernel: bool) -> Result<Pipeline, ExperimentError> {
        let c = CommandTarget::of(t)?;
        let (captured, http_replay) = replay_of(t, c.upstream)?;
        let net = Network::start(t, c.listen, c.upstream, kernel)?;
        let proxy = net.proxy;
        let (tx, records) = std::sync::mpsc::sync_channel(RECORD_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        std::fs::create_dir_all(&c.records_dir)
            .map_err(|e| ExperimentError::Io(c.records_dir.clone(), e))?;
        let tailer = follow_records(&c.records_dir, out, &stop, &dropped, tx)?;
        let pid = Arc::new(AtomicI32::new(0));
        let client = CommandClient {
            argv: c.argv,
            env: t.env.clone(),
            payload_env: t.payload_env.clone(),
            proxy_addr: proxy.local_addr(),
            log: out.join("command.log"),
            child: Mutex::new(None),
            pid: Arc::clone(&pid),
            tailer: Some(tailer),
        };
        client.spawn(t.payload_kb)?;
        Ok(Pipeline {
            knobs: Arc::new(Knobs::new(t.payload_kb)),
            proxy: Some(proxy),
            kernel: net.kernel.map(Mutex::new),
            undone: Vec::new(),
            captured: Arc::new(Mutex::new(captured)),
            http_replay,
            records,
            dropped,
            server_addr: c.upstream,
            server: None,
            policy: None,
            stop,
            client: Some(Client::Command(client)),
            pid,
            base_uplink: net.base_uplink,
            base_downlink: net.base_downlink,
            base_payload_kb: t.payload_kb,
            lerobot: None,
        })
    }

    /// Change the frame size: a knob of the demo's robot, or a restart of
    /// the command with its payload variable set.
    pub(crate) fn set_payload(&self, kb: u64) -> Result<(), ExperimentError> {
        self.knobs.payload_kb.store(kb, Ordering::Relaxed);
        if let Some(Client::Command(c)) = &self.client {
            c.kill();
            c.spawn(kb)?;
        }
        Ok(())
    }

    /// Start server, proxy and robot.
    fn start_demo(t: &Target, kernel: bool) -> Result<Pipeline, ExperimentError> {
        // Yielding waits: the CPU factor's burners share the cores.
        let model = SimModel::new(ms(t.model_ms)).spin(Spin::Yielding);
        let server = SimServer::start(
            ServerConfig::new(model)
                .metadata(MsgMap::new().with("policy", "stagetrace-experiment"))
                .concurrency(t.server_concurrency)
                .max_message_bytes(64 << 20)
                .thread_name("experiment-server"),
        )
        .map_err(|e| ExperimentError::Start(format!("the policy server: {e}")))?;
        let server_addr = server.addr();
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let net = Network::start(t, loopback, server_addr, kernel)?;
        let proxy = net.proxy;
        let knobs = Arc::new(Knobs::new(t.payload_kb));
        let captured = Arc::new(Mutex::new(None));
        let (tx, records) = std::sync::mpsc::sync_channel(RECORD_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let robot = robot::spawn(
            RobotSetup {
                addr: proxy.local_addr(),
                hz: t.hz,
                capture: ms(t.capture_ms),
                dispatch: ms(t.dispatch_ms),
            },
            Arc::clone(&knobs),
            Arc::clone(&captured),
            Arc::clone(&stop),
            ChannelSink {
                tx,
                dropped: Arc::clone(&dropped),
            },
        )
        .map_err(|e| ExperimentError::Start(format!("the robot thread: {e}")))?;
        Ok(Pipeline {
            knobs,
            proxy: Some(proxy),
            kernel: net.kernel.map(Mutex::new),
            undone: Vec::new(),
            captured,
            http_replay: None,
            records,
            dropped,
            server_addr,
            server: Some(server),
            policy: None,
            stop,
            client: Some(Client::Robot(robot)),
            pid: Arc::new(AtomicI32::new(std::process::id() as i32)),
            base_uplink: net.base_uplink,
            base_downlink: net.base_downlink,
            base_payload_kb: t.payload_kb,
            lerobot: None,
        })
    }

    /// `None` while the client runs; why it stopped otherwise.
    pub(crate) fn client_stopped(&self) -> Option<String> {
        match &self.client {
            Some(Client::Robot(r)) => r
                .is_finished()
                .then(|| "the demo's robot client stopped unexpectedly".to_owned()),
            Some(Client::Command(c)) => c.exited(),
            Some(Client::LeRobot(r)) => r.stopped(),
            None => Some("the client was shut down".to_owned()),
        }
    }

    /// Stop the client, then the proxy and the server. Idempotent.
    pub(crate) fn shutdown(&mut self) -> RobotStats {
        self.stop.store(true, Ordering::SeqCst);
        let stats = match self.client.take() {
            Some(Client::Robot(r)) => r.join().unwrap_or_default(),
            Some(Client::Command(mut c)) => {
                c.kill();
                if let Some(t) = c.tailer.take() {
                    let _ = t.join();
                }
                RobotStats::default()
            }
            Some(Client::LeRobot(r)) => {
                self.lerobot = r.join();
                self.lerobot
                    .as_ref()
                    .map(lerobot::stats_of)
                    .unwrap_or_default()
            }
            None => RobotStats::default(),
        };
        if let Some(p) = self.proxy.take() {
            p.shutdown();
        }
        if let Some(k) = self.kernel.take() {
            let mut k = k.into_inner().unwrap_or_else(|e| e.into_inner());
            let undone = k.shutdown();
            self.undone.extend(undone);
        }
        if let Some(s) = self.server.take() {
            let _ = s.stop();
        }
        if let Some(mut s) = self.policy.take() {
            s.stop();
        }
        stats
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
