//! `with st.call(...)` / `with st.stage(...)`: the context managers, in Rust
//! so entering and leaving one costs two C calls instead of two Python
//! frames (`bench/overhead.py`). The current span lives in a
//! `contextvars.ContextVar` (`stagetrace._native.current`), so asyncio tasks
//! and threads each see their own call.

use std::sync::Mutex;

use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::IntoPyDict;

use crate::recorder::Recorder;
use crate::span::Span;

/// The context variable's bound `get`, `set` and `reset`, looked up once:
/// a method lookup by name per scope cost more than the span itself.
struct Current {
    get: Py<PyAny>,
    set: Py<PyAny>,
    reset: Py<PyAny>,
}

static CURRENT: GILOnceCell<Current> = GILOnceCell::new();
static DEFAULT: Mutex<Option<Py<Recorder>>> = Mutex::new(None);

/// Creates the context variable and adds the module's functions and classes.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let cv = py.import("contextvars")?.getattr("ContextVar")?.call(
        ("stagetrace_span",),
        Some(&[("default", py.None())].into_py_dict(py)?),
    )?;
    m.add("current", &cv)?;
    let _ = CURRENT.set(
        py,
        Current {
            get: cv.getattr("get")?.unbind(),
            set: cv.getattr("set")?.unbind(),
            reset: cv.getattr("reset")?.unbind(),
        },
    );
    m.add_class::<CallScope>()?;
    m.add_class::<StageScope>()?;
    m.add_class::<Ready>()?;
    m.add_function(wrap_pyfunction!(set_default, m)?)?;
    Ok(())
}

fn current(py: Python<'_>) -> PyResult<&Current> {
    CURRENT.get(py).ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err("stagetrace._native not initialised")
    })
}

/// Make `rec` the recorder `call` / `stage` use when none is given (`None`:
/// forget it).
#[pyfunction]
fn set_default(rec: Option<Py<Recorder>>) {
    *DEFAULT.lock().unwrap_or_else(|e| e.into_inner()) = rec;
}

fn default_recorder(py: Python<'_>) -> PyResult<Py<Recorder>> {
    if let Some(r) = DEFAULT.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return Ok(r.clone_ref(py));
    }
    // First use without init(): the Python side makes one (and warns).
    py.import("stagetrace")?
        .getattr("recorder")?
        .call0()?
        .extract()
}

/// Whether a scope ending with `exc` marks its call failed ("exception"):
/// not when an inner scope or the client already gave the call its reason
/// (`exc._stagetrace_reason`); the first reason is the record's.
fn first_failure(exc: Option<&Bound<'_, PyAny>>) -> bool {
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
    fn with(value: PyObject) -> Self {
        Ready { value: Some(value) }
    }
}

/// Ends the scope's open span (a call's or a stage's), failed when an
/// exception is leaving the `with`, and restores the context variable; the
/// exception is never swallowed.
fn close(
    py: Python<'_>,
    open: &mut Option<(Py<Span>, PyObject)>,
    exc: Option<&Bound<'_, PyAny>>,
) -> PyResult<bool> {
    if let Some((span, token)) = open.take() {
        current(py)?.reset.call1(py, (token,))?;
        span.get().end_now(first_failure(exc));
    }
    Ok(false)
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

/// `with st.call(kind="infer", seq=None):` one control cycle (a record
/// line). The `with` gives the call's span.
#[pyclass(module = "stagetrace", name = "call")]
pub(crate) struct CallScope {
    kind: Option<String>,
    seq: Option<u64>,
    rec: Option<Py<Recorder>>,
    open: Option<(Py<Span>, PyObject)>,
}

#[pymethods]
impl CallScope {
    #[new]
    #[pyo3(signature = (kind=None, seq=None, *, recorder=None))]
    fn new(kind: Option<String>, seq: Option<u64>, recorder: Option<Py<Recorder>>) -> Self {
        CallScope {
            kind,
            seq,
            rec: recorder,
            open: None,
        }
    }

    fn __enter__(&mut self, py: Python<'_>) -> PyResult<Py<Span>> {
        let rec = match &self.rec {
            Some(r) => r.clone_ref(py),
            None => default_recorder(py)?,
        };
        let span = Py::new(py, rec.get().open_call(self.kind.as_deref(), self.seq))?;
        let token = current(py)?.set.call1(py, (span.clone_ref(py),))?;
        self.open = Some((span.clone_ref(py), token));
        Ok(span)
    }

    #[pyo3(signature = (_exc_type=None, exc=None, _tb=None))]
    fn __exit__(
        &mut self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        close(py, &mut self.open, exc)
    }

    fn __aenter__(&mut self, py: Python<'_>) -> PyResult<Ready> {
        Ok(Ready::with(self.__enter__(py)?.into_any()))
    }

    #[pyo3(signature = (exc_type=None, exc=None, tb=None))]
    fn __aexit__(
        &mut self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Ready> {
        let r = self.__exit__(py, exc_type, exc, tb)?;
        Ok(Ready::with(
            r.into_pyobject(py)?.to_owned().into_any().unbind(),
        ))
    }
}

/// `with st.stage("capture"):` a stage of the current call (or of the
/// current stage, nested). The `with` gives the stage's span.
#[pyclass(module = "stagetrace", name = "stage")]
pub(crate) struct StageScope {
    name: String,
    rec: Option<Py<Recorder>>,
    open: Option<(Py<Span>, PyObject)>,
}

#[pymethods]
impl StageScope {
    #[new]
    #[pyo3(signature = (name, *, recorder=None))]
    fn new(name: String, recorder: Option<Py<Recorder>>) -> Self {
        StageScope {
            name,
            rec: recorder,
            open: None,
        }
    }

    fn __enter__(&mut self, py: Python<'_>) -> PyResult<Py<Span>> {
        let cv = current(py)?;
        let parent = cv.get.bind(py).call0()?;
        let span = match parent.downcast::<Span>() {
            Ok(p) => p.get().child_stage(&self.name)?,
            Err(_) => {
                let rec = match &self.rec {
                    Some(r) => r.clone_ref(py),
                    None => default_recorder(py)?,
                };
                rec.get().open_stage(&self.name)?
            }
        };
        let span = Py::new(py, span)?;
        let token = cv.set.call1(py, (span.clone_ref(py),))?;
        self.open = Some((span.clone_ref(py), token));
        Ok(span)
    }

    #[pyo3(signature = (_exc_type=None, exc=None, _tb=None))]
    fn __exit__(
        &mut self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        close(py, &mut self.open, exc)
    }

    fn __aenter__(&mut self, py: Python<'_>) -> PyResult<Ready> {
        Ok(Ready::with(self.__enter__(py)?.into_any()))
    }

    #[pyo3(signature = (exc_type=None, exc=None, tb=None))]
    fn __aexit__(
        &mut self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Ready> {
        let r = self.__exit__(py, exc_type, exc, tb)?;
        Ok(Ready::with(
            r.into_pyobject(py)?.to_owned().into_any().unbind(),
        ))
    }
}
