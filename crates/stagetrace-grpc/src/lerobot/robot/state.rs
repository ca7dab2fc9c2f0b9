//! The robot's state between its control loop and its receiver: the action
//! queue merged by timestep, the observations in flight (each one call),
//! the chunks waiting for their first action, and the report.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use stagetrace::direct::{DirectCall, DirectCalls, DirectTransport, Mark};
use stagetrace::Stage;

use super::RobotReport;
use crate::lerobot::payload::{ActionChunk, MAX_ACTIONS};
use crate::wire::{Disposition, GrpcTiming, ObsOutcome};

/// Observations in flight kept at most: a robot has one or two; more means
/// chunks that never came (a lost reply), and the oldest give up.
const MAX_IN_FLIGHT: usize = 64;

/// Actions queued at most: a few chunks' worth (a server sending chunks far
/// ahead must not grow the queue without bound); the farthest are dropped.
const MAX_QUEUED_ACTIONS: usize = 4 * MAX_ACTIONS;

/// One observation sent, waiting for its chunk: its call and transport.
pub(super) struct Pending {
    pub(super) call: DirectCall,
    pub(super) transport: DirectTransport,
}

/// A chunk in, waiting for its first action to run.
struct Dispatching {
    first: u64,
    call: DirectCall,
    since: Mark,
}

pub(super) struct State {
    calls: DirectCalls,
    dt_ns: i64,
    queue: BTreeMap<u64, f64>,
    latest: Option<u64>,
    must_go: bool,
    dry_since: Option<Instant>,
    dry_ticks: u32,
    in_flight: BTreeMap<u64, VecDeque<Pending>>,
    dispatching: Vec<Dispatching>,
    pub(super) report: RobotReport,
}

impl State {
    pub(super) fn new(calls: DirectCalls, dt_ns: i64) -> Self {
        State {
            calls,
            dt_ns,
            queue: BTreeMap::new(),
            latest: None,
            must_go: true,
            dry_since: None,
            dry_ticks: 0,
            in_flight: BTreeMap::new(),
            dispatching: Vec::new(),
            report: RobotReport::default(),
        }
    }

    /// One control tick's action: the next one runs (and the chunks whose
    /// first action it reaches end their dispatch), or the tick is dry.
    pub(super) fn act(&mut self) {
        self.report.ticks += 1;
        let Some((ts, _action)) = self.queue.pop_first() else {
            self.dry_since.get_or_insert_with(Instant::now);
            self.dry_ticks += 1;
            self.report.dry_ticks += 1;
            return;
        };
        self.dry_since = None;
        self.dry_ticks = 0;
        self.latest = Some(ts);
        self.report.actions += 1;
        // LeRobot's rule (`stagetrace.lerobot`): a chunk is dispatched once
        // an action at or after its first timestep ran.
        let (started, waiting) = std::mem::take(&mut self.dispatching)
            .into_iter()
            .partition(|d| d.first <= ts);
        self.dispatching = waiting;
        for mut d in started {
            d.call.add_stage(Stage::Dispatch, d.since, false);
            self.calls.submit(&d.call);
            self.report.completed += 1;
        }
    }

    /// Whether the queue is low enough to send an observation (LeRobot's
    /// `queue size / chunk size <= chunk_size_threshold`).
    pub(super) fn wants_observation(&self, chunk_size: usize, threshold: f64) -> bool {
        self.queue.len() as f64 / chunk_size.max(1) as f64 <= threshold
    }

    /// The next observation's timestep (the last action run, LeRobot's) and
    /// `must_go` (the queue is empty and a chunk came since the last one).
    pub(super) fn next_observation(&mut self) -> (u64, bool) {
        let must_go = self.must_go && self.queue.is_empty();
        if must_go {
            self.must_go = false;
        }
        (self.latest.unwrap_or(0), must_go)
    }

