//! The stage [`Layer`]: the app-thread hot path (`docs/architecture.md` §4).
//!
//! Per tracked span the layer keeps one small `Copy` struct in the span's
//! registry extensions ([`span_state`], and [`CallState`] for the call span);
//! a stage span adds its time to the nearest enclosing call span when it
//! closes; the call span, when it closes, becomes one fixed-size message on a
//! bounded queue to the worker thread ([`crate::queue`]; `try_send`: a full
//! queue drops and counts, never blocks). No locks are held across calls into
//! other code, no I/O, no allocation beyond the registry's own per-span
//! extension slot.
//!
//! - [`callsite`]: what each callsite is, classified once and cached;
//! - [`fields`]: the field visitor (`stage`, `kind`, `seq`, `peer`);
//! - [`span_state`]: the per-span state of stage and transport spans;
//! - [`scope`]: walking a span's scope from a bare `tracing::Span`;
//! - [`span_ext`]: the span helpers an app calls, [`StageSpanExt`](crate::StageSpanExt).

pub(crate) mod callsite;
mod fields;
mod live;
mod scope;
pub(crate) mod span_ext;
mod span_state;

use std::any::TypeId;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_channel::Sender;
use tracing_core::dispatcher::WeakDispatch;
use tracing_core::span::{self, Attributes, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Dispatch, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::context::{SharedIds, TraceContextHook};
use crate::health::Health;
use crate::host_share::RunWaitMark;
use crate::ids;
use crate::inline_str::InlineStr;
use crate::queue::{CallState, Msg, RawCall, TransportAcc};
use crate::stage::Stage;
use crate::stamp::{self, Stamp};
use crate::wire::TraceParent;

use callsite::{Names, Role};
use fields::Fields;
pub(crate) use live::LiveSpans;
use live::Membership;
pub(crate) use scope::WithScope;
use span_state::{RemoteState, StageState, TransportState};

/// The stage layer. Built by [`StageLayer::builder`]: as a plain layer that
/// sees every span and skips the app's own in a table probe
/// ([`build`](crate::StageLayerBuilder::build)), or wrapped in its per-layer
/// filter ([`FilteredStageLayer`], [`build_filtered`](crate::StageLayerBuilder::build_filtered)).
/// Other layers see every span either way.
pub struct StageLayer {
    pub(crate) names: Arc<Names>,
    pub(crate) tx: Sender<Msg>,
    /// This layer's fault counters, shared with its worker.
    pub(crate) health: Arc<Health>,
    /// Numbers calls in the order they open (the record's `seq` when the
    /// call span has none).
    pub(crate) next_ordinal: Arc<AtomicU64>,
    pub(crate) with_scope: WithScope,
    /// Where call and transport ids come from when another layer owns the
    /// trace context (`None`: stagetrace makes its own).
    pub(crate) context_hook: Option<TraceContextHook>,
    /// The subscriber this layer sits in, for the hook. Weak: the subscriber
    /// owns the layer.
    pub(crate) dispatch: OnceLock<WeakDispatch>,
    /// Request handlers' spans (`remote_parent`) open now: while there are
    /// none, a new call has no remote parent to look for.
    pub(crate) remote_open: std::sync::atomic::AtomicUsize,
    /// The open spans this layer keeps state for, when no per-layer filter
    /// keeps the other spans away (`None`: behind [`StageFilter`]).
    pub(crate) live: Option<LiveSpans>,
    /// Sample the host's counters as each call opens and closes
    /// ([`StageLayerBuilder::host_figures`](crate::StageLayerBuilder::host_figures)).
    pub(crate) host_figures: bool,
}

impl fmt::Debug for StageLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StageLayer")
            .field("call_span", &self.names.call)
            .field("stage_spans", &self.names.stages)
            .finish_non_exhaustive()
    }
}

/// The per-layer filter: enables call spans, spans with a stage name and
/// spans with a `stage` field, for this layer only.
#[derive(Clone, Debug)]
pub struct StageFilter {
    pub(crate) names: Arc<Names>,
}

