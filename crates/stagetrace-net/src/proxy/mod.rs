//! A userspace TCP proxy that shapes each direction: fixed delay, jitter,
//! bandwidth limit and periodic stalls — the network of the tests, the demo
//! and the experiments (no `netem` needed).
//!
//! Each chunk read from one side is timestamped when it leaves the
//! bandwidth limiter and forwarded at that time plus the delay (and jitter);
//! chunks are never reordered (a chunk never leaves before the one ahead of
//! it). Settings change at runtime through the [`ProxyHandle`].
//!
//! ```no_run
//! use std::time::Duration;
//! use stagetrace_net::proxy::{LinkConfig, Proxy, ProxyConfig};
//!
//! # fn run() -> std::io::Result<()> {
//! let upstream = "127.0.0.1:8000".parse().unwrap();
//! let cfg = ProxyConfig {
//!     uplink: LinkConfig::delay(Duration::from_millis(20)),
//!     downlink: LinkConfig::delay(Duration::from_millis(5)),
//!     ..ProxyConfig::default()
//! };
//! // From sync code: the proxy runs its own runtime on a thread.
//! let proxy = Proxy::spawn_in_thread("127.0.0.1:0".parse().unwrap(), upstream, cfg)?;
//! println!("connect to {}", proxy.local_addr());
//! proxy.set_uplink(LinkConfig::delay(Duration::from_millis(50)));
//! proxy.shutdown();
//! # Ok(()) }
//! ```
//!
//! [`Proxy`] and its [`ProxyHandle`] are here; the settings are in `config`,
//! the accept loop and the two directions of a connection in `forward`, the
//! delay / jitter / stall / bandwidth arithmetic in `shape`, and the
//! sub-millisecond timer they sleep on in `timer`. No file below imports
//! this one.

mod config;
mod forward;
mod lateness;
mod pin;
mod shape;
mod timer;

pub use config::{Jitter, LinkConfig, ProxyConfig, Stall};
pub use lateness::ProxyLateness;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use tokio::net::TcpListener;
use tokio::sync::watch;

use forward::{accept_loop, Counters, Shared};
use timer::PreciseTimer;

/// Counters of a running proxy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted and forwarded.
    pub connections: u64,
    /// Connections open now.
    pub active: u64,
    /// Connections refused: over `max_connections`, or upstream unreachable.
    pub refused: u64,
    /// Bytes forwarded client → upstream.
    pub bytes_up: u64,
    /// Bytes forwarded upstream → client.
    pub bytes_down: u64,
    /// How late the proxy itself released its chunks (both directions):
    /// delay its own scheduling added to the one asked for.
    pub lateness: ProxyLateness,
    /// Whether the proxy's threads run at real-time priority
    /// ([`ProxyConfig::realtime`]): `Some(false)` when the kernel refused
    /// any, `None` when not asked.
    pub realtime: Option<bool>,
}

/// The proxy. Start it inside a tokio runtime with [`Proxy::start`], or from
/// sync code with [`Proxy::spawn_in_thread`].
#[derive(Debug)]
pub struct Proxy;

/// Controls a running proxy; dropping it shuts the proxy down.
pub struct ProxyHandle {
    local_addr: SocketAddr,
    uplink: watch::Sender<LinkConfig>,
    downlink: watch::Sender<LinkConfig>,
    stop: watch::Sender<bool>,
    counters: Arc<Counters>,
    thread: Option<thread::JoinHandle<()>>,
    timer: Arc<PreciseTimer>,
    timer_thread: Option<thread::JoinHandle<()>>,
    realtime: Arc<pin::Realtime>,
}

impl fmt::Debug for ProxyHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyHandle")
            .field("local_addr", &self.local_addr)
            .field("uplink", &*self.uplink.borrow())
            .field("downlink", &*self.downlink.borrow())
            .field("stats", &self.stats())
            .finish()
    }
}

impl ProxyHandle {
    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Change the client → upstream shaping; applies to chunks read from now
    /// on, on every connection.
    pub fn set_uplink(&self, link: LinkConfig) {
        self.uplink.send_replace(link);
    }

    /// Change the upstream → client shaping.
    pub fn set_downlink(&self, link: LinkConfig) {
        self.downlink.send_replace(link);
    }

    /// The current client → upstream shaping.
    pub fn uplink(&self) -> LinkConfig {
        *self.uplink.borrow()
    }

    /// The current upstream → client shaping.
    pub fn downlink(&self) -> LinkConfig {
        *self.downlink.borrow()
    }

