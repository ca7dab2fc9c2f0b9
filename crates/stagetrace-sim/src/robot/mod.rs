//! The simulated robot: one control cycle — a simulated camera
//! (`capture`), one request over a [`Connection`] (`transport`), a simulated
//! actuator (`dispatch`) — inside a `call` span, the output digest attached;
//! the paced [`ControlLoop`] that repeats it, and the closed-loop [`Fleet`]
//! of the mitigation scenario.

mod camera;
mod connection;
mod control;
mod fleet;
mod pacer;

use std::time::{Duration, Instant};

use stagetrace::StageSpanExt;
use stagetrace_net::executor::ExecutorClient;
use stagetrace_net::msg::MsgMap;
use stagetrace_wire::Hops;
use tracing::Instrument;

pub(crate) use camera::IMAGE_KEY;
pub use camera::{observation, scene, Camera, Refresh, PROMPT};
pub use connection::Connection;
pub use control::{CallProgress, ControlLoop, Knobs};
pub use fleet::{Fleet, FleetStats};
pub use pacer::Pacer;

use crate::checksum::fnv1a;
use crate::wait::{sleep_until_precise_blocking, Spin};
use crate::SimError;

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

/// The simulated robot: camera, connection to the policy server, actuator
/// (local, or a remote executor).
#[derive(Debug)]
pub struct Robot {
    connection: Connection,
    camera: Camera,
    cfg: RobotConfig,
    executor: Option<ExecutorClient>,
    hops: Hops,
}

impl Robot {
    /// A robot calling the server over `connection`.
    pub fn new(connection: Connection, cfg: RobotConfig) -> Self {
        Robot {
            connection,
            camera: Camera::new(cfg.refresh),
            cfg,
            executor: None,
            hops: Hops::new(),
        }
    }

    /// Dispatch each action chunk to a remote executor (with the call's
    /// `seq`) instead of the local actuator: `dispatch` then ends when the
    /// executor starts the chunk (`RobotConfig::dispatch` is not waited).
    #[must_use]
    pub fn with_executor(mut self, executor: ExecutorClient) -> Self {
        self.executor = Some(executor);
        self
    }

    /// The relays (gateways) the last call's answer came through, with
    /// their own timing (empty for a direct call).
    pub fn last_hops(&self) -> &Hops {
        &self.hops
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
                sleep_until_precise_blocking(begin + self.cfg.capture, self.cfg.spin);
                frame
            };
            let obs = observation(seq, frame);
            before_send(&obs);
            self.hops = Hops::new();
            let (action, hops) = self.connection.infer_via(&obs).await?;
            self.hops = hops;
            let digest = match &mut self.executor {
                Some(executor) => {
                    if !executor.is_connected() {
                        executor
                            .reconnect()
                            .await
                            .map_err(|e| SimError::Call(e.to_string()))?;
                    }
                    let digest = action.array("actions").map(|a| fnv1a(&a.data));
                    let chunk = action.with("seq", seq);
                    let ack = executor
                        .dispatch(&chunk)
                        .instrument(tracing::info_span!("dispatch"))
                        .await
                        .map_err(|e| SimError::Call(e.to_string()))?;
                    if !ack.started {
                        return Err(SimError::Call(format!(
                            "the executor did not start the chunk: {}",
                            ack.reason.as_deref().unwrap_or("no reason given")
                        )));
                    }
                    digest
                }
                None => {
                    let _dispatch = tracing::info_span!("dispatch").entered();
                    let begin = Instant::now();
                    let digest = action.array("actions").map(|a| fnv1a(&a.data));
                    sleep_until_precise_blocking(begin + self.cfg.dispatch, self.cfg.spin);
                    digest
                }
            };
            if let Some(d) = digest {
                tracing::Span::current().record_output_digest(d);
            }
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// Close the connection to the server (and to the executor).
    pub async fn close(self) {
        self.connection.close().await;
        if let Some(executor) = self.executor {
            executor.close().await;
        }
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
                    self.first_error = Some(e.to_string());
                }
                first
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_keep_the_first_failure() {
        let mut s = RobotStats::default();
        assert!(!s.count(Ok(())));
        assert!(s.count(Err(SimError::Call("first".into()))));
        assert!(!s.count(Err(SimError::Call("second".into()))));
        assert_eq!((s.completed, s.failed), (1, 2));
        assert_eq!(s.first_error.as_deref(), Some("first"));
    }
}