impl<S> Filter<S> for StageFilter {
    #[inline]
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        self.names.class(meta).interesting()
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.names.register(meta).interesting() {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn event_enabled(&self, _event: &tracing_core::Event<'_>, _cx: &Context<'_, S>) -> bool {
        false
    }
}

/// What [`StageLayer::builder`]`.build()` returns: the layer with its
/// per-layer filter, ready for `registry().with(...)`.
pub type FilteredStageLayer<S> = tracing_subscriber::filter::Filtered<StageLayer, StageFilter, S>;

impl<S> Layer<S> for StageLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_layer(&mut self, _subscriber: &mut S) {
        self.with_scope = WithScope::for_subscriber::<S>();
    }

    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        if self.context_hook.is_some() {
            let _ = self.dispatch.set(subscriber.downgrade());
        }
    }

    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        // Unfiltered, this layer sees every span; either way the class of
        // each callsite is worked out here once, not on every span.
        self.names.register(meta);
        Interest::always()
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        let class = self.names.class(meta);
        // A span that can never be a stage costs one table probe, not a
        // clock read (the app's own spans, when this layer sees them all).
        if !class.interesting() {
            return;
        }
        let t0 = stamp::now();
        let mut role = class.role();
        // Fields are read only where they matter: `stage` (if the callsite
        // has one), `kind` / `seq` on calls, `peer` on transport spans.
        let mut fields = Fields::new(&self.names);
        if class.stage_field() || matches!(role, Some(Role::Call | Role::Stage(Stage::Transport))) {
            attrs.record(&mut fields);
        }
        if let Some(by_field) = fields.stage {
            role = by_field;
            if by_field.is_none() {
                Health::bump(&self.health.unknown_stage);
            }
        }
        let Some(role) = role else { return };
        // Before any extensions lock: the hook reads the other layer's.
        let shared_ids = self.shared_ids(id, role);
        let Some(span) = ctx.span(id) else { return };
        // A call inside a server's handler continues the caller's trace,
        // unless another layer owns the trace context. Looked for only while
        // some handler's span is open: a robot's calls skip the walk.
        let remote = match (role, shared_ids) {
            (Role::Call, None) if self.remote_open.load(Ordering::Acquire) > 0 => {
                span_ext::remote_parent_of(span.parent())
            }
            _ => None,
        };
        if let Some(live) = &self.live {
            live.insert(id.into_u64());
        }
        let mut ext = span.extensions_mut();
        match role {
            Role::Remote => {
                self.remote_open.fetch_add(1, Ordering::AcqRel);
                ext.replace(RemoteState {
                    span_id: ids::span_id(),
                    parent: None,
                    state: None,
                });
            }
            Role::Call => {
                ext.replace(self.new_call(t0, &fields, remote, shared_ids));
            }
            Role::Stage(Stage::Transport) => {
                ext.replace(TransportState {
                    start: t0,
                    span_id: shared_ids.map_or_else(ids::span_id, |s| s.span_id),
                    shared: shared_ids.is_some(),
                    observer_ticks: stamp::now().ticks_since(t0),
                    timing: None,
                    peer: fields.peer.unwrap_or(InlineStr::new()),
                    first_byte: None,
                    request_first_byte: None,
                    request_written: None,
                    kernel_rx: None,
                    hops: crate::wire::Hops::new(),
                });
            }
            Role::Stage(stage) => {
                // Only a dispatch span sends a request of its own (to a
                // remote executor): only it needs an id.
                let span_id = match stage {
                    Stage::Dispatch => shared_ids.map_or_else(ids::span_id, |s| s.span_id),
                    _ => 0,
                };
                // The robot's own stages get their thread's run-queue wait
                // (one pread at open, one at close): a call's whole wait
                // cannot say which stage it fell in.
                let run_wait_at_open = (self.host_figures
                    && matches!(stage, Stage::Capture | Stage::Dispatch))
                .then(RunWaitMark::now)
                .flatten();
                ext.replace(StageState {
                    stage,
                    start: t0,
                    observer_ticks: stamp::now().ticks_since(t0),
                    span_id,
                    shared: shared_ids.is_some(),
                    run_wait_at_open,
                });
            }
        }
    }

    fn on_record(&self, id: &span::Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if self
            .live
            .as_ref()
            .is_some_and(|live| live.contains(id.into_u64()) == Membership::Untracked)
        {
            return;
        }
        let mut fields = Fields::new(&self.names);
        values.record(&mut fields);
        if fields.kind.is_none() && fields.seq.is_none() && fields.peer.is_none() {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(call) = ext.get_mut::<CallState>() {
            if let Some(k) = fields.kind {
                call.kind = k;
            }
            if let Some(s) = fields.seq {
                call.seq = Some(s);
            }
        } else if let Some(t) = ext.get_mut::<TransportState>() {
            if let Some(p) = fields.peer {
                t.peer = p;
            }
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        let membership = match &self.live {
            Some(live) => live.remove(id.into_u64()),
            None => Membership::Tracked,
        };
        if membership == Membership::Untracked {
            return;
        }
        let end = stamp::now();
        let Some(span) = ctx.span(&id) else { return };
        let ext = span.extensions();
        if membership == Membership::Unknown && carries_state(&ext) {
            if let Some(live) = &self.live {
                live.overflowed_closed();
            }
        }
        let closed = if let Some(st) = ext.get::<StageState>() {
            ClosedStage {
                stage: st.stage,
                start: st.start,
                observer_ticks: st.observer_ticks,
                dispatch_id: st.span_id,
                transport: None,
                run_wait_ns: st.run_wait_at_open.and_then(RunWaitMark::elapsed),
            }
        } else if let Some(t) = ext.get::<TransportState>() {
            ClosedStage {
                stage: Stage::Transport,
                start: t.start,
                observer_ticks: t.observer_ticks,
                dispatch_id: 0,
                transport: Some(*t),
                run_wait_ns: None,
            }
        } else if ext.get::<CallState>().is_some() {
            drop(ext);
            if let Some(call) = span.extensions_mut().get_mut::<CallState>() {
                self.finish_call(call, end);
            }
            return;
        } else {
            if ext.get::<RemoteState>().is_some() {
                let _ = self
                    .remote_open
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            }
            return;
        };
        drop(ext);
        self.credit_enclosing_call(span.parent(), closed, end);
    }

    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            Some(self as *const Self as *const ())
        } else if id == TypeId::of::<WithScope>() {
            Some(&self.with_scope as *const WithScope as *const ())
        } else if id == TypeId::of::<Health>() {
            // How `health::count_rejected_header` finds this layer's counters
            // through the subscriber (`Layered` and `Filtered` pass the
            // question on to their layers).
            Some(Arc::as_ptr(&self.health) as *const ())
        } else {
            None
        }
    }
}

