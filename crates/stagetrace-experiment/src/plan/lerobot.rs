//! The checks of a `transport = "grpc-async"` target (LeRobot's async
//! inference): its knobs, the target fields it has no use for, and the
//! factors it can be loaded with — the network through the proxy and CPU
//! contention. The others drive parts of the WebSocket demo the LeRobot
//! pair does not have, so they are refused with what to use instead.

use super::error::{invalid, PlanError};
use super::factor::FactorKind;
use super::target::DemoTransport;
use super::Plan;

/// Most actions per chunk (what the LeRobot pair's payload carries).
const MAX_CHUNK: usize = stagetrace_grpc::lerobot::payload::MAX_ACTIONS;

impl Plan {
    /// The LeRobot knobs belong to `grpc-async`; a `grpc-async` target's
    /// knobs are in range and its factor applies to it.
    pub(super) fn check_transport(&self) -> Result<(), PlanError> {
        let t = &self.target;
        let knobs = [
            ("chunk_size", t.chunk_size.is_some()),
            ("refill_threshold", t.refill_threshold.is_some()),
            ("inference_latency_ms", t.inference_latency_ms.is_some()),
        ];
        if !t.is_async() {
            if t.transport != DemoTransport::Ws {
                return Err(invalid(
                    "target.transport applies to kind = \"demo\" only (a command target is your own client)",
                ));
            }
            if let Some((name, _)) = knobs.iter().find(|(_, set)| *set) {
                return Err(invalid(format!(
                    "target.{name} is a knob of LeRobot's async inference: it applies to transport = \"grpc-async\" only"
                )));
            }
            return Ok(());
        }
        if !(1..=MAX_CHUNK).contains(&t.chunk_size()) {
            return Err(invalid(format!(
                "target.chunk_size = {} must be between 1 and {MAX_CHUNK} actions",
                t.chunk_size()
            )));
        }
        let r = t.refill_threshold();
        if !(r.is_finite() && (0.0..=1.0).contains(&r)) {
            return Err(invalid(format!(
                "target.refill_threshold = {r} must be a share of a chunk from 0 to 1 (0.5: send when half a chunk is left)"
            )));
        }
        if let Some(ms) = t.inference_latency_ms {
            if !(ms.is_finite() && (0.0..=60_000.0).contains(&ms)) {
                return Err(invalid(format!(
                    "target.inference_latency_ms = {ms} must be between 0 and 60000 ms"
                )));
            }
        }
        // The defaults are let through: a plan cannot say it left them out.
        if t.server_concurrency != 1 {
            return Err(invalid(
                "target.server_concurrency does not apply to transport = \"grpc-async\": LeRobot's policy server keeps one observation and runs one at a time",
            ));
        }
        if t.dispatch_ms != 1.0 {
            return Err(invalid(
                "target.dispatch_ms does not apply to transport = \"grpc-async\": the LeRobot robot's dispatch is the wait for its next control tick (set hz)",
            ));
        }
        self.check_async_factor()
    }

    /// The factors that load the LeRobot pair: the network (through the
    /// proxy) and CPU contention.
    fn check_async_factor(&self) -> Result<(), PlanError> {
        let why = match self.factor.kind {
            FactorKind::Net | FactorKind::Cpu => return Ok(()),
            FactorKind::Infer => {
                "an infer factor replays observations over WebSocket + msgpack against the WebSocket demo's policy server; LeRobot's server (gRPC) keeps one observation and runs one at a time, so there is no concurrency to load. Use kind = \"net\" or \"cpu\" here, or transport = \"ws\" for inference concurrency"
            }
            FactorKind::Payload => {
                "a payload factor changes the WebSocket demo's frame size while it runs; the LeRobot robot's frame is fixed for the run. Set target.payload_kb and compare two runs (stagetrace compare), or use bandwidth_mbps on a net factor"
            }
            FactorKind::Pause => {
                "a pause factor pauses the WebSocket demo's client inside its call; the LeRobot robot has no such pause. Use kind = \"cpu\" to hold up its threads, or transport = \"ws\""
            }
        };
        Err(invalid(format!(
            "factor {} does not apply to transport = \"grpc-async\": {why}",
            self.factor.kind.name()
        )))
    }
}
