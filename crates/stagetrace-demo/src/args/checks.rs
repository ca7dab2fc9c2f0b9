//! The ranges of the demo's knobs, and the knobs each scenario refuses.

use super::ids::{
    DISPATCH_MS, EXECUTOR_ONLY, GATEWAY_ONLY, LEROBOT_ONLY, MITIGATION_ONLY, NOT_ASYNC,
    OTLP_SHUTDOWN_MS, SINGLE_CLIENT_ONLY,
};
use super::{DemoArgs, TransportArg};
use crate::error::{err, DemoError};

/// A real oscillator is 5–30 ppm off; the demo allows far more (a short
/// run covering hours), up to what the simulated clock takes.
const MAX_DRIFT_PPM: f64 = 10_000.0;

/// The knobs the demo's run uses, in range.
pub(crate) fn validate(a: &DemoArgs) -> Result<(), DemoError> {
    check_scenario(a)?;
    if a.mitigate.active() {
        // Closed-loop clients: no pacing, camera, actuator or proxy knobs.
        check_calls(a.calls)?;
        check_ms("--model-ms", a.model_ms)?;
        return check_ms("--model-per-item-ms", a.mitigate.model_per_item_ms);
    }
    check_calls(a.calls)?;
    if !(a.hz.is_finite() && a.hz > 0.0 && a.hz <= 10_000.0) {
        return Err(err(
            "--hz must be a rate above 0 and at most 10000 calls per second (the demo paces its loop; 0 would never call)",
        ));
    }
    for (name, v) in [
        ("--model-ms", a.model_ms),
        ("--uplink-delay-ms", a.uplink_delay_ms),
        ("--downlink-delay-ms", a.downlink_delay_ms),
        ("--capture-ms", a.capture_ms),
        ("--dispatch-ms", a.dispatch_ms),
    ] {
        check_ms(name, v)?;
    }
    for (name, v) in [
        ("--server-skew-ms", a.server_skew_ms),
        ("--server-step-ms", a.server_step_ms),
    ] {
        check_clock_ms(name, v)?;
    }
    check_hops_wanted(a)?;
    check_hop_ranges(a)?;
    check_export(a)?;
    if a.payload_kb > 16 * 1024 {
        return Err(err("--payload-kb must be at most 16384 (16 MiB)"));
    }
    if a.warmup >= a.calls {
        return Err(err(format!(
            "--warmup {} leaves no measured call out of --calls {}; lower --warmup or raise --calls",
            a.warmup, a.calls
        )));
    }
    Ok(())
}

/// A knob typed for the other scenario is an error, not silently ignored.
fn check_scenario(a: &DemoArgs) -> Result<(), DemoError> {
    check_async(a)?;
    if a.mitigate.active() {
        let ignored = a.typed_of(&SINGLE_CLIENT_ONLY.concat());
        if !ignored.is_empty() {
            return Err(err(format!(
                "{}: not used by the mitigation demo (--clients > 1, --batch, --cache or \
                 --concurrency): its clients call as fast as answers come back, on loopback \
                 without the proxy, clock skew or OTLP export; drop them, or drop the \
                 mitigation knobs for the paced single-client demo",
                ignored.join(", ")
            )));
        }
    } else {
        let ignored = a.typed_of(MITIGATION_ONLY);
        if !ignored.is_empty() {
            return Err(err(format!(
                "{}: only used by the mitigation demo; add --clients N (N > 1), --batch N, \
                 --cache MIB or --concurrency N",
                ignored.join(", ")
            )));
        }
    }
    Ok(())
}

/// The async knobs only with `--transport grpc-async`, and that run without
/// the knobs it has no use for.
fn check_async(a: &DemoArgs) -> Result<(), DemoError> {
    if a.transport != TransportArg::GrpcAsync {
        let stray = a.typed_of(LEROBOT_ONLY);
        if !stray.is_empty() {
            return Err(err(format!(
                "{}: only used with --transport grpc-async",
                stray.join(", ")
            )));
        }
        return Ok(());
    }
    let ignored = a.typed_of(NOT_ASYNC);
    if a.mitigate.active() || !ignored.is_empty() {
        let mut names = ignored;
        if a.mitigate.active() {
            names.push("the mitigation knobs".into());
        }
        return Err(err(format!(
            "{}: not used by --transport grpc-async (a LeRobot-style robot and server \
             of its own; its knobs: --chunk-size, --refill-threshold, --similarity, \
             --inference-latency-ms, --model-ms, --hz, --calls, the delays and the skew)",
            names.join(", ")
        )));
    }
    let l = &a.lerobot;
    if !(1..=10_000).contains(&l.chunk_size) {
        return Err(err("--chunk-size must be 1 to 10000 actions"));
    }
    if !(l.refill_threshold.is_finite() && (0.0..=1.0).contains(&l.refill_threshold)) {
        return Err(err(
            "--refill-threshold must be a share of a chunk from 0 to 1 (0.5: send when half a chunk is left)",
        ));
    }
    if !(l.similarity.is_finite() && l.similarity >= 0.0) {
        return Err(err(
            "--similarity must be a distance of 0 or more (in steps)",
        ));
    }
    check_ms("--inference-latency-ms", l.inference_latency_ms)
}

