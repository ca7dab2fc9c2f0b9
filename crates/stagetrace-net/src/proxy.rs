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

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

/// Random variation added to a direction's delay.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Jitter {
    /// None.
    #[default]
    None,
    /// Uniform in `[−max, +max]`.
    Uniform(Duration),
    /// Normal with mean 0 and this standard deviation.
    Normal(Duration),
}

/// A periodic outage: every `every`, the direction stops for `length`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// Period of the stalls (measured from the proxy's start).
    pub every: Duration,
    /// How long each stall lasts (shorter than `every`).
    pub length: Duration,
}

/// The shaping of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkConfig {
    /// Fixed one-way delay added to every chunk.
    pub delay: Duration,
    /// Variation around `delay`; the sum is never below zero and never
    /// reorders chunks.
    pub jitter: Jitter,
    /// Bandwidth limit in bytes per second (token bucket with a burst of
    /// about 10 ms of traffic); `None` = unlimited.
    pub bandwidth: Option<u64>,
    /// Periodic stalls.
    pub stall: Option<Stall>,
}

impl LinkConfig {
    /// A link with a fixed delay only.
    pub fn delay(delay: Duration) -> Self {
        LinkConfig {
            delay,
            ..LinkConfig::default()
        }
    }

    /// This link with `jitter`.
    pub fn with_jitter(self, jitter: Jitter) -> Self {
        LinkConfig { jitter, ..self }
    }

    /// This link limited to `bytes_per_sec`.
    pub fn with_bandwidth(self, bytes_per_sec: u64) -> Self {
        LinkConfig {
            bandwidth: Some(bytes_per_sec),
            ..self
        }
    }

    /// This link with periodic stalls.
    pub fn with_stall(self, stall: Stall) -> Self {
        LinkConfig {
            stall: Some(stall),
            ..self
        }
    }
}

/// Settings of a [`Proxy`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProxyConfig {
    /// Client → upstream.
    pub uplink: LinkConfig,
    /// Upstream → client.
    pub downlink: LinkConfig,
    /// Seed of the jitter generator (each connection and direction derives
    /// its own stream from it), so runs repeat.
    pub seed: u64,
    /// Most connections open at once; further ones are closed on accept and
    /// counted.
    pub max_connections: u64,
    /// Most chunks in flight per direction of a connection; a full queue
    /// stops reading (back-pressure), memory stays bounded.
    pub max_in_flight: usize,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            uplink: LinkConfig::default(),
            downlink: LinkConfig::default(),
            seed: 0x5eed,
            max_connections: 256,
            max_in_flight: 256,
        }
    }
}

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
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    active: AtomicU64,
    refused: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
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

