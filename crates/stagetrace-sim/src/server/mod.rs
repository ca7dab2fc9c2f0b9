//! The simulated policy server: one call, [`SimServer::start`], serves a
//! [`SimModel`] over WebSocket or HTTP with the chosen mitigations (batcher,
//! result cache, admission control), a skewed — and optionally stepping —
//! clock, on a runtime of its own; the handle gives the address, the
//! counters and a stop.

mod chain;
mod config;
mod http;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use stagetrace::record::ServerRecord;
use stagetrace_mitigate::{AdmissionStats, BatchStats, CacheStats};
use stagetrace_net::{
    ws::PolicyServer, ws::ServeError, ws::ServerHandle, RequestHook, ServerClock,
};

pub use config::{CacheConfig, ServerConfig};

use crate::{SimError, Transport};

/// Requests a mitigated server lets through at once: enough that they meet
/// in the batcher, the cache and the admission queue rather than before.
const OPEN_CONCURRENCY: usize = 1024;

/// What the server's own hook counted.
#[derive(Debug, Default)]
struct Seen {
    requests: AtomicU64,
    failed: AtomicU64,
    with_context: AtomicU64,
}

impl Seen {
    /// Counts each request, then hands it to `next`.
    fn hook(self: &Arc<Self>, next: Option<RequestHook>) -> RequestHook {
        let seen = Arc::clone(self);
        Arc::new(move |rec: &ServerRecord| {
            if let Some(next) = &next {
                next(rec);
            }
            seen.requests.fetch_add(1, Ordering::Relaxed);
            if rec.error.is_some() {
                seen.failed.fetch_add(1, Ordering::Relaxed);
            }
            if rec.trace_parent.is_some() {
                seen.with_context.fetch_add(1, Ordering::Relaxed);
            }
        })
    }
}

/// What a running server has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimServerStats {
    /// Requests answered or failed.
    pub requests: u64,
    /// Requests that failed on the server.
    pub failed: u64,
    /// Requests that carried a trace context (`traceparent`).
    pub with_trace_context: u64,
    /// The batcher's counters, when there is one.
    pub batch: Option<BatchStats>,
    /// The cache's counters, when there is one.
    pub cache: Option<CacheStats>,
    /// Admission control's counters, when there is one.
    pub admission: Option<AdmissionStats>,
}

/// The server as it runs on its runtime.
enum Serving {
    Ws(ServerHandle),
    Http(http::HttpServer),
}

impl Serving {
    async fn shutdown(self) {
        match self {
            Serving::Ws(h) => h.shutdown().await,
            Serving::Http(h) => h.shutdown().await,
        }
    }
}

/// A running simulated policy server. Dropping it stops it, like
/// [`SimServer::stop`].
#[must_use = "dropping the handle stops the server"]
pub struct SimServer {
    addr: SocketAddr,
    clock: ServerClock,
    seen: Arc<Seen>,
    parts: chain::Parts,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for SimServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimServer")
            .field("addr", &self.addr)
            .field("clock", &self.clock)
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

impl SimServer {
    /// Start a policy server as `config` says, on a runtime of its own (two
    /// worker threads): returns once it listens.
    pub fn start(config: ServerConfig) -> Result<SimServer, SimError> {
        let clock = if config.drift_ppm == 0.0 {
            ServerClock::skewed_ns(config.skew_ns)
        } else {
            ServerClock::drifting(config.skew_ns, config.drift_ppm)
        };
        let seen = Arc::new(Seen::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let name = config.thread_name.clone();
        let thread = {
            let (clock, seen) = (clock.clone(), Arc::clone(&seen));
            std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .thread_name(name)
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = ready_tx.send(Err(SimError::Start {
                                what: "the server runtime",
                                reason: e.to_string(),
                            }));
                            return;
                        }
                    };
                    rt.block_on(async move {
                        match serve(config, clock, &seen).await {
                            Ok((serving, addr, parts)) => {
                                if ready_tx.send(Ok((addr, parts))).is_ok() {
                                    let _ = stop_rx.await;
                                }
                                serving.shutdown().await;
                            }
                            Err(e) => {
                                let _ = ready_tx.send(Err(e));
                            }
                        }
                    });
                    // Connections still open end with the runtime.
                    rt.shutdown_timeout(Duration::from_secs(2));
                })
                .map_err(|e| SimError::Start {
                    what: "the server thread",
                    reason: e.to_string(),
                })?
        };
        let (addr, parts) = match ready_rx.recv() {
            Ok(Ok(ready)) => ready,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(SimError::Start {
                    what: "the policy server",
                    reason: "its thread ended before it listened".into(),
                });
            }
        };
        Ok(SimServer {
            addr,
            clock,
            seen,
            parts,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's clock (skewed, and stepped when the run steps it).
    pub fn clock(&self) -> &ServerClock {
        &self.clock
    }

    /// Counters so far. The server counts a request after its answer is
    /// sent: a client may hold an answer not yet counted. [`SimServer::stop`]
    /// gives the final counts.
    pub fn stats(&self) -> SimServerStats {
        SimServerStats {
            requests: self.seen.requests.load(Ordering::Relaxed),
            failed: self.seen.failed.load(Ordering::Relaxed),
            with_trace_context: self.seen.with_context.load(Ordering::Relaxed),
            batch: self.parts.batch_stats(),
            cache: self.parts.cache_stats(),
            admission: self.parts.admission_stats(),
        }
    }

    /// Stop accepting, close every connection, end the runtime; returns
    /// when its threads are gone, with the final counts.
    pub fn stop(mut self) -> SimServerStats {
        self.shutdown();
        self.stats()
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn serve(
    cfg: ServerConfig,
    clock: ServerClock,
    seen: &Arc<Seen>,
) -> Result<(Serving, SocketAddr, chain::Parts), SimError> {
    let mut cfg = cfg;
    if let Some(step) = cfg.step {
        cfg.model = cfg.model.clock_step(clock.clone(), step);
    }
    let (handler, parts) = chain::build(&cfg)?;
    let hook = seen.hook(cfg.hook.clone());
    let concurrency = if cfg.mitigated() {
        OPEN_CONCURRENCY
    } else {
        cfg.concurrency
    };
    match cfg.transport {
        Transport::Ws => {
            let mut builder = PolicyServer::builder()
                .metadata(cfg.metadata)
                .clock(clock)
                .on_request(move |rec| hook(rec))
                .report_timing(cfg.report_timing)
                .max_concurrency(concurrency);
            if let Some(n) = cfg.max_message_bytes {
                builder = builder.max_message_bytes(n);
            }
            let handle = builder
                .spawn(cfg.addr, handler)
                .await
                .map_err(|e| match e {
                    ServeError::Bind(source) => SimError::Bind {
                        addr: cfg.addr,
                        source,
                    },
                    other => SimError::Start {
                        what: "the policy server",
                        reason: other.to_string(),
                    },
                })?;
            let addr = handle.local_addr();
            Ok((Serving::Ws(handle), addr, parts))
        }
        Transport::Http => {
            let server = http::spawn(http::HttpSetup {
                addr: cfg.addr,
                handler,
                parts: &parts,
                clock,
                hook,
                concurrency: (!cfg.mitigated()).then_some(concurrency),
                max_body_bytes: cfg.max_message_bytes,
                report_timing: cfg.report_timing,
            })
            .await?;
            let addr = server.addr;
            Ok((Serving::Http(server), addr, parts))
        }
    }
}
