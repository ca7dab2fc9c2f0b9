//! The simulated robot and policy server of the built-in demo pipeline,
//! shared by `stagetrace demo` (a fixed number of calls, then a report) and
//! by an experiment's demo target (long-lived, knobs changed at runtime).
//!
//! - [`SimModel`]: the policy server's handler — a checksum of the frame
//!   (pre-processing), a fixed model cost, an action chunk derived from the
//!   checksum (post-processing), and optionally a one-off step of the
//!   server's clock.
//! - [`Robot`]: one control cycle — a simulated camera (`capture`), one
//!   request over a [`Link`] (`transport`), a simulated actuator
//!   (`dispatch`) — inside a `call` span, the output digest attached.
//! - [`Pacer`]: the fixed-rate schedule of the control loop.
//!
//! What the two callers do differently is a parameter here, not a copy:
//! the spin mode of the precise waits ([`Spin::Hot`] for the demo's short,
//! precise runs; [`Spin::Yielding`] for experiments, whose CPU factor shares
//! the cores), how the camera refreshes its frame ([`Refresh`]), the
//! checksum stride, and whether the server's clock steps.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use stagetrace_net::ws::HandlerFuture;
use stagetrace_net::{
    ClientOptions, Handler, HandlerError, InferTimer, MsgMap, NdArray, PolicyClient, ServerClock,
    TracedHttpClient,
};
use tracing::Instrument;

use crate::sim::{self, Spin};

/// Action chunk shape the simulated model answers: 50 steps × 7 joints
/// (ALOHA-style).
pub const ACTION_CHUNK: [u64; 2] = [50, 7];

/// Width of a simulated camera frame in pixels (RGB, 3 bytes a pixel); the
/// frame has as many rows as the payload needs.
pub const FRAME_WIDTH: u64 = 160;

/// The prompt every simulated observation carries.
pub const PROMPT: &str = "pick up the red cup";

/// Seed of the simulated camera's pseudo-random pixels.
const CAMERA_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// Why the simulated robot could not connect or complete a call: the
/// transport's own message (it names the address and the cause).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError(String);

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}

fn sim_err(e: impl fmt::Display) -> SimError {
    SimError(e.to_string())
}

/// A server runtime for the simulated policy server: two worker threads
/// named `thread_name`, timers and I/O enabled.
pub fn server_runtime(thread_name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(thread_name)
        .enable_all()
        .build()
}

// ---------------------------------------------------------------------------
// server
// ---------------------------------------------------------------------------

/// A step of the server's clock during a run, as an NTP step would make it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockStep {
    /// The clock jumps while the model answers the call with this `seq`.
    pub at_seq: u64,
    /// The jump, ns (negative: backwards).
    pub jump_ns: i64,
}

/// The simulated policy: pre-processing (a checksum over a sample of the
/// frame), the model (a fixed cost, waited out precisely), post-processing
/// (an [`ACTION_CHUNK`] derived from the checksum). Serve it with
/// `PolicyServer::spawn` (it is a [`Handler`]) or call [`SimModel::infer`]
/// from any other server.
#[derive(Clone, Debug)]
pub struct SimModel {
    cost: Duration,
    stride: usize,
    spin: Spin,
    step: Option<(ServerClock, ClockStep)>,
}

impl SimModel {
    /// A model costing `cost` a call; checksum over every 256th byte of the
    /// frame, [`Spin::Yielding`] waits, no clock step.
    pub fn new(cost: Duration) -> Self {
        SimModel {
            cost,
            stride: 256,
            spin: Spin::Yielding,
            step: None,
        }
    }

    /// Pre-processing reads every `stride`-th byte of the frame (0 counts as
    /// 1). Sampling keeps `infer` close to the model's cost even for large
    /// frames and in debug builds; the stride also decides the output.
    #[must_use]
    pub fn checksum_stride(mut self, stride: usize) -> Self {
        self.stride = stride;
        self
    }

    /// How the model's wait ends (see [`Spin`]).
    #[must_use]
    pub fn spin(mut self, spin: Spin) -> Self {
        self.spin = spin;
        self
    }

