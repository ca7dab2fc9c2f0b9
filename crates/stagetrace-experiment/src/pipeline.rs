//! The built-in demo pipeline, long-lived and with knobs that change at
//! runtime: a robot client (camera → policy call → actuator) at a fixed
//! rate, the userspace proxy, and a policy server running a simulated model
//! — so a level changes exactly one factor while everything else stays.
//! The robot and the model are those of [`crate::demo`] (shared with
//! `stagetrace demo`); this module keeps them running and turns the knobs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stagetrace::{CallRecord, ClockMode, RecordSink, StageLayer};
use stagetrace_net::proxy::{LinkConfig, Proxy, ProxyConfig, ProxyHandle};
use stagetrace_net::{MsgMap, PolicyServer, ServerHandle};
use tracing_subscriber::layer::SubscriberExt;

use crate::demo::{self, Link, Pacer, Refresh, Robot, RobotStats, SimModel, Transport};
use crate::netns::KernelPath;
use crate::plan::{Target, TargetKind};
use crate::sim::{ms, Spin};
use crate::ExperimentError;

/// Records waiting for the runner; beyond this they are dropped and counted.
const RECORD_QUEUE: usize = 65_536;

/// Knobs of the running pipeline, shared with the robot thread.
#[derive(Debug)]
pub(crate) struct Knobs {
    /// Camera frame size, KiB.
    pub(crate) payload_kb: AtomicU64,
    /// Client pause length (µs), 0 = none.
    pub(crate) pause_us: AtomicU64,
    /// Client pause period (µs).
    pub(crate) pause_every_us: AtomicU64,
}

impl Knobs {
    /// A `payload_kb` frame, no pause (every 2 s once one is set).
    fn new(payload_kb: u64) -> Self {
        Knobs {
            payload_kb: AtomicU64::new(payload_kb),
            pause_us: AtomicU64::new(0),
            pause_every_us: AtomicU64::new(2_000_000),
        }
    }
}

/// The network in front of the target's server: the proxy with the
/// target's standing link shaping and, optionally, a kernel bottleneck on
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
    pub(crate) server_rt: Option<tokio::runtime::Runtime>,
    server: Option<ServerHandle>,
    stop: Arc<AtomicBool>,
    client: Option<Client>,
    /// The process the sampler follows (this one, or the command's).
    pub(crate) pid: Arc<AtomicI32>,
    /// The standing link settings of the target (what "restore" returns to).
    pub(crate) base_uplink: LinkConfig,
    pub(crate) base_downlink: LinkConfig,
    pub(crate) base_payload_kb: u64,
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

/// The target's standing link shaping, one direction.
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

/// The client side of the target.
enum Client {
    /// The demo's robot, a thread of this process.
    Robot(JoinHandle<RobotStats>),
    /// The user's client, a child process whose records files are tailed.
    Command(CommandClient),
}

impl Pipeline {
    /// Start the target: the demo pipeline, or the user's command behind the proxy.
    /// With `kernel`, the proxy's upstream leg crosses a real kernel
    /// bottleneck (two network namespaces, a veth pair; needs root).
    pub(crate) fn start(t: &Target, out: &Path, kernel: bool) -> Result<Pipeline, ExperimentError> {
        match t.kind {
            TargetKind::Demo => Pipeline::start_demo(t, kernel),
            TargetKind::Command => Pipeline::start_command(t, out, kernel),
        }
    }

