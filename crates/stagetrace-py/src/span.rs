//! One span of a recorder, seen from Python: a call, a stage or the
//! transport stage. Closing it (or dropping it) ends the stage; the core's
//! layer measures it from creation to close, as for a Rust span.

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;
use stagetrace::StageSpanExt;

use crate::dispatcher::Scope;
use crate::timing;

/// What a span is, for `repr` and for what it may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Call,
    Stage(&'static str),
    Transport,
}

/// A `tracing` span of a recorder. Children (`stage`, `transport`) are
/// created with this span as their explicit parent, not through the
/// thread's current span, so asyncio tasks interleaving on one thread keep
/// their calls apart (the Python side tracks the current span in a
/// `contextvars.ContextVar`).
#[pyclass(module = "stagetrace._native", frozen)]
pub(crate) struct Span {
    span: Mutex<Option<tracing::Span>>,
    scope: Arc<Scope>,
    role: Role,
}

/// Why a call failed, as its record says (`error`): the core takes a
/// `&'static str`, so Python's reason is matched onto the Rust client's words.
fn reason(r: &str) -> &'static str {
    const KNOWN: [&str; 8] = [
        "timeout",
        "disconnected",
        "server error",
        "bad response",
        "not connected",
        "connect failed",
        "exception",
        "cancelled",
    ];
    KNOWN.into_iter().find(|k| *k == r).unwrap_or("error")
}

impl Span {
    pub(crate) fn new(span: tracing::Span, scope: Arc<Scope>, role: Role) -> Self {
        Span {
            span: Mutex::new(Some(span)),
            scope,
            role,
        }
    }

    /// A stage span `name` (mapped onto its canonical stage), child of
    /// `parent` when given.
    pub(crate) fn open_stage(
        scope: &Arc<Scope>,
        parent: Option<&tracing::Span>,
        name: &str,
    ) -> PyResult<Span> {
        let stage = scope.stage(name)?;
        let s = stage.name();
        let span = scope.within(|| match parent {
            Some(p) => tracing::info_span!(parent: p, "stage", stage = s),
            None => tracing::info_span!(parent: None, "stage", stage = s),
        });
        let role = if s == "transport" {
            Role::Transport
        } else {
            Role::Stage(s)
        };
        Ok(Span::new(span, Arc::clone(scope), role))
    }

    fn lock(&self) -> MutexGuard<'_, Option<tracing::Span>> {
        // A panic while holding it cannot happen (no user code runs under
        // it); recover the value anyway rather than raise.
        self.span.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Close `span` under the recorder's dispatcher: the registry releases
    /// a closed child's hold on its parent through the *current* default
    /// dispatcher, so a span dropped outside it would keep its call open
    /// for ever (and the call would never be recorded).
    fn end(&self, span: tracing::Span) {
        self.scope.within(move || drop(span));
    }

    pub(crate) fn child_stage(&self, name: &str) -> PyResult<Span> {
        let guard = self.lock();
        Span::open_stage(&self.scope, guard.as_ref(), name)
    }

    /// `close`: end the span now, marking its call failed first if asked.
    pub(crate) fn end_now(&self, failed: bool) {
        let span = self.lock().take();
        if let Some(span) = span {
            if failed {
                span.mark_failed("exception");
            }
            self.end(span);
        }
    }

    fn with_open<T>(&self, f: impl FnOnce(&tracing::Span) -> T) -> Option<T> {
        self.lock().as_ref().map(f)
    }
}

impl Drop for Span {
    /// A span Python collects without `close` (an exception skipped it, or
    /// it was never used in a `with`) ends here, under its dispatcher.
    fn drop(&mut self) {
        let span = self
            .span
            .get_mut()
            .map(Option::take)
            .unwrap_or_else(|e| e.into_inner().take());
        if let Some(span) = span {
            self.end(span);
        }
    }
}

#[pymethods]
impl Span {
    /// A stage inside this span, started now: `capture`, `infer`,
    /// `dispatch`, ... or a name mapped onto one.
    fn stage(&self, name: &str) -> PyResult<Span> {
        self.child_stage(name)
    }

    /// The transport stage inside this span, started now: request handed to
    /// the send API → whole response received. `peer` names the server (one
    /// clock-offset estimate per peer).
    #[pyo3(signature = (peer=None))]
    fn transport(&self, peer: Option<&str>) -> Span {
        let guard = self.lock();
        let span = self.scope.within(|| match guard.as_ref() {
            Some(p) => tracing::info_span!(parent: p, "transport", peer = peer),
            None => tracing::info_span!(parent: None, "transport", peer = peer),
        });
        Span::new(span, Arc::clone(&self.scope), Role::Transport)
    }

    /// The W3C `traceparent` to send with the request of this transport
    /// span (`None` outside a call).
    fn traceparent(&self) -> Option<String> {
        self.with_open(|s| s.trace_parent().map(|tp| tp.to_string()))
            .flatten()
    }

    /// Attach the response's `server_timing` map (a dict as msgpack decoded
    /// it) to this transport span. The core checks it (keys, units, ranges);
    /// a malformed map is ignored and counted as a rejected header. Returns
    /// whether it was taken.
    fn server_timing(&self, map: &Bound<'_, PyAny>) -> bool {
        let parsed = timing::from_python(map);
        let guard = self.lock();
        let Some(span) = guard.as_ref() else {
            return false;
        };
        match parsed {
            Some(t) if !t.is_empty() => {
                span.record_server_timing(t);
                true
            }
            Some(_) => false,
            None => {
                self.scope.within(stagetrace::count_rejected_header);
                false
            }
        }
    }

    /// Mark the enclosing call failed (`failed: true, error: reason` on its
    /// record; kept out of the stage figures).
    fn fail(&self, why: &str) {
        let r = reason(why);
        self.with_open(|s| s.mark_failed(r));
    }

    /// Attach a digest of the call's output (`output_digest` on the record).
    fn output_digest(&self, digest: u64) {
        self.with_open(|s| s.record_output_digest(digest));
    }

    /// End the span now (a second close does nothing). `failed` marks the
    /// enclosing call failed with reason "exception" first.
    #[pyo3(signature = (failed=false))]
    fn close(&self, failed: bool) {
        self.end_now(failed);
    }

    /// Whether `close` has run.
    #[getter]
    fn closed(&self) -> bool {
        self.lock().is_none()
    }

    fn __repr__(&self) -> String {
        let state = match self.with_open(tracing::Span::is_disabled) {
            None => "closed",
            Some(true) => "disabled",
            Some(false) => "open",
        };
        match self.role {
            Role::Call => format!("<stagetrace call span, {state}>"),
            Role::Transport => format!("<stagetrace transport span, {state}>"),
            Role::Stage(s) => format!("<stagetrace {s} span, {state}>"),
        }
    }
}
