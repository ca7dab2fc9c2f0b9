//! A remote executor: `stagetrace-net`'s [`ExecutorServer`] on a thread of
//! its own, with a clock of its own, and a simulated controller that is
//! still busy with the previous action for a known time on every n-th
//! chunk: the wait the robot's `exec_wait_ms` must show.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stagetrace_net::executor::ExecutorServer;
use stagetrace_net::{RequestHook, ServerClock};

use crate::service::ServiceThread;
use crate::wait::{sleep_until_precise_blocking, Spin};
use crate::SimError;

/// What [`SimExecutor::start`] starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExecutorConfig {
    /// The executor's clock runs this far ahead of the host's, ns.
    pub skew_ns: i64,
    /// …and this many ppm fast from the start; 0: no drift.
    pub drift_ppm: f64,
    /// How long the previous action still runs when a busy chunk arrives.
    pub busy: Duration,
    /// Every `busy_every`-th chunk (by the chunk's `seq`: `seq % n == n − 1`)
    /// finds the controller busy; 0: never.
    pub busy_every: u64,
    /// Most starts remembered (one per chunk).
    pub keep: usize,
}

impl ExecutorConfig {
    /// Whether the chunk of call `seq` finds the controller busy.
    pub fn is_busy(&self, seq: u64) -> bool {
        self.busy_every > 0 && !self.busy.is_zero() && seq % self.busy_every == self.busy_every - 1
    }
}

/// The controller's own record of one chunk: the truth of its wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecStart {
    /// The `seq` the chunk carried.
    pub seq: u64,
    /// The executor had the whole chunk → the controller started it: read
    /// just before the executor's own start stamp (`wait`) and just after
    /// it (`wait_late`). The stamp lies between, whatever a loaded machine
    /// does to the thread in between.
    pub wait: Duration,
    /// See `wait`.
    pub wait_late: Duration,
    /// The chunk found the controller busy.
    pub busy: bool,
    /// When the executor had the whole chunk, on the host's wall clock
    /// (not the executor's skewed one), ns since the epoch.
    pub received_unix_ns: u64,
}

fn host_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A running executor. Dropping it stops it.
#[derive(Debug)]
#[must_use = "dropping the handle stops the executor"]
pub struct SimExecutor {
    service: ServiceThread,
    clock: ServerClock,
    starts: Arc<Mutex<Vec<ExecStart>>>,
}

impl SimExecutor {
    /// Bind a free loopback port and execute chunks as `cfg` says. The
    /// controller is a task on the executor's one thread: the chunk's
    /// arrival and its start are stamped with no thread wake-up between,
    /// so the wait is the busy time alone (a busy wait, not a sleep that
    /// may oversleep).
    pub fn start(cfg: ExecutorConfig) -> Result<SimExecutor, SimError> {
        SimExecutor::start_with_hook(cfg, None)
    }

    /// As [`start`](Self::start), handing each chunk's record (the
    /// executor's own: `role: Executor`, its wait) to `hook` — an OTLP
    /// exporter's, so the executor is a service of its own in Jaeger.
    pub fn start_with_hook(
        cfg: ExecutorConfig,
        hook: Option<RequestHook>,
    ) -> Result<SimExecutor, SimError> {
        let clock = if cfg.drift_ppm == 0.0 {
            ServerClock::skewed_ns(cfg.skew_ns)
        } else {
            ServerClock::drifting(cfg.skew_ns, cfg.drift_ppm)
        };
        let starts: Arc<Mutex<Vec<ExecStart>>> = Arc::default();
        let (server_clock, kept) = (clock.clone(), Arc::clone(&starts));
        let service = ServiceThread::spawn(
            "sim-executor",
            || (),
            move || async move {
                let mut builder = ExecutorServer::builder().clock(server_clock);
                if let Some(hook) = hook {
                    builder = builder.on_request(move |r| hook(r));
                }
                let (server, mut chunks) = builder
                    .spawn(SocketAddr::from(([127, 0, 0, 1], 0)))
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(async move {
                    while let Some(chunk) = chunks.recv().await {
                        let seq = chunk.action.get("seq").and_then(|v| v.as_u64());
                        let received = chunk.ticket.received();
                        let busy = seq.is_some_and(|s| cfg.is_busy(s));
                        if busy {
                            // The previous action runs until `busy` after
                            // this chunk arrived.
                            sleep_until_precise_blocking(received + cfg.busy, Spin::Hot);
                        }
                        let started = Instant::now();
                        chunk.ticket.started();
                        let stamped = Instant::now();
                        let received_unix_ns =
                            host_unix_ns().saturating_sub(received.elapsed().as_nanos() as u64);
                        if let (Some(seq), Ok(mut v)) = (seq, kept.lock()) {
                            if v.len() < cfg.keep {
                                v.push(ExecStart {
                                    seq,
                                    wait: started.saturating_duration_since(received),
                                    wait_late: stamped.saturating_duration_since(received),
                                    busy,
                                    received_unix_ns,
                                });
                            }
                        }
                    }
                });
                Ok(server)
            },
        )?;
        Ok(SimExecutor {
            service,
            clock,
            starts,
        })
    }

    /// The address the executor listens on.
    pub fn addr(&self) -> SocketAddr {
        self.service.addr
    }

    /// The executor's clock.
    pub fn clock(&self) -> &ServerClock {
        &self.clock
    }

    /// Stop; returns the controller's record of every chunk it started.
    pub fn stop(mut self) -> Vec<ExecStart> {
        self.service.stop();
        self.starts.lock().map(|v| v.clone()).unwrap_or_default()
    }
}
