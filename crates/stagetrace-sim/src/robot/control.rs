//! The paced control loop: one [`Robot`] call per tick of a [`Pacer`], for
//! a fixed number of calls or until stopped, with knobs that a caller turns
//! while it runs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace_net::executor::ExecutorClient;
use stagetrace_net::{msg::MsgMap, ws::ClientOptions};
use stagetrace_wire::Hops;

use super::{Connection, Pacer, Robot, RobotConfig, RobotStats};
use crate::{SimError, Transport};

/// Knobs of a running control loop, read before every call: a change takes
/// effect at the next call.
#[derive(Debug)]
pub struct Knobs {
    /// Camera frame size, KiB.
    pub payload_kb: AtomicU64,
    /// Client pause length (µs), 0 = none: the whole client thread stops
    /// once per period, inside the call but outside every stage (the
    /// stand-in for a garbage collector's pause).
    pub pause_us: AtomicU64,
    /// Client pause period (µs).
    pub pause_every_us: AtomicU64,
}

impl Knobs {
    /// A `payload_kb` frame, no pause (every 2 s once one is set).
    pub fn new(payload_kb: u64) -> Self {
        Knobs {
            payload_kb: AtomicU64::new(payload_kb),
            pause_us: AtomicU64::new(0),
            pause_every_us: AtomicU64::new(2_000_000),
        }
    }
}

/// Where a control loop is, after each call.
#[derive(Debug)]
pub struct CallProgress<'a> {
    /// The call just made.
    pub seq: u64,
    /// Calls made so far.
    pub done: u64,
    /// Outcomes so far.
    pub stats: &'a RobotStats,
    /// This call was the first to fail (its message is in `stats.first_error`).
    pub first_failure: bool,
    /// The relays (gateways) its answer came through, with their own
    /// timing (empty for a direct call).
    pub hops: &'a Hops,
}

/// A robot calling the policy server at a fixed rate.
#[derive(Clone, Debug)]
pub struct ControlLoop {
    /// Calls per second.
    pub hz: f64,
    /// Calls to make (`None`: until stopped).
    pub calls: Option<u64>,
    /// The robot's costs and waits (the pacer's waits end the same way).
    pub robot: RobotConfig,
    /// Skip ticks more than four periods past (after a pause or a stall)
    /// instead of firing them back to back.
    pub skip_missed: bool,
    /// A call gives up after this long.
    pub call_timeout: Duration,
    /// Keeps a copy of the observation sent after each change of the frame
    /// size (what a replay of the robot's traffic sends).
    pub keep_observation: Option<Arc<Mutex<Option<MsgMap>>>>,
}

