//! `with stagetrace.stage("capture"):` a stage of the current call.
//!
//! `stagetrace.stage(name)` gives one cached object per name (no object is
//! made per stage); entering it stamps the start into the current call
//! (the context variable's), leaving it adds the stage to that call: two
//! calls into Rust, no `tracing` span, no Python frame. The name is resolved
//! against the call's recorder when the stage is entered (its `stages=`
//! mapping).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyString};
use stagetrace::Stage;

use crate::call::Call;
use crate::current::{current, first_failure, shared_of, Ready};
use crate::shared::{Recorder, Shared};

/// Names cached at most (a program uses a handful; a program making names
/// up on the fly gets a fresh object past this many).
const CACHE_MAX: usize = 256;

static CACHE: GILOnceCell<Py<PyDict>> = GILOnceCell::new();

/// Adds `stage` and its class to the module: `stage` is the C entry of
/// `stage_entry` (the cache's hits), in front of the function below.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<StageScope>()?;
    let cache = CACHE.get_or_init(py, || PyDict::new(py).unbind()).bind(py);
    crate::stage_entry::register(m, cache, wrap_pyfunction!(stage, m)?.as_any())
}

/// `stagetrace.stage(name, *, recorder=None)` when `stage_entry` did not
/// answer from the cache: makes the scope, and caches it when no recorder
/// is given (the entry's docstring says what a user sees).
#[pyfunction]
#[pyo3(signature = (name, *, recorder=None))]
fn stage(
    py: Python<'_>,
    name: &Bound<'_, PyString>,
    recorder: Option<Py<Recorder>>,
) -> PyResult<Py<StageScope>> {
    let cache = CACHE.get_or_init(py, || PyDict::new(py).unbind()).bind(py);
    if recorder.is_none() {
        if let Some(hit) = cache.get_item(name)? {
            // SAFETY: only `StageScope`s are put in the cache (below), and
            // the cache is private to this module.
            return Ok(unsafe { hit.downcast_into_unchecked::<StageScope>() }.unbind());
        }
    }
    let text = name.to_cow()?.into_owned();
    let scope = Py::new(
        py,
        StageScope {
            canonical: text.parse().ok(),
            name: text,
            rec: recorder,
        },
    )?;
    if scope.get().rec.is_none() && cache.len() < CACHE_MAX {
        cache.set_item(name, &scope)?;
    }
    Ok(scope)
}

/// A stage name, ready for `with`.
#[pyclass(module = "stagetrace._native", frozen)]
pub(crate) struct StageScope {
    name: String,
    /// `name` as a canonical stage, when it is one.
    canonical: Option<Stage>,
    rec: Option<Py<Recorder>>,
}

impl StageScope {
    fn resolve(&self, shared: &Shared) -> PyResult<Stage> {
        shared.stage(&self.name, self.canonical)
    }

    /// The recorder to count in outside any call.
    fn outside(&self, py: Python<'_>) -> PyResult<Arc<Shared>> {
        shared_of(py, self.rec.as_ref())
    }
}

#[pymethods]
impl StageScope {
    fn __enter__(&self, py: Python<'_>) -> PyResult<PyObject> {
        let now = current(py)?.get.bind(py).call0()?;
        match Call::exactly(&now) {
            Some(call) => {
                let cell = &call.get().cell;
                cell.enter_stage(py, self.resolve(&cell.shared)?);
                Ok(now.unbind())
            }
            None => {
                // Still say at once when the name means nothing.
                self.resolve(&*self.outside(py)?)?;
                Ok(py.None())
            }
        }
    }

    #[pyo3(signature = (_exc_type=None, exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let now = current(py)?.get.bind(py).call0()?;
        match Call::exactly(&now) {
            Some(call) => {
                let cell = &call.get().cell;
                cell.exit_stage(py, self.resolve(&cell.shared)?, first_failure(exc));
            }
            None => self.outside(py)?.calls.count_ignored_stage(),
        }
        Ok(false)
    }

    fn __aenter__(&self, py: Python<'_>) -> PyResult<Ready> {
        Ok(Ready::with(self.__enter__(py)?))
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

    fn __repr__(&self) -> String {
        format!("<stagetrace stage {:?}>", self.name)
    }
}
