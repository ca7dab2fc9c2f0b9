//! The clap ids of the demo's knobs (their field names, `uplink_delay_ms`),
//! each spelled once: which scenario uses which knob, and which knobs were
//! typed on the command line.

use super::DemoArgs;

/// `--dispatch-ms`: the local actuator's cost, refused with a remote executor.
pub(super) const DISPATCH_MS: &str = "dispatch_ms";

/// `--otlp-shutdown-ms`: only used with `--otlp`.
pub(super) const OTLP_SHUTDOWN_MS: &str = "otlp_shutdown_ms";

/// The paced loop's own knobs: rate, camera, actuator, proxy, server clock.
const PACED: &[&str] = &[
    "hz",
    "payload_kb",
    "server_skew_ms",
    "uplink_delay_ms",
    "downlink_delay_ms",
    "proxy_cpu",
    "clock",
    "transport",
    "no_server_timing",
    "capture_ms",
    DISPATCH_MS,
    "warmup",
    "server_step_ms",
    "server_step_at",
    "server_drift_ppm",
];

/// `--gateway` itself.
const GATEWAY: &[&str] = &["gateway"];

/// The gateway's knobs besides `--gateway` itself.
pub(super) const GATEWAY_ONLY: &[&str] = &[
    "gateway_skew_ms",
    "gateway_drift_ppm",
    "gateway_uplink_delay_ms",
    "gateway_downlink_delay_ms",
];

/// `--executor` itself.
const EXECUTOR: &[&str] = &["executor"];

/// The executor's knobs besides `--executor` itself.
pub(super) const EXECUTOR_ONLY: &[&str] = &[
    "executor_skew_ms",
    "executor_drift_ppm",
    "executor_uplink_delay_ms",
    "executor_downlink_delay_ms",
    "executor_busy_ms",
    "executor_busy_every",
];

/// The export knobs: OTLP traces and metrics, and the robot's name in them.
const EXPORT: &[&str] = &["otlp", OTLP_SHUTDOWN_MS, "tail_sample", "metrics", "robot"];

/// Knobs only the paced single-client demo uses, in the order a refusal
/// names them.
pub(super) const SINGLE_CLIENT_ONLY: [&[&str]; 6] = [
    PACED,
    GATEWAY,
    GATEWAY_ONLY,
    EXECUTOR,
    EXECUTOR_ONLY,
    EXPORT,
];

/// Knobs only the multi-client mitigation demo uses (besides the four that
/// switch to it).
pub(super) const MITIGATION_ONLY: &[&str] = &[
    "batch_wait_ms",
    "batch_fixed_window",
    "cache_prompt_only",
    "scenes",
    "queue",
    "queue_timeout_ms",
    "model_per_item_ms",
];

/// Knobs only `--transport grpc-async` uses.
pub(super) const LEROBOT_ONLY: &[&str] = &[
    "chunk_size",
    "refill_threshold",
    "similarity",
    "inference_latency_ms",
];

/// Knobs of the paced WebSocket/HTTP demo the async run has no use for
/// (it has its own robot: no payload size, actuator, warm-up, server
/// clock step or drift, gateway, executor or export).
pub(super) const NOT_ASYNC: &[&str] = &[
    "payload_kb",
    "no_server_timing",
    DISPATCH_MS,
    "warmup",
    "server_step_ms",
    "server_step_at",
    "server_drift_ppm",
    "gateway",
    "executor",
    "otlp",
    "metrics",
    "tail_sample",
];

impl DemoArgs {
    /// Notes which knobs were typed on the command line (not defaults),
    /// from the demo's own matches (`stagetrace demo`'s subcommand
    /// matches): the demo refuses knobs its scenario would ignore, so it
    /// needs to know which ones were typed, not only their values.
    pub fn note_typed(&mut self, matches: &clap::ArgMatches) {
        self.given = matches
            .ids()
            .filter(|id| {
                matches.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine)
            })
            .map(|id| id.as_str().to_owned())
            .collect();
    }

    /// Whether the knob `id` was typed on the command line.
    pub(super) fn typed(&self, id: &str) -> bool {
        self.given.iter().any(|g| g == id)
    }

    /// The knobs of `ids` typed on the command line, as flags
    /// (`--uplink-delay-ms`), in the order of `ids`.
    pub(super) fn typed_of(&self, ids: &[&str]) -> Vec<String> {
        ids.iter()
            .filter(|id| self.typed(id))
            .map(|id| flag(id))
            .collect()
    }
}

/// The flag of a clap id: `uplink_delay_ms` → `--uplink-delay-ms`.
fn flag(id: &str) -> String {
    format!("--{}", id.replace('_', "-"))
}

#[cfg(test)]
mod tests {
    use clap::Args as _;

    use super::*;

    /// A misspelt id would never match what was typed: the knob would be
    /// silently accepted in the scenario that ignores it.
    #[test]
    fn every_listed_id_is_a_knob_of_the_demo() {
        let demo = DemoArgs::augment_args(clap::Command::new("demo"));
        let listed = SINGLE_CLIENT_ONLY
            .concat()
            .into_iter()
            .chain(MITIGATION_ONLY.iter().copied())
            .chain(LEROBOT_ONLY.iter().copied())
            .chain(NOT_ASYNC.iter().copied());
        for id in listed {
            assert!(
                demo.get_arguments().any(|arg| arg.get_id() == id),
                "{id} is not a clap id of `stagetrace demo`"
            );
        }
    }
}
