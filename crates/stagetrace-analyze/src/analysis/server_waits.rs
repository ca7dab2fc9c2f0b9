//! The server's own waits before it reads a request (the parts of `queue`:
//! `accept_wait_ms`, every worker of a thread pool busy; `loop_wait_ms`,
//! the event loop blocked): how many calls waited a tenth of the call or
//! more, and how long.
//!
//! Why a level and not a spike: a starved pool makes nearly every call
//! wait (LeRobot's `GetActions` holding the only worker for a second), so
//! the wait is the figure's median, and an outlier rule measured against
//! that median sees nothing. A healthy server hands a request over in well
//! under the spike floor; any call past it waited for the server.

use stagetrace_schema::Figure;

use super::group::GroupData;
use super::report::ServerWait;
use crate::load::Dataset;

/// What of a call's wait `f` its server's host explains: for
/// `accept_wait`, the worker's own wait for a core once woken
/// (`server_rx_wait`). A worker that was free but started late because the
/// host's cores were busy waited on a run queue, not for the pool: on a
/// loaded host a 4-worker pool's threads start 3–4 ms late on a sixth of
/// the calls, and that is the host's CPU (which `host_cpu` names through
/// the figure's spikes), never a pool to enlarge.
fn host_share(ds: &Dataset, f: Figure, i: usize) -> f64 {
    match f {
        Figure::AcceptWait => ds.value(Figure::ServerRxWait, i).unwrap_or(0.0),
        _ => 0.0,
    }
}

/// Each of queue's parts the group's records carry, with the calls that
/// waited longer than `spike_floor_ms` (a tenth of the e2e median, at least
/// the practical floor: `options::spike_floor_ms`).
pub(super) fn server_waits(ds: &Dataset, g: &GroupData, spike_floor_ms: f64) -> Vec<ServerWait> {
    Figure::Queue
        .parts()
        .iter()
        .filter(|f| !g.sorted(**f).is_empty())
        .map(|&f| {
            let mut waited: Vec<f64> = g
                .calls
                .iter()
                .filter_map(|&i| Some(ds.value(f, i as usize)? - host_share(ds, f, i as usize)))
                .filter(|v| *v > spike_floor_ms)
                .collect();
            waited.sort_by(f64::total_cmp);
            let n = waited.len();
            ServerWait {
                figure: f.name(),
                calls: g.sorted(f).len() as u64,
                threshold_ms: spike_floor_ms,
                waited: n as u64,
                mean_ms: (n > 0).then(|| waited.iter().sum::<f64>() / n as f64),
                p50_ms: waited.get(n.saturating_sub(1) / 2).copied(),
                max_ms: waited.last().copied(),
            }
        })
        .collect()
}
