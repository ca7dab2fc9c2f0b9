//! [`Robot`]: LeRobot's async `RobotClient`, one call per observation, as
//! `stagetrace.lerobot.trace_robot_client` times LeRobot's own.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stagetrace::direct::{DirectCalls, DirectTransport, Mark};
use stagetrace::Stage;
use tokio::sync::Notify;
use tonic::transport::Channel;

use super::payload::{ActionChunk, TimedObservation};
use crate::client::{ClientLayer, ClientService, ClientStats, SendTrace, TrailerSlot};
use crate::proto::async_inference_client::AsyncInferenceClient;
use crate::proto::Empty;

mod state;

use state::{Pending, State};

/// How the robot runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RobotConfig {
    /// Control ticks per second (LeRobot's `fps`).
    pub fps: f64,
    /// The server's actions per chunk (for the refill threshold).
    pub chunk_size: usize,
    /// Send an observation when queued actions / chunk size is at most
    /// this (LeRobot's `chunk_size_threshold`).
    pub refill_threshold: f64,
    /// Control ticks that may send observations.
    pub ticks: u64,
    /// Time to capture one observation (the `capture` stage).
    pub capture: Duration,
    /// Filler bytes per observation, standing for camera frames.
    pub frame_bytes: usize,
    /// After the last sending tick, ticks go on (no observations) until
    /// every observation's chunk came and ran, at most this long; what is
    /// still open then ends `cancelled`.
    pub drain: Duration,
}

impl Default for RobotConfig {
    fn default() -> Self {
        RobotConfig {
            fps: 30.0,
            chunk_size: 10,
            refill_threshold: 0.5,
            ticks: 300,
            capture: Duration::from_millis(1),
            frame_bytes: 0,
            drain: Duration::from_secs(2),
        }
    }
}

/// What one [`Robot::run`] did: what the test or the demo holds the
/// records and the server's own account against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RobotReport {
    /// Control ticks run.
    pub ticks: u64,
    /// Actions executed.
    pub actions: u64,
    /// Ticks without an action.
    pub dry_ticks: u64,
    /// Observations sent.
    pub observations: u64,
    /// … queued by the server.
    pub queued: u64,
    /// … pushed out of the server's queue by a newer one (failed `replaced`).
    pub replaced: u64,
    /// … skipped by the server (failed `skipped`).
    pub skipped: u64,
    /// … the server said nothing of (failed `disconnected` / `no timing`).
    pub unanswered: u64,
    /// Chunks that ended an observation's transport.
    pub chunks: u64,
    /// Chunks whose timing named no observation in flight.
    pub unmatched: u64,
    /// Calls submitted whole (their chunk's first action ran).
    pub completed: u64,
    /// Calls still open when the run ended (failed `cancelled`).
    pub cancelled: u64,
    /// `GetActions` calls that failed.
    pub poll_errors: u64,
    /// The client layer's counters.
    pub client: ClientStats,
}

/// LeRobot's async robot client on a tonic `Channel`: a control loop at
/// [`RobotConfig::fps`] executing one action per tick from a queue merged
/// by timestep, sending an observation (`SendObservations`) when the queue
/// runs low, and a receiver polling `GetActions`.
///
/// Each observation is one call ([`DirectCalls`], `kind` `lerobot`, `seq` its
/// timestep): `capture`; the transport from the `SendObservations` start to
/// the `GetActions` reply carrying its chunk, with that reply's server
/// timing (the server's `queue`, `infer`, `poll_wait`); `dispatch` from the
/// reply to the chunk's first action; `margin_ms` / `dry_ticks` of the action
/// queue when the chunk came. An observation the server replaced or skipped
/// ends as a failed call (`replaced`, `skipped`).
#[derive(Clone)]
pub struct Robot {
    inner: Arc<Inner>,
}

struct Inner {
    client: AsyncInferenceClient<ClientService<Channel>>,
    layer: ClientLayer,
    calls: DirectCalls,
    cfg: RobotConfig,
    peer: String,
    state: Mutex<State>,
    stop: Notify,
}

