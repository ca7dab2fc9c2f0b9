//! What every call of one recorder shares: where its finished calls go (the
//! core's queue to its worker) and its sub-stage names. Apart from the
//! recorder, so calls and spans need not reach back up to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use stagetrace::direct::DirectCalls;
use stagetrace::{FlushGuard, Stage};

/// What calls of one recorder need: its queue to the core's worker (two
/// recorders in one process never mix) and the sub-stage names mapped onto
/// canonical stages.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) calls: DirectCalls,
    pub(crate) stages: HashMap<String, Stage>,
}

impl Shared {
    /// The canonical stage `name` stands for, or a Python error that says
    /// how to map it. `canonical`: `name` parsed as a canonical stage name,
    /// when the caller already knows it (a mapping still wins over it).
    pub(crate) fn stage(&self, name: &str, canonical: Option<Stage>) -> PyResult<Stage> {
        if !self.stages.is_empty() {
            if let Some(s) = self.stages.get(name) {
                return Ok(*s);
            }
        }
        if let Some(s) = canonical {
            return Ok(s);
        }
        name.parse().map_err(|_| {
            PyValueError::new_err(format!(
                "unknown stage {name:?}: use capture, transport, queue, infer or dispatch, \
                 or map it onto one: stagetrace.init(stages={{{name:?}: \"dispatch\"}})"
            ))
        })
    }
}

/// The Rust core's stage recorder: `StageLayer::builder()` with the given
/// settings. `finish()` drains the worker and returns the cumulative summary.
/// (Its methods: `recorder.rs`.)
#[pyclass(module = "stagetrace._native", frozen)]
pub(crate) struct Recorder {
    pub(crate) shared: Arc<Shared>,
    pub(crate) guard: Mutex<Option<FlushGuard>>,
}