impl ControlLoop {
    /// Connect to the server at `addr` and call it until `calls` are made
    /// or `stop` is set (checked before every call); `on_call` hears of each
    /// call. Fails only when the server cannot be reached or the rate is
    /// not a rate; failed calls are counted in the stats.
    pub async fn run(
        &self,
        transport: Transport,
        addr: SocketAddr,
        knobs: &Knobs,
        stop: &AtomicBool,
        on_call: impl FnMut(CallProgress<'_>),
    ) -> Result<RobotStats, SimError> {
        self.run_with_executor(transport, addr, None, knobs, stop, on_call)
            .await
    }

    /// As [`ControlLoop::run`], dispatching each action chunk to the remote
    /// executor at `executor` (WebSocket, `docs/protocol.md` "Executor
    /// ack") when given, instead of the local actuator.
    pub async fn run_with_executor(
        &self,
        transport: Transport,
        addr: SocketAddr,
        executor: Option<SocketAddr>,
        knobs: &Knobs,
        stop: &AtomicBool,
        on_call: impl FnMut(CallProgress<'_>),
    ) -> Result<RobotStats, SimError> {
        let connection = Connection::connect(transport, addr, self.call_timeout).await?;
        let pacer = self.pacer()?;
        let mut robot = Robot::new(connection, self.robot);
        if let Some(addr) = executor {
            robot = robot.with_executor(self.connect_executor(addr).await?);
        }
        let stats = self
            .call_until_done(&mut robot, &pacer, knobs, stop, on_call)
            .await;
        robot.close().await;
        Ok(stats)
    }

    /// The pacer of `hz`; an error when it is not a rate.
    fn pacer(&self) -> Result<Pacer, SimError> {
        Pacer::new(self.hz).ok_or_else(|| {
            SimError::Config(format!(
                "the control rate {} Hz is not a rate above 0 calls per second",
                self.hz
            ))
        })
    }

    /// A connection to the remote executor at `addr`, with the loop's call
    /// timeout.
    async fn connect_executor(&self, addr: SocketAddr) -> Result<ExecutorClient, SimError> {
        let options = ClientOptions {
            call_timeout: self.call_timeout,
            ..ClientOptions::default()
        };
        ExecutorClient::connect_with(&format!("ws://{addr}"), options)
            .await
            .map_err(|e| SimError::Connect {
                addr,
                reason: e.to_string(),
            })
    }

    /// One call of `robot` per tick of `pacer` until `calls` are made or
    /// `stop` is set, the knobs read before each; `on_call` hears of each.
    async fn call_until_done(
        &self,
        robot: &mut Robot,
        pacer: &Pacer,
        knobs: &Knobs,
        stop: &AtomicBool,
        mut on_call: impl FnMut(CallProgress<'_>),
    ) -> RobotStats {
        let spin = self.robot.spin;
        let mut stats = RobotStats::default();
        let mut pause = ClientPause::default();
        let mut kept = KeptObservation::new(self.keep_observation.as_ref());
        let mut seq: u64 = 0;
        let mut done: u64 = 0;
        let more = |seq: u64| self.calls.is_none_or(|n| seq < n);
        while more(seq) && !stop.load(Ordering::Relaxed) {
            if self.skip_missed {
                seq = pacer.skip_missed(seq);
                if !more(seq) {
                    break;
                }
            }
            pacer.wait(seq, spin).await;
            let kb = knobs.payload_kb.load(Ordering::Relaxed);
            let length = Duration::from_micros(knobs.pause_us.load(Ordering::Relaxed));
            let every = Duration::from_micros(knobs.pause_every_us.load(Ordering::Relaxed).max(1));
            let outcome = robot
                .call(seq, kb, |obs| {
                    pause.take(length, every);
                    kept.keep(kb, obs);
                })
                .await;
            let first_failure = stats.count(outcome);
            done += 1;
            on_call(CallProgress {
                seq,
                done,
                stats: &stats,
                first_failure,
                hops: robot.last_hops(),
            });
            seq += 1;
        }
        stats
    }
}

/// The client's pause (`Knobs::pause_us` every `Knobs::pause_every_us`):
/// the whole client thread stops once per period, inside the call but
/// outside every stage, as a garbage collector's pause would.
#[derive(Debug, Default)]
struct ClientPause {
    /// When the next pause is due (`None`: no pause set).
    next: Option<Instant>,
}

impl ClientPause {
    /// Sleeps `pause` when one is due, one every `every` (a zero `pause`:
    /// none, and the period starts afresh when one is set).
    fn take(&mut self, pause: Duration, every: Duration) {
        if pause.is_zero() {
            self.next = None;
            return;
        }
        let now = Instant::now();
        let due = *self.next.get_or_insert(now + every);
        if now >= due {
            std::thread::sleep(pause);
            let mut next = due;
            while next <= now {
                next += every;
            }
            self.next = Some(next);
        }
    }
}

/// A copy of the observation sent after each change of the frame size
/// (`ControlLoop::keep_observation`: what a replay of the robot's traffic
/// sends).
struct KeptObservation<'a> {
    into: Option<&'a Arc<Mutex<Option<MsgMap>>>>,
    /// The frame size (KiB) of the copy kept (`u64::MAX`: none yet).
    kb: u64,
}

impl<'a> KeptObservation<'a> {
    fn new(into: Option<&'a Arc<Mutex<Option<MsgMap>>>>) -> Self {
        KeptObservation { into, kb: u64::MAX }
    }

    /// Keeps `obs`, a frame of `kb` KiB, when the size changed since the
    /// copy kept.
    fn keep(&mut self, kb: u64, obs: &MsgMap) {
        let Some(into) = self.into else { return };
        if self.kb != kb {
            if let Ok(mut k) = into.lock() {
                *k = Some(obs.clone());
                self.kb = kb;
            }
        }
    }
}
