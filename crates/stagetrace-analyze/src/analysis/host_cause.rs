//! Which host, if any, explains a figure's spikes: the host figures
//! (run-queue wait, CPU stall, GC) of the calls that spiked against those
//! of the group's calls.
//!
//! Why per call: a loaded host shows as a low average utilisation and a
//! high latency; only the calls that were slow, read next to what the host
//! did to those very calls, tell "short of CPU" from "the network".

use super::report::HostCause;
use stagetrace_schema::{Figure, Side};

use super::group::GroupData;
use crate::load::Dataset;

/// Share of the spikes' total excess (each spike call over the figure's
/// median) a host figure's own excess on the same calls must explain to be
/// named as their cause. Half: a cause that explains less leaves most of the spike to
/// the stage itself, and the stage's own advice stays.
const EXPLAINED_SHARE: f64 = 0.5;

/// The name a [`HostCause`] gives the robot's voluntary switches: a count,
/// not a figure of the table (`blocked_wait`).
pub(super) const BLOCKED: &str = "voluntary_switches";

impl HostCause {
    /// The figure.
    pub fn host_figure(&self) -> Option<Figure> {
        Figure::from_name(self.figure)
    }

    /// The robot's thread gave its core up to wait: a count of voluntary
    /// switches, not a time.
    pub fn is_blocked_wait(&self) -> bool {
        self.figure == BLOCKED
    }

    /// The end and what it lacked, as a sentence names them: "the policy
    /// server was short of CPU".
    pub fn diagnosis(&self) -> &'static str {
        if self.is_blocked_wait() {
            return "the robot's control thread blocked waiting, with its core free and no timed log writing: a lock, a queue or another blocking call on the loop's thread";
        }
        match self.host_figure() {
            Some(Figure::ServerRunWait | Figure::ServerCpuStall | Figure::ServerRxWait) => {
                "the policy server's host was short of CPU"
            }
            // The response was ready and the server's thread did not get
            // to write it: the server's side, never the link.
            Some(Figure::ServerTxWait) => {
                "the policy server's host was short of CPU when it sent the response (its thread waited for a core before the write)"
            }
            // The robot's own send: its thread waited for a core, or, in a
            // Python robot, for the GIL another thread held.
            Some(Figure::TxWait) => {
                "the robot's own send was held up on the robot: its host was short of CPU, or (in Python) another thread held the GIL"
            }
            Some(Figure::ServerGc) => "the policy server paused for its garbage collector",
            Some(Figure::LogWrite) => {
                "the robot's control thread was blocked writing its own logs (a synchronous logger)"
            }
            Some(Figure::Gc) => "the robot paused for its garbage collector",
            _ => "the robot's host was short of CPU",
        }
    }

    /// What the figure is, as a sentence names it: "the policy server's
    /// run-queue wait".
    pub fn what(&self) -> &'static str {
        if self.is_blocked_wait() {
            return "the robot's call thread giving its core up to wait (voluntary switches)";
        }
        match self.host_figure() {
            Some(Figure::ServerRunWait) => "the policy server's run-queue wait",
            Some(Figure::ServerCpuStall) => "the policy server host's CPU stall",
            Some(Figure::ServerGc) => "the policy server's GC pauses",
            Some(Figure::RunWait) => "the robot's run-queue wait",
            Some(Figure::CpuStall) => "the robot host's CPU stall",
            Some(Figure::Gc) => "the robot's GC pauses",
            Some(Figure::ServerRxWait) => {
                "the policy server reading the request late, its thread waiting for a core (kernel stamps, or a gRPC worker's own run-queue wait)"
            }
            Some(Figure::RxWait) => "the robot reading the response late (kernel stamps)",
            Some(Figure::LogWrite) => "the robot's time writing its logs",
            Some(Figure::CaptureRunWait) => "the robot's run-queue wait inside capture",
            Some(Figure::DispatchRunWait) => "the robot's run-queue wait inside dispatch",
            Some(Figure::TxWait) => {
                "the robot handing the request to the kernel late (its own time inside uplink)"
            }
            Some(Figure::ServerTxWait) => {
                "the policy server handing its response to the kernel late (its own time inside downlink)"
            }
            _ => "a host figure",
        }
    }
}

