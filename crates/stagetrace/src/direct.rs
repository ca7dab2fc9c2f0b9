//! Calls timed without `tracing` spans, for language bindings.
//!
//! The Python package (`crates/stagetrace-py`) times a call from Python
//! context managers. Making a `tracing` span for each of them costs a
//! registry slot and the layer's callbacks; here a call is a plain value
//! instead: its stages are stamped on the layer's own clock ([`Mark::now`])
//! and added to the same per-call state the layer keeps for a call span
//! (`CallState`), and the finished call is the
//! same message on the same bounded queue (`try_send`: a full queue drops the
//! call and counts it in `queue_drops`, never blocks). The worker cannot
//! tell the two apart, so records, summaries, clock stitching and every sink
//! are exactly those of a call made of spans (`docs/architecture.md` §4).
//!
//! ```
//! use stagetrace::direct::Mark;
//! use stagetrace::{StageLayer, Stage};
//!
//! # fn main() -> Result<(), stagetrace::BuildError> {
//! let (layer, guard) = StageLayer::builder().build()?;
//! let calls = layer.direct_calls();
//! let mut call = calls.start(Some("infer"), None);
//! let capture = Mark::now();
//! // … grab frames
//! call.add_stage(Stage::Capture, capture, false);
//! calls.submit(&call);
//! let summary = guard.finish();
//! assert_eq!(summary.calls + summary.warmup_calls, 1);
//! # Ok(())
//! # }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;

use crate::call_state::{
    trace_of, CallState, NewCall, PackedTiming, TransportAcc, TransportStamps,
};
use crate::health::Health;
use crate::ids;
use crate::inline_str::InlineStr;
use crate::message::{Msg, RawCall};
use crate::stage::Stage;
use crate::stamp::{self, Stamp};
use crate::thread_sample::{RunWaitMark, ThreadSample};
use stagetrace_wire::HostFigure;
use stagetrace_wire::{Hops, ServerTiming, TraceParent};

/// A point in time on the layer's hot-path clock (the calibrated TSC or the
/// monotonic clock, as for spans): where a stage started; for the robot's
/// own stages with host figures on, also the thread's run-queue wait then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark(Stamp, Option<RunWaitMark>);

impl Mark {
    /// Now.
    #[inline]
    pub fn now() -> Mark {
        Mark(stamp::now(), None)
    }

    /// Now, where a `stage` starts: a capture or dispatch stage of calls
    /// with host figures on ([`DirectCalls::host_figures`]) also reads the
    /// thread's run-queue wait (one `pread`), so the record says how much
    /// of the stage was spent waiting for a core (`capture_run_wait_ms`).
    #[inline]
    pub fn of_stage(stage: Stage, host_figures: bool) -> Mark {
        let run_wait = (host_figures && matches!(stage, Stage::Capture | Stage::Dispatch))
            .then(RunWaitMark::now)
            .flatten();
        Mark(stamp::now(), run_wait)
    }
}

/// Where calls timed without spans go: the queue and counters of the
/// [`StageLayer`](crate::StageLayer) it came from
/// ([`direct_calls`](crate::StageLayer::direct_calls)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct DirectCalls {
    pub(crate) tx: Sender<Msg>,
    pub(crate) health: Arc<Health>,
    /// Shared with the layer: calls are numbered in the order they open,
    /// whichever way they are made.
    pub(crate) ordinals: Arc<AtomicU64>,
    /// Sample the host's counters as each call opens and closes.
    pub(crate) host_figures: bool,
}

impl DirectCalls {
    /// Whether calls carry host figures
    /// ([`StageLayerBuilder::host_figures`](crate::StageLayerBuilder::host_figures)):
    /// a binding adds its runtime's own (GC) only then.
    pub fn host_figures(&self) -> bool {
        self.host_figures
    }

    /// A call started now, with a trace of its own (random trace id,
    /// flags sampled | random, as a call span outside any remote parent).
    /// `kind` and `seq` land on its record (`kind` truncated to 32 bytes).
    pub fn start(&self, kind: Option<&str>, seq: Option<u64>) -> DirectCall {
        self.start_continuing(None, kind, seq)
    }