    /// Step `clock` (the server's) by `step.jump_ns` while answering the
    /// call numbered `step.at_seq` (read from the observation's `seq`).
    #[must_use]
    pub fn clock_step(mut self, clock: ServerClock, step: ClockStep) -> Self {
        self.step = Some((clock, step));
        self
    }

    /// Answer one observation: `{"actions": f32 array of ACTION_CHUNK}`.
    /// Marks the end of pre-processing and the start of post-processing on
    /// `timer`.
    pub async fn infer(&self, obs: MsgMap, timer: InferTimer) -> Result<MsgMap, HandlerError> {
        let seq = obs.get("seq").and_then(rmpv::Value::as_u64);
        let frame_sum = obs
            .array("observation/image")
            .map_or(0, |a| sim::fnv1a_strided(&a.data, self.stride));
        timer.pre_done();
        sim::sleep_until_precise(Instant::now() + self.cost, self.spin).await;
        timer.post_start();
        let n = (ACTION_CHUNK[0] * ACTION_CHUNK[1]) as usize;
        let chunk = sim::pseudo_actions(frame_sum, n);
        if let (Some((clock, step)), Some(seq)) = (&self.step, seq) {
            if seq == step.at_seq {
                clock.step_ns(step.jump_ns);
            }
        }
        Ok(MsgMap::new().with("actions", NdArray::from_f32(&chunk, &ACTION_CHUNK)))
    }
}

impl Handler for SimModel {
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        let model = self.clone();
        Box::pin(async move { model.infer(request, timer).await })
    }
}

// ---------------------------------------------------------------------------
// robot
// ---------------------------------------------------------------------------

/// Transport between the simulated robot and the policy server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// WebSocket + msgpack (the openpi protocol), `ws://ADDR`.
    Ws,
    /// HTTP POST of a msgpack body to `http://ADDR/infer`.
    Http,
}

/// The robot's connection to the policy server; each call runs in a
/// `transport` span (the clients of `stagetrace-net` open it).
#[derive(Debug)]
pub enum Link {
    /// A WebSocket client, reconnected before a call if the link dropped.
    Ws(Box<PolicyClient>),
    /// A traced HTTP client and the URL it posts to.
    Http(TracedHttpClient, String),
}

impl Link {
    /// Connect to the server at `addr` (WebSocket) or prepare the client
    /// (HTTP); every call gives up after `call_timeout`.
    pub async fn connect(
        transport: Transport,
        addr: SocketAddr,
        call_timeout: Duration,
    ) -> Result<Link, SimError> {
        match transport {
            Transport::Ws => {
                let options = ClientOptions {
                    call_timeout,
                    ..ClientOptions::default()
                };
                PolicyClient::connect_with(&format!("ws://{addr}"), options)
                    .await
                    .map(|c| Link::Ws(Box::new(c)))
                    .map_err(sim_err)
            }
            Transport::Http => TracedHttpClient::new()
                .map(|c| Link::Http(c.timeout(call_timeout), format!("http://{addr}/infer")))
                .map_err(sim_err),
        }
    }

    /// One policy call: the observation out, the action map back.
    pub async fn infer(&mut self, obs: &MsgMap) -> Result<MsgMap, SimError> {
        match self {
            Link::Ws(client) => {
                if !client.is_connected() {
                    client.reconnect().await.map_err(sim_err)?;
                }
                client.infer(obs).await.map(|r| r.action).map_err(sim_err)
            }
            Link::Http(client, url) => {
                let req = client
                    .inner()
                    .post(url.as_str())
                    .header("content-type", "application/msgpack")
                    .body(obs.to_msgpack());
                let reply = client.send(req).await.map_err(sim_err)?;
                MsgMap::from_msgpack(&reply.body).map_err(sim_err)
            }
        }
    }

    /// Close the connection (WebSocket: a close handshake).
    pub async fn close(self) {
        if let Link::Ws(client) = self {
            client.close().await;
        }
    }
}

/// How the simulated camera renews its frame between captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// Refill the whole frame with fresh pseudo-random bytes: memory work
    /// that grows with the frame, as a real capture's readout does.
    Full,
    /// Fill the frame once per size, then overwrite its first 8 bytes each
    /// capture: frames still differ, but the capture's cost does not grow
    /// with the frame (so a payload ramp loads the transport only).
    Touch,
}