/// The host figure whose excess on `spikes` (indices into `ds`) explains
/// at least [`EXPLAINED_SHARE`] of `f`'s excess there, the largest; `None`
/// when none does, when the run has no host figures, or for a host figure
/// itself.
pub(super) fn host_cause(
    ds: &Dataset,
    g: &GroupData,
    f: Figure,
    spikes: &[usize],
) -> Option<HostCause> {
    if f.is_host() || spikes.is_empty() {
        return None;
    }
    timed_cause(ds, g, f, spikes).or_else(|| blocked_cause(ds, g, f, spikes))
}

/// [`host_cause`] from the host figures' times.
fn timed_cause(ds: &Dataset, g: &GroupData, f: Figure, spikes: &[usize]) -> Option<HostCause> {
    let f_median = median_sorted(g.sorted(f))?;
    // Each spike call's excess over the figure's median. A host figure
    // explains a call's excess up to its own excess there; summed over the
    // spike calls this is robust to many small spikes beside a few large
    // ones (a median over the spike calls was not: 8 GC pauses of 200 ms
    // among 12 calls 1 ms over the threshold read as "no GC").
    let f_excess: Vec<(usize, f64)> = spikes
        .iter()
        .filter_map(|&i| ds.value(f, i).map(|v| (i, (v - f_median).max(0.0))))
        .collect();
    let total: f64 = f_excess.iter().map(|&(_, e)| e).sum();
    if total <= 0.0 {
        return None;
    }
    candidates(f)
        .filter_map(|h| {
            let median_ms = median_sorted(g.sorted(h))?;
            // What the call would show anyway: the typical value, or for
            // a stall (a host-wide rate times the call's time) the typical
            // rate times this call's time, so a call longer for another
            // reason on a steadily loaded host is not "short of CPU".
            let rate = accrual_span(h).and_then(|span| typical_rate(ds, g, h, span));
            let expected = |i: usize| match (rate, accrual_span(h)) {
                (Some((r, span)), _) => ds
                    .value(span, i)
                    .map_or(median_ms, |t| (r * t).max(median_ms)),
                _ => median_ms,
            };
            let mut explained = 0.0;
            let mut on_explained = Vec::new();
            for &(i, fe) in &f_excess {
                let Some(v) = ds.value(h, i) else { continue };
                let he = (v - expected(i)).max(0.0);
                explained += he.min(fe);
                if he >= EXPLAINED_SHARE * fe {
                    on_explained.push(v);
                }
            }
            if explained < EXPLAINED_SHARE * total {
                return None;
            }
            let spike_median_ms = median(&mut on_explained)?;
            Some((
                explained,
                HostCause {
                    figure: h.name(),
                    spike_median_ms,
                    median_ms,
                },
            ))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, cause)| cause)
}

/// The span a host figure accrues over when it is a host-wide rate times
/// the call's time (`cpu_stall_ms`: the stall rate around the call times
/// the call, docs/host.md): the call for the robot's, the server's handling
/// for the server's.
fn accrual_span(h: Figure) -> Option<Figure> {
    match h {
        Figure::CpuStall => Some(Figure::E2e),
        Figure::ServerCpuStall => Some(Figure::Server),
        _ => None,
    }
}

/// The group's typical rate of `h` per ms of `span` (the median of each
/// call's ratio), with the span.
fn typical_rate(ds: &Dataset, g: &GroupData, h: Figure, span: Figure) -> Option<(f64, Figure)> {
    let mut rates: Vec<f64> = g
        .calls
        .iter()
        .filter_map(|&i| {
            let i = i as usize;
            let (v, t) = (ds.value(h, i)?, ds.value(span, i)?);
            (t > 0.0).then(|| v / t)
        })
        .collect();
    median(&mut rates).map(|r| (r, span))
}

/// The host figures that can delay `f`: the server's for what the server
/// stamps or runs (uplink ends at the server's receive stamp, queue and
/// infer run there), the robot's for what it stamps or runs (downlink ends
/// at its receive, capture, dispatch, the gap), either end's for a sum of
/// both (roundtrip, net, the first byte's cut). An end's figures name that
/// end: a robot stage is never blamed on the server's host, even when one
/// machine runs both. A figure read inside one stage (`capture_run_wait`)
/// is a candidate for that stage alone and the sums holding it, whichever
/// end stamps the rest of it (`tx_wait`, the robot's time before the kernel
/// had the request, for the uplink the server's receive ends;
/// `server_tx_wait`, the server's time before its write, for the downlink
/// the robot's receive ends; both for `net` when the run has no split).
fn candidates(f: Figure) -> impl Iterator<Item = Figure> {
    let ends: &[Side] = if f.side() == Side::Server || f == Figure::Uplink {
        &[Side::Server]
    } else if f.side() == Side::Transport && f != Figure::Downlink {
        &[Side::Client, Side::Server]
    } else {
        &[Side::Client]
    };
    // A figure read inside one stage (the robot's run wait in capture)
    // speaks for that stage and what holds it only.
    let holds = crate::figures::descendants(f);
    Figure::ALL.into_iter().filter(move |h| {
        h.is_host()
            && match h.within_stage() {
                Some(stage) => stage == f || holds.contains(&stage),
                None => ends.contains(&h.side()),
            }
    })
}

