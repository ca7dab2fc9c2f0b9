//! The verdict for a figure's spikes that its calls' host figures explain:
//! which host, which cause (CPU, GC, log writing, a blocked wait), and the
//! host's remedy in place of the stage's own.

use serde_json::json;
use stagetrace_schema::{Figure, Side};

use super::report::{HostCause, Verdict};
use crate::format::fmt_ms;

/// A figure's spikes in a group, as a host-cause verdict tells them.
pub(super) struct Spikes<'a> {
    /// The group's kind.
    pub(super) kind: &'a str,
    /// The group's steady calls.
    pub(super) steady: u64,
    /// The figure that spiked.
    pub(super) f: Figure,
    /// Calls it spiked on.
    pub(super) rounds: u64,
    /// What a spike adds to its call, on average (ms).
    pub(super) cost_ms: f64,
    /// The figure's median (ms).
    pub(super) median_ms: f64,
}

/// Spikes of a figure that its calls' host figures explain: the host and
/// the cause named, with the host's remedies; the stage's own advice would
/// send the user after the wrong thing (the network, the model, the camera).
pub(super) fn host_spikes(sp: &Spikes<'_>, cause: &HostCause) -> Verdict {
    if cause.is_blocked_wait() {
        return blocked_spikes(sp, cause);
    }
    let f = sp.f;
    let host = cause.host_figure().unwrap_or(Figure::RunWait);
    let not = match f {
        Figure::Uplink | Figure::Downlink | Figure::Net | Figure::Roundtrip => "not the network",
        Figure::Infer | Figure::Queue | Figure::Server | Figure::Model | Figure::Device => {
            "not the model"
        }
        Figure::Capture => "not the camera",
        Figure::Dispatch => "not the executor",
        _ => "not the stage itself",
    };
    let code = match host {
        Figure::Gc | Figure::ServerGc => "host_gc",
        Figure::LogWrite => "host_log",
        _ => "host_cpu",
    };
    Verdict {
        from_spikes: false,
        code,
        kind: sp.kind.to_owned(),
        stage: Some(f.name()),
        group: Some(host.side().as_str()),
        text: format!(
            "{} coincide with {} ({} on those calls, {} on a typical one): {}, {not}; {}.",
            spikes_said(sp),
            cause.what(),
            fmt_ms(cause.spike_median_ms),
            fmt_ms(cause.median_ms),
            cause.diagnosis(),
            host.advice()
        ),
        evidence: spikes_evidence(sp, cause, ("host_spike_median_ms", "host_median_ms")),
    }
}

/// Spikes of a figure of the robot's own thread on calls where that thread
/// blocked waiting (more voluntary switches than a typical call), no host
/// time explaining them: a lock or a queue on the control thread.
fn blocked_spikes(sp: &Spikes<'_>, cause: &HostCause) -> Verdict {
    Verdict {
        from_spikes: false,
        code: "blocked_wait",
        kind: sp.kind.to_owned(),
        stage: Some(sp.f.name()),
        group: Some(Side::Client.as_str()),
        text: format!(
            "{} coincide with {} ({:.0} on those calls, {:.0} on a typical one): {}; not the CPU, the network or the observer. Find what the loop waits on (a profiler's off-CPU view, py-spy dump, or `strace -f -T -e trace=futex,read,write` on the loop's thread) and take it off the loop: hold no lock across the call, hand work to queues with a timeout; a synchronous logger shows as log_write_ms once its writer is wrapped (docs/host.md).",
            spikes_said(sp),
            cause.what(),
            cause.spike_median_ms,
            cause.median_ms,
            cause.diagnosis(),
        ),
        evidence: spikes_evidence(
            sp,
            cause,
            ("voluntary_switches_on_spikes", "voluntary_switches_typical"),
        ),
    }
}

/// How a host-cause verdict opens: the figure's spikes, how many, how
/// large against its median.
fn spikes_said(sp: &Spikes<'_>) -> String {
    format!(
        "{} spikes on {} of {} calls ({:.1}%, {} above its median of {} on average)",
        sp.f,
        sp.rounds,
        sp.steady,
        100.0 * sp.rounds as f64 / sp.steady as f64,
        fmt_ms(sp.cost_ms),
        fmt_ms(sp.median_ms),
    )
}

/// A host-cause verdict's evidence: the spikes, and the host figure's value
/// on the spike calls and on a typical one under the two names given.
fn spikes_evidence(
    sp: &Spikes<'_>,
    cause: &HostCause,
    (on_spikes, typical): (&str, &str),
) -> serde_json::Value {
    let mut e = json!({
        "cost_ms": sp.cost_ms, "rounds": sp.rounds, "calls": sp.steady,
        "median_ms": sp.median_ms, "host_figure": cause.figure,
    });
    e[on_spikes] = json!(cause.spike_median_ms);
    e[typical] = json!(cause.median_ms);
    e
}
