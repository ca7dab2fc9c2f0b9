//! Sharing the trace context of another tracing layer (`docs/architecture.md` §4).
//!
//! Many apps already run `tracing-opentelemetry`. Left alone, stagetrace would
//! give each call trace ids of its own, and the same `capture` span would
//! reach Jaeger twice, under two traces. With a [`TraceContextHook`]
//! (`stagetrace-otlp` provides one for `tracing-opentelemetry`), the stage
//! layer asks that layer for the ids of each `call` and `transport` span
//! instead: `traceparent` then carries the app's own trace id and transport
//! span id, the server's spans join the app's trace, and the record says so
//! ([`Timeline::shared_context`](crate::record::Timeline::shared_context)),
//! so an exporter adds only what the other layer cannot know (the
//! clock-corrected uplink and downlink).

use tracing_core::{span, Dispatch};

/// The ids another layer gave one span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedIds {
    /// The trace the span belongs to (non-zero).
    pub trace_id: u128,
    /// The span's own id (non-zero).
    pub span_id: u64,
}

/// Looks up, in the subscriber `dispatch`, the trace context another layer
/// keeps for span `id`, whose stage name is `stage` (`"call"` for the call
/// span); the hook may also label that layer's span with the stage.
///
/// Called on the app thread when a call or stage span is created, after the
/// layers registered before the stage layer have seen it; `None` means that
/// layer has no context for the span (then stagetrace uses ids of its own and
/// counts a miss). Must not panic or block.
pub type TraceContextHook =
    fn(dispatch: &Dispatch, id: &span::Id, stage: &'static str) -> Option<SharedIds>;
