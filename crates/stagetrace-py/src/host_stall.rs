//! The host's CPU stall and the thread's log writing for Python servers and
//! robots that take their own
//! host samples (`stagetrace._host`): the core's stall sampler, by time,
//! instead of a read of the pressure file per request, which loses most of
//! the stall for every reader on the host (`stagetrace::host::stall_between_us`).

use pyo3::prelude::*;

/// The host's CPU stall between two `time.monotonic_ns()` instants, ns;
/// `None` without PSI or before the sampler's first sample.
#[pyfunction]
fn stall_between_ns(t0_ns: u64, t1_ns: u64) -> Option<u64> {
    stagetrace::host::stall_between_us(t0_ns, t1_ns).map(|us| us.saturating_mul(1000))
}

/// A request or call opens: keep the stall sampler going (start it once,
/// wake it when parked). A few ns.
#[pyfunction]
fn keep_stall_sampler() {
    stagetrace::host::keep_stall_sampler();
}

/// Adds `ns` of log writing to the calling thread's total (the record's
/// `log_write_ms`): what `stagetrace.timed_handler` measured around a
/// `logging` handler.
#[pyfunction]
fn add_log_write_ns(ns: u64) {
    stagetrace::log_writer::add_thread_ns(ns);
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(add_log_write_ns, m)?)?;
    m.add_function(wrap_pyfunction!(stall_between_ns, m)?)?;
    m.add_function(wrap_pyfunction!(keep_stall_sampler, m)?)?;
    Ok(())
}
