//! One call's state (`docs/architecture.md` §4): what the layer keeps for
//! an open call span (or a call timed without spans, [`crate::direct`]) and
//! what the worker receives when it closes ([`crate::message`]), turned
//! there into a [`CallRecord`](crate::record::CallRecord).
//!
//! Nothing in here allocates on the app thread: the few boxes a call may
//! carry (an executor ack, relays' hops, a server timing's finer figures)
//! are made when they arrive and moved, not copied. The layer, the direct
//! API and the worker import this module; it imports none of them.

use std::time::Instant;

use crate::executor::ExecAcc;
use crate::inline_str::{InlineStr, KIND_LEN, PEER_LEN};
use crate::stage::Stage;
use crate::stamp::Stamp;
use crate::thread_sample::ThreadSample;
use stagetrace_wire::{HostShare, TraceParent};

mod packed_timing;

pub(crate) use packed_timing::PackedTiming;

/// What a call's opening knows: its number and ids, from the caller's
/// trace, another layer or our own, and the host's counters (with host
/// figures on). Worked out before the call's state is written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NewCall {
    pub(crate) ordinal: u64,
    pub(crate) seq: Option<u64>,
    pub(crate) trace_id: u128,
    /// The W3C trace flags sent with the call's requests.
    pub(crate) flags: u8,
    pub(crate) span_id: u64,
    pub(crate) kind: InlineStr<KIND_LEN>,
    /// `trace_id` / `span_id` came from another layer (see [`crate::context`]).
    pub(crate) shared_context: bool,
    /// The host's counters when the call opened (sampled before a slot is
    /// locked: it reads /proc).
    pub(crate) host_at_open: Option<ThreadSample>,
}

/// Accumulated time of one stage inside one call, in stamp ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StageAcc {
    /// Spans of this stage that closed inside the call.
    pub(crate) count: u32,
    /// Sum of their durations.
    pub(crate) sum_ticks: u64,
    /// Start of the first one, after the call started.
    pub(crate) first_start_ticks: u64,
}

/// What a transport stage's own stamps say about its exchange, beyond its
/// start and end: the peer, and the socket moments a transport stamped
/// (`StageSpanExt::record_*`). One struct, kept alike by a transport span,
/// a direct transport and the call they close into: moved whole.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TransportStamps {
    pub(crate) peer: InlineStr<PEER_LEN>,
    /// The response's first byte arrived.
    pub(crate) first_byte: Option<Instant>,
    /// The request's first byte left.
    pub(crate) request_first_byte: Option<Instant>,
    /// The write that took the request's first bytes returned.
    pub(crate) request_written: Option<Instant>,
    /// The kernel had the response's last byte (a kernel receive stamp).
    pub(crate) kernel_rx: Option<Instant>,
}

/// The transport span used for stitching (its relays, if any, are the
/// call's [`relays`](CallState::relays)).
#[derive(Clone, Debug)]
pub(crate) struct TransportAcc {
    pub(crate) start: Stamp,
    pub(crate) end: Stamp,
    pub(crate) span_id: u64,
    /// The server timing the response carried, packed (its finer figures
    /// boxed).
    pub(crate) timing: Option<PackedTiming>,
    pub(crate) stamps: TransportStamps,
}

