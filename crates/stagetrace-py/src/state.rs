//! One call's state, shared by the call object and the spans opened in it
//! (transport, stage handles): the core's [`DirectCall`] (stage sums,
//! transport, failure, digest: what a Rust call span keeps) plus the stages
//! open right now, in a fixed array (no allocation per stage).

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::PyObject;
use stagetrace::direct::{DirectCall, DirectTransport, Mark};
use stagetrace::{Stage, TraceParent};

use crate::shared::Shared;

/// Stages open at once in one call (`with` nesting depth); deeper ones are
/// not recorded and are counted as ignored spans.
pub(crate) const MAX_OPEN: usize = 16;

/// A `with stage` open in the call: its stage, start, and whether another
/// stage of the call was open when it started.
#[derive(Clone, Copy, Debug)]
struct Open {
    stage: Stage,
    start: Mark,
    nested: bool,
}

/// Where the call is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Made, not started (`stagetrace.call(...)` before its `with`).
    New,
    Running,
    /// Submitted to the worker; the ids stay for late `traceparent`s.
    Ended,
}

#[derive(Debug)]
struct Inner {
    phase: Phase,
    /// What to start the call with.
    kind: Option<String>,
    seq: Option<u64>,
    /// The call's state, once started (kept in place: most of a KB, copied
    /// only when it is queued).
    call: Option<DirectCall>,
    open: [Option<Open>; MAX_OPEN],
    depth: usize,
    /// `with stage` entered past `MAX_OPEN` and not yet left.
    overflow: u32,
    /// Transports and stage handles open (`Span`s): they nest what starts
    /// inside them too.
    handles: u32,
    /// The context variable's token while this call is the current one.
    token: Option<PyObject>,
    /// The garbage collector's totals when the call started.
    gc_at_start: (u64, u64),
}

/// One call of a recorder.
#[derive(Debug)]
pub(crate) struct CallCell {
    pub(crate) shared: Arc<Shared>,
    inner: Mutex<Inner>,
}

impl CallCell {
    pub(crate) fn new(shared: Arc<Shared>, kind: Option<String>, seq: Option<u64>) -> Self {
        CallCell {
            shared,
            inner: Mutex::new(Inner {
                phase: Phase::New,
                kind,
                seq,
                call: None,
                open: [None; MAX_OPEN],
                depth: 0,
                overflow: 0,
                handles: 0,
                token: None,
                gc_at_start: (0, 0),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // No user code runs under the lock, so it cannot be poisoned by a
        // panic of ours that matters; take the value anyway rather than raise.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start the call now (a second start does nothing). Returns whether it
    /// started here.
    /// `parent`: the caller's context of the request being handled, whose
    /// trace the call continues.
    pub(crate) fn start(&self, parent: Option<TraceParent>) -> bool {
        let mut g = self.lock();
        if g.phase != Phase::New {
            return false;
        }
        let g = &mut *g;
        g.call = Some(
            self.shared
                .calls
                .start_continuing(parent, g.kind.as_deref(), g.seq),
        );
        g.phase = Phase::Running;
        g.gc_at_start = crate::gc_clock::totals();
        true
    }

    /// End the call now and queue it to the worker (once).
    pub(crate) fn end(&self) {
        let mut g = self.lock();
        if g.phase == Phase::Running {
            let (ns, n) = crate::gc_clock::totals();
            let (ns0, n0) = g.gc_at_start;
            if let Some(call) = &mut g.call {
                if self.shared.calls.host_figures() {
                    call.set_gc(ns.saturating_sub(ns0), n.saturating_sub(n0));
                }
                self.shared.calls.submit(call);
            }
            g.phase = Phase::Ended;
        }
    }

    pub(crate) fn set_token(&self, token: PyObject) {
        self.lock().token = Some(token);
    }

    pub(crate) fn take_token(&self) -> Option<PyObject> {
        self.lock().token.take()
    }

    /// A `with stage` starts now. Outside a running call nothing is kept
    /// (its end counts it as ignored).
    pub(crate) fn enter_stage(&self, stage: Stage) {
        let start = Mark::of_stage(stage, self.shared.calls.host_figures());
        let mut g = self.lock();
        if g.phase != Phase::Running {
            return;
        }
        let nested = g.depth > 0 || g.handles > 0;
        if g.depth < MAX_OPEN {
            let d = g.depth;
            g.open[d] = Some(Open {
                stage,
                start,
                nested,
            });
            g.depth += 1;
        } else {
            g.overflow = g.overflow.saturating_add(1);
        }
    }

    /// A `with stage` of `stage` ends now: the latest open one of that
    /// stage is added to the call (asyncio tasks sharing a call may leave
    /// theirs out of order), marked failed first when `failed`.
    pub(crate) fn exit_stage(&self, stage: Stage, failed: bool) {
        let mut g = self.lock();
        let g = &mut *g;
        if failed {
            if let Some(call) = &mut g.call {
                call.mark_failed("exception");
            }
        }
        if g.overflow > 0 {
            g.overflow -= 1;
            self.shared.calls.count_ignored_stage();
            return;
        }
        let found = g.open[..g.depth]
            .iter()
            .rposition(|o| o.is_some_and(|o| o.stage == stage));
        let Some(i) = found else {
            self.shared.calls.count_ignored_stage();
            return;
        };
        let open = g.open[i].take();
        g.open.copy_within(i + 1..g.depth, i);
        g.depth -= 1;
        g.open[g.depth] = None;
        match (g.phase, &mut g.call, open) {
            (Phase::Running, Some(call), Some(o)) => call.add_stage(o.stage, o.start, o.nested),
            _ => self.shared.calls.count_ignored_stage(),
        }
    }

    /// A span (transport or stage handle) opens in this call; returns
    /// whether it is nested in another stage, and whether the call runs.
    pub(crate) fn open_handle(&self) -> (bool, bool) {
        let mut g = self.lock();
        let running = g.phase == Phase::Running;
        let nested = g.depth > 0 || g.handles > 0;
        if running {
            g.handles = g.handles.saturating_add(1);
        }
        (nested, running)
    }

    /// A span opened with `open_handle` ends now: added to the call, or
    /// counted as ignored when the call ended first.
    pub(crate) fn close_handle(
        &self,
        stage: Stage,
        start: Mark,
        nested: bool,
        transport: Option<&DirectTransport>,
    ) {
        let mut g = self.lock();
        let g = &mut *g;
        g.handles = g.handles.saturating_sub(1);
        match (g.phase, &mut g.call, transport) {
            (Phase::Running, Some(call), Some(t)) => call.add_transport(t, nested),
            (Phase::Running, Some(call), None) => call.add_stage(stage, start, nested),
            _ => self.shared.calls.count_ignored_stage(),
        }
    }

    /// Runs `f` on the call once started (ended included).
    pub(crate) fn with_call<T>(&self, f: impl FnOnce(&mut DirectCall) -> T) -> Option<T> {
        self.lock().call.as_mut().map(f)
    }

    /// The `traceparent` of a request made in `transport` (or in the call).
    pub(crate) fn trace_parent(&self, transport: Option<&DirectTransport>) -> Option<TraceParent> {
        self.with_call(|c| c.trace_parent(transport))
    }

    /// "new", "open" or "closed", for `repr` and `closed`.
    pub(crate) fn phase(&self) -> &'static str {
        match self.lock().phase {
            Phase::New => "new",
            Phase::Running => "open",
            Phase::Ended => "closed",
        }
    }
}
