//! [`StageSpanExt`]: what an app tells the stage layer about a call through
//! its `tracing::Span`s (server timing, trace context, failure, output digest,
//! stale actions), as `tracing-opentelemetry`'s `OpenTelemetrySpanExt` does
//! for OpenTelemetry.

use std::sync::Arc;
use std::time::Instant;

use crate::call_state::{CallState, PackedTiming};
use crate::executor::ExecutorAck;
use stagetrace_wire::{Hops, ServerTiming, TraceContext, TraceParent, TraceState};

use super::callsite::REMOTE_PARENT_SPAN;
use super::scope::walk;
use super::span_state::{SpanState, TransportState};

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
/// is `None`). None of them blocks, and only
/// [`set_remote_parent`](Self::set_remote_parent) allocates (once).
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

    /// Attach the relays a response came through (outermost first, as
    /// [`TimingChain`](stagetrace_wire::TimingChain) reads them from its
    /// `server_timing`) to this transport span, or to the nearest transport
    /// span enclosing it; the [`ServerTiming`] given to
    /// [`record_server_timing`](Self::record_server_timing) is then the
    /// policy server's (the innermost level). The worker adds the record's
    /// per-hop `hops` figures and composes the clock offset along the path
    /// (`docs/stages.md`, "Hops"). Copies a fixed-size value; no allocation.
    fn record_hops(&self, hops: Hops);

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

    /// Tell the enclosing transport span when the write that took the
    /// request's first bytes returned: the kernel had them by then. The
    /// time from the span's start to it is the robot's `tx_wait` (its own
    /// encoding and its thread's wait for a core, inside `uplink`), which
    /// a verdict names when the uplink's spikes are the robot's and not the
    /// network's. No effect outside a transport span.
    fn record_request_written(&self, at: Instant);

    /// Tell the enclosing transport span when the kernel had the response's
    /// last byte (a kernel receive stamp, `SO_TIMESTAMPING`): the roundtrip
    /// then ends there, and the time until the app read the response is the
    /// robot's `rx_wait` (its own scheduling, inside the call's `gap`, not
    /// the downlink). A stamp outside the transport span, or before the
    /// response's first byte, is ignored. No effect outside a transport span.
    fn record_response_kernel_rx(&self, at: Instant);

    /// The W3C trace context to send with the request made inside this span:
    /// trace id = the call's trace id (the record's `trace_id`), parent id =
    /// the enclosing transport span's own id (or the call's when there is no
    /// transport span), flags = the call's (see below). Outside a call but
    /// inside a server's handler run under a remote parent
    /// ([`remote_parent_span`](crate::remote_parent_span)): the caller's
    /// trace id and flags, parent id = the transport span's id (or the
    /// handler span's own). `None` otherwise, or without a
    /// [`StageLayer`](crate::StageLayer).
    ///
    /// Flags: a call opened under a remote parent keeps the caller's sampled
    /// and random flags (W3C Trace Context Level 2; undefined flags sent as
    /// 0) and its trace id; any other call starts a trace of its own, sampled
    /// and, since its trace id is random, with the random flag (`03`), or only
    /// sampled (`01`) when the ids come from another layer
    /// ([`crate::context`]).
    fn trace_parent(&self) -> Option<TraceParent>;

    /// The W3C `tracestate` to send along with
    /// [`trace_parent`](Self::trace_parent): the one the enclosing remote
    /// parent came with, unchanged (stagetrace adds no key of its own), when
    /// the request continues that trace and the list is not empty. `None`
    /// otherwise. Shares the list; does not copy it.
    fn trace_state(&self) -> Option<Arc<TraceState>>;

    /// Run everything inside this span under the remote parent `context`:
    /// calls opened inside continue its trace (same trace id, the caller's
    /// flags, its `tracestate` passed on). Acts on this span when it is a
    /// [`REMOTE_PARENT_SPAN`](crate::REMOTE_PARENT_SPAN) span, else on the
    /// nearest enclosing one (not past a call); no effect without one. Servers
    /// normally use [`remote_parent_span`](crate::remote_parent_span), which
    /// makes the span and sets this. Allocates once for a non-empty
    /// `tracestate`.
    fn set_remote_parent(&self, context: TraceContext);

    /// Attach a remote executor's acknowledgement of the call's action chunk
    /// (its timing and the client's stamps of the exchange, see
    /// [`ExecutorAck`]) to the enclosing call; the latest one counts. Call it
    /// inside the `dispatch` span: `dispatch_ms` then ends when the executor
    /// **started** the action (placed with that executor's clock-offset
    /// estimate, ± `exec_err_ms`) and is split into `exec_tx_ms` (transfer
    /// to the executor) and `exec_wait_ms` (its wait behind the previous
    /// action); the rest of the span, the ack's way back, is `exec_ack_ms`,
    /// inside `gap_ms`. An ack whose stamps fall outside the `dispatch` span
    /// is ignored and counted as a rejected header. No effect outside a call.
    fn record_executor_ack(&self, ack: ExecutorAck<'_>);

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
        // Packed before the span's state is locked: its finer figures are
        // boxed, and only a response that has one pays for the box.
        let mut timing = Some(PackedTiming::pack(timing));
        with_transport(self, |t| t.timing = timing.take());
    }

    fn record_hops(&self, hops: Hops) {
        // Boxed before the span's state is locked; only relayed responses
        // have hops, so only they pay for the box.
        let mut hops = (!hops.is_empty()).then(|| Box::new(hops));
        with_transport(self, |t| t.hops = hops.take());
    }

    fn record_response_first_byte(&self, at: Instant) {
        with_transport(self, |t| t.stamps.first_byte = Some(at));
    }

    fn record_request_first_byte(&self, at: Instant) {
        with_transport(self, |t| t.stamps.request_first_byte = Some(at));
    }

    fn record_request_written(&self, at: Instant) {
        with_transport(self, |t| t.stamps.request_written = Some(at));
    }

    fn record_response_kernel_rx(&self, at: Instant) {
        with_transport(self, |t| t.stamps.kernel_rx = Some(at));
    }

    fn trace_parent(&self) -> Option<TraceParent> {
        outgoing(self, false).map(|(tp, _)| tp)
    }

    fn trace_state(&self) -> Option<Arc<TraceState>> {
        outgoing(self, true).and_then(|(_, st)| st)
    }

    fn set_remote_parent(&self, context: TraceContext) {
        let mut context = Some(context);
        walk(self, &mut |state| match state {
            SpanState::Remote(r) => {
                if let Some(c) = context.take() {
                    r.parent = Some(c.parent);
                    r.state = (!c.state.is_empty()).then(|| Arc::new(c.state));
                }
                true
            }
            SpanState::Call(_) => true,
            _ => false,
        });
    }

    fn record_executor_ack(&self, ack: ExecutorAck<'_>) {
        let acc = ack.into();
        with_call(self, |call| call.executor = Some(Box::new(acc)));
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
    walk(span, &mut |state| match state {
        SpanState::Transport(t) => {
            f(t);
            true
        }
        SpanState::Call(_) => true,
        _ => false,
    });
}

