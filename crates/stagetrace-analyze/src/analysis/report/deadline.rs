//! The loop's deadline: how many calls missed their tick, and why.

use serde::Serialize;

use crate::stats::Distribution;

/// Deadline misses against the target rate.
#[derive(Clone, Debug, Serialize)]
pub struct Deadline {
    /// Calls with a deadline.
    pub calls: u64,
    /// Calls that ended after their tick's deadline.
    pub misses: u64,
    /// `misses / calls`.
    pub miss_rate: f64,
    /// Lateness against the scheduled tick (ms), when recorded.
    pub late: Option<Distribution>,
    /// Why the calls missed: the loop's period, whether it is paced, and
    /// which stages carry the time over the period. Absent without a miss
    /// (or without `late_ms` to read the period from).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<DeadlineCause>,
}

/// Why a group's calls missed their tick's deadline (`docs/report.md`,
/// "Deadline misses").
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeadlineCause {
    /// The loop's period (ms), read off the records: the largest
    /// `e2e − late` (deadline − start, the period on a call that started
    /// on its tick).
    pub period_ms: f64,
    /// `1000 / period_ms`.
    pub target_hz: f64,
    /// `unpaced` (the loop runs its calls back to back, faster than its
    /// target: it does not wait for its ticks), `over_period` (the typical
    /// call takes 90 % of the period or more: the call does not fit), or
    /// `held_up` (a few calls took longer than usual).
    pub cause: &'static str,
    /// Median time between one call's end and the next one's start (ms;
    /// `null` when no two consecutive records say).
    pub idle_p50_ms: Option<f64>,
    /// e2e median of the steady calls (ms).
    pub e2e_p50_ms: f64,
    /// e2e median of the calls that missed (ms).
    pub missed_e2e_p50_ms: f64,
    /// Median of how long after its tick a missed call started (ms): the
    /// call before it overran.
    pub late_start_ms: f64,
    /// What carries the time, largest first: for `over_period` each
    /// stage's median on the missed calls; for `held_up` each stage's
    /// median excess over its own median on those calls, and `late_start`.
    /// Only what reaches the floor of "What counts".
    pub stages: Vec<DeadlineShare>,
    /// The hosts' run-queue wait on the missed calls (ms; the robot's
    /// `run_wait` plus the server's `server_run_wait`, their sum's median):
    /// time inside the stages when their threads were ready and had no
    /// core. `null` without host figures.
    pub host_wait_ms: Option<f64>,
    /// The same on the group's typical call (its median over every call).
    pub host_wait_typical_ms: Option<f64>,
}

/// One stage's share of the deadline misses (ms).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeadlineShare {
    /// The stage (or `late_start`).
    pub stage: &'static str,
    /// Its time (ms), as [`DeadlineCause::stages`] says.
    pub ms: f64,
}
