//! What a caller hands [`ClientLayer`](crate::tower::ClientLayer) in a request's
//! extensions: the trace context to send ([`SendTrace`]) and where to put
//! what the response's trailers said ([`TrailerSlot`]).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use stagetrace_wire::TraceParent;

use crate::wire::{GrpcTiming, ObsOutcome};

/// Put into a `tonic::Request`'s extensions: [`ClientLayer`](crate::tower::ClientLayer)
/// sends this `traceparent` (a call timed without spans:
/// [`DirectCall::trace_parent`](stagetrace::direct::DirectCall::trace_parent))
/// instead of the current span's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendTrace(pub TraceParent);

/// What a response's trailers said, read by [`ClientLayer`](crate::tower::ClientLayer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailers {
    /// The server's timing (`stagetrace-timing-bin`), when sent and valid.
    pub timing: Option<GrpcTiming>,
    /// An async server's outcome for an observation (`stagetrace-obs-bin`).
    pub outcome: Option<ObsOutcome>,
    /// The `grpc-status` code, when the trailers carried one.
    pub status: Option<i32>,
    /// Entries that were present but malformed (ignored, counted).
    pub rejected: u32,
    /// When the trailers arrived: the whole response was in.
    pub at: Instant,
}

/// A slot [`ClientLayer`](crate::tower::ClientLayer) fills when the response's
/// trailers arrive: put a clone into the request's extensions, read it
/// after the call returned (tonic reads a unary response's trailers before
/// it returns).
///
/// ```
/// # use stagetrace_grpc::TrailerSlot;
/// let slot = TrailerSlot::new();
/// let mut req = tonic::Request::new(());
/// req.extensions_mut().insert(slot.clone());
/// // … client.method(req).await …
/// let _trailers = slot.take(); // None until the trailers came
/// ```
#[derive(Clone, Debug, Default)]
pub struct TrailerSlot(Arc<Mutex<Option<Trailers>>>);

impl TrailerSlot {
    /// An empty slot.
    pub fn new() -> Self {
        TrailerSlot::default()
    }

    /// What the trailers said, once (`None` before they came, or after a
    /// previous `take`).
    pub fn take(&self) -> Option<Trailers> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub(crate) fn fill(&self, t: Trailers) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
    }
}
