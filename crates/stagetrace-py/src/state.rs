//! One call's state, shared by the call object and the spans opened in it
//! (transport, stage handles): the core's [`DirectCall`] (stage sums,
//! transport, failure, digest: what a Rust call span keeps) plus the stages
//! open right now, in a fixed array (no allocation per stage).

use std::cell::RefCell;
use std::sync::Arc;

use pyo3::sync::GILProtected;
use pyo3::types::{PyString, PyStringMethods};
use pyo3::{Py, PyObject, Python};
use stagetrace::direct::{DirectCall, DirectTransport, Mark};
use stagetrace::Stage;
use stagetrace_wire::TraceParent;

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
    /// (The caller's string, kept: no copy unless the call starts.)
    kind: Option<Py<PyString>>,
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
pub(crate) struct CallCell {
    pub(crate) shared: Arc<Shared>,
    /// Only ever touched with the GIL held (every caller is a Python
    /// method), so a `RefCell` rather than a mutex: a call's stages take
    /// the cell a dozen times, and a mutex's two atomic operations each
    /// time were a tenth of the bindings' cost (`bench/overhead.py`).
    inner: GILProtected<RefCell<Inner>>,
}

impl CallCell {
    pub(crate) fn new(shared: Arc<Shared>, kind: Option<Py<PyString>>, seq: Option<u64>) -> Self {
        CallCell {
            shared,
            inner: GILProtected::new(RefCell::new(Inner {
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
            })),
        }
    }

    /// Runs `f` on the state. No Python code runs inside `f` (nothing
    /// here calls back into Python or drops a Python object), so the
    /// cell is never taken twice; were it ever, `f` is skipped rather than
    /// the `RefCell` panicking in the app.
    fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&mut Inner) -> T) -> Option<T> {
        let mut g = self.inner.get(py).try_borrow_mut().ok()?;
        Some(f(&mut g))
    }

    /// Start the call now (a second start does nothing). Returns whether it
    /// started here.
    /// `parent`: the caller's context of the request being handled, whose
    /// trace the call continues.
    pub(crate) fn start(&self, py: Python<'_>, parent: Option<TraceParent>) -> bool {
        self.with(py, |g| {
            if g.phase != Phase::New {
                return false;
            }
            // (Checked to be UTF-8 when the call was made: cached by Python.)
            let kind = g.kind.as_ref().and_then(|k| k.bind(py).to_str().ok());
            g.call = Some(self.shared.calls.start_continuing(parent, kind, g.seq));
            g.phase = Phase::Running;
            g.gc_at_start = crate::gc_clock::totals();
            true
        })
        .unwrap_or(false)
    }

    /// End the call now and queue it to the worker (once).
    pub(crate) fn end(&self, py: Python<'_>) {
        self.with(py, |g| {
            if g.phase != Phase::Running {
                return;
            }
            if let Some(call) = &mut g.call {
                if self.shared.calls.host_figures() {
                    let (ns, n) = crate::gc_clock::totals();
                    let (ns0, n0) = g.gc_at_start;
                    call.set_gc(ns.saturating_sub(ns0), n.saturating_sub(n0));
                }
                self.shared.calls.submit(call);
            }
            g.phase = Phase::Ended;
        });
    }

    /// Keeps the context variable's token while this call is current; an
    /// earlier one is given back (dropped by the caller, outside the cell).
    pub(crate) fn set_token(&self, py: Python<'_>, token: PyObject) -> Option<PyObject> {
        self.with(py, |g| g.token.replace(token)).flatten()
    }

    pub(crate) fn take_token(&self, py: Python<'_>) -> Option<PyObject> {
        self.with(py, |g| g.token.take()).flatten()
    }

    /// A `with stage` starts now. Outside a running call nothing is kept
    /// (its end counts it as ignored).
    pub(crate) fn enter_stage(&self, py: Python<'_>, stage: Stage) {
        let start = Mark::of_stage(stage, self.shared.calls.host_figures());
        self.with(py, |g| {
            if g.phase != Phase::Running {
                return;
            }
            let nested = g.depth > 0 || g.handles > 0;
            if g.depth < MAX_OPEN {
                g.open[g.depth] = Some(Open {
                    stage,
                    start,
                    nested,
                });
                g.depth += 1;
            } else {
                g.overflow = g.overflow.saturating_add(1);
            }
        });
    }

    /// A `with stage` of `stage` ends now: the latest open one of that
    /// stage is added to the call (asyncio tasks sharing a call may leave
    /// theirs out of order), marked failed first when `failed`.
    pub(crate) fn exit_stage(&self, py: Python<'_>, stage: Stage, failed: bool) {
        let added = self.with(py, |g| {
            if failed {
                if let Some(call) = &mut g.call {
                    call.mark_failed("exception");
                }
            }
            if g.overflow > 0 {
                g.overflow -= 1;
                return false;
            }
            let found = g.open[..g.depth]
                .iter()
                .rposition(|o| o.is_some_and(|o| o.stage == stage));
            let Some(i) = found else {
                return false;
            };
            let open = g.open[i].take();
            g.open.copy_within(i + 1..g.depth, i);
            g.depth -= 1;
            g.open[g.depth] = None;
            match (g.phase, &mut g.call, open) {
                (Phase::Running, Some(call), Some(o)) => {
                    call.add_stage(o.stage, o.start, o.nested);
                    true
                }
                _ => false,
            }
        });
        if added != Some(true) {
            self.shared.calls.count_ignored_stage();
        }
    }

    /// A span (transport or stage handle) opens in this call; returns
    /// whether it is nested in another stage, and whether the call runs.
    pub(crate) fn open_handle(&self, py: Python<'_>) -> (bool, bool) {
        self.with(py, |g| {
            let running = g.phase == Phase::Running;
            let nested = g.depth > 0 || g.handles > 0;
            if running {
                g.handles = g.handles.saturating_add(1);
            }
            (nested, running)
        })
        .unwrap_or((false, false))
    }

    /// A span opened with `open_handle` ends now: added to the call, or
    /// counted as ignored when the call ended first.
    pub(crate) fn close_handle(
        &self,
        py: Python<'_>,
        stage: Stage,
        start: Mark,
        nested: bool,
        transport: Option<&DirectTransport>,
    ) {
        let added = self.with(py, |g| {
            g.handles = g.handles.saturating_sub(1);
            match (g.phase, &mut g.call, transport) {
                (Phase::Running, Some(call), Some(t)) => call.add_transport(t, nested),
                (Phase::Running, Some(call), None) => call.add_stage(stage, start, nested),
                _ => return false,
            }
            true
        });
        if added != Some(true) {
            self.shared.calls.count_ignored_stage();
        }
    }

    /// Runs `f` on the call once started (ended included).
    pub(crate) fn with_call<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut DirectCall) -> T,
    ) -> Option<T> {
        self.with(py, |g| g.call.as_mut().map(f)).flatten()
    }

    /// The `traceparent` of a request made in `transport` (or in the call).
    pub(crate) fn trace_parent(
        &self,
        py: Python<'_>,
        transport: Option<&DirectTransport>,
    ) -> Option<TraceParent> {
        self.with_call(py, |c| c.trace_parent(transport))
    }

    /// "new", "open" or "closed", for `repr` and `closed`.
    pub(crate) fn phase(&self, py: Python<'_>) -> &'static str {
        match self.with(py, |g| g.phase) {
            Some(Phase::New) => "new",
            Some(Phase::Running) | None => "open",
            Some(Phase::Ended) => "closed",
        }
    }
}
