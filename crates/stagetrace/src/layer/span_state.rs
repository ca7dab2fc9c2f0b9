//! What the layer keeps for each span it tracks: one [`SpanState`], in its
//! own table ([`super::live`]) or, when that is full, in the span's registry
//! extensions. A call span keeps a [`CallState`], which is also what the
//! worker receives when the call closes.

use std::sync::Arc;

use crate::call_state::{CallState, PackedTiming, TransportStamps};
use crate::stage::Stage;
use crate::stamp::Stamp;
use crate::thread_sample::RunWaitMark;
use stagetrace_wire::{Hops, TraceParent, TraceState};

/// Per-stage-span state (stages other than transport). Kept small: the
/// registry boxes one per span.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StageState {
    pub(crate) stage: Stage,
    pub(crate) start: Stamp,
    pub(crate) observer_ticks: u64,
    /// A `dispatch` span's id (0 for other stages): the parent id sent to a
    /// remote executor, so the executor's spans join under the dispatch span.
    pub(crate) span_id: u64,
    /// `span_id` came from another layer (see [`crate::context`]).
    pub(crate) shared: bool,
    /// The thread's run-queue wait when a robot's own stage (capture,
    /// dispatch) opened, and the thread's tag, with host figures on.
    pub(crate) run_wait_at_open: Option<RunWaitMark>,
    /// The call its time goes to, found once when it opened.
    pub(crate) to: Enclosing,
}

/// Per-transport-span state: also the span id sent in `traceparent`, the
/// server timing and the peer.
#[derive(Clone, Debug)]
pub(crate) struct TransportState {
    pub(crate) start: Stamp,
    /// Non-zero: the parent id sent in `traceparent`.
    pub(crate) span_id: u64,
    /// `span_id` came from another layer (see [`crate::context`]).
    pub(crate) shared: bool,
    pub(crate) observer_ticks: u64,
    /// The server timing the response carried, packed as the call keeps
    /// it (its finer figures boxed).
    pub(crate) timing: Option<PackedTiming>,
    /// The peer and the socket stamps the transport took.
    pub(crate) stamps: TransportStamps,
    /// The relays the response came through (none: a direct call). Boxed:
    /// only relayed responses pay for their 200 bytes.
    pub(crate) hops: Option<Box<Hops>>,
    /// The call its time goes to, found once when it opened.
    pub(crate) to: Enclosing,
}

/// Per-remote-parent-span state: the trace context a server's request came
/// with, continued by the calls its handler makes. Not `Copy` (the
/// `tracestate` is shared, not copied, with each outgoing call).
#[derive(Clone, Debug)]
pub(crate) struct RemoteState {
    /// This span's own id: the parent id sent by a call made directly in it
    /// (no transport span of its own).
    pub(crate) span_id: u64,
    /// The caller's context, once the server has set it.
    pub(crate) parent: Option<TraceParent>,
    /// The `tracestate` that came with it, when not empty.
    pub(crate) state: Option<Arc<TraceState>>,
}

/// What the layer keeps for one tracked span.
// Each table slot is sized for a call, and a call's state lives there in
// place: boxing it would bring back the allocation per call the table is
// there to avoid.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum SpanState {
    /// A table slot no span holds.
    Vacant,
    Call(CallState),
    Stage(StageState),
    Transport(TransportState),
    Remote(RemoteState),
}

/// Where a stage span's time goes, worked out when it opens (its ancestors
/// cannot change) and carried down to the stages opened inside it: its
/// close then needs no walk up the registry.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Enclosing {
    /// The nearest enclosing call (`None`: the stage is outside any call).
    pub(crate) call: Option<Home>,
    /// It runs inside another stage of the call (its time is covered).
    pub(crate) nested: bool,
    /// A request handler's span (`remote_parent`) is above it.
    pub(crate) in_service: bool,
}

/// A slot of the layer's table (`live.rs`): where one open span's state
/// lives. Defined here, with the state it holds, so the table depends on
/// the state and not the other way round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot(pub(super) u32);

/// Where a span's state is kept. For a stage's call: a call outlives the
/// spans inside it (the registry keeps a parent open while it has
/// children), so the reference stays good until the stage closes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Home {
    /// In the layer's table, at this slot, for the span with this id.
    Table(Slot, u64),
    /// In the registry's extensions of the span with this id.
    Registry(u64),
}