    /// Counters so far.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.counters;
        ProxyStats {
            connections: c.connections.load(Ordering::Relaxed),
            active: c.active.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            bytes_up: c.bytes_up.load(Ordering::Relaxed),
            bytes_down: c.bytes_down.load(Ordering::Relaxed),
            lateness: c.lateness.snapshot(),
            realtime: self.realtime.granted(),
        }
    }

    /// Stop accepting and close every connection. A proxy started with
    /// [`Proxy::spawn_in_thread`] is joined (call this from sync code then);
    /// one started with [`Proxy::start`] winds down on its runtime.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.send_replace(true);
        if let Some(t) = self.thread.take() {
            // The proxy thread does not panic; if it did, there is nothing
            // left to clean up.
            let _ = t.join();
        }
        self.timer.stop();
        if let Some(t) = self.timer_thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// What `Proxy::start` needs that it has no runtime for.
fn no_runtime() -> io::Error {
    io::Error::other(
        "stagetrace proxy: Proxy::start needs a tokio runtime; call it inside one \
         or use Proxy::spawn_in_thread from sync code",
    )
}

impl Proxy {
    /// Listen on `listen` and forward every connection to `upstream`, on the
    /// current tokio runtime. Fails when `listen` cannot be bound or when
    /// called outside a runtime.
    pub fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        cfg: ProxyConfig,
    ) -> io::Result<ProxyHandle> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| no_runtime())?;
        // The caller's runtime runs the proxy: only the timer thread is ours to pin.
        pin::check(cfg.cpu)?;
        let std_listener = std::net::TcpListener::bind(listen)?;
        std_listener.set_nonblocking(true)?;
        let (handle, shared) = Self::parts(std_listener.local_addr()?, upstream, cfg)?;
        let _guard = rt.enter();
        let listener = TcpListener::from_std(std_listener)?;
        rt.spawn(accept_loop(listener, shared));
        Ok(handle)
    }

    /// Like [`Proxy::start`], on a thread of its own running its own
    /// runtime, for sync callers. The thread ends on
    /// [`ProxyHandle::shutdown`] (or when the handle is dropped).
    pub fn spawn_in_thread(
        listen: SocketAddr,
        upstream: SocketAddr,
        cfg: ProxyConfig,
    ) -> io::Result<ProxyHandle> {
        pin::check(cfg.cpu)?;
        let (cpu, realtime) = (cfg.cpu, cfg.realtime);
        let std_listener = std::net::TcpListener::bind(listen)?;
        std_listener.set_nonblocking(true)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (mut handle, shared) = Self::parts(std_listener.local_addr()?, upstream, cfg)?;
        let raised = handle.realtime.clone();
        let thread = thread::Builder::new()
            .name("stagetrace-proxy".into())
            .spawn(move || {
                pin::pin_current(cpu);
                if realtime {
                    raised.raise_current();
                }
                rt.block_on(async move {
                    match TcpListener::from_std(std_listener) {
                        Ok(listener) => accept_loop(listener, shared).await,
                        Err(e) => tracing::warn!("stagetrace proxy: cannot listen: {e}"),
                    }
                });
            })?;
        handle.thread = Some(thread);
        Ok(handle)
    }

    fn parts(
        local_addr: SocketAddr,
        upstream: SocketAddr,
        cfg: ProxyConfig,
    ) -> io::Result<(ProxyHandle, Shared)> {
        let realtime = Arc::new(pin::Realtime::default());
        let (timer, timer_thread) =
            PreciseTimer::spawn(cfg.cpu, cfg.realtime.then(|| realtime.clone()))?;
        let (up_tx, up_rx) = watch::channel(cfg.uplink);
        let (down_tx, down_rx) = watch::channel(cfg.downlink);
        let (stop_tx, stop_rx) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let handle = ProxyHandle {
            local_addr,
            uplink: up_tx,
            downlink: down_tx,
            stop: stop_tx,
            counters: counters.clone(),
            thread: None,
            timer: timer.clone(),
            timer_thread: Some(timer_thread),
            realtime,
        };
        let shared = Shared {
            upstream,
            seed: cfg.seed,
            max_connections: cfg.max_connections.max(1),
            max_in_flight: cfg.max_in_flight.max(1),
            started: Instant::now(),
            timer,
            uplink: up_rx,
            downlink: down_rx,
            stop: stop_rx,
            counters,
        };
        Ok((handle, shared))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn start_outside_a_runtime_is_an_error() {
        let err = Proxy::start(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:9".parse().unwrap(),
            ProxyConfig::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("spawn_in_thread"));
    }
}
