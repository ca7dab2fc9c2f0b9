//! The client's `transport` span: the stage the layer turns into `roundtrip`,
//! `uplink`, `downlink` and `net` once the server's timing is attached.

use stagetrace::StageSpanExt;
use tracing::Span;

/// The span a client call runs in: the current span when it is already a
/// `transport` span (the app opened it), otherwise a new `transport` span,
/// child of the current one (normally the app's `call` span).
///
/// `peer` names the server (its URL): the layer keeps one clock-offset
/// estimate per peer.
pub(crate) fn transport_span(peer: &str) -> Span {
    let current = Span::current();
    if current.metadata().is_some_and(|m| m.name() == "transport") {
        current
    } else {
        tracing::info_span!("transport", peer = peer)
    }
}

/// The `traceparent` to send for this transport span, when a stage layer is
/// installed and tracks the span.
pub(crate) fn traceparent(span: &Span) -> Option<[u8; stagetrace_wire::TRACEPARENT_LEN]> {
    span.trace_parent().map(|tp| tp.to_bytes())
}

/// The `tracestate` to send with [`traceparent`]: the one of the trace this
/// request continues, when not empty (the spec: avoid sending an empty one).
pub(crate) fn tracestate(span: &Span) -> Option<String> {
    span.trace_state()
        .map(|ts| ts.to_header())
        .filter(|h| !h.is_empty())
}

/// Attach the server's timing (parsed from the response) to the span.
pub(crate) fn attach(span: &Span, timing: stagetrace_wire::ServerTiming) {
    if !timing.is_empty() {
        span.record_server_timing(timing);
    }
}

/// Tell the span when the request's first byte left and the response's
/// first byte arrived (`None`: the transport did not see it).
pub(crate) fn first_bytes(
    span: &Span,
    written: Option<std::time::Instant>,
    read: Option<std::time::Instant>,
) {
    if let Some(at) = written {
        span.record_request_first_byte(at);
    }
    if let Some(at) = read {
        span.record_response_first_byte(at);
    }
}

/// Tell the span when the write that took the request's first byte
/// returned (`None`: the transport did not see it).
pub(crate) fn written(span: &Span, at: Option<std::time::Instant>) {
    if let Some(at) = at {
        span.record_request_written(at);
    }
}

/// Tell the span when the kernel had the response's last byte (`None`:
/// the kernel does not stamp the socket).
pub(crate) fn kernel_rx(span: &Span, at: Option<std::time::Instant>) {
    if let Some(at) = at {
        span.record_response_kernel_rx(at);
    }
}

/// Flag the call as failed with a short reason.
pub(crate) fn fail(span: &Span, reason: &'static str) {
    span.mark_failed(reason);
}

/// Count a server-timing input that was malformed and ignored.
pub(crate) fn reject() {
    stagetrace::health::count_rejected_header();
}
