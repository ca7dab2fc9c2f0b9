//! A request's trace context (W3C Trace Context, each rejected header
//! counted), the span its handler runs in, and the record the hook gets.

use stagetrace::record::ServerRecord;
use stagetrace_wire::ServerTiming;
use stagetrace_wire::{Extracted, TraceContext};

use super::counters::ServerCounters;

/// The trace context `found` in one request's `traceparent` values and
/// `tracestate` lines (W3C Trace Context Level 2: see
/// [`TraceContext::extract`]); each rejected header is counted.
pub(crate) fn take_context(counters: &ServerCounters, found: Extracted) -> Option<TraceContext> {
    for _ in 0..found.rejected() {
        counters.reject_header();
    }
    found.context
}

/// The span a request's handler runs in: under the caller's context, so the
/// calls it makes continue the trace; no span (the current one stays) when
/// the request carried none.
pub(crate) fn handler_span(context: Option<TraceContext>) -> tracing::Span {
    context.map_or_else(tracing::Span::none, stagetrace::remote_parent_span)
}

/// Build the record handed to the hook.
pub(crate) fn server_record(
    trace_parent: Option<stagetrace_wire::TraceParent>,
    kind: Option<&str>,
    timing: ServerTiming,
    error: Option<String>,
) -> ServerRecord {
    ServerRecord {
        trace_parent,
        kind: kind
            .filter(|k| !k.is_empty() && k.len() <= 64)
            .unwrap_or("call")
            .to_owned(),
        timing,
        error,
        ..ServerRecord::default()
    }
}