struct Shared {
    upstream: SocketAddr,
    seed: u64,
    max_connections: u64,
    max_in_flight: usize,
    started: Instant,
    timer: Arc<PreciseTimer>,
    uplink: watch::Receiver<LinkConfig>,
    downlink: watch::Receiver<LinkConfig>,
    stop: watch::Receiver<bool>,
    counters: Arc<Counters>,
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
        let std_listener = std::net::TcpListener::bind(listen)?;
        std_listener.set_nonblocking(true)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (mut handle, shared) = Self::parts(std_listener.local_addr()?, upstream, cfg)?;
        let thread = thread::Builder::new()
            .name("stagetrace-proxy".into())
            .spawn(move || {
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
        let (timer, timer_thread) = PreciseTimer::spawn()?;
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

/// Resolves once the stop flag is set (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    // An error means the handle is gone: stop as well.
    let _ = stop.wait_for(|s| *s).await;
}

async fn accept_loop(listener: TcpListener, shared: Shared) {
    let shared = Arc::new(shared);
    let mut index: u64 = 0;
    loop {
        let accepted = tokio::select! {
            _ = stopped(shared.stop.clone()) => return,
            a = listener.accept() => a,
        };
        let client = match accepted {
            Ok((client, _)) => client,
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                tracing::debug!("stagetrace proxy: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let c = &shared.counters;
        if c.active.load(Ordering::Relaxed) >= shared.max_connections {
            c.refused.fetch_add(1, Ordering::Relaxed);
            continue; // dropping `client` closes it
        }
        c.active.fetch_add(1, Ordering::Relaxed);
        index += 1;
        let shared = shared.clone();
        tokio::spawn(async move {
            let stop = stopped(shared.stop.clone());
            tokio::select! {
                _ = stop => {}
                _ = connection(client, index, &shared) => {}
            }
            shared.counters.active.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// How long a connection to the upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

async fn connection(client: TcpStream, index: u64, shared: &Shared) {
    let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(shared.upstream));
    let upstream = match connect.await {
        Ok(Ok(s)) => s,
        Err(_) => {
            tracing::debug!(
                "stagetrace proxy: upstream {} did not answer",
                shared.upstream
            );
            shared.counters.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!(
                "stagetrace proxy: upstream {} unreachable: {e}",
                shared.upstream
            );
            shared.counters.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    shared.counters.connections.fetch_add(1, Ordering::Relaxed);
    // Small writes must not wait for Nagle: the delay is ours to set.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_rd, client_wr) = client.into_split();
    let (up_rd, up_wr) = upstream.into_split();
    let seed = shared.seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let c = &shared.counters;
    tokio::join!(
        direction(
            client_rd,
            up_wr,
            shared.uplink.clone(),
            seed,
            shared,
            &c.bytes_up
        ),
        direction(
            up_rd,
            client_wr,
            shared.downlink.clone(),
            seed ^ 1,
            shared,
            &c.bytes_down
        ),
    );
}

/// One chunk on its way: the bytes and when they may leave.
struct Chunk {
    data: Vec<u8>,
    release: Instant,
}

const READ_BUF: usize = 64 * 1024;

/// Read from `rd`, shape, write to `wr`, until EOF or an error on either.
async fn direction(
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    link: watch::Receiver<LinkConfig>,
    seed: u64,
    shared: &Shared,
    bytes: &AtomicU64,
) {
    let (tx, mut rx) = mpsc::channel::<Chunk>(shared.max_in_flight);
    let reader = async move {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut bucket = TokenBucket::default();
        let mut last_release = Instant::now();
        let mut buf = vec![0u8; READ_BUF];
        loop {
            let n = match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let cfg = *link.borrow();
            if let Some(stall) = cfg.stall {
                wait_out_stall(stall, shared).await;
            }
            // The limiter hands out pieces no larger than its burst, so a
            // large read leaves the bottleneck gradually.
            let mut rest = buf.get(..n).unwrap_or(&[]);
            while !rest.is_empty() {
                let take = match cfg.bandwidth {
                    Some(rate) => bucket.take(rate, rest.len(), &shared.timer).await,
                    None => rest.len(),
                };
                let (piece, tail) = rest.split_at(take.min(rest.len()));
                rest = tail;
                let left = Instant::now();
                let release = (left + one_way(&cfg, &mut rng)).max(last_release);
                last_release = release;
                let chunk = Chunk {
                    data: piece.to_vec(),
                    release,
                };
                if tx.send(chunk).await.is_err() {
                    return;
                }
            }
        }
        // Dropping `tx` tells the writer: EOF after what is queued.
    };
    let writer = async move {
        while let Some(chunk) = rx.recv().await {
            shared.timer.sleep_until(chunk.release).await;
            if wr.write_all(&chunk.data).await.is_err() {
                return;
            }
            bytes.fetch_add(chunk.data.len() as u64, Ordering::Relaxed);
        }
        let _ = wr.shutdown().await;
    };
    tokio::join!(reader, writer);
}

/// Longest one-way delay or stall applied (longer settings are capped).
const MAX_DELAY: Duration = Duration::from_secs(3600);

/// Delay plus jitter for one chunk, never negative, at most [`MAX_DELAY`].
fn one_way(cfg: &LinkConfig, rng: &mut StdRng) -> Duration {
    let base = cfg.delay.as_secs_f64();
    let extra = match cfg.jitter {
        Jitter::None => 0.0,
        Jitter::Uniform(max) => {
            let m = max.as_secs_f64();
            if m > 0.0 {
                rng.random_range(-m..=m)
            } else {
                0.0
            }
        }
        Jitter::Normal(sd) => {
            // Box–Muller.
            let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
            let u2: f64 = rng.random::<f64>();
            sd.as_secs_f64() * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        }
    };
    Duration::try_from_secs_f64((base + extra).max(0.0))
        .unwrap_or(cfg.delay)
        .min(MAX_DELAY)
}

async fn wait_out_stall(stall: Stall, shared: &Shared) {
    if stall.every.is_zero() || stall.length.is_zero() {
        return;
    }
    let every = stall.every.as_nanos();
    let phase = shared.started.elapsed().as_nanos() % every;
    let length = stall.length.min(stall.every).min(MAX_DELAY).as_nanos();
    if phase < length {
        let left = Duration::from_nanos(u64::try_from(length - phase).unwrap_or(0));
        shared.timer.sleep_until(Instant::now() + left).await;
    }
}

/// A timer thread for sub-millisecond sleeps: tokio's timer wheel ticks in
/// whole milliseconds (a 5 ms delay becomes 5–6 ms), and spinning on a
/// loaded machine gets the spinner preempted. One thread per proxy sleeps on
/// a condition variable (a high-resolution kernel timer) until the earliest
/// deadline and wakes the waiting tasks.
#[derive(Debug, Default)]
struct PreciseTimer {
    state: Mutex<TimerState>,
    cv: Condvar,
    /// How early to fire, ns: a low percentile of the wake-up latency the
    /// waiters measure (timer thread → runtime → task), so that a task
    /// resumes at its deadline or just after, rarely before.
    lead_ns: AtomicU64,
}

/// Most lead the timer takes against its measured wake-up latency.
const MAX_LEAD_NS: u64 = 500_000;

#[derive(Debug, Default)]
struct TimerState {
    heap: BinaryHeap<Reverse<Wake>>,
    seq: u64,
    stopped: bool,
}

#[derive(Debug)]
struct Wake {
    at: Instant,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Wake {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Wake {}
impl PartialOrd for Wake {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Wake {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

impl PreciseTimer {
    /// Start the timer thread.
    fn spawn() -> io::Result<(Arc<Self>, thread::JoinHandle<()>)> {
        let timer = Arc::new(PreciseTimer::default());
        let t = timer.clone();
        let join = thread::Builder::new()
            .name("stagetrace-proxy-timer".into())
            .spawn(move || t.run())?;
        Ok((timer, join))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TimerState> {
        // The state stays consistent even if a holder panicked.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        let mut st = self.lock();
        loop {
            if st.stopped {
                st.heap.clear(); // waiters see the sender dropped
                return;
            }
            let lead = Duration::from_nanos(self.lead_ns.load(Ordering::Relaxed));
            let now = Instant::now();
            match st.heap.peek().map(|w| w.0.at) {
                Some(at) if at <= now + lead => {
                    if let Some(Reverse(w)) = st.heap.pop() {
                        let _ = w.tx.send(());
                    }
                }
                Some(at) => {
                    st = self
                        .cv
                        .wait_timeout(st, (at - now).saturating_sub(lead))
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
                None => st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    fn stop(&self) {
        self.lock().stopped = true;
        self.cv.notify_all();
    }

    /// Sleep until `deadline`, to within the kernel's timer slack (~50 µs).
    async fn sleep_until(&self, deadline: Instant) {
        if Instant::now() >= deadline {
            return;
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.lock();
            if st.stopped {
                return;
            }
            st.seq += 1;
            let seq = st.seq;
            let earliest = st.heap.peek().is_none_or(|w| deadline < w.0.at);
            st.heap.push(Reverse(Wake {
                at: deadline,
                seq,
                tx,
            }));
            if earliest {
                self.cv.notify_one();
            }
        }
        // An error means the proxy is shutting down: stop waiting.
        if rx.await.is_ok() {
            self.follow_latency(deadline);
        }
    }

    /// Track the 10th percentile of the wake-up latency: a late wake-up
    /// moves the lead up a small step, an early one down nine steps, so about
    /// one wake-up in ten is early (by little) and the rest late by little.
    fn follow_latency(&self, deadline: Instant) {
        const STEP_NS: u64 = 4_000;
        let lead = self.lead_ns.load(Ordering::Relaxed);
        let next = if Instant::now() >= deadline {
            lead.saturating_add(STEP_NS).min(MAX_LEAD_NS)
        } else {
            lead.saturating_sub(9 * STEP_NS)
        };
        self.lead_ns.store(next, Ordering::Relaxed);
    }
}

/// A token bucket refilled at the configured rate; burst ≈ 10 ms of traffic
/// (between 1500 bytes and 64 KiB).
#[derive(Debug, Default)]
struct TokenBucket {
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// Wait until some bytes may pass; returns how many (≤ `want`).
    async fn take(&mut self, rate: u64, want: usize, timer: &PreciseTimer) -> usize {
        let rate_f = rate.max(1) as f64;
        let burst = (rate_f / 100.0).clamp(1500.0, 65536.0);
        // Pieces of a quarter burst: a late wake-up (up to 3/4 of the burst
        // time) keeps its tokens instead of losing them to the cap.
        let piece = (want as f64).min(burst / 4.0).max(1.0);
        loop {
            let now = Instant::now();
            let last = *self.last.get_or_insert(now);
            self.tokens =
                (self.tokens + now.duration_since(last).as_secs_f64() * rate_f).min(burst);
            self.last = Some(now);
            if self.tokens >= piece {
                self.tokens -= piece;
                return piece as usize;
            }
            let wait = (piece - self.tokens) / rate_f;
            timer
                .sleep_until(now + Duration::from_secs_f64(wait.min(60.0)))
                .await;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_way_never_negative_and_seeded() {
        let cfg = LinkConfig::delay(Duration::from_millis(1))
            .with_jitter(Jitter::Normal(Duration::from_millis(5)));
        let mut a = StdRng::seed_from_u64(1);
        let mut b = StdRng::seed_from_u64(1);
        let xs: Vec<Duration> = (0..1000).map(|_| one_way(&cfg, &mut a)).collect();
        let ys: Vec<Duration> = (0..1000).map(|_| one_way(&cfg, &mut b)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().any(|d| d.is_zero()));
        let mean = xs.iter().map(Duration::as_secs_f64).sum::<f64>() / 1000.0;
        // A clipped normal N(1 ms, 5 ms) has a mean near 2.6 ms.
        assert!((0.0015..0.004).contains(&mean), "mean {mean}");
        let uni = LinkConfig::delay(Duration::from_millis(10))
            .with_jitter(Jitter::Uniform(Duration::from_millis(2)));
        let mut r = StdRng::seed_from_u64(2);
        for _ in 0..1000 {
            let d = one_way(&uni, &mut r);
            assert!(d >= Duration::from_millis(8) && d <= Duration::from_millis(12));
        }
    }

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