    /// What the server said of an observation (`None`: nothing, `reason`
    /// says why): it waits for its chunk, or its call ends failed, and the
    /// one it replaced too.
    pub(super) fn settle(
        &mut self,
        p: Pending,
        ts: u64,
        outcome: Option<ObsOutcome>,
        reason: &'static str,
    ) {
        self.report.observations += 1;
        let Some(o) = outcome else {
            self.report.unanswered += 1;
            return self.give_up(p, reason);
        };
        // The one pushed out first: a newer observation of the same
        // timestep replaces its namesake.
        if let Some(gone) = o.replaced.and_then(|r| self.pop(r, false)) {
            self.report.replaced += 1;
            self.give_up(gone, "replaced");
        }
        if o.disposition != Disposition::Queued {
            self.report.skipped += 1;
            return self.give_up(p, "skipped");
        }
        self.report.queued += 1;
        self.in_flight.entry(ts).or_default().push_back(p);
        if self.in_flight.values().map(VecDeque::len).sum::<usize>() > MAX_IN_FLIGHT {
            if let Some(oldest) = self.in_flight.keys().next().copied() {
                if let Some(p) = self.pop(oldest, true) {
                    self.report.unanswered += 1;
                    self.give_up(p, "no timing");
                }
            }
        }
    }

    /// A `GetActions` reply with `chunk` arrived at `at`, with `timing`
    /// (its `timestep` names the observation): that observation's
    /// transport ends, its dispatch starts, the chunk joins the queue.
    pub(super) fn on_chunk(&mut self, chunk: ActionChunk, timing: Option<GrpcTiming>, at: Instant) {
        let pending = timing
            .and_then(|t| t.timestep)
            .and_then(|ts| self.pop(ts, true).map(|p| (ts, p)));
        match pending {
            Some((first, mut p)) => {
                if let Some(t) = timing {
                    p.transport.record_server_timing(t.timing);
                }
                p.call.add_transport(&p.transport, false);
                let (margin, dry) = self.margin(at);
                p.call.set_action_queue(margin, dry);
                let since = Mark::of_stage(Stage::Dispatch, self.calls.host_figures());
                self.dispatching.push(Dispatching {
                    first,
                    call: p.call,
                    since,
                });
                self.report.chunks += 1;
            }
            None => self.report.unmatched += 1,
        }
        self.merge(chunk);
        self.must_go = true;
    }

    /// How long the queue would still have lasted when a chunk arrived at
    /// `at` (its actions × the control period), or, run dry, how long ago
    /// that was (negative), with the dry ticks since.
    fn margin(&self, at: Instant) -> (i64, u32) {
        let left = i64::try_from(self.queue.len()).unwrap_or(i64::MAX);
        match self.dry_since {
            _ if left > 0 => (left.saturating_mul(self.dt_ns), 0),
            Some(since) => {
                let dry = at.saturating_duration_since(since).as_nanos();
                (-i64::try_from(dry).unwrap_or(i64::MAX), self.dry_ticks)
            }
            None => (0, 0),
        }
    }

    /// LeRobot's `_aggregate_action_queues`: actions already past are
    /// dropped, the newer chunk's action wins a timestep both have.
    fn merge(&mut self, chunk: ActionChunk) {
        for (i, a) in chunk.actions.into_iter().enumerate() {
            let ts = chunk.first_timestep.saturating_add(i as u64);
            if self.latest.is_none_or(|l| ts > l) {
                self.queue.insert(ts, a);
            }
        }
        while self.queue.len() > MAX_QUEUED_ACTIONS {
            self.queue.pop_last();
        }
    }

    /// An observation of timestep `ts` in flight: the oldest (its chunk
    /// comes first) or the newest (the queued one a newer one replaced).
    fn pop(&mut self, ts: u64, oldest: bool) -> Option<Pending> {
        let q = self.in_flight.get_mut(&ts)?;
        let p = if oldest { q.pop_front() } else { q.pop_back() };
        if q.is_empty() {
            self.in_flight.remove(&ts);
        }
        p
    }

    /// The call of an observation that will never get its chunk ends, failed.
    pub(super) fn give_up(&mut self, mut p: Pending, reason: &'static str) {
        p.call.add_transport(&p.transport, false);
        p.call.mark_failed(reason);
        self.calls.submit(&p.call);
    }

    /// Whether observations or chunks are still open.
    pub(super) fn outstanding(&self) -> bool {
        !self.in_flight.is_empty() || !self.dispatching.is_empty()
    }

    /// The run is over: whatever is still open ends as `cancelled`.
    pub(super) fn cancel_all(&mut self) {
        let open: Vec<Pending> = std::mem::take(&mut self.in_flight)
            .into_values()
            .flatten()
            .collect();
        for p in open {
            self.report.cancelled += 1;
            self.give_up(p, "cancelled");
        }
        for mut d in std::mem::take(&mut self.dispatching) {
            self.report.cancelled += 1;
            d.call.mark_failed("cancelled");
            self.calls.submit(&d.call);
        }
    }
}
