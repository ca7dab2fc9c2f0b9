//! What every span of one recorder shares: the recorder's own `tracing`
//! dispatcher and its sub-stage names. Apart from the recorder, so spans
//! need not reach back up to it.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use stagetrace::Stage;
use tracing::Dispatch;

/// What spans of one recorder need: its dispatcher (spans are created under
/// it whatever the thread's default is, so two recorders in one process
/// never mix) and the sub-stage names mapped onto canonical stages.
#[derive(Debug)]
pub(crate) struct Scope {
    pub(crate) dispatch: Dispatch,
    pub(crate) stages: HashMap<String, Stage>,
}

impl Scope {
    /// Run `f` with this recorder's dispatcher as the default: spans are
    /// created under it, and the registry releases a closed child's hold on
    /// its parent through the *current* default dispatcher.
    #[inline]
    pub(crate) fn within<T>(&self, f: impl FnOnce() -> T) -> T {
        // Never the global default: a host app or another library may want
        // that one, and a scoped default costs no more (measured).
        tracing::dispatcher::with_default(&self.dispatch, f)
    }

    /// The canonical stage `name` stands for, or a Python error that says
    /// how to map it.
    pub(crate) fn stage(&self, name: &str) -> PyResult<Stage> {
        if let Some(s) = self.stages.get(name) {
            return Ok(*s);
        }
        name.parse().map_err(|_| {
            PyValueError::new_err(format!(
                "unknown stage {name:?}: use capture, transport, queue, infer or dispatch, \
                 or map it onto one: stagetrace.init(stages={{{name:?}: \"dispatch\"}})"
            ))
        })
    }
}
