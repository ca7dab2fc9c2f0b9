//! W3C Trace Context for Python services in the middle: a relay
//! or a policy server written in Python continues its caller's trace by the
//! core's rules, not by a copy of them. `continue_trace` is the core's
//! [`TraceContext::extract`] (several `traceparent`s: none used; `tracestate`
//! lines combined; a repeated key keeps its left-most member; a malformed
//! list dropped whole) followed by [`TraceParent::continued`] and
//! [`TraceState::to_header`](stagetrace_wire::TraceState::to_header) (the
//! 512-character cut), as `stagetrace-net`'s servers and clients do.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use stagetrace_wire::{TraceContext, MAX_HOPS};

/// A header value as Python holds it: `str` or `bytes`. Anything else is a
/// malformed header (a byte the grammars refuse), as a msgpack request's
/// non-string value is in the Rust server.
fn header_bytes(v: &Bound<'_, PyAny>) -> Vec<u8> {
    if let Ok(s) = v.downcast::<PyString>() {
        if let Ok(s) = s.to_cow() {
            return s.as_bytes().to_vec();
        }
    }
    if let Ok(b) = v.downcast::<PyBytes>() {
        return b.as_bytes().to_vec();
    }
    vec![0]
}

/// `continue_trace(traceparents, tracestates, span_id)` → `(traceparent,
/// tracestate, trace_id, rejected_traceparent, rejected_tracestate)`.
///
/// `traceparents` / `tracestates`: every value of one request, in the order
/// received (a list; `str` or `bytes`). `span_id`: the 8 bytes of the
/// sending span's own id (the new parent id). Returns the `traceparent` to
/// send (same trace id, `span_id` as parent, the caller's sampled and
/// random flags, version `00`) and the `tracestate` to send (`None` when
/// empty), or `None`s when the request carries no usable context (the caller
/// then starts a new trace); the caller's trace id (hex) or `None`; and
/// whether the `traceparent` / `tracestate` headers were rejected (each one
/// rejected header to count).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn continue_trace(
    traceparents: Vec<Bound<'_, PyAny>>,
    tracestates: Vec<Bound<'_, PyAny>>,
    span_id: &[u8],
) -> PyResult<(Option<String>, Option<String>, Option<String>, bool, bool)> {
    let span_id: [u8; 8] = span_id
        .try_into()
        .map_err(|_| PyValueError::new_err("span_id must be 8 bytes (os.urandom(8))"))?;
    let parents: Vec<Vec<u8>> = traceparents.iter().map(header_bytes).collect();
    let states: Vec<Vec<u8>> = tracestates.iter().map(header_bytes).collect();
    let parents: Vec<&[u8]> = parents.iter().map(Vec::as_slice).collect();
    let states: Vec<&[u8]> = states.iter().map(Vec::as_slice).collect();
    let found = TraceContext::extract(&parents, &states);
    let rejected_tp = found.traceparent_error.is_some();
    let rejected_ts = found.tracestate_error.is_some();
    let Some(ctx) = found.context else {
        return Ok((None, None, None, rejected_tp, rejected_ts));
    };
    let out = ctx.parent.continued(span_id).map(|tp| tp.to_header());
    let state = Some(ctx.state.to_header()).filter(|s| !s.is_empty());
    Ok((
        out,
        state,
        Some(ctx.parent.trace_id_hex()),
        rejected_tp,
        rejected_ts,
    ))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(continue_trace, m)?)?;
    // Most relays a response's `server_timing` nests (`wire/hops.rs`).
    m.add("MAX_HOPS", MAX_HOPS)?;
    Ok(())
}