impl fmt::Debug for Robot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Robot")
            .field("cfg", &self.inner.cfg)
            .field("peer", &self.inner.peer)
            .finish_non_exhaustive()
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Robot {
    /// A robot talking over `channel` (a [`ClientLayer`] is added; `fps`
    /// kept within 0.1 … 10 000, durations cut to an hour), its
    /// calls going to `calls`; `peer` names the server for the clock
    /// estimate (e.g. `grpc://host:port`).
    pub fn new(
        channel: Channel,
        calls: DirectCalls,
        cfg: RobotConfig,
        peer: impl Into<String>,
    ) -> Self {
        let cfg = RobotConfig {
            fps: super::sane_fps(cfg.fps),
            capture: cfg.capture.min(super::MAX_WAIT),
            drain: cfg.drain.min(super::MAX_WAIT),
            ..cfg
        };
        let layer = ClientLayer::new();
        let client = AsyncInferenceClient::new(tower::Layer::layer(&layer, channel));
        let dt_ns = (1e9 / cfg.fps) as i64;
        Robot {
            inner: Arc::new(Inner {
                client,
                layer,
                state: Mutex::new(State::new(calls.clone(), dt_ns)),
                calls,
                cfg,
                peer: peer.into(),
                stop: Notify::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Plain values: a panic elsewhere leaves nothing half-written.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run [`RobotConfig::ticks`] sending ticks, then drain; `observe`
    /// gives the robot's state at a timestep (the value the server compares
    /// for similarity). Returns what happened; the calls are in the layer.
    /// Run a robot once: a second run goes on from its state and report.
    pub async fn run(&self, observe: impl FnMut(u64) -> f64) -> RobotReport {
        self.run_until(observe, std::future::pending()).await
    }

    /// [`run`](Self::run) that also ends its sending ticks when `stop`
    /// resolves (then drains as after the last tick): a robot that runs
    /// until it is told, with [`RobotConfig::ticks`] at `u64::MAX`. A tick
    /// under way (its observation being sent) finishes first.
    pub async fn run_until(
        &self,
        mut observe: impl FnMut(u64) -> f64,
        stop: impl std::future::Future<Output = ()>,
    ) -> RobotReport {
        let cfg = self.inner.cfg;
        let receiver = tokio::spawn(self.clone().receive());
        let period = Duration::from_secs_f64(1.0 / cfg.fps);
        let mut ticks = tokio::time::interval(period);
        // LeRobot sleeps out the rest of a tick: a late tick delays the next.
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = std::pin::pin!(stop);
        for _ in 0..cfg.ticks {
            tokio::select! {
                biased;
                () = &mut stop => break,
                _ = ticks.tick() => {}
            }
            self.state().act();
            let wants = self
                .state()
                .wants_observation(cfg.chunk_size, cfg.refill_threshold);
            if wants {
                self.observe_and_send(&mut observe).await;
            }
        }
        let drain_end = Instant::now() + cfg.drain;
        while self.state().outstanding() && Instant::now() < drain_end {
            ticks.tick().await;
            self.state().act();
        }
        self.inner.stop.notify_one();
        // The receiver ends at once (its poll is dropped); bounded anyway.
        if tokio::time::timeout(Duration::from_secs(5), receiver)
            .await
            .is_err()
        {
            self.state().report.poll_errors += 1;
        }
        let mut st = self.state();
        st.cancel_all();
        st.report.client = self.inner.layer.stats();
        st.report
    }

    /// Capture one observation and send it; the server's outcome settles it.
    async fn observe_and_send(&self, observe: &mut impl FnMut(u64) -> f64) {
        let calls = &self.inner.calls;
        let mut call = calls.start(Some("lerobot"), None);
        let capture = Mark::of_stage(Stage::Capture, calls.host_figures());
        if !self.inner.cfg.capture.is_zero() {
            tokio::time::sleep(self.inner.cfg.capture).await;
        }
        let (ts, must_go) = self.state().next_observation();
        let obs = TimedObservation {
            timestep: ts,
            value: observe(ts),
            sent_unix_ns: unix_ns(),
            must_go,
            frame: vec![0; self.inner.cfg.frame_bytes],
        };
        call.add_stage(Stage::Capture, capture, false);
        call.set_seq(ts);
        let transport = DirectTransport::start(Some(&self.inner.peer));
        let slot = TrailerSlot::new();
        let mut req = tonic::Request::new(futures_util::stream::iter(obs.to_messages()));
        req.extensions_mut()
            .insert(SendTrace(call.trace_parent(Some(&transport))));
        req.extensions_mut().insert(slot.clone());
        let sent = self.inner.client.clone().send_observations(req).await;
        let outcome = slot.take().and_then(|t| t.outcome);
        let reason = if sent.is_err() {
            "disconnected"
        } else {
            "no timing"
        };
        self.state()
            .settle(Pending { call, transport }, ts, outcome, reason);
    }

    /// LeRobot's receiver thread: poll `GetActions` until stopped.
    async fn receive(self) {
        let mut client = self.inner.client.clone();
        loop {
            let slot = TrailerSlot::new();
            let mut req = tonic::Request::new(Empty {});
            req.extensions_mut().insert(slot.clone());
            let reply = tokio::select! {
                r = client.get_actions(req) => r,
                () = self.inner.stop.notified() => return,
            };
            let at = Instant::now();
            match reply {
                Ok(r) => {
                    let Some(chunk) = ActionChunk::from_bytes(&r.into_inner().data) else {
                        continue;
                    };
                    let timing = slot.take().and_then(|t| t.timing);
                    self.state().on_chunk(chunk, timing, at);
                }
                Err(_) => {
                    self.state().report.poll_errors += 1;
                    // A server that went away: poll again shortly, until stopped.
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                        () = self.inner.stop.notified() => return,
                    }
                }
            }
        }
    }
}
