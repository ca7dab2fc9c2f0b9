//! Python's garbage collector, timed: a `gc.callbacks` entry that sums
//! every collection's start → stop, so a call's record can say how long
//! the collector held the interpreter while the call ran (`gc_ms`).
//!
//! Why process-wide: the collector holds the GIL, so a collection on any
//! thread stops the call's Python code too. Two atomic loads per call read
//! the totals; the callback itself runs once per collection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use pyo3::prelude::*;

/// Collector time so far, ns.
static TOTAL_NS: AtomicU64 = AtomicU64::new(0);
/// Collections finished so far.
static COLLECTIONS: AtomicU64 = AtomicU64::new(0);
/// The running collection's start, ns after [`epoch`] (0: none running).
static STARTED_NS: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    // +1: 0 means "none running".
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1
}

/// The `gc.callbacks` entry (`phase` is `"start"` or `"stop"`).
#[pyfunction]
fn _gc_event(phase: &str, _info: &Bound<'_, PyAny>) {
    match phase {
        "start" => STARTED_NS.store(now_ns(), Ordering::Relaxed),
        "stop" => {
            let started = STARTED_NS.swap(0, Ordering::Relaxed);
            if started != 0 {
                TOTAL_NS.fetch_add(now_ns().saturating_sub(started), Ordering::Relaxed);
                COLLECTIONS.fetch_add(1, Ordering::Relaxed);
            }
        }
        _ => {}
    }
}

/// (collector time in ns, collections) so far.
pub(crate) fn totals() -> (u64, u64) {
    (
        TOTAL_NS.load(Ordering::Relaxed),
        COLLECTIONS.load(Ordering::Relaxed),
    )
}

/// Registers the callback's function; `stagetrace/__init__.py` appends it
/// to `gc.callbacks` once.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    epoch();
    m.add_function(wrap_pyfunction!(_gc_event, m)?)
}
