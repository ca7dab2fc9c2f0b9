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
                .filter_map(|&i| ds.value(f, i as usize))
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
