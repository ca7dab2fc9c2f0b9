//! [`StageSpanExt`]: what an app tells the stage layer about a call through
//! its `tracing::Span`s (server timing, trace context, failure, output digest,
//! stale actions), as `tracing-opentelemetry`'s `OpenTelemetrySpanExt` does
//! for OpenTelemetry.

use std::time::Instant;

use crate::queue::CallState;
use crate::wire::{ServerTiming, TraceParent};

use super::scope::walk;
use super::span_state::TransportState;

/// Keeps [`StageSpanExt`] implemented for `tracing::Span` only, so methods
/// can be added to it without breaking anyone.
mod sealed {
    pub trait Sealed {}
    impl Sealed for tracing::Span {}
}

/// What a call's spans can tell the stage layer, as methods on
/// [`tracing::Span`].
///
/// Each method acts on the span itself or the nearest enclosing transport or
/// call span. Outside a call, or when no [`StageLayer`](crate::StageLayer)
/// sees the span, they do nothing (and [`trace_parent`](Self::trace_parent)
/// is `None`). None of them allocates or blocks.
///
/// ```
/// use stagetrace::{ServerTiming, StageSpanExt};
///
/// let transport = tracing::info_span!("transport");
/// let _traceparent = transport.trace_parent(); // send it with the request
/// // … the response arrives with the server's timing:
/// transport.record_server_timing(ServerTiming::default());
/// tracing::Span::current().record_output_digest(0xabc);
/// ```
pub trait StageSpanExt: sealed::Sealed {
    /// Attach the server timing a response carried (`docs/architecture.md` §3)
    /// to this transport span, or to the nearest transport span enclosing it.
    ///
    /// The worker stitches it onto the client's timeline when the call ends:
    /// `server_ms`, `net_ms`, the `uplink_ms` / `downlink_ms` split,
    /// `queue_ms` and `infer_ms`. Without it the transport is reported as
    /// `roundtrip_ms` only. No effect when the span is not inside a transport
    /// span or no [`StageLayer`](crate::StageLayer) is installed.
    fn record_server_timing(&self, timing: ServerTiming);

    /// Tell the enclosing transport span when the response's first byte
    /// arrived (the transport's first read after sending the request: a
    /// WebSocket frame header, an HTTP response head). The clock estimate
    /// then leaves the response's transfer (first byte → whole response,
    /// measured on this clock) out of the offset, as the server's
    /// `transfer_ns` does for the request (`docs/clocks.md`). A stamp
    /// outside the transport span is ignored and counted. No effect outside
    /// a transport span.
    fn record_response_first_byte(&self, at: Instant);

    /// Tell the enclosing transport span when the request's first byte left
    /// (a stamp taken just before the write that took it: never after the
    /// byte left). The clock estimate then leaves the client's own work
    /// before that write (encoding, WebSocket masking of a big frame) out of
    /// the offset; the uplink still counts it. Ignored and counted when
    /// outside the transport span or after the response's first byte.
    fn record_request_first_byte(&self, at: Instant);

    /// The W3C trace context to send with the request made inside this span:
    /// trace id = the call's trace id (the record's `trace_id`), parent id =
    /// the enclosing transport span's own id (or the call's when there is no
    /// transport span). `None` outside a call or without a
    /// [`StageLayer`](crate::StageLayer).
    fn trace_parent(&self) -> Option<TraceParent>;

    /// Mark the call enclosing this span (or the span itself, if it is the
    /// call span) as failed: its record gets `failed: true, error: reason`,
    /// and it is kept out of the stage figures (counted as `failed_calls`).
    fn mark_failed(&self, reason: &'static str);

    /// Attach a digest of the call's output (e.g. a hash of the action chunk)
    /// to the enclosing call; written as `output_digest` in hex, for
    /// consistency checks between runs.
    fn record_output_digest(&self, digest: u64);

    /// Count `n` action chunks of the enclosing call as dropped because they
    /// were too old to execute (added to what the call already counted);
    /// written as `stale_dropped`. Calls that dropped none carry no field.
    fn record_stale_dropped(&self, n: u32);
}

impl StageSpanExt for tracing::Span {
    fn record_server_timing(&self, timing: ServerTiming) {
        with_transport(self, |t| t.timing = Some(timing));
    }

    fn record_response_first_byte(&self, at: Instant) {
        with_transport(self, |t| t.first_byte = Some(at));
    }

    fn record_request_first_byte(&self, at: Instant) {
        with_transport(self, |t| t.request_first_byte = Some(at));
    }

    fn trace_parent(&self) -> Option<TraceParent> {
        let mut transport: Option<(u64, bool)> = None;
        let mut out = None;
        walk(self, &mut |ext| {
            if let Some(t) = ext.get_mut::<TransportState>() {
                if transport.is_none() && t.span_id != 0 {
                    transport = Some((t.span_id, t.shared));
                }
                return false;
            }
            if let Some(call) = ext.get_mut::<CallState>() {
                // A transport id from another layer's trace only makes sense in
                // that trace: if the call kept ids of its own, so does the parent.
                let parent_id = match transport {
                    Some((id, shared)) if shared == call.shared_context => id,
                    _ => call.span_id,
                };
                out = Some(TraceParent {
                    version: 0,
                    trace_id: call.trace_id.to_be_bytes(),
                    parent_id: parent_id.to_be_bytes(),
                    flags: 1,
                });
                return true;
            }
            false
        });
        out
    }

    fn mark_failed(&self, reason: &'static str) {
        with_call(self, |call| call.failed = Some(reason));
    }

    fn record_output_digest(&self, digest: u64) {
        with_call(self, |call| call.digest = Some(digest));
    }

    fn record_stale_dropped(&self, n: u32) {
        with_call(self, |call| {
            call.stale_dropped = call.stale_dropped.saturating_add(n);
        });
    }
}

/// Runs `f` on the state of the transport span enclosing `span` (or `span`
/// itself), stopping at the call.
fn with_transport(span: &tracing::Span, mut f: impl FnMut(&mut TransportState)) {
    walk(span, &mut |ext| {
        if let Some(t) = ext.get_mut::<TransportState>() {
            f(t);
            return true;
        }
        ext.get_mut::<CallState>().is_some()
    });
}

/// Runs `f` on the state of the call enclosing `span` (or `span` itself).
fn with_call(span: &tracing::Span, mut f: impl FnMut(&mut CallState)) {
    walk(span, &mut |ext| match ext.get_mut::<CallState>() {
        Some(call) => {
            f(call);
            true
        }
        None => false,
    });
}