/// Per-call state, in the layer's table of open spans (or the call span's
/// registry extensions when that is full); sent whole to the worker. Kept
/// small: it is copied once per call onto the queue, into a slot the worker
/// read long ago (cold), and it sizes every slot of the layer's table. What
/// not every call carries (an executor ack, a relayed response's hops, a
/// server timing's finer figures: `PackedTiming`) is boxed.
/// (`Default`: storage only, an empty state before [`begin`](Self::begin).)
#[derive(Clone, Debug, Default)]
pub(crate) struct CallState {
    pub(crate) start: Stamp,
    pub(crate) ordinal: u64,
    pub(crate) seq: Option<u64>,
    pub(crate) trace_id: u128,
    /// The W3C trace flags sent with the call's requests: the caller's when
    /// the call continues a remote trace, else sampled (and random, for ids
    /// of our own).
    pub(crate) flags: u8,
    pub(crate) span_id: u64,
    pub(crate) kind: InlineStr<KIND_LEN>,
    pub(crate) stages: [StageAcc; Stage::ALL.len()],
    /// Sum of the durations of stage spans not nested in another stage span.
    pub(crate) covered_ticks: u64,
    pub(crate) transport: Option<TransportAcc>,
    /// A remote executor's acknowledgement of the call's action chunk.
    /// Boxed: only calls that dispatch to a remote executor pay for it
    /// (one allocation when the ack arrives), the others keep the state small.
    pub(crate) executor: Option<Box<ExecAcc>>,
    /// The relays the kept `transport`'s response came through (none: a
    /// direct call). Boxed, and beside `transport` rather than in it, for
    /// the same reason as `executor`: only relayed calls pay for their 200
    /// bytes, and the rest of the state is copied whole.
    pub(crate) relays: Option<Box<stagetrace_wire::Hops>>,
    /// Id of the call's first `dispatch` span (0: none): the parent id sent
    /// to a remote executor.
    pub(crate) dispatch_span_id: u64,
    pub(crate) failed: Option<&'static str>,
    pub(crate) digest: Option<u64>,
    /// Action chunks dropped as stale in this call (0: none).
    pub(crate) stale_dropped: u32,
    /// The robot's action queue when the chunk arrived (async inference):
    /// its time left in ns (negative: dry that long) and the idle ticks.
    pub(crate) action_queue: Option<(i64, u32)>,
    /// The layer's own time on this call so far.
    pub(crate) observer_ticks: u64,
    /// `trace_id` / `span_id` came from another layer (see [`crate::context`]).
    pub(crate) shared_context: bool,
    /// The host's counters when the call opened (with host figures on).
    pub(crate) host_at_open: Option<ThreadSample>,
    /// What the host did to the call, once it closed.
    pub(crate) host: HostShare,
    /// The robot's run-queue wait inside its capture and dispatch spans,
    /// ns ([`Stage::Capture`], [`Stage::Dispatch`]; see
    /// [`add_stage_run_wait`](Self::add_stage_run_wait)).
    pub(crate) stage_run_wait_ns: [Option<u64>; 2],
}

impl CallState {
    /// The state to queue, leaving this one without what it owns (the
    /// executor ack, the relays, the transport with its server timing):
    /// moved, not copied, no allocation.
    #[inline]
    pub(crate) fn take(&mut self) -> CallState {
        CallState {
            transport: self.transport.take(),
            executor: self.executor.take(),
            relays: self.relays.take(),
            ..*self
        }
    }

    /// A call started at `start` with no stage yet: the layer's call span
    /// and a call timed without spans ([`crate::direct`]) start alike.
    pub(crate) fn new(start: Stamp, call: NewCall) -> Self {
        let mut state = CallState::default();
        state.begin(start, call);
        state
    }

    /// Makes this state a call started at `start` with no stage yet, in
    /// place: a call's state reused in the layer's table is not built aside
    /// and copied in. The one place a call's state is set up
    /// ([`new`](Self::new) calls it too).
    #[inline]
    pub(crate) fn begin(&mut self, start: Stamp, call: NewCall) {
        let NewCall {
            ordinal,
            seq,
            trace_id,
            flags,
            span_id,
            kind,
            shared_context,
            host_at_open,
        } = call;
        // Every field named, no `..`: a field added to the state does not
        // compile until it is reset here (a reused slot would carry the
        // last call's value into the next one).
        let CallState {
            start: start_,
            ordinal: ordinal_,
            seq: seq_,
            trace_id: trace_id_,
            flags: flags_,
            span_id: span_id_,
            kind: kind_,
            stages,
            covered_ticks,
            transport,
            executor,
            relays,
            dispatch_span_id,
            failed,
            digest,
            stale_dropped,
            action_queue,
            observer_ticks,
            shared_context: shared_context_,
            host_at_open: host_at_open_,
            host,
            stage_run_wait_ns,
        } = self;
        *start_ = start;
        *ordinal_ = ordinal;
        *seq_ = seq;
        *trace_id_ = trace_id;
        *flags_ = flags;
        *span_id_ = span_id;
        *kind_ = kind;
        *stages = [StageAcc::default(); Stage::ALL.len()];
        *covered_ticks = 0;
        *transport = None;
        *executor = None;
        *relays = None;
        *dispatch_span_id = 0;
        *failed = None;
        *digest = None;
        *stale_dropped = 0;
        *action_queue = None;
        *observer_ticks = 0;
        *shared_context_ = shared_context;
        *host_at_open_ = host_at_open;
        *host = HostShare::default();
        *stage_run_wait_ns = [None; 2];
    }

    /// Adds one span's run-queue wait to its stage's (capture and dispatch
    /// only: the robot's own stages; the others are ignored). Only spans
    /// not nested in another stage: a nested one's wait is in its outer's.
    pub(crate) fn add_stage_run_wait(&mut self, stage: Stage, ns: u64) {
        if let Some(slot) =
            stage_run_wait_slot(stage).and_then(|i| self.stage_run_wait_ns.get_mut(i))
        {
            *slot = Some(slot.unwrap_or(0).saturating_add(ns));
        }
    }

