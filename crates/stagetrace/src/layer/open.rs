//! What a span's open does: classify it (a table probe), read the few fields
//! that matter, find the call a stage belongs to (once: its close then goes
//! straight to the call), and keep its state in the layer's table.

use std::sync::atomic::Ordering;

use tracing_core::span::{self, Attributes};
use tracing_core::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::callsite::{Class, Role};
use super::entered;
use super::fields::Fields;
use super::span_state::{Enclosing, Home, RemoteState, SpanState, StageState, TransportState};
use super::StageLayer;
use crate::call_state::{trace_of, CallState, NewCall, TransportStamps};
use crate::context::SharedIds;
use crate::health::Health;
use crate::ids;
use crate::stage::Stage;
use crate::stamp::{self, Stamp};
use crate::thread_sample::{RunWaitMark, ThreadSample};
use stagetrace_wire::TraceParent;

impl StageLayer {
    /// `on_new_span` of a span whose callsite may be a stage (`class`).
    /// Kept out of line: the app's own spans do not pay for its frame.
    #[inline(never)]
    pub(super) fn open<S>(
        &self,
        class: Class,
        attrs: &Attributes<'_>,
        id: &span::Id,
        ctx: &Context<'_, S>,
    ) where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
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
        // Before any state is locked: the hook reads the other layer's.
        let shared_ids = match self.context_hook {
            Some(_) => self.shared_ids(id, role),
            None => None,
        };
        match role {
            Role::Remote => self.open_remote(id, ctx),
            Role::Call => {
                // A call inside a server's handler continues the caller's
                // trace, unless another layer owns the trace context. Looked
                // for only while some handler's span is open.
                let remote = match shared_ids {
                    None if self.remote_open.load(Ordering::Acquire) > 0 => {
                        self.remote_parent(attrs, id, ctx)
                    }
                    _ => None,
                };
                let call = self.new_call(&fields, remote, shared_ids);
                let home = self.keep(id, ctx, |s| fill_call(s, call, t0));
                self.opened(
                    id,
                    home.map(|home| Enclosing {
                        call: Some(home),
                        nested: false,
                        in_service: false,
                    }),
                );
            }
            Role::Stage(stage) => {
                let to = self.enclosing(attrs, id, ctx);
                self.open_stage(id, ctx, stage, t0, to, &fields, shared_ids);
                self.opened(id, Some(Enclosing { nested: true, ..to }));
            }
        }
    }

    /// Keeps a new span's state, written by `fill`, in the table, or in its
    /// registry extensions when its bucket is full; says where.
    #[inline]
    fn keep<S>(
        &self,
        id: &span::Id,
        ctx: &Context<'_, S>,
        fill: impl FnOnce(&mut SpanState),
    ) -> Option<Home>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let raw = id.into_u64();
        match self.live.insert(raw, fill) {
            Ok(slot) => Some(Home::Table(slot, raw)),
            Err(fill) => self.keep_in_registry(id, ctx, fill),
        }
    }

    /// Keeps a new span's state in its registry extensions: its bucket of
    /// the table is full. Out of line and marked cold: the open path a call
    /// takes 30 times a second stays a few cache lines of code, not this.
    #[cold]
    #[inline(never)]
    fn keep_in_registry<S>(
        &self,
        id: &span::Id,
        ctx: &Context<'_, S>,
        fill: impl FnOnce(&mut SpanState),
    ) -> Option<Home>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let raw = id.into_u64();
        let span = ctx.span(id)?;
        let mut state = SpanState::Vacant;
        fill(&mut state);
        span.extensions_mut().replace(state);
        self.live.overflowed(raw);
        Some(Home::Registry(raw))
    }

    /// Tracked span `id` opened on this thread; a stage inside it goes to
    /// `child` (`None`: look at its state). Kept for its enter.
    #[inline]
    fn opened(&self, id: &span::Id, child: Option<Enclosing>) {
        if self.sees_every_enter {
            entered::opened(self.live.tag(), id.into_u64(), child);
        }
    }

    /// A server handler's span opened: calls inside it continue its
    /// caller's trace. Out of line: a robot never takes this path.
    #[inline(never)]
    fn open_remote<S>(&self, id: &span::Id, ctx: &Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        self.remote_open.fetch_add(1, Ordering::AcqRel);
        let span_id = ids::span_id();
        self.keep(id, ctx, |s| {
            *s = SpanState::Remote(RemoteState {
                span_id,
                parent: None,
                state: None,
            });
        });
        self.opened(id, None);
    }

    /// Keeps the state of a stage span (`stage`) opening at `t0` inside `to`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn open_stage<S>(
        &self,
        id: &span::Id,
        ctx: &Context<'_, S>,
        stage: Stage,
        t0: Stamp,
        to: Enclosing,
        fields: &Fields<'_>,
        shared_ids: Option<SharedIds>,
    ) where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let shared = shared_ids.is_some();
        if stage == Stage::Transport {
            let span_id = shared_ids.map_or_else(ids::span_id, |s| s.span_id);
            let peer = fields.peer.unwrap_or_default();
            self.keep(id, ctx, |s| {
                *s = SpanState::Transport(TransportState {
                    start: t0,
                    span_id,
                    shared,
                    observer_ticks: stamp::now().ticks_since(t0),
                    timing: None,
                    stamps: TransportStamps {
                        peer,
                        ..TransportStamps::default()
                    },
                    hops: None,
                    to,
                });
            });
            return;
        }
        // Only a dispatch span sends a request of its own (to a remote
        // executor): only it needs an id.
        let span_id = match stage {
            Stage::Dispatch => shared_ids.map_or_else(ids::span_id, |s| s.span_id),
            _ => 0,
        };
        // The robot's own stages get their thread's run-queue wait (one
        // pread at open, one at close): a call's whole wait cannot say which
        // stage it fell in.
        let run_wait_at_open = (self.host_figures
            && matches!(stage, Stage::Capture | Stage::Dispatch))
        .then(RunWaitMark::now)
        .flatten();
        self.keep(id, ctx, |s| {
            *s = SpanState::Stage(StageState {
                stage,
                start: t0,
                observer_ticks: stamp::now().ticks_since(t0),
                span_id,
                shared,
                run_wait_at_open,
                to,
            });
        });
    }

    /// The call a new stage span `id` belongs to. Usually its parent is the
    /// call or a stage that already knows its call: one look at the parent's
    /// state. The app's own spans in between cost a walk up the registry.
    #[inline]
    fn enclosing<S>(&self, attrs: &Attributes<'_>, id: &span::Id, ctx: &Context<'_, S>) -> Enclosing
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        // The current span is a call or stage that opened on this thread:
        // known without the registry or a look at its state.
        if self.sees_every_enter && attrs.is_contextual() {
            if let Some(to) = entered::current_child(self.live.tag()) {
                return to;
            }
        }
        self.enclosing_by_parent(attrs, id, ctx)
    }

    /// [`enclosing`](Self::enclosing) by a look at the parent's state: the
    /// parent was entered on another thread, is explicit, or the layer does
    /// not see every enter. Out of line: a robot's stages inside its call
    /// take the fast path, and this code stays out of their cache lines.
    #[inline(never)]
    fn enclosing_by_parent<S>(
        &self,
        attrs: &Attributes<'_>,
        id: &span::Id,
        ctx: &Context<'_, S>,
    ) -> Enclosing
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let Some(parent) = self.parent_of(attrs, ctx) else {
            return Enclosing::default();
        };
        let known = self.with_state(&parent, ctx, |state, home| match state {
            SpanState::Call(_) => Some(Enclosing {
                call: Some(home),
                nested: false,
                in_service: false,
            }),
            SpanState::Stage(StageState { to, .. })
            | SpanState::Transport(TransportState { to, .. }) => Some(Enclosing {
                nested: true,
                ..*to
            }),
            SpanState::Remote(_) | SpanState::Vacant => None,
        });
        match known.flatten() {
            Some(to) => to,
            None => self.enclosing_by_walk(id, ctx),
        }
    }

    /// [`enclosing`](Self::enclosing) the long way: up the registry from
    /// span `id`, past the app's own spans and request handlers' spans.
    fn enclosing_by_walk<S>(&self, id: &span::Id, ctx: &Context<'_, S>) -> Enclosing
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        /// What one ancestor says.
        enum Up {
            Call(Home),
            /// A stage, which knows its call.
            Stage(Enclosing),
            /// The app's own span or a request handler's: keep going.
            Pass,
        }
        let mut in_service = false;
        let mut next = ctx.span(id).and_then(|s| s.parent());
        while let Some(ancestor) = next {
            let up = self.with_state(&ancestor.id(), ctx, |state, home| match state {
                SpanState::Call(_) => Up::Call(home),
                SpanState::Stage(StageState { to, .. })
                | SpanState::Transport(TransportState { to, .. }) => Up::Stage(*to),
                SpanState::Remote(_) => {
                    in_service = true;
                    Up::Pass
                }
                SpanState::Vacant => Up::Pass,
            });
            match up {
                Some(Up::Call(home)) => {
                    return Enclosing {
                        call: Some(home),
                        nested: false,
                        in_service,
                    }
                }
                Some(Up::Stage(to)) => {
                    return Enclosing {
                        call: to.call,
                        nested: true,
                        in_service: in_service || to.in_service,
                    }
                }
                Some(Up::Pass) | None => {}
            }
            next = ancestor.parent();
        }
        Enclosing {
            call: None,
            nested: false,
            in_service,
        }
    }

    /// The remote parent a call opening as span `id` continues: the nearest
    /// enclosing request handler's context, not past another call.
    fn remote_parent<S>(
        &self,
        attrs: &Attributes<'_>,
        id: &span::Id,
        ctx: &Context<'_, S>,
    ) -> Option<TraceParent>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        // Usually the handler's span is the call's parent: one look.
        let parent = self.parent_of(attrs, ctx)?;
        let direct = self.with_state(&parent, ctx, |state, _| match state {
            SpanState::Remote(r) => r.parent,
            _ => None,
        });
        if let Some(Some(found)) = direct {
            return Some(found);
        }
        let mut next = ctx.span(id).and_then(|s| s.parent());
        while let Some(ancestor) = next {
            let found = self.with_state(&ancestor.id(), ctx, |state, _| match state {
                SpanState::Remote(r) => r.parent.map(Some),
                SpanState::Call(_) => Some(None),
                _ => None,
            });
            if let Some(Some(found)) = found {
                return found;
            }
            next = ancestor.parent();
        }
        None
    }

    /// What a call span opening gets: its number and ids, from the
    /// caller's trace (`remote`), from another layer (`shared_ids`) or our own.
    fn new_call(
        &self,
        fields: &Fields<'_>,
        remote: Option<TraceParent>,
        shared_ids: Option<SharedIds>,
    ) -> NewCall {
        let ordinal = self.next_ordinal.fetch_add(1, Ordering::Relaxed);
        // Another layer's trace ids may not be random: only sampled.
        let (trace_id, flags) = match (remote, shared_ids) {
            (None, Some(s)) => (s.trace_id, TraceParent::FLAG_SAMPLED),
            (remote, _) => trace_of(remote),
        };
        NewCall {
            ordinal,
            seq: fields.seq,
            trace_id,
            flags,
            span_id: shared_ids.map_or_else(ids::span_id, |s| s.span_id),
            kind: fields.kind.unwrap_or_default(),
            shared_context: shared_ids.is_some(),
            // Sampled before the slot is locked: it reads /proc.
            host_at_open: self.host_figures.then(ThreadSample::now),
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
}

/// Writes a call's state, opened at `t0`, into `slot`: over the call state
/// a closed call left there when there is one (no 1 KB copy of a new state
/// built aside).
#[inline]
fn fill_call(slot: &mut SpanState, call: NewCall, t0: Stamp) {
    if !matches!(slot, SpanState::Call(_)) {
        *slot = SpanState::Call(CallState::default());
    }
    if let SpanState::Call(state) = slot {
        state.begin(t0, call);
        state.observer_ticks = stamp::now().ticks_since(t0);
    }
}

impl StageLayer {
    /// The id of a new span's parent, as the registry chose it: the current
    /// span for a contextual span (one registry lookup), else the explicit
    /// one.
    #[inline]
    fn parent_of<S>(&self, attrs: &Attributes<'_>, ctx: &Context<'_, S>) -> Option<span::Id>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        if attrs.is_root() {
            None
        } else if attrs.is_contextual() {
            ctx.current_span().id().cloned()
        } else {
            attrs.parent().cloned()
        }
    }
}
