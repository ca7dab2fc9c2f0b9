//! [`PolicyServer`]: LeRobot's async policy server (`transport.AsyncInference`)
//! with an injected inference time, timed through [`ServerLayer`](crate::tower::ServerLayer)'s
//! [`RequestTimer`] as `stagetrace.lerobot.trace_policy_server` times
//! LeRobot's own.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::{Request, Response, Status, Streaming};

use super::payload::{ActionChunk, Assembler, TimedObservation};
use crate::proto::async_inference_server::{AsyncInference, AsyncInferenceServer};
use crate::proto::{Actions, Empty, Observation, PolicySetup};
use crate::server::RequestTimer;
use crate::wire::{Disposition, ObsOutcome};

/// How the simulated policy behaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicyConfig {
    /// Actions per chunk (LeRobot's `actions_per_chunk`).
    pub chunk_size: usize,
    /// Pre-processing time, inside `infer`.
    pub pre: Duration,
    /// The model's time.
    pub model: Duration,
    /// Post-processing time, inside `infer`.
    pub post: Duration,
    /// The reply leaves no sooner than this after the poll began (LeRobot's
    /// `inference_latency`): the wait lands in `poll_wait`.
    pub latency: Duration,
    /// An observation whose value is closer than this to the last one run
    /// is skipped (LeRobot's `observations_similar`; 0: never).
    pub similarity: f64,
    /// How long a `GetActions` waits for an observation before answering
    /// empty (LeRobot's `obs_queue_timeout`).
    pub poll_timeout: Duration,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            chunk_size: 10,
            pre: Duration::from_millis(2),
            model: Duration::from_millis(20),
            post: Duration::from_millis(2),
            latency: Duration::ZERO,
            similarity: 0.0,
            poll_timeout: Duration::from_millis(200),
        }
    }
}

/// What the server did, told to [`PolicyServer::on_event`] as it happens:
/// the truth a test or the demo checks the robot's records against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerEvent {
    /// An observation arrived and was queued, replaced or skipped.
    Observation(ObsOutcome),
    /// A chunk for the observation of this timestep was sent.
    Chunk {
        /// The observation's timestep (the chunk's first action's).
        timestep: u64,
        /// The server's own reading, on its monotonic clock: the
        /// observation whole (TRANSFER_END read) → the policy took it.
        queued: Duration,
        /// The server's own reading: the policy took it → the chunk was
        /// built (pre-processing, model, post-processing).
        inferred: Duration,
        /// The robot's wall-clock stamp in the observation → the server's
        /// wall clock when it was whole: the true uplink when both run on
        /// one machine's clock (the demo), whatever the layer's skew.
        uplink_wall: Duration,
    },
    /// A poll found no observation in time: an empty reply.
    EmptyPoll,
}

type EventHook = Arc<dyn Fn(ServerEvent) + Send + Sync>;

/// LeRobot's policy server: one pending observation at most (a newer one
/// replaces it; one of a timestep already predicted, or too similar to the
/// last one run, is skipped, unless `must_go`); `GetActions` takes it, runs
/// the policy and returns a chunk of [`PolicyConfig::chunk_size`] actions.
///
/// Served behind a [`ServerLayer`](crate::tower::ServerLayer), each reply's
/// trailers say what the robot needs: `SendObservations` the outcome
/// (`stagetrace-obs-bin`, no timing), `GetActions` the timing of the
/// observation whose chunk it carries, from that observation's receive
/// (queue = received → taken, infer = taken → chunk ready, parts pre /
/// model / post, `poll_wait` = ready → the reply sent) with its `timestep`.
#[derive(Clone)]
pub struct PolicyServer {
    shared: Arc<Shared>,
}

struct Shared {
    cfg: PolicyConfig,
    state: Mutex<State>,
    arrived: Notify,
    events: Option<EventHook>,
}

/// Most predicted timesteps remembered (LeRobot keeps them all; a robot
/// sends timesteps that grow, so the oldest are the ones never asked again).
const PREDICTED_KEPT: usize = 4096;