/// The simulated camera: an RGB frame [`FRAME_WIDTH`] pixels wide and as
/// many rows as the payload needs, pseudo-random from a fixed seed (so a
/// run's frames are the same in every run).
#[derive(Debug)]
pub struct Camera {
    frame: Vec<u8>,
    shape: [u64; 3],
    kb: Option<u64>,
    state: u64,
    refresh: Refresh,
}

impl Camera {
    /// A camera with no frame yet; the first capture sizes it.
    pub fn new(refresh: Refresh) -> Self {
        Camera {
            frame: Vec::new(),
            shape: [0, FRAME_WIDTH, 3],
            kb: None,
            state: CAMERA_SEED,
            refresh,
        }
    }

    /// Capture a frame of at least `kb` KiB (whole rows); `None` for 0 KiB.
    pub fn capture(&mut self, kb: u64) -> Option<NdArray> {
        if self.kb != Some(kb) {
            let row = FRAME_WIDTH * 3;
            let rows = kb.saturating_mul(1024).div_ceil(row);
            self.shape = [rows, FRAME_WIDTH, 3];
            self.frame = vec![0; usize::try_from(rows.saturating_mul(row)).unwrap_or(0)];
            self.kb = Some(kb);
            if self.refresh == Refresh::Touch {
                sim::fill_random(&mut self.frame, &mut self.state);
            }
        }
        if self.frame.is_empty() {
            return None;
        }
        match self.refresh {
            Refresh::Full => sim::fill_random(&mut self.frame, &mut self.state),
            Refresh::Touch => {
                let v = sim::xorshift(&mut self.state).to_le_bytes();
                let n = v.len().min(self.frame.len());
                self.frame[..n].copy_from_slice(&v[..n]);
            }
        }
        Some(NdArray::from_u8(self.frame.clone(), &self.shape))
    }
}

/// The observation the robot sends for call `seq`: the prompt, the call
/// number, a 7-joint state and, if there is one, the camera frame
/// (`observation/image`).
pub fn observation(seq: u64, frame: Option<NdArray>) -> MsgMap {
    let mut obs = MsgMap::new().with("prompt", PROMPT).with("seq", seq).with(
        "observation/state",
        NdArray::from_f32(&[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6], &[7]),
    );
    if let Some(frame) = frame {
        obs.insert("observation/image", frame);
    }
    obs
}

/// What the robot's calls cost and how its waits end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RobotConfig {
    /// Cost of one capture (frame work included, then waited out).
    pub capture: Duration,
    /// Cost of handing one action chunk to the actuator.
    pub dispatch: Duration,
    /// How the capture and dispatch waits end.
    pub spin: Spin,
    /// How the camera renews its frame.
    pub refresh: Refresh,
}

/// The simulated robot: camera, link to the policy server, actuator.
#[derive(Debug)]
pub struct Robot {
    link: Link,
    camera: Camera,
    cfg: RobotConfig,
}

impl Robot {
    /// A robot calling the server over `link`.
    pub fn new(link: Link, cfg: RobotConfig) -> Self {
        Robot {
            link,
            camera: Camera::new(cfg.refresh),
            cfg,
        }
    }

