//! The `net` factor's real kernel bottleneck: two network namespaces joined
//! by a veth pair, `tbf` on the sending side(s), UDP cross traffic from a
//! built-in sender, and two forwarders that carry the proxy's upstream leg
//! across the pair:
//!
//! ```text
//! proxy ─► 127.0.0.1:entry ══ ns a ══ veth (tbf) ══ ns b: 10.213.0.2:port ══► server
//! ```
//!
//! A socket belongs to the namespace its creating thread was in, so the
//! forwarders create their sockets from threads that entered a namespace with
//! `setns(2)` and use them from anywhere. The namespaces carry this process's
//! id (`stagetrace-<pid>-<n>-a`); everything lives inside them, so deleting
//! them removes the veth pair and its qdiscs too. Leftovers of a process that
//! died without cleaning up are removed at the next start.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::ExperimentError;
use crate::plan::Direction;
use crate::sampler::{NetnsProbe, NetnsWatch};

/// Prefix of every namespace this crate creates.
const PREFIX: &str = "stagetrace-";
/// Address of the `a` end (client side) and the `b` end (server side).
const ADDR_A: [u8; 4] = [10, 213, 0, 1];
const ADDR_B: [u8; 4] = [10, 213, 0, 2];
/// Cross-traffic datagram payload (fits a 1500-byte MTU).
const DATAGRAM: usize = 1400;

static SEQ: AtomicU32 = AtomicU32::new(0);

fn need_root() -> ExperimentError {
    ExperimentError::Plan(
        "kernel bottleneck needs root and iproute2; use the userspace proxy (kernel = false)"
            .into(),
    )
}

fn start_err(what: impl std::fmt::Display) -> ExperimentError {
    ExperimentError::Start(format!("the kernel bottleneck: {what}"))
}

/// Run `prog args`; the error carries its stderr.
fn run(prog: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{prog}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{prog} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// True when this process may create namespaces and `ip` / `tc` exist.
pub fn kernel_bottleneck_available() -> bool {
    let tool = |p: &str| {
        Command::new(p)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    rustix::process::geteuid().is_root() && tool("ip") && tool("tc")
}

/// Network namespaces (names under `/run/netns`) this crate created for
/// process `pid`.
pub fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("{PREFIX}{pid}-");
    list_namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

fn list_namespaces() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(PREFIX))
        .collect()
}

