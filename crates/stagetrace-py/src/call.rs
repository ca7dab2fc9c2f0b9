//! `with stagetrace.call(kind="infer"):` one control cycle (a record line).
//!
//! The call is a Rust object holding the core's
//! [`DirectCall`](stagetrace::direct::DirectCall): entering it stamps the
//! start and makes it the current call of the thread or asyncio task (the
//! `contextvars.ContextVar` `stagetrace._native.current`), `with
//! stagetrace.stage(...)` stamps into it, and leaving it queues it to the
//! core's worker, which writes the same record a Rust call span gives. No
//! `tracing` span is made (`bench/overhead.py`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::type_object::PyTypeInfo;
use pyo3::types::PyString;

use crate::current::{current, first_failure, incoming_parent, shared_of, Ready};
use crate::shared::{Recorder, Shared};
use crate::span::{reason, Span};
use crate::state::CallCell;

/// `stagetrace.call(kind=None, seq=None, *, recorder=None)`: a call, started
/// by its `with`. A function rather than the class itself: a class called
/// with keywords costs a keyword dict per call, a function does not.
#[pyfunction]
#[pyo3(signature = (kind=None, seq=None, *, recorder=None))]
pub(crate) fn call(
    py: Python<'_>,
    kind: Option<Bound<'_, PyString>>,
    seq: Option<u64>,
    recorder: Option<Py<Recorder>>,
) -> PyResult<Call> {
    // The caller's string is kept, not copied; a kind that is not UTF-8
    // (a lone surrogate) is refused here, where the caller can see it.
    if let Some(k) = &kind {
        k.to_str()?;
    }
    let shared = shared_of(py, recorder.as_ref())?;
    Ok(Call {
        cell: Arc::new(CallCell::new(shared, kind.map(Bound::unbind), seq)),
    })
}

/// One call. The `with` gives the call itself: `c.transport(peer)`,
/// `c.stage(name)`, `c.fail(why)`, `c.output_digest(d)`, `c.traceparent()`.
#[pyclass(module = "stagetrace", name = "Call", frozen)]
pub(crate) struct Call {
    pub(crate) cell: Arc<CallCell>,
}

/// `Call`'s type object, looked up once: `with stage` checks the current
/// call's type twice per stage, and pyo3's checked downcast (its lazy type
/// object, then `PyType_IsSubtype`) cost more than the stage's stamps.
static CALL_TYPE: GILOnceCell<usize> = GILOnceCell::new();

impl Call {
    /// `obj` as a `Call`, when it is one. `Call` cannot be subclassed (no
    /// `subclass` in its `pyclass`), so its exact type is the whole test.
    pub(crate) fn exactly<'a, 'py>(obj: &'a Bound<'py, PyAny>) -> Option<&'a Bound<'py, Call>> {
        let py = obj.py();
        let ty = *CALL_TYPE.get_or_init(py, || Call::type_object_raw(py) as usize);
        // SAFETY: `obj` is a live object (borrowed), so reading its type is
        // sound; when that type is `Call`'s the object is a `Call`.
        unsafe {
            (pyo3::ffi::Py_TYPE(obj.as_ptr()) as usize == ty)
                .then(|| obj.downcast_unchecked::<Call>())
        }
    }

    /// A call started now, not made current (`Recorder.call`).
    pub(crate) fn opened(
        py: Python<'_>,
        shared: Arc<Shared>,
        kind: Option<&str>,
        seq: Option<u64>,
    ) -> Call {
        let cell = CallCell::new(shared, kind.map(|k| PyString::new(py, k).unbind()), seq);
        cell.start(py, incoming_parent(py));
        Call {
            cell: Arc::new(cell),
        }
    }
}

impl Drop for Call {
    /// A call Python collects without leaving its `with` or `close` ends
    /// here (and is recorded), as a dropped Rust call span.
    fn drop(&mut self) {
        // Python drops it holding the GIL; this only borrows it.
        Python::with_gil(|py| self.cell.end(py));
    }
}

#[pymethods]
impl Call {
    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let py = slf.py();
        let cell = &slf.get().cell;
        cell.start(py, incoming_parent(py));
        let token = current(py)?.set.call1(py, (slf,))?;
        drop(cell.set_token(py, token));
        Ok(slf.clone())
    }

    #[pyo3(signature = (_exc_type=None, exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if first_failure(exc) {
            self.cell.with_call(py, |c| c.mark_failed("exception"));
        }
        self.cell.end(py);
        if let Some(token) = self.cell.take_token(py) {
            current(py)?.reset.call1(py, (token,))?;
        }
        Ok(false)
    }

    fn __aenter__(slf: &Bound<'_, Self>) -> PyResult<Ready> {
        Ok(Ready::with(Self::__enter__(slf)?.into_any().unbind()))
    }

    #[pyo3(signature = (exc_type=None, exc=None, tb=None))]
    fn __aexit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Ready> {
        let suppress = self.__exit__(py, exc_type, exc, tb)?;
        Ok(Ready::with_bool(py, suppress))
    }

    /// A stage of this call, started now, ended by its `close()`:
    /// `capture`, `infer`, `dispatch`, ... or a name mapped onto one.
    fn stage(&self, py: Python<'_>, name: &str) -> PyResult<Span> {
        Span::stage_of(py, &self.cell, name)
    }

    /// The transport stage of this call, started now: request handed to the
    /// send API → whole response received, ended by its `close()`. `peer`
    /// names the server (one clock-offset estimate per peer).
    #[pyo3(signature = (peer=None))]
    fn transport(&self, py: Python<'_>, peer: Option<&str>) -> Span {
        Span::transport_of(py, &self.cell, peer)
    }

    /// The W3C `traceparent` of a request made directly in the call (no
    /// transport stage); `None` before it starts.
    fn traceparent(&self, py: Python<'_>) -> Option<String> {
        self.cell.trace_parent(py, None).map(|tp| tp.to_string())
    }

    /// Mark the call failed (`failed: true, error: reason` on its record;
    /// kept out of the stage figures).
    fn fail(&self, py: Python<'_>, why: &str) {
        let r = reason(why);
        self.cell.with_call(py, |c| c.mark_failed(r));
    }

    /// Attach a digest of the call's output (`output_digest` on the record).
    fn output_digest(&self, py: Python<'_>, digest: u64) {
        self.cell.with_call(py, |c| c.record_output_digest(digest));
    }

    /// The call's `seq`, learnt after it started (an async robot's
    /// observation gets its timestep once captured).
    fn set_seq(&self, py: Python<'_>, seq: u64) {
        self.cell.with_call(py, |c| c.set_seq(seq));
    }

    /// The robot's action queue when this call's chunk arrived (async
    /// inference): `margin_ns` of actions left (negative: dry that long)
    /// and `dry_ticks` without an action before it (`margin_ms`,
    /// `dry_ticks` on the record).
    fn action_queue(&self, py: Python<'_>, margin_ns: i64, dry_ticks: u32) {
        self.cell
            .with_call(py, |c| c.set_action_queue(margin_ns, dry_ticks));
    }

    /// End the call now (a second close does nothing). `failed` marks it
    /// failed with reason "exception" first.
    #[pyo3(signature = (failed=false))]
    fn close(&self, py: Python<'_>, failed: bool) {
        if failed {
            self.cell.with_call(py, |c| c.mark_failed("exception"));
        }
        self.cell.end(py);
    }

    /// Whether the call has ended.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.cell.phase(py) == "closed"
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<stagetrace call, {}>", self.cell.phase(py))
    }
}