/// Whether a span's extensions hold any state of this layer.
fn carries_state(ext: &tracing_subscriber::registry::Extensions<'_>) -> bool {
    ext.get::<CallState>().is_some()
        || ext.get::<StageState>().is_some()
        || ext.get::<TransportState>().is_some()
        || ext.get::<RemoteState>().is_some()
}

/// What a closed stage span hands to its call.
struct ClosedStage {
    stage: Stage,
    start: Stamp,
    observer_ticks: u64,
    /// A dispatch span's id (0 for the others).
    dispatch_id: u64,
    transport: Option<TransportState>,
    /// The thread's run-queue wait inside the span (a robot's own stage,
    /// opened and closed on one thread, with host figures on).
    run_wait_ns: Option<u64>,
}

impl StageLayer {
    /// Adds a closed stage to the nearest enclosing call, walking up from
    /// `next`; a stage under no call is counted as ignored.
    fn credit_enclosing_call<S>(
        &self,
        mut next: Option<tracing_subscriber::registry::SpanRef<'_, S>>,
        closed: ClosedStage,
        end: Stamp,
    ) where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let mut nested = false;
        let mut in_service = false;
        while let Some(ancestor) = next {
            // The app's own spans between a stage and its call hold nothing
            // of ours: no lock on their extensions.
            let untracked = self.live.as_ref().is_some_and(|live| {
                live.contains(ancestor.id().into_u64()) == Membership::Untracked
            });
            if !untracked {
                let mut ext = ancestor.extensions_mut();
                if let Some(call) = ext.get_mut::<CallState>() {
                    // The first dispatch span is the one exporters draw.
                    if call.dispatch_span_id == 0 {
                        call.dispatch_span_id = closed.dispatch_id;
                    }
                    let transport = closed.transport.map(|t| TransportAcc {
                        start: closed.start,
                        end,
                        span_id: t.span_id,
                        timing: t.timing,
                        peer: t.peer,
                        first_byte: t.first_byte,
                        request_first_byte: t.request_first_byte,
                        request_written: t.request_written,
                        kernel_rx: t.kernel_rx,
                        hops: t.hops,
                    });
                    call.add_stage(closed.stage, closed.start, end, nested, transport);
                    // A nested span's wait is inside its outer stage's.
                    if let (Some(ns), false) = (closed.run_wait_ns, nested) {
                        call.add_stage_run_wait(closed.stage, ns);
                    }
                    call.observer_ticks = call
                        .observer_ticks
                        .saturating_add(closed.observer_ticks)
                        .saturating_add(stamp::now().ticks_since(end));
                    return;
                }
                if ext.get_mut::<StageState>().is_some()
                    || ext.get_mut::<TransportState>().is_some()
                {
                    nested = true;
                }
                if ext.get_mut::<RemoteState>().is_some() {
                    in_service = true;
                }
            }
            next = ancestor.parent();
        }
        Health::bump(&self.health.ignored_spans);
        if in_service {
            Health::bump(&self.health.service_spans);
        }
    }

    /// The state of a call span opening at `t0`: its ids from the caller's
    /// trace (`remote`), from another layer (`shared_ids`) or our own.
    fn new_call(
        &self,
        t0: Stamp,
        fields: &Fields<'_>,
        remote: Option<TraceParent>,
        shared_ids: Option<SharedIds>,
    ) -> CallState {
        let ordinal = self.next_ordinal.fetch_add(1, Ordering::Relaxed);
        // Our own trace ids are random (at least the right-most 7 bytes, as
        // the Level 2 random flag promises); another layer's may not be.
        let (trace_id, flags) = match (remote, shared_ids) {
            (Some(tp), _) => (
                u128::from_be_bytes(tp.trace_id),
                tp.flags & TraceParent::KNOWN_FLAGS,
            ),
            (None, Some(s)) => (s.trace_id, TraceParent::FLAG_SAMPLED),
            (None, None) => (
                ids::trace_id(),
                TraceParent::FLAG_SAMPLED | TraceParent::FLAG_RANDOM,
            ),
        };
        let mut state = CallState::new(
            t0,
            ordinal,
            fields.seq,
            trace_id,
            flags,
            shared_ids.map_or_else(ids::span_id, |s| s.span_id),
            fields.kind.unwrap_or(InlineStr::new()),
            shared_ids.is_some(),
        );
        if self.host_figures {
            state.open_host();
        }
        state.observer_ticks = stamp::now().ticks_since(t0);
        state
    }

    /// A handle for timing calls without `tracing` spans (language
    /// bindings: [`crate::direct`]): same queue, same worker, same counters
    /// and call numbering as this layer's call spans.
    pub fn direct_calls(&self) -> crate::direct::DirectCalls {
        crate::direct::DirectCalls {
            tx: self.tx.clone(),
            health: Arc::clone(&self.health),
            ordinals: Arc::clone(&self.next_ordinal),
            host_figures: self.host_figures,
        }
    }

    /// The ids the trace-context hook finds for span `id`, if one is set.
    fn shared_ids(&self, id: &span::Id, role: Role) -> Option<SharedIds> {
        let hook = self.context_hook?;
        let stage = match role {
            Role::Call => "call",
            Role::Stage(stage) => stage.name(),
            Role::Remote => return None,
        };
        let dispatch = self.dispatch.get()?.upgrade()?;
        // The hook is other code on the app thread: a panic in it must not
        // reach the host (it counts as a miss).
        let found =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&dispatch, id, stage)))
                .ok()
                .flatten()
                .filter(|s| s.trace_id != 0 && s.span_id != 0);
        if found.is_none() && matches!(role, Role::Call | Role::Stage(Stage::Transport)) {
            Health::bump(&self.health.context_misses);
        }
        found
    }

    /// Queues the finished call: one fixed-size message, built in place
    /// from the span's extensions (lock held only for the copy).
    #[inline]
    fn finish_call(&self, state: &mut CallState, end: Stamp) {
        let panicking = std::thread::panicking();
        let mut raw = RawCall {
            state: state.take(),
            end,
            panicking,
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
}
