//! Verdicts on causes the records name outright, whatever the shape of the
//! figures: requests waiting for a server worker (`worker_pool_starved`),
//! for a blocked event loop (`loop_blocked`), and a model stage that closed
//! before its device work was done (`device_after_model`).
//!
//! Each replaces the shape verdicts (spikes, modes, moves, a host's) of the
//! figures it explains: the wait's own figure and the sums holding it
//! (`queue`, `server`, ...), or post and the device time, whose numbers the
//! misplaced device work makes wrong.

use serde_json::json;
use stagetrace_schema::Figure;

use super::options::{MIN_SPIKES, SPIKE_SHARE};
use super::report::{GroupReport, ServerWait, Verdict};
use crate::figures;
use crate::format::fmt_ms;

/// Verdicts read off one figure's shape, which a cause named here replaces.
const SHAPE_CODES: [&str; 9] = [
    "spikes",
    "second_mode",
    "periodic",
    "median_shift",
    "tail_only",
    "host_cpu",
    "host_gc",
    "host_log",
    "blocked_wait",
];

/// Calls enough for a verdict: the spikes' rule (at least [`MIN_SPIKES`]
/// and [`SPIKE_SHARE`] of the calls).
pub(super) fn enough(n: u64, of: u64) -> bool {
    n >= MIN_SPIKES as u64 && n as f64 >= SPIKE_SHARE * of as f64
}

/// The verdicts of this module for a group, and the figures whose shape
/// verdicts they replace.
pub(super) fn cause_verdicts(r: &GroupReport) -> (Vec<Verdict>, Vec<Figure>) {
    let mut out = Vec::new();
    let mut replaced = Vec::new();
    for w in &r.server_waits {
        let Some(f) = Figure::from_name(w.figure) else {
            continue;
        };
        if let Some(v) = server_wait(r, f, w) {
            out.push(v);
            replaced.push(f);
            replaced.extend(
                Figure::ALL
                    .into_iter()
                    .filter(|s| figures::descendants(*s).contains(&f)),
            );
        }
    }
    if let Some(v) = device_after_model(r) {
        out.push(v);
        replaced.extend([Figure::Post, Figure::Device]);
    }
    (out, replaced)
}

/// Whether `v` is a shape verdict on one of `replaced`.
pub(super) fn superseded(v: &Verdict, replaced: &[Figure]) -> bool {
    SHAPE_CODES.contains(&v.code)
        && v.stage
            .and_then(Figure::from_name)
            .is_some_and(|f| replaced.contains(&f))
}

/// `worker_pool_starved` / `loop_blocked` when enough calls waited longer
/// than the spike floor before the server read them.
fn server_wait(r: &GroupReport, f: Figure, w: &ServerWait) -> Option<Verdict> {
    if !enough(w.waited, r.steady) {
        return None;
    }
    let (mean, p50, max) = (w.mean_ms?, w.p50_ms?, w.max_ms?);
    let share = w.waited as f64 / r.steady as f64;
    let how = format!(
        "on {} of {} calls ({:.1}%; median {}, up to {})",
        w.waited,
        r.steady,
        100.0 * share,
        fmt_ms(p50),
        fmt_ms(max)
    );
    // The wait is the server's queue; where the uplink is on the records,
    // say it stayed the network's own.
    let not_net = r
        .stages
        .get(Figure::Uplink.name())
        .map_or(String::new(), |u| {
            format!(", not the network (uplink median {})", fmt_ms(u.p50))
        });
    let (code, text) = match f {
        Figure::AcceptWait => (
            "worker_pool_starved",
            format!(
                "requests waited {} on average for a server worker {how}: time in queue{not_net}; {}.",
                fmt_ms(mean),
                f.advice()
            ),
        ),
        Figure::LoopWait => (
            "loop_blocked",
            format!(
                "the server's event loop was blocked for {} on average when requests came, {how}: time in queue{not_net}; {}.",
                fmt_ms(mean),
                f.advice()
            ),
        ),
        _ => return None,
    };
    Some(Verdict {
        from_spikes: false,
        code,
        kind: r.kind.clone(),
        stage: Some(f.name()),
        group: Some(f.side().as_str()),
        text,
        evidence: json!({
            "cost_ms": mean, "calls": r.steady, "waited": w.waited, "share": share,
            "threshold_ms": w.threshold_ms, "mean_ms": mean, "p50_ms": p50, "max_ms": max,
        }),
    })
}

/// `device_after_model` when the device's own time outran the model stage
/// on enough calls: the stage closed at the dispatch and the device's work
/// landed in post.
fn device_after_model(r: &GroupReport) -> Option<Verdict> {
    let d = r.infer_parts.as_ref()?.device.as_ref()?;
    if !enough(d.late_calls, d.calls) {
        return None;
    }
    let excess = d.late_excess_ms?;
    let share = d.late_calls as f64 / d.calls as f64;
    let on_late = |v: Option<f64>| v.map_or_else(|| "-".to_string(), fmt_ms);
    Some(Verdict {
        from_spikes: false,
        code: "device_after_model",
        kind: r.kind.clone(),
        stage: Some(Figure::Model.name()),
        group: Some(Figure::Model.side().as_str()),
        text: format!(
            "the model's device work went on after the model stage closed, on {} of {} calls ({:.1}%): the device's own time (device_ms) exceeds the stage by {} on average (model median {} on those calls): the stage closed at the dispatch (a jitted JAX call, an asynchronous CUDA launch) and the device's work landed in post (median {} on those calls), so post looks like the bottleneck and the model looks fast; end the model stage when its arrays are ready (jax.block_until_ready, a CUDA event or torch.cuda.synchronize; docs/stages.md, \"Asynchronous devices\"), then read the parts again.",
            d.late_calls,
            d.calls,
            100.0 * share,
            fmt_ms(excess),
            on_late(d.late_model_p50_ms),
            on_late(d.late_post_p50_ms)
        ),
        evidence: json!({
            "cost_ms": excess, "calls": d.calls, "late_calls": d.late_calls, "share": share,
            "excess_ms": excess, "model_p50_ms": d.late_model_p50_ms,
            "post_p50_ms": d.late_post_p50_ms, "device_p50_ms": d.p50_ms,
        }),
    })
}