    /// A call started now that continues `parent`'s trace when given (a
    /// server handling a request under its caller's context, as a call span
    /// inside [`remote_parent_span`](crate::remote_parent_span)): the
    /// caller's trace id and known flags; without one, as [`start`](Self::start).
    pub fn start_continuing(
        &self,
        parent: Option<TraceParent>,
        kind: Option<&str>,
        seq: Option<u64>,
    ) -> DirectCall {
        let t0 = stamp::now();
        let ordinal = self.ordinals.fetch_add(1, Ordering::Relaxed);
        let mut k = InlineStr::new();
        if let Some(kind) = kind {
            k.set(kind);
        }
        let (trace_id, flags) = trace_of(parent);
        let mut state = CallState::new(
            t0,
            NewCall {
                ordinal,
                seq,
                trace_id,
                flags,
                span_id: ids::span_id(),
                kind: k,
                shared_context: false,
                host_at_open: self.host_figures.then(ThreadSample::now),
            },
        );
        state.observer_ticks = stamp::now().ticks_since(t0);
        DirectCall { state }
    }

    /// The call ends now: it is queued to the worker, or dropped and
    /// counted (`queue_drops`) when the queue is full or the worker has
    /// finished. Never blocks; allocates only for what the call keeps
    /// boxed, copied with it (a relayed response's hops, a server timing's
    /// finer figures).
    pub fn submit(&self, call: &DirectCall) {
        let end = stamp::now();
        let mut raw = RawCall {
            state: call.state.clone(),
            end,
            panicking: false,
        };
        raw.state.close_host();
        raw.state.observer_ticks = raw
            .state
            .observer_ticks
            .saturating_add(stamp::now().ticks_since(end));
        if self.tx.try_send(Msg::Call(raw)).is_err() {
            Health::bump(&self.health.queue_drops);
        }
    }

    /// Count a stage that ended outside any call (`ignored_spans`), as the
    /// layer counts such a span.
    pub fn count_ignored_stage(&self) {
        Health::bump(&self.health.ignored_spans);
    }

    /// Count a rejected header or server-timing map (`rejected_headers`).
    pub fn count_rejected_header(&self) {
        Health::bump(&self.health.rejected_headers);
    }
}

/// One call being timed: the state a call span keeps, as a value.
#[derive(Clone, Debug)]
pub struct DirectCall {
    state: CallState,
}

impl DirectCall {
    /// The runtime's garbage collector ran for `gc_ns` in `collections`
    /// collections while the call ran (language bindings: Python's
    /// `gc.callbacks`); the record's `gc_ms`.
    pub fn set_gc(&mut self, gc_ns: u64, collections: u64) {
        let us = u32::try_from(gc_ns.saturating_add(500) / 1000).unwrap_or(u32::MAX);
        let n = u32::try_from(collections).unwrap_or(u32::MAX);
        self.state.host.set(HostFigure::Gc, Some(us));
        self.state.host.set(HostFigure::GcCollections, Some(n));
    }

    /// Adds stage `stage`, from `start` to now. `nested`: it ran inside
    /// another stage of this call (its time counts for its stage, and once
    /// in the call's `gap`, as a nested span). For the transport stage use
    /// [`add_transport`](Self::add_transport).
    pub fn add_stage(&mut self, stage: Stage, start: Mark, nested: bool) {
        let end = stamp::now();
        self.state.add_stage(stage, start.0, end, nested, None);
        // A nested stage's wait is inside its outer stage's.
        if let (Some(ns), false) = (start.1.and_then(RunWaitMark::elapsed), nested) {
            self.state.add_stage_run_wait(stage, ns);
        }
        self.add_observer(end);
    }

    /// Adds the transport stage `transport`, from its start to now.
    pub fn add_transport(&mut self, transport: &DirectTransport, nested: bool) {
        let end = stamp::now();
        let acc = TransportAcc {
            start: transport.start,
            end,
            span_id: transport.span_id,
            // Packed here, as the relays are boxed below (see `PackedTiming`).
            timing: transport.timing.map(PackedTiming::pack),
            stamps: transport.stamps,
        };
        // Boxed only when there are relays (see `CallState::relays`).
        let relays = (!transport.hops.is_empty()).then(|| Box::new(transport.hops));
        self.state.add_stage(
            Stage::Transport,
            transport.start,
            end,
            nested,
            Some((acc, relays)),
        );
        self.add_observer(end);
    }

    fn add_observer(&mut self, since: Stamp) {
        self.state.observer_ticks = self
            .state
            .observer_ticks
            .saturating_add(stamp::now().ticks_since(since));
    }

