//! The stage [`Layer`]: the app-thread hot path (`docs/architecture.md` §4).
//!
//! Per tracked span the layer keeps one [`SpanState`] in a fixed table of
//! its own ([`live`]; the registry's extensions only when the table is
//! full); a stage span finds its call once when it opens and adds its time
//! to it when it closes; the call span, when it closes, becomes one
//! fixed-size message on a bounded queue to the worker thread
//! ([`crate::queue`]; `try_send`: a full queue drops and counts, never
//! blocks). No locks are held across calls into other code, no I/O, no
//! allocation.
//!
//! - [`callsite`]: what each callsite is, classified once and cached;
//! - [`fields`]: the field visitor (`stage`, `kind`, `seq`, `peer`);
//! - [`live`]: the open spans this layer tracks and their state;
//! - [`entered`]: the spans entered on each thread (a stage's parent
//!   without the registry);
//! - [`span_state`]: the per-span state;
//! - [`open`], [`close`]: what a span's open and close do;
//! - [`scope`]: walking a span's scope from a bare `tracing::Span`;
//! - [`span_ext`]: the span helpers an app calls, [`StageSpanExt`](crate::StageSpanExt).

pub(crate) mod callsite;
mod close;
mod entered;
mod fields;
mod live;
mod open;
mod scope;
pub(crate) mod span_ext;
mod span_state;

use std::any::TypeId;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use crossbeam_channel::Sender;
use tracing_core::dispatcher::WeakDispatch;
use tracing_core::span::{self, Attributes, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Dispatch, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::context::TraceContextHook;
use crate::health::Health;
use crate::message::Msg;

use callsite::Names;
use fields::Fields;
pub(crate) use live::LiveSpans;
use live::Membership;
pub(crate) use scope::WithScope;
use span_state::{Home, SpanState};

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
    /// The open spans this layer keeps state for, and their state.
    pub(crate) live: LiveSpans,
    /// Sample the host's counters as each call opens and closes
    /// ([`StageLayerBuilder::host_figures`](crate::StageLayerBuilder::host_figures)).
    pub(crate) host_figures: bool,
    /// The layer sees every span enter and exit (a plain layer, `build()`):
    /// it keeps its own stack of entered spans ([`entered`]) and asks it,
    /// not the registry, for a new stage's parent.
    pub(crate) sees_every_enter: bool,
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
        // each callsite is worked out here once, not on every span. Never
        // `Interest::never` here: in a plain layer it would hide the span
        // from every other layer of the subscriber.
        self.names.register(meta);
        Interest::always()
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let class = self.names.class(attrs.metadata());
        // A span that can never be a stage costs one probe of the callsite
        // table, not a clock read (the app's own spans, when this layer sees
        // them all).
        if class.interesting() {
            self.open(class, attrs, id, &ctx);
        }
    }

    fn on_enter(&self, id: &span::Id, _ctx: Context<'_, S>) {
        if self.sees_every_enter {
            entered::enter(self.live.tag(), id.into_u64());
        }
    }

    fn on_exit(&self, id: &span::Id, _ctx: Context<'_, S>) {
        if self.sees_every_enter {
            entered::exit(self.live.tag(), id.into_u64());
        }
    }

    fn on_record(&self, id: &span::Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if self.live.find(id.into_u64()) == Membership::Untracked {
            return;
        }
        let mut fields = Fields::new(&self.names);
        values.record(&mut fields);
        if fields.kind.is_none() && fields.seq.is_none() && fields.peer.is_none() {
            return;
        }
        self.with_state(id, &ctx, |state, _| match state {
            SpanState::Call(call) => {
                if let Some(k) = fields.kind {
                    call.kind = k;
                }
                if let Some(s) = fields.seq {
                    call.seq = Some(s);
                }
            }
            SpanState::Transport(t) => {
                if let Some(p) = fields.peer {
                    t.stamps.peer = p;
                }
            }
            _ => {}
        });
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        // The app's own spans cost one probe of the table: no clock read,
        // no registry lookup.
        match self.live.find(id.into_u64()) {
            Membership::Untracked => {}
            found => self.close(&id, found, &ctx),
        }
    }

    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            Some(self as *const Self as *const ())
        } else if id == TypeId::of::<WithScope>() {
            Some(&self.with_scope as *const WithScope as *const ())
        } else if id == TypeId::of::<LiveSpans>() {
            // How the span helpers (`scope::walk`) find the spans' state.
            Some(&self.live as *const LiveSpans as *const ())
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

impl StageLayer {
    /// Runs `f` on span `id`'s state, wherever it is kept (`None`: the
    /// span has none), with where that is.
    #[inline]
    fn with_state<S, R>(
        &self,
        id: &span::Id,
        ctx: &Context<'_, S>,
        f: impl FnOnce(&mut SpanState, Home) -> R,
    ) -> Option<R>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let raw = id.into_u64();
        match self.live.find(raw) {
            Membership::Tracked(slot) => {
                self.live.with(slot, raw, |s| f(s, Home::Table(slot, raw)))
            }
            Membership::Untracked => None,
            Membership::Unknown => self.with_home(Home::Registry(raw), ctx, f),
        }
    }

    /// Runs `f` on the state kept at `home`.
    #[inline]
    fn with_home<S, R>(
        &self,
        home: Home,
        ctx: &Context<'_, S>,
        f: impl FnOnce(&mut SpanState, Home) -> R,
    ) -> Option<R>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        match home {
            Home::Table(slot, raw) => self.live.with(slot, raw, |s| f(s, home)),
            Home::Registry(raw) => Self::with_registry_home(raw, ctx, f),
        }
    }

    /// [`with_home`](Self::with_home) for a span whose state went to its
    /// registry extensions (its bucket of the table was full). Out of line
    /// and cold: a call's every stage close would otherwise carry this
    /// registry lookup's code through the cache.
    #[cold]
    #[inline(never)]
    fn with_registry_home<S, R>(
        raw: u64,
        ctx: &Context<'_, S>,
        f: impl FnOnce(&mut SpanState, Home) -> R,
    ) -> Option<R>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let span = ctx.span(&span::Id::from_u64(raw))?;
        let mut ext = span.extensions_mut();
        ext.get_mut::<SpanState>()
            .map(|s| f(s, Home::Registry(raw)))
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
}
