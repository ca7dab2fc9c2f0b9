//! Python bindings of stagetrace: the `stagetrace._native` extension module
//! behind the `stagetrace` package (`python/stagetrace/`).
//!
//! Nothing is re-implemented here. A [`Recorder`](shared::Recorder) is the
//! Rust core's `StageLayer` (worker thread, clock stitching, rolling
//! summaries, record files, OTLP sink); a [`Call`](call::Call) holds the
//! core's `DirectCall` (`stagetrace::direct`): the per-call state a Rust
//! call span keeps, stamped on the core's clock, queued to the same worker
//! as the same message when the call ends. So a call timed from Python is
//! measured, stitched and written by the same code as one timed from Rust,
//! and its record is the same; no `tracing` span is made per stage, which
//! is what keeps `with stagetrace.stage()` cheap (`bench/overhead.py`).
//!
//! - [`call`]: `with stagetrace.call()`, the current call (a context variable);
//! - [`scope`]: `with stagetrace.stage()`, cached per name; [`stage_entry`]:
//!   the cache's C entry point;
//! - [`span`]: stages opened by a method (`call.transport(peer)`);
//! - [`state`]: one call's state, shared by the call and its spans;
//! - [`current`]: the context variable, the default recorder, `async with`;
//! - [`shared`], [`recorder`]: the recorder; [`losses`]: what its sinks lost,
//!   told through Python's `logging`; [`summary`]: its summary as a table;
//!   [`timing`]: `server_timing` maps;
//! - [`trace`]: W3C trace continuation for Python services in the middle;
//! - [`gc_clock`]: the garbage collector's pauses, for the record's `gc_ms`;
//! - [`host_stall`]: the host's CPU stall by time, for Python's own host samples;
//! - [`sock`]: socket stamps of Python clients (`tx_wait`, `rx_wait`);
//! - [`partition`]: mergeable per-partition summaries (`stagetrace.summarize`,
//!   `stagetrace.merge`), the analyze crate's, for `stagetrace.fleet`.

use pyo3::prelude::*;

mod call;
mod current;
mod gc_clock;
mod host_stall;
mod losses;
mod partition;
mod recorder;
mod scope;
mod shared;
mod sock;
mod span;
mod stage_entry;
mod state;
mod summary;
mod timing;
mod trace;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<shared::Recorder>()?;
    m.add_class::<span::Span>()?;
    m.add_class::<call::Call>()?;
    m.add_function(wrap_pyfunction!(call::call, m)?)?;
    current::register(m)?;
    scope::register(m)?;
    trace::register(m)?;
    gc_clock::register(m)?;
    host_stall::register(m)?;
    sock::register(m)?;
    summary::register(m)?;
    partition::register(m)?;
    m.add("STAGES", stagetrace::Stage::ALL.map(|s| s.name()).to_vec())?;
    m.add(
        "FIELDS",
        stagetrace_schema::FIELDS
            .iter()
            .map(|f| f.name)
            .collect::<Vec<_>>(),
    )?;
    Ok(())
}