    /// One control cycle, in a `call` span numbered `seq`: capture a
    /// `payload_kb` frame (`capture` span), build the observation, hand it
    /// to `before_send` (inside the call, outside every stage: where a
    /// caller pauses the client or keeps a copy), send it (`transport`),
    /// hand the answer to the actuator (`dispatch` span) and attach the
    /// action chunk's FNV-1a digest to the call as its output digest.
    pub async fn call(
        &mut self,
        seq: u64,
        payload_kb: u64,
        before_send: impl FnOnce(&MsgMap),
    ) -> Result<(), SimError> {
        let span = tracing::info_span!("call", seq = seq);
        async {
            let frame = {
                let _capture = tracing::info_span!("capture").entered();
                let begin = Instant::now();
                let frame = self.camera.capture(payload_kb);
                sim::sleep_until_precise_blocking(begin + self.cfg.capture, self.cfg.spin);
                frame
            };
            let obs = observation(seq, frame);
            before_send(&obs);
            let action = self.link.infer(&obs).await?;
            let digest = {
                let _dispatch = tracing::info_span!("dispatch").entered();
                let begin = Instant::now();
                let digest = action.array("actions").map(|a| sim::fnv1a(&a.data));
                sim::sleep_until_precise_blocking(begin + self.cfg.dispatch, self.cfg.spin);
                digest
            };
            if let Some(d) = digest {
                stagetrace::record_output_digest(&tracing::Span::current(), d);
            }
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// Close the link to the server.
    pub async fn close(self) {
        self.link.close().await;
    }
}

/// What a robot loop counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RobotStats {
    /// Calls answered.
    pub completed: u64,
    /// Calls that failed.
    pub failed: u64,
    /// The first failure's message.
    pub first_error: Option<String>,
}

impl RobotStats {
    /// Count one call's outcome; `true` when it is the first failure (now
    /// in [`RobotStats::first_error`]).
    pub fn count(&mut self, outcome: Result<(), SimError>) -> bool {
        match outcome {
            Ok(()) => {
                self.completed += 1;
                false
            }
            Err(e) => {
                self.failed += 1;
                let first = self.first_error.is_none();
                if first {
                    self.first_error = Some(e.0);
                }
                first
            }
        }
    }
}

/// The control loop's fixed-rate schedule: call `seq` is due at
/// `start + seq / hz`, so a late call does not shift the ones after it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pacer {
    start: Instant,
    period: Duration,
    hz: f64,
}

impl Pacer {
    /// A schedule starting now; `None` unless `hz` is a finite rate above 0
    /// with a representable period.
    pub fn new(hz: f64) -> Option<Pacer> {
        if !(hz.is_finite() && hz > 0.0) {
            return None;
        }
        let period = Duration::try_from_secs_f64(1.0 / hz).ok()?;
        Some(Pacer {
            start: Instant::now(),
            period,
            hz,
        })
    }

    /// When call `seq` is due.
    pub fn due(&self, seq: u64) -> Instant {
        self.start + self.period.mul_f64(seq as f64)
    }

    /// `seq`, or — when its tick is more than four periods past (a long
    /// pause or stall) — the first call still due, so that missed ticks are
    /// skipped rather than fired back to back.
    pub fn skip_missed(&self, seq: u64) -> u64 {
        let now = Instant::now();
        if now > self.due(seq) + self.period * 4 {
            (now.duration_since(self.start).as_secs_f64() * self.hz).ceil() as u64
        } else {
            seq
        }
    }