/// Runs `f` on the state of the call enclosing `span` (or `span` itself).
fn with_call(span: &tracing::Span, mut f: impl FnMut(&mut CallState)) {
    walk(span, &mut |state| match state {
        SpanState::Call(call) => {
            f(call);
            true
        }
        _ => false,
    });
}

/// A span to run one request's handler in, under the remote parent
/// `context` (the caller's trace context, from
/// [`TraceContext::extract`](stagetrace_wire::TraceContext::extract)): calls and
/// transport spans opened inside continue the caller's trace. Named
/// [`REMOTE_PARENT_SPAN`](crate::REMOTE_PARENT_SPAN); disabled (and
/// harmless) without a [`StageLayer`](crate::StageLayer).
///
/// ```
/// use stagetrace_wire::TraceContext;
/// use stagetrace::StageSpanExt;
///
/// let tp: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03";
/// let found = TraceContext::extract(&[tp], &[b"congo=t61rcWkgMzE"]);
/// if let Some(context) = found.context {
///     let _handler = stagetrace::remote_parent_span(context).entered();
///     // … calls made here send trace id 4bf9…4736, flags 03,
///     // tracestate congo=t61rcWkgMzE
/// }
/// ```
pub fn remote_parent_span(context: TraceContext) -> tracing::Span {
    let span = tracing::info_span!(REMOTE_PARENT_SPAN);
    span.set_remote_parent(context);
    span
}

/// What a request made inside `span` sends: the `traceparent` and, when
/// `with_state`, the `tracestate` of the remote parent it continues. One walk
/// up the scope, innermost first.
fn outgoing(
    span: &tracing::Span,
    with_state: bool,
) -> Option<(TraceParent, Option<Arc<TraceState>>)> {
    let mut transport: Option<(u64, bool)> = None;
    let mut out: Option<(TraceParent, Option<Arc<TraceState>>)> = None;
    walk(span, &mut |state| {
        if out.is_none() {
            if let SpanState::Transport(t) = state {
                if transport.is_none() && t.span_id != 0 {
                    transport = Some((t.span_id, t.shared));
                }
                return false;
            }
            // A dispatch span (to a remote executor) is the parent of what
            // it sends, as a transport span is.
            if let SpanState::Stage(st) = state {
                if transport.is_none() && st.span_id != 0 {
                    transport = Some((st.span_id, st.shared));
                }
                return false;
            }
            if let SpanState::Call(call) = state {
                // A transport id from another layer's trace only makes sense in
                // that trace: if the call kept ids of its own, so does the parent.
                let parent_id = match transport {
                    Some((id, shared)) if shared == call.shared_context => id,
                    _ => call.span_id,
                };
                out = Some((
                    TraceParent {
                        version: 0,
                        trace_id: call.trace_id.to_be_bytes(),
                        parent_id: parent_id.to_be_bytes(),
                        flags: call.flags,
                    },
                    None,
                ));
                // The tracestate, if any, is the remote parent's further up.
                return !with_state;
            }
        }
        let SpanState::Remote(r) = state else {
            return false;
        };
        // A remote parent span the server never set is transparent.
        let Some(remote) = r.parent else {
            return false;
        };
        match &mut out {
            // The call continued this trace (not one of another layer's).
            Some((tp, state)) => {
                if tp.trace_id == remote.trace_id {
                    *state = r.state.clone();
                }
            }
            None => {
                let parent_id = match transport {
                    Some((id, false)) => id,
                    _ => r.span_id,
                };
                out = remote
                    .continued(parent_id.to_be_bytes())
                    .map(|tp| (tp, r.state.clone()));
            }
        }
        true
    });
    out
}