    fn start_command(t: &Target, out: &Path, kernel: bool) -> Result<Pipeline, ExperimentError> {
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
        let mut http_replay = None;
        let captured = match &t.replay_file {
            Some(f) if t.replay_http_path.is_some() => {
                let body = std::fs::read(f).map_err(|e| ExperimentError::Io(f.clone(), e))?;
                http_replay = Some(Arc::new(HttpReplay {
                    url: format!(
                        "http://{upstream}{}",
                        t.replay_http_path.as_deref().unwrap_or("/")
                    ),
                    body: body.into(),
                    content_type: t
                        .replay_content_type
                        .clone()
                        .unwrap_or_else(|| "application/msgpack".into()),
                }));
                None
            }
            Some(f) => {
                let bytes = std::fs::read(f).map_err(|e| ExperimentError::Io(f.clone(), e))?;
                let obs = MsgMap::from_msgpack(&bytes).map_err(|e| {
                    ExperimentError::Plan(format!(
                        "target.replay_file {} is not a msgpack observation map ({e}); save one request's map as sent by your client",
                        f.display()
                    ))
                })?;
                Some(obs)
            }
            None => None,
        };
        let net = Network::start(t, listen, upstream, kernel)?;
        let proxy = net.proxy;
        let (tx, records) = std::sync::mpsc::sync_channel(RECORD_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        std::fs::create_dir_all(&records_dir)
            .map_err(|e| ExperimentError::Io(records_dir.clone(), e))?;
        let tailer = {
            let (stop, dropped) = (Arc::clone(&stop), Arc::clone(&dropped));
            let dir = records_dir.clone();
            let skip = out.join("records-experiment.jsonl");
            let offsets = existing_sizes(&dir);
            std::thread::Builder::new()
                .name("st-tail".into())
                .spawn(move || tail_records(&dir, &skip, offsets, &stop, &tx, &dropped))
                .map_err(|e| ExperimentError::Start(format!("the records reader: {e}")))?
        };
        let pid = Arc::new(AtomicI32::new(0));
        let client = CommandClient {
            argv,
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
            server_addr: upstream,
            server_rt: None,
            server: None,
            stop,
            client: Some(Client::Command(client)),
            pid,
            base_uplink: net.base_uplink,
            base_downlink: net.base_downlink,
            base_payload_kb: t.payload_kb,
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
        let server_rt = demo::server_runtime("experiment-server")
            .map_err(|e| ExperimentError::Start(format!("the server runtime: {e}")))?;
        // Yielding waits: the CPU factor's burners share the cores.
        let model = SimModel::new(ms(t.model_ms)).spin(Spin::Yielding);
        let server = server_rt
            .block_on(async {
                PolicyServer::builder()
                    .metadata(MsgMap::new().with("policy", "stagetrace-experiment"))
                    .max_concurrency(t.server_concurrency)
                    .max_message_bytes(64 << 20)
                    .spawn(SocketAddr::from(([127, 0, 0, 1], 0)), model)
                    .await
            })
            .map_err(|e| ExperimentError::Start(format!("the policy server: {e}")))?;
        let server_addr = server.local_addr();
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let net = Network::start(t, loopback, server_addr, kernel)?;
        let proxy = net.proxy;
        let knobs = Arc::new(Knobs::new(t.payload_kb));
        let captured = Arc::new(Mutex::new(None));
        let (tx, records) = std::sync::mpsc::sync_channel(RECORD_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let robot = {
            let cfg = RobotConfig {
                addr: proxy.local_addr(),
                hz: t.hz,
                capture: ms(t.capture_ms),
                dispatch: ms(t.dispatch_ms),
            };
            let knobs = Arc::clone(&knobs);
            let captured = Arc::clone(&captured);
            let stop = Arc::clone(&stop);
            let sink = ChannelSink {
                tx,
                dropped: Arc::clone(&dropped),
            };
            std::thread::Builder::new()
                .name("experiment-robot".into())
                .spawn(move || robot_thread(cfg, knobs, captured, stop, sink))
                .map_err(|e| ExperimentError::Start(format!("the robot thread: {e}")))?
        };
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
            server_rt: Some(server_rt),
            server: Some(server),
            stop,
            client: Some(Client::Robot(robot)),
            pid: Arc::new(AtomicI32::new(std::process::id() as i32)),
            base_uplink: net.base_uplink,
            base_downlink: net.base_downlink,
            base_payload_kb: t.payload_kb,
        })
    }

    /// `None` while the client runs; why it stopped otherwise.
    pub(crate) fn client_stopped(&self) -> Option<String> {
        match &self.client {
            Some(Client::Robot(r)) => r
                .is_finished()
                .then(|| "the demo's robot client stopped unexpectedly".to_owned()),
            Some(Client::Command(c)) => c.exited(),
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
        if let (Some(rt), Some(s)) = (self.server_rt.as_ref(), self.server.take()) {
            rt.block_on(s.shutdown());
        }
        if let Some(rt) = self.server_rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
        stats
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Hands each finished call to the runner; never blocks the layer's worker.
struct ChannelSink {
    tx: SyncSender<CallRecord>,
    dropped: Arc<AtomicU64>,
}

impl RecordSink for ChannelSink {
    fn on_record(&mut self, rec: &CallRecord) {
        match self.tx.try_send(rec.clone()) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// the user's command
// ---------------------------------------------------------------------------

struct CommandClient {
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    payload_env: Option<String>,
    proxy_addr: SocketAddr,
    log: PathBuf,
    child: Mutex<Option<Child>>,
    pid: Arc<AtomicI32>,
    tailer: Option<JoinHandle<()>>,
}

impl CommandClient {
    /// Start the command in a process group of its own (so its children
    /// are stopped with it), output appended to `command.log`.
    fn spawn(&self, payload_kb: u64) -> Result<(), ExperimentError> {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| ExperimentError::Io(self.log.clone(), e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| ExperimentError::Io(self.log.clone(), e))?;
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .envs(&self.env)
            .env("STAGETRACE_PROXY_ADDR", self.proxy_addr.to_string())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        if let Some(var) = &self.payload_env {
            cmd.env(var, payload_kb.to_string());
        }
        let child = cmd.spawn().map_err(|e| {
            ExperimentError::Start(format!("the command {:?}: {e}", self.argv.join(" ")))
        })?;
        self.pid.store(child.id() as i32, Ordering::SeqCst);
        if let Ok(mut c) = self.child.lock() {
            *c = Some(child);
        }
        Ok(())
    }

    fn exited(&self) -> Option<String> {
        let mut c = self.child.lock().ok()?;
        let child = c.as_mut()?;
        match child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(format!(
                "the command exited ({status}) before the experiment ended; it must keep calling the server until stopped (see command.log)"
            )),
            Err(e) => Some(format!("cannot watch the command: {e}")),
        }
    }

    /// SIGTERM to the command's process group, SIGKILL after 2 s.
    fn kill(&self) {
        let Ok(mut c) = self.child.lock() else { return };
        let Some(mut child) = c.take() else { return };
        if let Ok(None) = child.try_wait() {
            let pgid = rustix::process::Pid::from_child(&child);
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Ok(None) = child.try_wait() {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            }
        }
        let _ = child.wait();
    }
}

impl Drop for CommandClient {
    fn drop(&mut self) {
        self.kill();
    }
}

fn is_records_file(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("records") && n.ends_with(".jsonl"))
}

/// Sizes of the records files already there: older runs are not read.
fn existing_sizes(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut m = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if is_records_file(&p) {
                m.insert(p, e.metadata().map_or(0, |md| md.len()));
            }
        }
    }
    m
}

/// Follow every `records*.jsonl` in `dir` (new files included), whole lines only.
fn tail_records(
    dir: &Path,
    skip: &Path,
    mut offsets: BTreeMap<PathBuf, u64>,
    stop: &AtomicBool,
    tx: &SyncSender<CallRecord>,
    dropped: &AtomicU64,
) {
    use std::io::{Read, Seek, SeekFrom};
    // A line longer than this is not a record: skipped.
    const MAX_LINE: usize = 1 << 20;
    let mut pending: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    loop {
        // One last pass after the stop, for lines written at the end.
        let last = stop.load(Ordering::SeqCst);
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                if !is_records_file(&p) || p == skip {
                    continue;
                }
                let off = offsets.entry(p.clone()).or_insert(0);
                let Ok(mut f) = std::fs::File::open(&p) else {
                    continue;
                };
                let len = f.metadata().map_or(0, |m| m.len());
                if len < *off {
                    *off = 0; // truncated or replaced
                }
                if len == *off || f.seek(SeekFrom::Start(*off)).is_err() {
                    continue;
                }
                let mut buf = Vec::new();
                if f.take(len - *off).read_to_end(&mut buf).is_err() {
                    continue;
                }
                *off += buf.len() as u64;
                let acc = pending.entry(p).or_default();
                acc.extend_from_slice(&buf);
                let mut start = 0;
                while let Some(nl) = acc[start..].iter().position(|b| *b == b'\n') {
                    let line = &acc[start..start + nl];
                    start += nl + 1;
                    if let Ok(rec) = serde_json::from_slice::<CallRecord>(line) {
                        if let Err(TrySendError::Full(_)) = tx.try_send(rec) {
                            dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                acc.drain(..start);
                if acc.len() > MAX_LINE {
                    acc.clear();
                }
            }
        }
        if last {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------
// robot
// ---------------------------------------------------------------------------

struct RobotConfig {
    addr: SocketAddr,
    hz: f64,
    capture: Duration,
    dispatch: Duration,
}

fn robot_thread(
    cfg: RobotConfig,
    knobs: Arc<Knobs>,
    captured: Arc<Mutex<Option<MsgMap>>>,
    stop: Arc<AtomicBool>,
    sink: ChannelSink,
) -> RobotStats {
    let mut stats = RobotStats::default();
    let built = StageLayer::builder()
        .target_hz(cfg.hz)
        .clock_mode(ClockMode::Estimate)
        .sink(Box::new(sink))
        .build();
    let (layer, guard) = match built {
        Ok(x) => x,
        Err(e) => {
            stats.first_error = Some(format!("cannot build the stage layer: {e}"));
            return stats;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            stats.first_error = Some(format!("cannot start the robot runtime: {e}"));
            return stats;
        }
    };
    let subscriber = tracing_subscriber::registry().with(layer);
    {
        let _default = tracing::subscriber::set_default(subscriber);
        rt.block_on(robot_loop(&cfg, &knobs, &captured, &stop, &mut stats));
    }
    drop(rt);
    let _ = guard.finish();
    stats
}

async fn robot_loop(
    cfg: &RobotConfig,
    knobs: &Knobs,
    captured: &Mutex<Option<MsgMap>>,
    stop: &AtomicBool,
    stats: &mut RobotStats,
) {
    let link = match Link::connect(Transport::Ws, cfg.addr, Duration::from_secs(10)).await {
        Ok(l) => l,
        Err(e) => {
            stats.first_error = Some(format!("the robot cannot reach the policy server: {e}"));
            return;
        }
    };
    let Some(pacer) = Pacer::new(cfg.hz) else {
        stats.first_error = Some(format!(
            "target.hz = {} is not a rate above 0 calls per second",
            cfg.hz
        ));
        return;
    };
    // Yielding waits, and a frame whose capture cost does not grow with its
    // size: a payload level loads the transport only.
    let mut robot = Robot::new(
        link,
        demo::RobotConfig {
            capture: cfg.capture,
            dispatch: cfg.dispatch,
            spin: Spin::Yielding,
            refresh: Refresh::Touch,
        },
    );
    let mut next_pause: Option<Instant> = None;
    let mut captured_kb = u64::MAX;
    let mut seq: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        seq = pacer.skip_missed(seq);
        pacer.wait(seq, Spin::Yielding).await;
        let kb = knobs.payload_kb.load(Ordering::Relaxed);
        let pause = Duration::from_micros(knobs.pause_us.load(Ordering::Relaxed));
        let every = Duration::from_micros(knobs.pause_every_us.load(Ordering::Relaxed).max(1));
        let outcome = robot
            .call(seq, kb, |obs| {
                // The GC stand-in: the whole client thread stops, inside the
                // call but outside every stage, once per period.
                if pause.is_zero() {
                    next_pause = None;
                } else {
                    let now = Instant::now();
                    let due = *next_pause.get_or_insert(now + every);
                    if now >= due {
                        std::thread::sleep(pause);
                        let mut next = due;
                        while next <= now {
                            next += every;
                        }
                        next_pause = Some(next);
                    }
                }
                if captured_kb != kb {
                    if let Ok(mut c) = captured.lock() {
                        *c = Some(obs.clone());
                        captured_kb = kb;
                    }
                }
            })
            .await;
        stats.count(outcome);
        seq += 1;
    }
    robot.close().await;
}