    /// Wait until call `seq` is due (see [`sim::sleep_until_precise`]).
    pub fn wait(&self, seq: u64, spin: Spin) -> impl Future<Output = ()> {
        sim::sleep_until_precise(self.due(seq), spin)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use stagetrace_net::PolicyServer;

    #[test]
    fn camera_frames_have_whole_rows_and_differ() {
        for refresh in [Refresh::Full, Refresh::Touch] {
            let mut cam = Camera::new(refresh);
            assert!(cam.capture(0).is_none());
            let a = cam.capture(100).unwrap();
            let b = cam.capture(100).unwrap();
            // 100 KiB in rows of 480 bytes: 214 rows.
            assert_eq!(a.shape, vec![214, FRAME_WIDTH, 3]);
            assert_eq!(a.data.len(), 214 * 480);
            assert_ne!(a.data, b.data, "{refresh:?}: frames must differ");
            let c = cam.capture(1).unwrap();
            assert_eq!(c.shape, vec![3, FRAME_WIDTH, 3]);
        }
        // Touch renews only the first 8 bytes; Full renews all of them.
        let mut cam = Camera::new(Refresh::Touch);
        let (a, b) = (cam.capture(4).unwrap(), cam.capture(4).unwrap());
        assert_eq!(a.data[8..], b.data[8..]);
        let mut cam = Camera::new(Refresh::Full);
        let (a, b) = (cam.capture(4).unwrap(), cam.capture(4).unwrap());
        assert_ne!(a.data[8..], b.data[8..]);
        // Same seed, same frames.
        let mut again = Camera::new(Refresh::Full);
        assert_eq!(again.capture(4).unwrap().data, a.data);
    }

    #[test]
    fn pacer_keeps_its_schedule_and_skips_a_stall() {
        assert!(Pacer::new(0.0).is_none());
        assert!(Pacer::new(f64::NAN).is_none());
        assert!(Pacer::new(f64::INFINITY).is_none());
        let p = Pacer::new(1000.0).unwrap();
        assert_eq!(p.due(10) - p.due(0), Duration::from_millis(10));
        assert_eq!(p.skip_missed(0), 0);
        std::thread::sleep(Duration::from_millis(20));
        // 20 ms late at 1 kHz: the next due call is at least number 20.
        assert!(p.skip_missed(0) >= 20, "{}", p.skip_missed(0));
        assert_eq!(p.skip_missed(1_000_000), 1_000_000);
    }

    #[test]
    fn stats_keep_the_first_failure() {
        let mut s = RobotStats::default();
        assert!(!s.count(Ok(())));
        assert!(s.count(Err(SimError("first".into()))));
        assert!(!s.count(Err(SimError("second".into()))));
        assert_eq!((s.completed, s.failed), (1, 2));
        assert_eq!(s.first_error.as_deref(), Some("first"));
    }

    #[tokio::test]
    async fn robot_calls_the_model_over_loopback_and_the_clock_steps_once() {
        let clock = ServerClock::skewed_ns(0);
        let model = SimModel::new(Duration::from_millis(2))
            .checksum_stride(64)
            .spin(Spin::Hot)
            .clock_step(
                clock.clone(),
                ClockStep {
                    at_seq: 1,
                    jump_ns: 5_000_000,
                },
            );
        let server = PolicyServer::builder()
            .clock(clock.clone())
            .spawn(SocketAddr::from(([127, 0, 0, 1], 0)), model)
            .await
            .unwrap();
        let link = Link::connect(Transport::Ws, server.local_addr(), Duration::from_secs(10))
            .await
            .unwrap();
        let mut robot = Robot::new(
            link,
            RobotConfig {
                capture: Duration::from_millis(1),
                dispatch: Duration::from_millis(1),
                spin: Spin::Yielding,
                refresh: Refresh::Touch,
            },
        );
        let mut stats = RobotStats::default();
        let mut sent = Vec::new();
        for seq in 0..3 {
            let outcome = robot
                .call(seq, 8, |obs| {
                    sent.push(obs.get("seq").and_then(rmpv::Value::as_u64));
                })
                .await;
            stats.count(outcome);
        }
        assert_eq!(
            stats,
            RobotStats {
                completed: 3,
                ..RobotStats::default()
            }
        );
        assert_eq!(sent, vec![Some(0), Some(1), Some(2)]);
        assert_eq!(clock.offset_ns(), 5_000_000, "one step, at seq 1");
        robot.close().await;
        server.shutdown().await;
    }

    #[tokio::test]
    async fn model_answers_an_action_chunk_from_the_frame() {
        let server = PolicyServer::builder()
            .spawn(
                SocketAddr::from(([127, 0, 0, 1], 0)),
                SimModel::new(Duration::ZERO),
            )
            .await
            .unwrap();
        let mut link = Link::connect(Transport::Ws, server.local_addr(), Duration::from_secs(10))
            .await
            .unwrap();
        let mut cam = Camera::new(Refresh::Touch);
        let obs = observation(7, cam.capture(16));
        assert_eq!(
            obs.get("prompt").and_then(rmpv::Value::as_str),
            Some(PROMPT)
        );
        let a = link.infer(&obs).await.unwrap();
        let a = a.array("actions").unwrap();
        assert_eq!(a.shape, ACTION_CHUNK.to_vec());
        let again = link.infer(&obs).await.unwrap();
        assert_eq!(
            again.array("actions").unwrap().data,
            a.data,
            "deterministic"
        );
        let b = link.infer(&observation(8, cam.capture(16))).await.unwrap();
        assert_ne!(b.array("actions").unwrap().data, a.data, "a new frame");
        link.close().await;
        server.shutdown().await;
    }
}