/// The gateway and executor knobs typed only with the hop they belong to,
/// and with the rest of the run able to have that hop.
fn check_hops_wanted(a: &DemoArgs) -> Result<(), DemoError> {
    let h = &a.hops;
    for (on, name, ids) in [
        (h.gateway, "--gateway", GATEWAY_ONLY),
        (h.executor, "--executor", EXECUTOR_ONLY),
    ] {
        let stray = a.typed_of(ids);
        if !on && !stray.is_empty() {
            return Err(err(format!(
                "{}: only used with {name}; add {name}",
                stray.join(", ")
            )));
        }
    }
    if h.gateway && a.transport != TransportArg::Ws {
        return Err(err(
            "--gateway: the gateway is the WebSocket relay; drop --transport http",
        ));
    }
    if h.gateway && a.no_server_timing {
        return Err(err(
            "--gateway with --no-server-timing: the hops are split from the servers' timing; drop one",
        ));
    }
    if h.executor && a.typed(DISPATCH_MS) {
        return Err(err(
            "--dispatch-ms: not used with --executor (dispatch then ends when the executor starts the chunk; use --executor-busy-ms for its wait)",
        ));
    }
    Ok(())
}

/// The gateway and executor knobs (and the server's drift) in range.
fn check_hop_ranges(a: &DemoArgs) -> Result<(), DemoError> {
    let h = &a.hops;
    for (name, v) in [
        ("--gateway-uplink-delay-ms", h.gateway_uplink_delay_ms),
        ("--gateway-downlink-delay-ms", h.gateway_downlink_delay_ms),
        ("--executor-uplink-delay-ms", h.executor_uplink_delay_ms),
        ("--executor-downlink-delay-ms", h.executor_downlink_delay_ms),
        ("--executor-busy-ms", h.executor_busy_ms),
    ] {
        check_ms(name, v)?;
    }
    for (name, v) in [
        ("--gateway-skew-ms", h.gateway_skew_ms),
        ("--executor-skew-ms", h.executor_skew_ms),
    ] {
        check_clock_ms(name, v)?;
    }
    for (name, v) in [
        ("--server-drift-ppm", a.server_drift_ppm),
        ("--gateway-drift-ppm", h.gateway_drift_ppm),
        ("--executor-drift-ppm", h.executor_drift_ppm),
    ] {
        if !(v.is_finite() && v.abs() <= MAX_DRIFT_PPM) {
            return Err(err(format!(
                "{name} must be within ±{MAX_DRIFT_PPM} ppm (real clocks: 5–30), got {v}"
            )));
        }
    }
    if h.executor_busy_every > 0 && h.executor_busy_ms == 0.0 {
        return Err(err(
            "--executor-busy-every: give --executor-busy-ms too (how long the executor is busy)",
        ));
    }
    Ok(())
}

/// The OTLP knobs typed only with `--otlp`, the robot's name and the
/// shutdown bound in range.
fn check_export(a: &DemoArgs) -> Result<(), DemoError> {
    if a.otlp.is_none() && a.typed(OTLP_SHUTDOWN_MS) {
        return Err(err(
            "--otlp-shutdown-ms: only used with --otlp (the bound on sending what is queued at the end)",
        ));
    }
    if a.tail_sample && a.otlp.is_none() {
        return Err(err(
            "--tail-sample: only used with --otlp (it chooses which calls are exported as traces)",
        ));
    }
    if let Some(robot) = &a.robot {
        let ok = !robot.is_empty()
            && robot.len() <= 64
            && robot
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !ok {
            return Err(err(format!(
                "--robot {robot:?}: give a name of letters, digits, '-', '_' or '.' (at most 64), \
                 e.g. --robot arm-3"
            )));
        }
    }
    if a.otlp_shutdown_ms > 60_000 {
        return Err(err(format!(
            "--otlp-shutdown-ms must be between 0 and 60000 ms, got {}",
            a.otlp_shutdown_ms
        )));
    }
    Ok(())
}

/// A clock knob (skew, step): signed, within a day either way.
fn check_clock_ms(name: &str, v: f64) -> Result<(), DemoError> {
    if v.is_finite() && v.abs() <= 86_400_000.0 {
        Ok(())
    } else {
        Err(err(format!("{name} must be within ±1 day, got {v}")))
    }
}

/// A duration knob in ms: finite, 0 to a minute.
fn check_ms(name: &str, v: f64) -> Result<(), DemoError> {
    if v.is_finite() && (0.0..=60_000.0).contains(&v) {
        Ok(())
    } else {
        Err(err(format!(
            "{name} must be between 0 and 60000 ms, got {v}"
        )))
    }
}

/// `--calls` within 1..=1 000 000.
fn check_calls(calls: u64) -> Result<(), DemoError> {
    if calls == 0 || calls > 1_000_000 {
        return Err(err("--calls must be between 1 and 1000000"));
    }
    Ok(())
}
