//! A summary as a table for people: the core's [`WindowSummary::table`]
//! (stages in call order, the hosts under their own heading, columns as
//! wide as their longest cell), so Python prints the layout `summary.table()`
//! prints in Rust and `stagetrace tail` shows, from one implementation.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use stagetrace::summary::WindowSummary;

/// The table of a summary given as its JSON line (what
/// `Recorder.finish()` returns, a line of `summary.*.jsonl`).
#[pyfunction]
fn summary_table(line: &str) -> PyResult<String> {
    let summary: WindowSummary = serde_json::from_str(line).map_err(|e| {
        PyValueError::new_err(format!(
            "not a stagetrace summary ({e}): give what stagetrace.finish() returns or a line of summary.*.jsonl"
        ))
    })?;
    Ok(summary.table())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(summary_table, m)?)
}