#[derive(Default)]
struct State {
    slot: Option<Queued>,
    last_value: Option<f64>,
    predicted: BTreeSet<u64>,
}

struct Queued {
    obs: TimedObservation,
    timer: Option<RequestTimer>,
    /// When the whole observation was in (the truth [`ServerEvent::Chunk`]
    /// reports, read apart from the layer's own stamps).
    arrived: Instant,
    /// Its send stamp (the robot's wall clock) → the server's wall clock then.
    uplink_wall: Duration,
}

impl fmt::Debug for PolicyServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyServer")
            .field("cfg", &self.shared.cfg)
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // Plain values: a panic elsewhere leaves nothing half-written.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PolicyServer {
    /// A server with `cfg` (durations cut to an hour).
    pub fn new(cfg: PolicyConfig) -> Self {
        let cap = |d: Duration| d.min(super::MAX_WAIT);
        let cfg = PolicyConfig {
            pre: cap(cfg.pre),
            model: cap(cfg.model),
            post: cap(cfg.post),
            latency: cap(cfg.latency),
            poll_timeout: cap(cfg.poll_timeout),
            ..cfg
        };
        PolicyServer {
            shared: Arc::new(Shared {
                cfg,
                state: Mutex::new(State::default()),
                arrived: Notify::new(),
                events: None,
            }),
        }
    }

    /// Call `hook` with every [`ServerEvent`] (set before serving).
    pub fn on_event(self, hook: impl Fn(ServerEvent) + Send + Sync + 'static) -> Self {
        PolicyServer {
            shared: Arc::new(Shared {
                cfg: self.shared.cfg,
                state: Mutex::new(State::default()),
                arrived: Notify::new(),
                events: Some(Arc::new(hook)),
            }),
        }
    }

    /// The tonic service, to add to a `Server` (behind a [`ServerLayer`](crate::tower::ServerLayer)).
    pub fn into_service(self) -> AsyncInferenceServer<PolicyServer> {
        AsyncInferenceServer::new(self)
    }

    fn emit(&self, e: ServerEvent) {
        if let Some(hook) = &self.shared.events {
            hook(e);
        }
    }

    /// LeRobot's `_enqueue_observation`: the checks, then the one slot.
    fn enqueue(
        &self,
        obs: TimedObservation,
        timer: Option<RequestTimer>,
        arrived: (Instant, u64),
    ) -> ObsOutcome {
        let ts = obs.timestep;
        let mut st = lock(&self.shared.state);
        let predicted = st.predicted.contains(&ts);
        let similar = st
            .last_value
            .is_some_and(|last| (obs.value - last).abs() < self.shared.cfg.similarity);
        let outcome = if obs.must_go || st.last_value.is_none() || !(predicted || similar) {
            let replaced = st.slot.take().map(|q| q.obs.timestep);
            let uplink_wall = Duration::from_nanos(arrived.1.saturating_sub(obs.sent_unix_ns));
            st.slot = Some(Queued {
                obs,
                timer,
                arrived: arrived.0,
                uplink_wall,
            });
            ObsOutcome {
                disposition: Disposition::Queued,
                timestep: Some(ts),
                replaced,
            }
        } else {
            ObsOutcome {
                disposition: if predicted {
                    Disposition::SkippedPredicted
                } else {
                    Disposition::SkippedSimilar
                },
                timestep: Some(ts),
                replaced: None,
            }
        };
        drop(st);
        if outcome.disposition == Disposition::Queued {
            self.shared.arrived.notify_one();
        }
        outcome
    }

    /// Take the pending observation, waiting until `deadline`; marks it
    /// predicted and last run, as LeRobot's `GetActions` does.
    async fn take(&self, deadline: Instant) -> Option<Queued> {
        loop {
            {
                let mut st = lock(&self.shared.state);
                if let Some(q) = st.slot.take() {
                    st.predicted.insert(q.obs.timestep);
                    while st.predicted.len() > PREDICTED_KEPT {
                        st.predicted.pop_first();
                    }
                    st.last_value = Some(q.obs.value);
                    return Some(q);
                }
            }
            // A permit left by an observation taken meanwhile only loops once more.
            if tokio::time::timeout_at(deadline, self.shared.arrived.notified())
                .await
                .is_err()
            {
                return None;
            }
        }
    }

    /// The policy on `q`, its parts marked on the observation's timer.
    async fn infer(&self, q: &Queued) -> ActionChunk {
        let cfg = &self.shared.cfg;
        let timer = q.timer.as_ref();
        mark(timer, RequestTimer::infer_start);
        tokio::time::sleep(cfg.pre).await;
        mark(timer, RequestTimer::pre_done);
        tokio::time::sleep(cfg.model).await;
        mark(timer, RequestTimer::post_start);
        tokio::time::sleep(cfg.post).await;
        let ts = q.obs.timestep;
        let actions = (0..cfg.chunk_size)
            .map(|i| q.obs.value + (i as f64) * 1e-3)
            .collect();
        mark(timer, RequestTimer::ready);
        ActionChunk {
            first_timestep: ts,
            actions,
        }
    }
}