    /// The W3C trace context a request made in `transport` (or, without
    /// one, directly in the call) sends: the call's trace id and flags, the
    /// transport's own id as parent (the record's ids, as
    /// [`StageSpanExt::trace_parent`](crate::StageSpanExt::trace_parent)).
    pub fn trace_parent(&self, transport: Option<&DirectTransport>) -> TraceParent {
        TraceParent {
            version: 0,
            trace_id: self.state.trace_id.to_be_bytes(),
            parent_id: transport
                .map_or(self.state.span_id, |t| t.span_id)
                .to_be_bytes(),
            flags: self.state.flags,
        }
    }

    /// Mark the call failed (`failed: true, error: reason`); the latest
    /// reason counts, as [`StageSpanExt::mark_failed`](crate::StageSpanExt::mark_failed).
    pub fn mark_failed(&mut self, reason: &'static str) {
        self.state.failed = Some(reason);
    }

    /// Whether the call was marked failed.
    pub fn failed(&self) -> bool {
        self.state.failed.is_some()
    }

    /// Attach a digest of the call's output (`output_digest`).
    pub fn record_output_digest(&mut self, digest: u64) {
        self.state.digest = Some(digest);
    }

    /// The call's `seq`, when it is learnt after the call started (an
    /// async robot's observation gets its timestep once captured).
    pub fn set_seq(&mut self, seq: u64) {
        self.state.seq = Some(seq);
    }

    /// The robot's action queue when this call's chunk arrived (async
    /// inference): `margin_ns` of actions left (negative: it had run dry
    /// that long) and `dry_ticks`, control ticks without an action before
    /// it; the record's `margin_ms` and `dry_ticks`.
    pub fn set_action_queue(&mut self, margin_ns: i64, dry_ticks: u32) {
        self.state.action_queue = Some((margin_ns, dry_ticks));
    }
}

/// The transport stage of a [`DirectCall`], open: started at
/// [`start`](Self::start), with its own span id (the `traceparent`'s parent
/// id) and the server's timing once the response brought it.
#[derive(Clone, Copy, Debug)]
pub struct DirectTransport {
    start: Stamp,
    span_id: u64,
    timing: Option<ServerTiming>,
    hops: Hops,
    /// The peer and the socket stamps a binding's transport took (see the
    /// `record_*` methods): the same as a transport span's.
    stamps: TransportStamps,
}

impl DirectTransport {
    /// A transport stage started now, to `peer` (one clock-offset estimate
    /// per peer; truncated to 64 bytes).
    pub fn start(peer: Option<&str>) -> DirectTransport {
        let start = stamp::now();
        let mut p = InlineStr::new();
        if let Some(peer) = peer {
            p.set(peer);
        }
        DirectTransport {
            start,
            span_id: ids::span_id(),
            timing: None,
            hops: Hops::new(),
            stamps: TransportStamps {
                peer: p,
                ..TransportStamps::default()
            },
        }
    }

    /// Attach the server timing the response carried (the worker stitches
    /// it onto the call's timeline), as
    /// [`StageSpanExt::record_server_timing`](crate::StageSpanExt::record_server_timing).
    pub fn record_server_timing(&mut self, timing: ServerTiming) {
        self.timing = Some(timing);
    }

    /// Attach the relays the response came through (its timing chain,
    /// outermost first), as
    /// [`StageSpanExt::record_hops`](crate::StageSpanExt::record_hops).
    pub fn record_hops(&mut self, hops: Hops) {
        self.hops = hops;
    }

    /// The response's first byte arrived, as
    /// [`StageSpanExt::record_response_first_byte`](crate::StageSpanExt::record_response_first_byte).
    pub fn record_response_first_byte(&mut self, at: Instant) {
        self.stamps.first_byte = Some(at);
    }

    /// The request's first byte left (a stamp taken just before the write
    /// that took it), as
    /// [`StageSpanExt::record_request_first_byte`](crate::StageSpanExt::record_request_first_byte).
    pub fn record_request_first_byte(&mut self, at: Instant) {
        self.stamps.request_first_byte = Some(at);
    }

    /// The write that took the request's first bytes returned (the robot's
    /// `tx_wait` ends there), as
    /// [`StageSpanExt::record_request_written`](crate::StageSpanExt::record_request_written).
    pub fn record_request_written(&mut self, at: Instant) {
        self.stamps.request_written = Some(at);
    }

    /// The kernel had the response's last byte (a kernel receive stamp; the
    /// robot's `rx_wait` starts there), as
    /// [`StageSpanExt::record_response_kernel_rx`](crate::StageSpanExt::record_response_kernel_rx).
    pub fn record_response_kernel_rx(&mut self, at: Instant) {
        self.stamps.kernel_rx = Some(at);
    }
}
