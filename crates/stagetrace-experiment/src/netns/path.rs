//! [`KernelPath`]: the namespaces, veth pair, `tbf` shaping, forwarders and
//! cross traffic of one run, built and torn down together.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::cross::CrossSender;
use super::forwarder::Forwarder;
use super::namespaces::{enter, in_ns, kernel_bottleneck_available, remove_stale, run, PREFIX};
use crate::error::ExperimentError;
use crate::plan::Direction;
use crate::sampler::{NetnsProbe, NetnsWatch};

/// Address of the `a` end (client side) and the `b` end (server side).
const ADDR_A: [u8; 4] = [10, 213, 0, 1];
const ADDR_B: [u8; 4] = [10, 213, 0, 2];

/// Paths this process built so far: the `<n>` in the names.
static SEQ: AtomicU32 = AtomicU32::new(0);

/// Why there is no kernel bottleneck without root and iproute2.
fn need_root() -> ExperimentError {
    ExperimentError::Plan(
        "kernel bottleneck needs root and iproute2; use the userspace proxy (kernel = false)"
            .into(),
    )
}

/// A step of building or shaping the path failed.
fn start_err(what: impl std::fmt::Display) -> ExperimentError {
    ExperimentError::Start(format!("the kernel bottleneck: {what}"))
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
