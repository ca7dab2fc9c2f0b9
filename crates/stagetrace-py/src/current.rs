//! The current call of a thread or asyncio task (a `contextvars.ContextVar`,
//! `stagetrace._native.current`), the process's default recorder, and what
//! the context managers share: how an exception marks a call failed, and an
//! awaitable for `async with`.

use std::cell::RefCell;
use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::prelude::*;
use pyo3::sync::{GILOnceCell, GILProtected};
use pyo3::types::{IntoPyDict, PyString};
use stagetrace_wire::TraceParent;

use crate::shared::{Recorder, Shared};

/// The context variable's bound `get`, `set` and `reset`, looked up once:
/// a method lookup by name per scope would cost more than the stamps.
pub(crate) struct Current {
    pub(crate) get: Py<PyAny>,
    pub(crate) set: Py<PyAny>,
    pub(crate) reset: Py<PyAny>,
}

static CURRENT: GILOnceCell<Current> = GILOnceCell::new();
/// `stagetrace._native.incoming.get`, looked up once.
static INCOMING: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
/// The default recorder's shared part (what `call` / `stage` use when no
/// recorder is given). Read by every call, so no mutex: the GIL guards it.
static DEFAULT: GILProtected<RefCell<Option<Arc<Shared>>>> = GILProtected::new(RefCell::new(None));

/// Creates the context variable and adds it and `set_default` to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let cv = py.import("contextvars")?.getattr("ContextVar")?.call(
        ("stagetrace_span",),
        Some(&[("default", py.None())].into_py_dict(py)?),
    )?;
    m.add("current", &cv)?;
    // The request being handled here (`stagetrace.trace.continuing`): its
    // caller's `(traceparent, tracestate)`, or None. A call started inside
    // continues that trace, as a Rust call span under a remote parent.
    let incoming = py.import("contextvars")?.getattr("ContextVar")?.call(
        ("stagetrace_incoming_trace",),
        Some(&[("default", py.None())].into_py_dict(py)?),
    )?;
    m.add("incoming", &incoming)?;
    let _ = INCOMING.set(py, incoming.getattr("get")?.unbind());
    let _ = CURRENT.set(
        py,
        Current {
            get: cv.getattr("get")?.unbind(),
            set: cv.getattr("set")?.unbind(),
            reset: cv.getattr("reset")?.unbind(),
        },
    );
    m.add_class::<Ready>()?;
    m.add_function(wrap_pyfunction!(set_default, m)?)?;
    Ok(())
}

/// The caller's trace context of the request this thread or task handles
/// (inside `stagetrace.trace.continuing`), when it is a valid `traceparent`.
pub(crate) fn incoming_parent(py: Python<'_>) -> Option<TraceParent> {
    let v = INCOMING.get(py)?.call0(py).ok()?;
    let v = v.bind(py);
    if v.is_none() {
        return None;
    }
    let tp = v.get_item(0).ok()?;
    let tp = tp.downcast::<PyString>().ok()?.to_cow().ok()?;
    TraceParent::parse(&tp).ok()
}

pub(crate) fn current(py: Python<'_>) -> PyResult<&Current> {
    CURRENT
        .get(py)
        .ok_or_else(|| PyRuntimeError::new_err("stagetrace._native not initialised"))
}

/// Make `rec` the recorder `call` / `stage` use when none is given (`None`:
/// forget it).
#[pyfunction]
fn set_default(py: Python<'_>, rec: Option<Py<Recorder>>) {
    let new = rec.map(|r| Arc::clone(&r.get().shared));
    // The one it replaces is dropped after the cell is let go (its drop
    // runs no Python code, but keep the borrow short anyway).
    // (`try_`: never a panic, though nothing else holds it here.)
    let _old = DEFAULT
        .get(py)
        .try_borrow_mut()
        .map(|mut d| std::mem::replace(&mut *d, new));
}

/// The shared part of `rec`, or of the default recorder (made, with a
/// warning, by the Python side on first use without `init()`).
pub(crate) fn shared_of(py: Python<'_>, rec: Option<&Py<Recorder>>) -> PyResult<Arc<Shared>> {
    if let Some(r) = rec {
        return Ok(Arc::clone(&r.get().shared));
    }
    if let Some(s) = DEFAULT.get(py).try_borrow().ok().and_then(|d| d.clone()) {
        return Ok(s);
    }
    let r: Py<Recorder> = py
        .import("stagetrace")?
        .getattr("recorder")?
        .call0()?
        .extract()?;
    Ok(Arc::clone(&r.get().shared))
}

/// Whether a scope ending with `exc` marks its call failed ("exception"):
/// not when an inner scope or the client already gave the call its reason
/// (`exc._stagetrace_reason`); the first reason is the record's.
pub(crate) fn first_failure(exc: Option<&Bound<'_, PyAny>>) -> bool {
    let Some(exc) = exc.filter(|e| !e.is_none()) else {
        return false;
    };
    match exc.getattr("_stagetrace_reason") {
        Ok(r) if !r.is_none() => false,
        _ => {
            // An exception type without a __dict__ cannot carry it.
            let _ = exc.setattr("_stagetrace_reason", "exception");
            true
        }
    }
}

/// An awaitable that is done at once with `value`: `async with` support.
#[pyclass(module = "stagetrace._native")]
pub(crate) struct Ready {
    value: Option<PyObject>,
}

impl Ready {
    /// An awaitable that is already done, with `value`.
    pub(crate) fn with(value: PyObject) -> Self {
        Ready { value: Some(value) }
    }

    /// An awaitable that is already done, with `True` or `False` (what an
    /// `__aexit__` answers).
    pub(crate) fn with_bool(py: Python<'_>, b: bool) -> Self {
        Ready::with(
            pyo3::types::PyBool::new(py, b)
                .to_owned()
                .into_any()
                .unbind(),
        )
    }
}

#[pymethods]
impl Ready {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        let v = self.value.take().unwrap_or_else(|| py.None());
        Err(PyStopIteration::new_err((v,)))
    }
}