/// Mark `timer` with `f`, when the observation has one (a server without
/// the layer has none).
fn mark(timer: Option<&RequestTimer>, f: fn(&RequestTimer)) {
    if let Some(t) = timer {
        f(t);
    }
}

#[tonic::async_trait]
impl AsyncInference for PolicyServer {
    async fn send_observations(
        &self,
        request: Request<Streaming<Observation>>,
    ) -> Result<Response<Empty>, Status> {
        let timer = RequestTimer::of(&request);
        let mut stream = request.into_inner();
        let mut assembler = Assembler::default();
        loop {
            let Some(msg) = stream.message().await? else {
                return Err(Status::invalid_argument(
                    "observation stream ended before TRANSFER_END",
                ));
            };
            match assembler.push(msg) {
                Ok(true) => break,
                Ok(false) => {}
                Err(_) => {
                    return Err(Status::resource_exhausted(format!(
                        "observation larger than {} bytes",
                        super::payload::MAX_OBSERVATION_BYTES
                    )))
                }
            }
        }
        // LeRobot stops reading at TRANSFER_END: the observation is in.
        if let Some(t) = &timer {
            t.received_now();
        }
        // Read apart from the layer's stamps: the truth a demo checks.
        let arrived = (Instant::now(), super::payload::unix_ns());
        let obs = TimedObservation::from_bytes(assembler.bytes()).ok_or_else(|| {
            Status::invalid_argument("observation is not a stagetrace msgpack observation")
        })?;
        let outcome = self.enqueue(obs, timer.clone(), arrived);
        if let Some(t) = &timer {
            t.set_outcome(outcome);
            // The observation's timing travels with its chunk.
            t.skip_timing();
        }
        self.emit(ServerEvent::Observation(outcome));
        Ok(Response::new(Empty {}))
    }

    async fn get_actions(&self, request: Request<Empty>) -> Result<Response<Actions>, Status> {
        let poll = RequestTimer::of(&request);
        let start = Instant::now();
        let Some(q) = self.take(start + self.shared.cfg.poll_timeout).await else {
            if let Some(t) = &poll {
                t.skip_timing();
            }
            self.emit(ServerEvent::EmptyPoll);
            return Ok(Response::new(Actions { data: Vec::new() }));
        };
        let taken = Instant::now();
        let chunk = self.infer(&q).await;
        let inferred = taken.elapsed();
        let data = chunk.to_bytes();
        tokio::time::sleep_until(start + self.shared.cfg.latency).await;
        if let (Some(poll), Some(obs)) = (&poll, &q.timer) {
            poll.answer_for(obs, chunk.first_timestep);
        }
        self.emit(ServerEvent::Chunk {
            timestep: chunk.first_timestep,
            queued: taken.saturating_duration_since(q.arrived),
            inferred,
            uplink_wall: q.uplink_wall,
        });
        Ok(Response::new(Actions { data }))
    }

    async fn send_policy_instructions(
        &self,
        _request: Request<PolicySetup>,
    ) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }

    async fn ready(&self, _request: Request<Empty>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }
}