/// The robot's own time outside the transport: what its call thread does
/// itself, where a wait it blocks on (a lock, a queue) lands. The transport
/// is left out: a blocking client waits there for the server by design.
const ROBOT_THREAD: [Figure; 4] = [Figure::Gap, Figure::Capture, Figure::Dispatch, Figure::E2e];

/// The spikes of a figure of the robot's own thread explained by that
/// thread blocking: on at least [`EXPLAINED_SHARE`] of the spike calls it
/// gave its core up more often than on a typical call (at least one
/// voluntary switch more than the group's median), where no host time
/// (a wait for a core, a collector, timed log writing) explained them.
fn blocked_cause(ds: &Dataset, g: &GroupData, f: Figure, spikes: &[usize]) -> Option<HostCause> {
    if !ROBOT_THREAD.contains(&f) || ds.vol_switches.is_empty() {
        return None;
    }
    let count = |i: usize| {
        ds.vol_switches
            .get(i)
            .copied()
            .filter(|v| !v.is_nan())
            .map(f64::from)
    };
    let mut all: Vec<f64> = g.calls.iter().filter_map(|&i| count(i as usize)).collect();
    let typical = median(&mut all)?;
    let mut on_spikes: Vec<f64> = spikes.iter().filter_map(|&i| count(i)).collect();
    let blocked = on_spikes.iter().filter(|&&v| v >= typical + 1.0).count();
    if on_spikes.is_empty() || (blocked as f64) < EXPLAINED_SHARE * spikes.len() as f64 {
        return None;
    }
    Some(HostCause {
        figure: BLOCKED,
        spike_median_ms: median(&mut on_spikes)?,
        median_ms: typical,
    })
}

fn median_sorted(sorted: &[f32]) -> Option<f64> {
    (!sorted.is_empty()).then(|| f64::from(sorted[sorted.len() / 2]))
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_looks_at_the_end_that_stamps_it_and_either_host_s_stall() {
        let up: Vec<Figure> = candidates(Figure::Uplink).collect();
        assert_eq!(
            up,
            [
                Figure::ServerRunWait,
                Figure::ServerCpuStall,
                Figure::ServerGc,
                Figure::ServerRxWait,
                Figure::TxWait
            ]
        );
        // The downlink ends at the robot's receive; the server's wait
        // before its own write is inside it.
        let down: Vec<Figure> = candidates(Figure::Downlink).collect();
        assert_eq!(
            down,
            [
                Figure::RunWait,
                Figure::CpuStall,
                Figure::Gc,
                Figure::RxWait,
                Figure::ServerTxWait,
                Figure::LogWrite
            ]
        );
        assert_eq!(candidates(Figure::Infer).count(), 4);
        assert_eq!(candidates(Figure::Post).count(), 4);
        // Either end's, and both sends (net holds uplink and downlink).
        let net: Vec<Figure> = candidates(Figure::Net).collect();
        assert_eq!(net.len(), 11);
        assert!(net.contains(&Figure::TxWait) && net.contains(&Figure::ServerTxWait));
        assert_eq!(candidates(Figure::Roundtrip).count(), 11);
    }

    /// The robot's wait inside capture is a candidate for capture only.
    #[test]
    fn a_stage_s_own_run_wait_speaks_for_that_stage_alone() {
        let capture: Vec<Figure> = candidates(Figure::Capture).collect();
        assert_eq!(
            capture,
            [
                Figure::RunWait,
                Figure::CpuStall,
                Figure::Gc,
                Figure::RxWait,
                Figure::CaptureRunWait,
                Figure::LogWrite
            ]
        );
        let dispatch: Vec<Figure> = candidates(Figure::Dispatch).collect();
        assert!(dispatch.contains(&Figure::DispatchRunWait));
        assert_eq!(dispatch.last(), Some(&Figure::LogWrite));
        assert!(!dispatch.contains(&Figure::CaptureRunWait));
        assert!(!candidates(Figure::Gap).any(|h| h.within_stage().is_some()));
    }
}
