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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::{DemoTransport, Plan};

    fn plan(target: &str, factor: &str) -> Result<Plan, String> {
        Plan::from_toml(&format!(
            "[target]\n{target}\n[baseline]\nhold_s = 2\n[factor]\n{factor}\nhold_s = 2\n"
        ))
        .map_err(|e| e.to_string())
    }

    const ASYNC: &str = "kind = \"demo\"\ntransport = \"grpc-async\"";

    #[test]
    fn an_async_target_takes_the_lerobot_knobs_and_net_or_cpu() {
        let p = plan(ASYNC, "kind = \"net\"\nlevels = [10]").unwrap();
        assert_eq!(p.target.transport, DemoTransport::GrpcAsync);
        assert!(p.target.is_async());
        assert_eq!(
            (p.target.chunk_size(), p.target.refill_threshold()),
            (20, 0.5)
        );
        // A chunk every 20 − 1 − 10 = 9 ticks at 30 Hz.
        assert!((p.target.call_hz() - 30.0 / 9.0).abs() < 1e-12);
        let p = plan(
            &format!("{ASYNC}\nchunk_size = 10\nrefill_threshold = 0.3\ninference_latency_ms = 5"),
            "kind = \"cpu\"\nlevels = [2]",
        )
        .unwrap();
        assert!((p.target.call_hz() - 30.0 / 6.0).abs() < 1e-12);
        let ws = plan("kind = \"demo\"", "kind = \"net\"\nlevels = [10]").unwrap();
        assert!(!ws.target.is_async());
        assert_eq!(ws.target.call_hz(), 30.0);
    }

    /// The factors that drive the WebSocket demo's parts are refused, each
    /// saying why and what to use instead.
    #[test]
    fn factors_the_lerobot_pair_does_not_have_are_refused_with_why() {
        for (factor, why) in [
            (
                "kind = \"infer\"\nlevels = [2]",
                "no concurrency to load. Use kind = \"net\" or \"cpu\" here",
            ),
            (
                "kind = \"payload\"\nlevels = [256]",
                "frame is fixed for the run",
            ),
            (
                "kind = \"pause\"\nlevels = [20]",
                "has no such pause. Use kind = \"cpu\"",
            ),
        ] {
            let e = plan(ASYNC, factor).unwrap_err();
            assert!(
                e.contains("does not apply to transport = \"grpc-async\""),
                "{e}"
            );
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn misplaced_or_out_of_range_lerobot_knobs_are_named() {
        for (target, what) in [
            ("kind = \"demo\"\nchunk_size = 10", "target.chunk_size is a knob of LeRobot's async inference"),
            ("kind = \"demo\"\nrefill_threshold = 0.2", "target.refill_threshold is a knob"),
            (
                "kind = \"command\"\ntransport = \"grpc-async\"\ncommand = [\"x\"]\nrecords_dir = \"r\"\nupstream = \"127.0.0.1:9\"",
                "target.transport applies to kind = \"demo\" only",
            ),
            (&format!("{ASYNC}\nchunk_size = 0"), "target.chunk_size = 0 must be between 1"),
            (&format!("{ASYNC}\nrefill_threshold = 1.5"), "target.refill_threshold = 1.5 must be a share"),
            (&format!("{ASYNC}\nserver_concurrency = 4"), "target.server_concurrency does not apply"),
            (&format!("{ASYNC}\ndispatch_ms = 3"), "target.dispatch_ms does not apply"),
        ] {
            let e = plan(target, "kind = \"net\"\nlevels = [10]").unwrap_err();
            assert!(e.contains(what), "{target}: {e}");
        }
        let e = plan(
            "kind = \"demo\"\ntransport = \"grpc\"",
            "kind = \"net\"\nlevels = [1]",
        )
        .unwrap_err();
        assert!(e.contains("grpc-async"), "{e}");
    }
}
