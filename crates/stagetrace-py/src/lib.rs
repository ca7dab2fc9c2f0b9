//! Python bindings of stagetrace: the `stagetrace._native` extension module
//! behind the `stagetrace` package (`python/stagetrace/`).
//!
//! Nothing is re-implemented here. A [`Recorder`](recorder::Recorder) is the
//! Rust core's `StageLayer` (worker thread, clock stitching, rolling
//! summaries, record files, OTLP sink) behind its own `tracing` dispatcher;
//! a [`Span`](span::Span) is a `tracing` span of that dispatcher (`call`,
//! a stage, or `transport`), so a call timed from Python is measured, stitched
//! and written by the same code as one timed from Rust, and its record is the
//! same. The context managers, the decorator and the openpi client wrapper
//! are Python (`stagetrace/__init__.py`, `stagetrace/client.py`).

use pyo3::prelude::*;

mod dispatcher;
mod recorder;
mod scope;
mod span;
mod timing;
mod trace;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<recorder::Recorder>()?;
    m.add_class::<span::Span>()?;
    scope::register(m)?;
    trace::register(m)?;
    m.add("STAGES", stagetrace::Stage::ALL.map(|s| s.name()).to_vec())?;
    m.add(
        "FIELDS",
        stagetrace::schema::FIELDS
            .iter()
            .map(|f| f.name)
            .collect::<Vec<_>>(),
    )?;
    Ok(())
}