/// The namespaces of stagetrace processes that no longer run (a crashed or
/// killed run).
pub fn stale_namespaces() -> Vec<String> {
    list_namespaces()
        .into_iter()
        .filter(|name| {
            name[PREFIX.len()..]
                .split('-')
                .next()
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect()
}

/// Delete the namespaces of stagetrace processes that no longer run (a
/// crashed or killed run). Returns the names deleted.
pub fn remove_stale() -> Vec<String> {
    stale_namespaces()
        .into_iter()
        .filter(|name| run("ip", &["netns", "del", name]).is_ok())
        .collect()
}

/// Move the calling thread into the named network namespace.
fn enter(ns: &str) -> Result<(), String> {
    let f = File::open(format!("/run/netns/{ns}")).map_err(|e| format!("namespace {ns}: {e}"))?;
    rustix::thread::move_into_link_name_space(
        f.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(|e| format!("cannot enter namespace {ns}: {e}"))
}

/// Run `f` on a short-lived thread inside namespace `ns`.
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, String> {
    let ns = ns.to_owned();
    std::thread::Builder::new()
        .name("st-netns".into())
        .spawn(move || {
            enter(&ns)?;
            f().map_err(|e| format!("in namespace {ns}: {e}"))
        })
        .map_err(|e| e.to_string())?
        .join()
        .map_err(|_| "a namespace thread panicked".to_owned())?
}

/// Accepts on a listener and relays each connection to `target`, connecting
/// from inside `connect_ns` (or the root namespace).
#[derive(Debug)]
struct Forwarder {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    fn start(
        listener: TcpListener,
        connect_ns: Option<String>,
        target: SocketAddr,
    ) -> Result<Forwarder, String> {
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let (stop, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread = std::thread::Builder::new()
            .name("st-netns-fwd".into())
            .spawn(move || {
                if let Some(ns) = &connect_ns {
                    if let Err(e) = enter(ns) {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
                let rt = match stagetrace_sim::client_runtime() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    loop {
                        tokio::select! {
                            _ = &mut stop_rx => break,
                            a = listener.accept() => {
                                let Ok((inbound, _)) = a else { continue };
                                tokio::spawn(relay(inbound, target));
                            }
                        }
                    }
                });
                // Dropping the runtime drops every relay: all sockets close.
                drop(rt);
            })
            .map_err(|e| e.to_string())?;
        let mut f = Forwarder {
            stop: Some(stop),
            thread: Some(thread),
        };
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(f),
            Ok(Err(e)) => {
                f.stop();
                Err(e)
            }
            Err(_) => {
                f.stop();
                Err("the forwarder did not start".into())
            }
        }
    }

    fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn relay(mut inbound: tokio::net::TcpStream, target: SocketAddr) {
    let connect = tokio::net::TcpStream::connect(target);
    let Ok(Ok(mut outbound)) = tokio::time::timeout(Duration::from_secs(10), connect).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
}

/// UDP sent at a fixed rate from one namespace to a sink in the other.
#[derive(Debug)]
struct CrossSender {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _sink: UdpSocket,
}

impl CrossSender {
    fn start(
        from_ns: &str,
        to_ns: &str,
        to: [u8; 4],
        mbit: f64,
        sent: Arc<AtomicU64>,
    ) -> Result<CrossSender, String> {
        let sink = in_ns(to_ns, move || UdpSocket::bind(SocketAddr::from((to, 0))))?;
        let dest = sink.local_addr().map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread = {
            let stop = Arc::clone(&stop);
            let from_ns = from_ns.to_owned();
            std::thread::Builder::new()
                .name("st-cross-udp".into())
                .spawn(move || {
                    let sock = enter(&from_ns).and_then(|()| {
                        UdpSocket::bind(SocketAddr::from(([0, 0, 0, 0], 0)))
                            .map_err(|e| e.to_string())
                    });
                    let sock = match sock {
                        Ok(s) => {
                            let _ = ready_tx.send(Ok(()));
                            s
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    pace(&sock, dest, mbit, &stop, &sent);
                })
                .map_err(|e| e.to_string())?
        };
        let mut s = CrossSender {
            stop,
            thread: Some(thread),
            _sink: sink,
        };
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(s),
            Ok(Err(e)) => {
                s.stop();
                Err(e)
            }
            Err(_) => {
                s.stop();
                Err("the cross-traffic sender did not start".into())
            }
        }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for CrossSender {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Send datagrams so that the bytes sent follow `mbit` over time (1 ms
/// ticks; a lag of more than 50 ms is forgiven rather than burst out).
fn pace(sock: &UdpSocket, dest: SocketAddr, mbit: f64, stop: &AtomicBool, sent: &AtomicU64) {
    let buf = [0x5au8; DATAGRAM];
    let bytes_per_s = mbit * 1e6 / 8.0;
    let start = Instant::now();
    let mut done = 0.0f64;
    while !stop.load(Ordering::Relaxed) {
        let due = start.elapsed().as_secs_f64() * bytes_per_s;
        if due - done > bytes_per_s * 0.05 {
            done = due - bytes_per_s * 0.05;
        }
        while done + DATAGRAM as f64 <= due {
            // A full queue drops the datagram (that is the point); not an error.
            if sock.send_to(&buf, dest).is_ok() {
                sent.fetch_add(DATAGRAM as u64, Ordering::Relaxed);
            }
            done += DATAGRAM as f64;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The namespaces, veth pair, forwarders and cross traffic of one run (and
/// of the clock-split ground truth test, `tests/split_ground_truth.rs`).
#[derive(Debug)]
pub struct KernelPath {
    ns: [String; 2],
    dev: [String; 2],
    entry: SocketAddr,
    forwarders: Vec<Forwarder>,
    cross: Vec<CrossSender>,
    shaped: [bool; 2],
    created: bool,
    /// One parked thread per namespace, for the sampler's loss counters.
    probes: Vec<NetnsProbe>,
    watch: NetnsWatch,
    /// Cross-traffic bytes sent, over all levels.
    pub(crate) cross_bytes: Arc<AtomicU64>,
}

impl KernelPath {
    /// Build the path to `server` (an address of the root namespace); the
    /// proxy then forwards to [`KernelPath::entry`].
    pub fn start(server: SocketAddr) -> Result<KernelPath, ExperimentError> {
        if !kernel_bottleneck_available() {
            return Err(need_root());
        }
        remove_stale();
        let pid = std::process::id();
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let mut kp = KernelPath {
            ns: [
                format!("{PREFIX}{pid}-{n}-a"),
                format!("{PREFIX}{pid}-{n}-b"),
            ],
            dev: [format!("st{pid}-{n}a"), format!("st{pid}-{n}b")],
            entry: SocketAddr::from(([127, 0, 0, 1], 0)),
            forwarders: Vec::new(),
            cross: Vec::new(),
            shaped: [false; 2],
            created: false,
            probes: Vec::new(),
            watch: NetnsWatch::default(),
            cross_bytes: Arc::new(AtomicU64::new(0)),
        };
        // On an error, Drop removes whatever was created.
        kp.build(server).map_err(start_err)?;
        Ok(kp)
    }

    fn build(&mut self, server: SocketAddr) -> Result<(), String> {
        let [a, b] = self.ns.clone();
        let [da, db] = self.dev.clone();
        self.created = true;
        run("ip", &["netns", "add", &a])?;
        run("ip", &["netns", "add", &b])?;
        run(
            "ip",
            &[
                "link", "add", &da, "netns", &a, "type", "veth", "peer", "name", &db, "netns", &b,
            ],
        )?;
        for (ns, dev, addr) in [(&a, &da, ADDR_A), (&b, &db, ADDR_B)] {
            let cidr = format!("{}/30", std::net::Ipv4Addr::from(addr));
            run("ip", &["-n", ns, "addr", "add", &cidr, "dev", dev])?;
            run("ip", &["-n", ns, "link", "set", dev, "up"])?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
            let name = ns.clone();
            self.probes
                .push(NetnsProbe::start(ns, move || enter(&name), &self.watch)?);
        }
        // Server side: a listener inside b, relaying to the server from the
        // root namespace.
        let exit = in_ns(&b, || TcpListener::bind(SocketAddr::from((ADDR_B, 0))))?;
        let exit_addr = exit.local_addr().map_err(|e| e.to_string())?;
        self.forwarders.push(Forwarder::start(exit, None, server)?);
        // Client side: a loopback listener in the root namespace, relaying
        // from inside a across the veth pair.
        let entry = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .map_err(|e| format!("entry listener: {e}"))?;
        self.entry = entry.local_addr().map_err(|e| e.to_string())?;
        self.forwarders
            .push(Forwarder::start(entry, Some(a), exit_addr)?);
        Ok(())
    }

    /// The namespaces the sampler reads (listed while the path is up).
    pub(crate) fn watch(&self) -> NetnsWatch {
        std::sync::Arc::clone(&self.watch)
    }

    /// Where the proxy forwards to.
    pub fn entry(&self) -> SocketAddr {
        self.entry
    }

    /// Set one level: `tbf` at `rate_mbit` on the shaped direction(s) (none:
    /// removed), cross traffic at `cross_mbit` (none: stopped).
    pub fn set(
        &mut self,
        direction: Direction,
        rate_mbit: Option<f64>,
        queue_ms: Option<f64>,
        cross_mbit: Option<f64>,
    ) -> Result<(), ExperimentError> {
        for s in &mut self.cross {
            s.stop();
        }
        self.cross.clear();
        // Index 0: uplink (a → b, shaped on a's end); 1: downlink.
        let sides = [
            direction != Direction::Downlink,
            direction != Direction::Uplink,
        ];
        for (i, on) in sides.into_iter().enumerate() {
            let (ns, dev) = (&self.ns[i], &self.dev[i]);
            match rate_mbit.filter(|_| on) {
                Some(mbit) => {
                    let kbit = format!("{}kbit", (mbit * 1e3).round().max(1.0) as u64);
                    // At least 4 ms of the rate, and never below 16 KiB.
                    let burst = ((mbit * 1e6 / 8.0 * 0.004) as u64)
                        .max(16 * 1024)
                        .to_string();
                    let latency = format!("{}ms", queue_ms.unwrap_or(100.0).round() as u64);
                    run(
                        "tc",
                        &[
                            "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &kbit,
                            "burst", &burst, "latency", &latency,
                        ],
                    )
                    .map_err(start_err)?;
                    self.shaped[i] = true;
                }
                None => self.unshape(i),
            }
        }
        if let Some(mbit) = cross_mbit {
            for (i, on) in sides.into_iter().enumerate() {
                if !on {
                    continue;
                }
                let (from, to, addr) = if i == 0 {
                    (&self.ns[0], &self.ns[1], ADDR_B)
                } else {
                    (&self.ns[1], &self.ns[0], ADDR_A)
                };
                let s = CrossSender::start(from, to, addr, mbit, Arc::clone(&self.cross_bytes))
                    .map_err(start_err)?;
                self.cross.push(s);
            }
        }
        Ok(())
    }

    fn unshape(&mut self, i: usize) {
        if std::mem::take(&mut self.shaped[i]) {
            let _ = run(
                "tc",
                &[
                    "-n",
                    &self.ns[i],
                    "qdisc",
                    "del",
                    "dev",
                    &self.dev[i],
                    "root",
                ],
            );
        }
    }

    /// Remove the shaping and stop the cross traffic; the path stays up.
    /// Returns what was undone.
    pub fn clear(&mut self) -> Vec<String> {
        let mut undone = Vec::new();
        if !self.cross.is_empty() {
            for s in &mut self.cross {
                s.stop();
            }
            self.cross.clear();
            undone.push("cross traffic stopped".to_owned());
        }
        if self.shaped.iter().any(|s| *s) {
            self.unshape(0);
            self.unshape(1);
            undone.push("tbf removed".to_owned());
        }
        undone
    }

    /// Stop everything and delete the namespaces (and with them the veth
    /// pair). Idempotent; returns what was undone.
    pub fn shutdown(&mut self) -> Vec<String> {
        let mut undone = self.clear();
        for f in &mut self.forwarders {
            f.stop();
        }
        self.forwarders.clear();
        // A probe would keep its namespace (and the veth pair) alive.
        for p in &mut self.probes {
            p.stop(&self.watch);
        }
        self.probes.clear();
        if std::mem::take(&mut self.created) {
            for ns in &self.ns {
                let _ = run("ip", &["netns", "del", ns]);
            }
            undone.push(format!(
                "namespaces {} and {} deleted",
                self.ns[0], self.ns[1]
            ));
        }
        undone
    }
}

impl Drop for KernelPath {
    fn drop(&mut self) {
        self.shutdown();
    }
}