    /// The run-queue wait inside `stage`'s spans (capture, dispatch).
    pub(crate) fn stage_run_wait(&self, stage: Stage) -> Option<u64> {
        self.stage_run_wait_ns
            .get(stage_run_wait_slot(stage)?)
            .copied()
            .flatten()
    }

    /// What the host did to the call since it opened: the thread's own
    /// figures when it closes on the thread it opened on, the host's stall
    /// always; nothing without a sample at open
    /// ([`NewCall::host_at_open`]).
    pub(crate) fn close_host(&mut self) {
        if let Some(at_open) = &self.host_at_open {
            // What a binding set already (its runtime's GC) stays.
            self.host = ThreadSample::now().since(at_open).plus(&self.host);
        }
    }

    /// Adds one closed stage (`start` → `end`) to the call. `nested`: it ran
    /// inside another stage of the call, so its time is already covered
    /// (counted once in `gap`). `transport`: what a transport stage brought
    /// back; the one with the server's timing wins over one without.
    #[inline]
    pub(crate) fn add_stage(
        &mut self,
        stage: Stage,
        start: Stamp,
        end: Stamp,
        nested: bool,
        transport: Option<(TransportAcc, Option<Box<stagetrace_wire::Hops>>)>,
    ) {
        self.add_span(stage, start, end, nested);
        if let Some((t, relays)) = transport {
            if self.keeps_transport(t.timing.is_some()) {
                self.transport = Some(t);
                self.relays = relays;
            }
        }
    }

    /// [`add_stage`](Self::add_stage) without a transport's findings.
    #[inline]
    pub(crate) fn add_span(&mut self, stage: Stage, start: Stamp, end: Stamp, nested: bool) {
        let dur = end.ticks_since(start);
        let acc = &mut self.stages[stage.index()];
        if acc.count == 0 {
            acc.first_start_ticks = start.ticks_since(self.start);
        }
        acc.count = acc.count.saturating_add(1);
        acc.sum_ticks = acc.sum_ticks.saturating_add(dur);
        if !nested {
            self.covered_ticks = self.covered_ticks.saturating_add(dur);
        }
    }

    /// Whether a closed transport span's findings replace the call's: the
    /// one with the server's timing (`has_timing`) wins over one without.
    #[inline]
    pub(crate) fn keeps_transport(&self, has_timing: bool) -> bool {
        has_timing || self.transport.as_ref().is_none_or(|c| c.timing.is_none())
    }
}

/// A new call's trace id and W3C flags: the caller's trace id and known
/// flags when it continues `parent`'s trace, else ids of our own (random,
/// at least in the right-most 7 bytes, as the Level 2 random flag promises).
pub(crate) fn trace_of(parent: Option<TraceParent>) -> (u128, u8) {
    match parent {
        Some(tp) => (
            u128::from_be_bytes(tp.trace_id),
            tp.flags & TraceParent::KNOWN_FLAGS,
        ),
        None => (
            crate::ids::trace_id(),
            TraceParent::FLAG_SAMPLED | TraceParent::FLAG_RANDOM,
        ),
    }
}

/// Where a stage's run-queue wait is kept in a [`CallState`].
fn stage_run_wait_slot(stage: Stage) -> Option<usize> {
    match stage {
        Stage::Capture => Some(0),
        Stage::Dispatch => Some(1),
        _ => None,
    }
}

#[cfg(test)]
mod size {
    /// The call's state stays small (see [`super::CallState`]): 736 bytes
    /// when the relays' hops were boxed (928 before), 784 with the async
    /// shape's fields (the server's `poll_wait`, the robot's action queue),
    /// 864 with the server timing's parts of inference, its waits and the
    /// previous send's wait (five more figures: 80 bytes), 928 with
    /// inference's three parts timed in-process (three stage slots), 864
    /// with those five figures boxed (`PackedTiming`: 72 bytes fewer, and
    /// the 16-byte alignment the trace id gives the whole takes back 8),
    /// 896 with the host shares' voluntary switches and log-write time and
    /// the open sample's clock for the sampled CPU stall, copied once per
    /// call.
    #[test]
    fn the_call_state_stays_small() {
        assert!(
            std::mem::size_of::<super::CallState>() <= 896,
            "{}",
            std::mem::size_of::<super::CallState>()
        );
    }
}
