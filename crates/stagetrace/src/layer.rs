//! The stage [`Layer`]: the app-thread hot path.
//!
//! Per tracked span the layer keeps one small `Copy` struct in the span's
//! registry extensions; a stage span adds its time to the nearest enclosing
//! call span when it closes; the call span, when it closes, becomes one
//! fixed-size message on a bounded queue to the worker thread (`try_send`: a
//! full queue drops and counts, never blocks). No locks are held across calls
//! into other code, no I/O, no allocation beyond the registry's own per-span
//! extension slot.

use std::any::TypeId;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_channel::Sender;
use tracing_core::dispatcher::WeakDispatch;
use tracing_core::field::{Field, Visit};
use tracing_core::span::{self, Attributes, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Dispatch, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::{ExtensionsMut, LookupSpan};

use crate::context::{SharedIds, TraceContextHook};
use crate::ids;
use crate::stage::Stage;
use crate::stamp::{self, Stamp};
use crate::wire::{ServerTiming, TraceParent};

/// A short string kept inline (no allocation); longer values are truncated
/// at a character boundary.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct InlineStr<const N: usize> {
    len: u8,
    buf: [u8; N],
}

impl<const N: usize> InlineStr<N> {
    pub(crate) const fn new() -> Self {
        InlineStr {
            len: 0,
            buf: [0; N],
        }
    }

    pub(crate) fn set(&mut self, s: &str) {
        let mut n = s.len().min(N).min(u8::MAX as usize);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[..n].copy_from_slice(&s.as_bytes()[..n]);
        self.len = n as u8;
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("")
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<const N: usize> fmt::Debug for InlineStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Longest `kind` kept (bytes).
pub(crate) const KIND_LEN: usize = 32;
/// Longest transport `peer` kept (bytes).
pub(crate) const PEER_LEN: usize = 64;

/// What a tracked span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Call,
    Stage(Stage),
}

/// Span names → roles, fixed at build time.
#[derive(Debug)]
pub(crate) struct Names {
    pub(crate) call: String,
    /// Name → stage; user mappings first, then the defaults.
    pub(crate) stages: Vec<(String, Stage)>,
    /// What each callsite is, worked out once when it registers.
    pub(crate) callsites: CallsiteCache,
}

impl Names {
    pub(crate) fn new(call: String, stages: Vec<(String, Stage)>) -> Self {
        Names {
            call,
            stages,
            callsites: CallsiteCache::new(),
        }
    }

    #[inline]
    fn role(&self, name: &str) -> Option<Role> {
        if name == self.call {
            return Some(Role::Call);
        }
        self.stages
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| Role::Stage(*s))
    }

    fn role_of_value(&self, value: &str) -> Option<Role> {
        if value == self.call || value == "call" {
            return Some(Role::Call);
        }
        value.parse().ok().map(Role::Stage)
    }

    /// Works out what spans of this callsite are, from the name and fields.
    fn classify(&self, meta: &Metadata<'_>) -> Class {
        if !meta.is_span() {
            return Class::IGNORED;
        }
        Class::new(
            self.role(meta.name()),
            meta.fields().field("stage").is_some(),
        )
    }

    /// [`classify`](Self::classify), cached per callsite: one table probe
    /// for a registered callsite instead of string compares.
    #[inline]
    fn class(&self, meta: &Metadata<'_>) -> Class {
        match self.callsites.get(meta) {
            Some(c) => c,
            None => self.classify(meta),
        }
    }

    /// Called once per callsite (`register_callsite` / `callsite_enabled`).
    fn register(&self, meta: &'static Metadata<'static>) -> Class {
        let class = self.classify(meta);
        self.callsites.insert(meta, class);
        class
    }
}

/// What the layer makes of a callsite: its role by name, and whether a
/// `stage` field may override it. Packed in one byte for [`CallsiteCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Class(u8);

impl Class {
    const PRESENT: u8 = 0x80;
    const STAGE_FIELD: u8 = 0x40;
    const ROLE: u8 = 0x07;
    const IGNORED: Class = Class(Self::PRESENT);

    fn new(role: Option<Role>, stage_field: bool) -> Self {
        let r = match role {
            None => 0,
            Some(Role::Call) => 1,
            Some(Role::Stage(s)) => 2 + s.index() as u8,
        };
        Class(Self::PRESENT | if stage_field { Self::STAGE_FIELD } else { 0 } | r)
    }

    #[inline]
    fn role(self) -> Option<Role> {
        match self.0 & Self::ROLE {
            0 => None,
            1 => Some(Role::Call),
            r => Stage::ALL.get(usize::from(r - 2)).copied().map(Role::Stage),
        }
    }

    #[inline]
    fn stage_field(self) -> bool {
        self.0 & Self::STAGE_FIELD != 0
    }

    #[inline]
    fn interesting(self) -> bool {
        self.0 & (Self::STAGE_FIELD | Self::ROLE) != 0
    }
}

/// Slots in the callsite table (a power of two); callsites beyond it are
/// classified on every span instead (correct, only slower).
const CALLSITE_SLOTS: usize = 1024;
/// Slots probed per lookup.
const CALLSITE_PROBES: usize = 16;

/// A fixed-size, lock-free, insert-only map from a callsite's `'static`
/// metadata address to its [`Class`]: filled when callsites register,
/// read on every span. No allocation after build.
pub(crate) struct CallsiteCache {
    keys: Box<[AtomicUsize]>,
    classes: Box<[AtomicU8]>,
}

impl fmt::Debug for CallsiteCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let used = self
            .keys
            .iter()
            .filter(|k| k.load(Ordering::Relaxed) != 0)
            .count();
        f.debug_struct("CallsiteCache")
            .field("callsites", &used)
            .finish()
    }
}

impl CallsiteCache {
    fn new() -> Self {
        CallsiteCache {
            keys: (0..CALLSITE_SLOTS).map(|_| AtomicUsize::new(0)).collect(),
            classes: (0..CALLSITE_SLOTS).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    #[inline]
    fn slot(key: usize, probe: usize) -> usize {
        // Fibonacci hashing of the address; metadata is at least 8-aligned.
        let h = ((key >> 3) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54;
        (h as usize).wrapping_add(probe) & (CALLSITE_SLOTS - 1)
    }

    #[inline]
    fn get(&self, meta: &Metadata<'_>) -> Option<Class> {
        let key = meta as *const Metadata<'_> as usize;
        for probe in 0..CALLSITE_PROBES {
            let i = Self::slot(key, probe);
            let k = self.keys.get(i)?.load(Ordering::Acquire);
            if k == key {
                let c = self.classes.get(i)?.load(Ordering::Acquire);
                // 0: the inserting thread has not stored the class yet.
                return (c & Class::PRESENT != 0).then_some(Class(c));
            }
            if k == 0 {
                return None;
            }
        }
        None
    }

    fn insert(&self, meta: &'static Metadata<'static>, class: Class) {
        let key = meta as *const Metadata<'static> as usize;
        for probe in 0..CALLSITE_PROBES {
            let i = Self::slot(key, probe);
            let (Some(k), Some(c)) = (self.keys.get(i), self.classes.get(i)) else {
                return;
            };
            match k.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    c.store(class.0, Ordering::Release);
                    return;
                }
                Err(existing) if existing == key => {
                    c.store(class.0, Ordering::Release);
                    return;
                }
                Err(_) => {}
            }
        }
    }
}

/// Counters the app thread bumps and the worker reports.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) next_ordinal: AtomicU64,
    pub(crate) queue_drops: AtomicU64,
    pub(crate) ignored_spans: AtomicU64,
    pub(crate) unknown_stage: AtomicU64,
    /// Call / transport spans for which the trace-context hook found nothing.
    pub(crate) context_misses: AtomicU64,
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

/// The transport span used for stitching.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TransportAcc {
    pub(crate) start: Stamp,
    pub(crate) end: Stamp,
    pub(crate) span_id: u64,
    pub(crate) timing: Option<ServerTiming>,
    pub(crate) peer: InlineStr<PEER_LEN>,
}

/// Per-call state, in the call span's extensions; sent whole to the worker.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallState {
    pub(crate) start: Stamp,
    pub(crate) ordinal: u64,
    pub(crate) seq: Option<u64>,
    pub(crate) trace_id: u128,
    pub(crate) span_id: u64,
    pub(crate) kind: InlineStr<KIND_LEN>,
    pub(crate) stages: [StageAcc; 5],
    /// Sum of the durations of stage spans not nested in another stage span.
    pub(crate) covered_ticks: u64,
    pub(crate) transport: Option<TransportAcc>,
    pub(crate) failed: Option<&'static str>,
    pub(crate) digest: Option<u64>,
    /// Action chunks dropped as stale in this call (0: none).
    pub(crate) stale_dropped: u32,
    /// The layer's own time on this call so far.
    pub(crate) observer_ticks: u64,
    /// `trace_id` / `span_id` came from another layer (see [`crate::context`]).
    pub(crate) shared_context: bool,
}

/// Per-stage-span state (stages other than transport). Kept small: the
/// registry boxes one per span.
#[derive(Clone, Copy, Debug)]
struct StageState {
    stage: Stage,
    start: Stamp,
    observer_ticks: u64,
}

/// Per-transport-span state: also the span id sent in `traceparent`, the
/// server timing and the peer.
#[derive(Clone, Copy, Debug)]
struct TransportState {
    start: Stamp,
    /// Non-zero: the parent id sent in `traceparent`.
    span_id: u64,
    /// `span_id` came from another layer (see [`crate::context`]).
    shared: bool,
    observer_ticks: u64,
    timing: Option<ServerTiming>,
    peer: InlineStr<PEER_LEN>,
}

/// One finished call, as queued to the worker.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawCall {
    pub(crate) state: CallState,
    pub(crate) end: Stamp,
    pub(crate) panicking: bool,
}

/// Messages to the worker.
// Boxing the call would allocate on the app thread; the queue's slots are
// preallocated at this size instead.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Msg {
    Call(RawCall),
    /// Drain, write the cumulative summary, reply, exit.
    Shutdown,
}

/// Reads the few fields the layer cares about.
struct Fields<'a> {
    names: &'a Names,
    stage: Option<Option<Role>>,
    kind: Option<InlineStr<KIND_LEN>>,
    seq: Option<u64>,
    peer: Option<InlineStr<PEER_LEN>>,
}

impl<'a> Fields<'a> {
    fn new(names: &'a Names) -> Self {
        Fields {
            names,
            stage: None,
            kind: None,
            seq: None,
            peer: None,
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "stage" => self.stage = Some(self.names.role_of_value(value)),
            "kind" => {
                let mut k = InlineStr::new();
                k.set(value);
                self.kind = Some(k);
            }
            "peer" => {
                let mut p = InlineStr::new();
                p.set(value);
                self.peer = Some(p);
            }
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "seq" {
            self.seq = Some(value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "seq" {
            self.seq = u64::try_from(value).ok();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `stage = ?x` / `kind = %x` arrive here; format into a stack buffer.
        if matches!(field.name(), "stage" | "kind" | "peer") {
            let mut buf = StackWriter::<64>::new();
            if fmt::write(&mut buf, format_args!("{value:?}")).is_ok() || buf.len > 0 {
                let s = buf.as_str().trim_matches('"');
                self.record_str(field, s);
            }
        }
    }
}

/// A `fmt::Write` into a fixed stack buffer; excess is dropped.
struct StackWriter<const N: usize> {
    len: usize,
    buf: [u8; N],
}

impl<const N: usize> StackWriter<N> {
    fn new() -> Self {
        StackWriter {
            len: 0,
            buf: [0; N],
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> fmt::Write for StackWriter<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = N - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// Walks the scope of a span, innermost first, handing each span's extensions
/// to `f` until it returns `true`. Set when the layer is attached, because
/// only then is the subscriber type known (tracing-opentelemetry's `WithContext`
/// does the same).
#[derive(Clone, Copy)]
pub(crate) struct WithScope(Option<WalkFn>);

impl WithScope {
    pub(crate) fn for_subscriber<S>() -> Self
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        WithScope(Some(walk_scope::<S>))
    }
}

type WalkFn = fn(&Dispatch, &span::Id, &mut dyn FnMut(&mut ExtensionsMut<'_>) -> bool);

impl fmt::Debug for WithScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WithScope")
    }
}

fn walk_scope<S>(
    dispatch: &Dispatch,
    id: &span::Id,
    f: &mut dyn FnMut(&mut ExtensionsMut<'_>) -> bool,
) where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(subscriber) = dispatch.downcast_ref::<S>() else {
        return;
    };
    let Some(span) = subscriber.span(id) else {
        return;
    };
    for s in span.scope() {
        if f(&mut s.extensions_mut()) {
            return;
        }
    }
}

/// The stage layer. Built by [`StageLayer::builder`]; what the builder returns
/// is this layer wrapped in its per-layer filter ([`FilteredStageLayer`]), so
/// spans that are not stages cost almost nothing and other layers still see them.
pub struct StageLayer {
    pub(crate) names: Arc<Names>,
    pub(crate) tx: Sender<Msg>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) with_scope: WithScope,
    /// Where call and transport ids come from when another layer owns the
    /// trace context (`None`: stagetrace makes its own).
    pub(crate) context_hook: Option<TraceContextHook>,
    /// The subscriber this layer sits in, for the hook. Weak: the subscriber
    /// owns the layer.
    pub(crate) dispatch: OnceLock<WeakDispatch>,
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
        let t0 = stamp::now();
        let meta = attrs.metadata();
        let class = self.names.class(meta);
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
                self.shared.unknown_stage.fetch_add(1, Ordering::Relaxed);
            }
        }
        let Some(role) = role else { return };
        // Before any extensions lock: the hook reads the other layer's.
        let shared_ids = self.shared_ids(id, role);
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        match role {
            Role::Call => {
                let ordinal = self.shared.next_ordinal.fetch_add(1, Ordering::Relaxed);
                let mut state = CallState {
                    start: t0,
                    ordinal,
                    seq: fields.seq,
                    trace_id: shared_ids.map_or_else(ids::trace_id, |s| s.trace_id),
                    span_id: shared_ids.map_or_else(ids::span_id, |s| s.span_id),
                    kind: fields.kind.unwrap_or(InlineStr::new()),
                    stages: [StageAcc::default(); 5],
                    covered_ticks: 0,
                    transport: None,
                    failed: None,
                    digest: None,
                    stale_dropped: 0,
                    observer_ticks: 0,
                    shared_context: shared_ids.is_some(),
                };
                state.observer_ticks = stamp::now().ticks_since(t0);
                ext.replace(state);
            }
            Role::Stage(Stage::Transport) => {
                ext.replace(TransportState {
                    start: t0,
                    span_id: shared_ids.map_or_else(ids::span_id, |s| s.span_id),
                    shared: shared_ids.is_some(),
                    observer_ticks: stamp::now().ticks_since(t0),
                    timing: None,
                    peer: fields.peer.unwrap_or(InlineStr::new()),
                });
            }
            Role::Stage(stage) => {
                ext.replace(StageState {
                    stage,
                    start: t0,
                    observer_ticks: stamp::now().ticks_since(t0),
                });
            }
        }
    }

    fn on_record(&self, id: &span::Id, values: &Record<'_>, ctx: Context<'_, S>) {
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
        let end = stamp::now();
        let Some(span) = ctx.span(&id) else { return };
        let ext = span.extensions();
        // (stage, start, observer ticks, transport part)
        let (stage, start, observer_ticks, transport) = if let Some(st) = ext.get::<StageState>() {
            (st.stage, st.start, st.observer_ticks, None)
        } else if let Some(t) = ext.get::<TransportState>() {
            (Stage::Transport, t.start, t.observer_ticks, Some(*t))
        } else if let Some(call) = ext.get::<CallState>() {
            self.finish_call(call, end);
            return;
        } else {
            return;
        };
        drop(ext);
        let dur = end.ticks_since(start);
        let mut nested = false;
        let mut next = span.parent();
        while let Some(ancestor) = next {
            {
                let mut ext = ancestor.extensions_mut();
                if let Some(call) = ext.get_mut::<CallState>() {
                    let acc = &mut call.stages[stage.index()];
                    if acc.count == 0 {
                        acc.first_start_ticks = start.ticks_since(call.start);
                    }
                    acc.count = acc.count.saturating_add(1);
                    acc.sum_ticks = acc.sum_ticks.saturating_add(dur);
                    if !nested {
                        call.covered_ticks = call.covered_ticks.saturating_add(dur);
                    }
                    if let Some(t) = transport {
                        if t.timing.is_some() || call.transport.is_none_or(|c| c.timing.is_none()) {
                            call.transport = Some(TransportAcc {
                                start,
                                end,
                                span_id: t.span_id,
                                timing: t.timing,
                                peer: t.peer,
                            });
                        }
                    }
                    call.observer_ticks = call
                        .observer_ticks
                        .saturating_add(observer_ticks)
                        .saturating_add(stamp::now().ticks_since(end));
                    return;
                }
                if ext.get_mut::<StageState>().is_some()
                    || ext.get_mut::<TransportState>().is_some()
                {
                    nested = true;
                }
            }
            next = ancestor.parent();
        }
        self.shared.ignored_spans.fetch_add(1, Ordering::Relaxed);
    }

    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            Some(self as *const Self as *const ())
        } else if id == TypeId::of::<WithScope>() {
            Some(&self.with_scope as *const WithScope as *const ())
        } else {
            None
        }
    }
}

impl StageLayer {
    /// The ids the trace-context hook finds for span `id`, if one is set.
    fn shared_ids(&self, id: &span::Id, role: Role) -> Option<SharedIds> {
        let hook = self.context_hook?;
        let dispatch = self.dispatch.get()?.upgrade()?;
        let stage = match role {
            Role::Call => "call",
            Role::Stage(stage) => stage.name(),
        };
        // The hook is other code on the app thread: a panic in it must not
        // reach the host (it counts as a miss).
        let found =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&dispatch, id, stage)))
                .ok()
                .flatten()
                .filter(|s| s.trace_id != 0 && s.span_id != 0);
        if found.is_none() && matches!(role, Role::Call | Role::Stage(Stage::Transport)) {
            self.shared.context_misses.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Queues the finished call: one fixed-size message, built in place
    /// from the span's extensions (read lock held only for the copy).
    #[inline]
    fn finish_call(&self, state: &CallState, end: Stamp) {
        let panicking = std::thread::panicking();
        let mut raw = RawCall {
            state: *state,
            end,
            panicking,
        };
        raw.state.observer_ticks = raw
            .state
            .observer_ticks
            .saturating_add(stamp::now().ticks_since(end));
        if self.tx.try_send(Msg::Call(raw)).is_err() {
            self.shared.queue_drops.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs `f` on the extensions of `span` and its ancestors, innermost first,
/// until `f` returns `true`. Does nothing when no stage layer is installed.
///
/// A span no layer enabled (e.g. a non-stage span when stagetrace is the only
/// layer) has no scope of its own: the current span stands in for it.
fn walk(span: &tracing::Span, f: &mut dyn FnMut(&mut ExtensionsMut<'_>) -> bool) {
    let walk_from =
        |dispatch: &Dispatch, id: &span::Id, f: &mut dyn FnMut(&mut ExtensionsMut<'_>) -> bool| {
            if let Some(WithScope(Some(walk))) = dispatch.downcast_ref::<WithScope>() {
                walk(dispatch, id, f);
            }
        };
    if span.is_disabled() {
        tracing::dispatcher::get_default(|dispatch| {
            if let Some(id) = dispatch.current_span().id() {
                walk_from(dispatch, id, &mut *f);
            }
        });
    } else {
        span.with_subscriber(|(id, dispatch)| walk_from(dispatch, id, &mut *f));
    }
}

/// Attach the server timing a response carried (DESIGN section 3) to the
/// transport span `span`, or to the nearest transport span enclosing it.
///
/// The worker stitches it onto the client's timeline when the call ends:
/// `server_ms`, `net_ms`, the `uplink_ms` / `downlink_ms` split, `queue_ms`
/// and `infer_ms`. Without it the transport is reported as `roundtrip_ms`
/// only. No effect when `span` is not inside a transport span or no
/// [`StageLayer`] is installed. Never allocates or blocks.
pub fn record_server_timing(span: &tracing::Span, timing: ServerTiming) {
    walk(span, &mut |ext| {
        if let Some(t) = ext.get_mut::<TransportState>() {
            t.timing = Some(timing);
            return true;
        }
        ext.get_mut::<CallState>().is_some()
    });
}

/// The W3C trace context to send with the request made inside `span`:
/// trace id = the call's trace id (the record's `trace_id`), parent id = the
/// enclosing transport span's own id (or the call's when there is no
/// transport span). `None` outside a call or without a [`StageLayer`].
pub fn trace_parent(span: &tracing::Span) -> Option<TraceParent> {
    let mut transport: Option<(u64, bool)> = None;
    let mut out = None;
    walk(span, &mut |ext| {
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

/// Mark the call enclosing `span` (or `span` itself, if it is the call span)
/// as failed: its record gets `failed: true, error: reason`, and it is kept out
/// of the stage figures (counted as `failed_calls`).
pub fn mark_failed(span: &tracing::Span, reason: &'static str) {
    with_call(span, |call| call.failed = Some(reason));
}

/// Attach a digest of the call's output (e.g. a hash of the action chunk) to
/// the enclosing call; written as `output_digest` in hex, for consistency
/// checks between runs.
pub fn record_output_digest(span: &tracing::Span, digest: u64) {
    with_call(span, |call| call.digest = Some(digest));
}

/// Count `n` action chunks of the call enclosing `span` as dropped because
/// they were too old to execute (added to what the call already counted);
/// written as `stale_dropped`. Calls that dropped none carry no field.
/// No effect outside a call or without a [`StageLayer`]. Never allocates or
/// blocks.
pub fn record_stale_dropped(span: &tracing::Span, n: u32) {
    with_call(span, |call| {
        call.stale_dropped = call.stale_dropped.saturating_add(n);
    });
}

fn with_call(span: &tracing::Span, mut f: impl FnMut(&mut CallState)) {
    walk(span, &mut |ext| match ext.get_mut::<CallState>() {
        Some(call) => {
            f(call);
            true
        }
        None => false,
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn inline_str_truncates_on_char_boundary() {
        let mut s = InlineStr::<4>::new();
        s.set("abcdef");
        assert_eq!(s.as_str(), "abcd");
        s.set("aé€");
        assert_eq!(s.as_str(), "aé");
        assert!(!s.is_empty());
    }

    fn names() -> Names {
        let stages = Stage::ALL
            .iter()
            .map(|s| (s.name().to_owned(), *s))
            .collect();
        Names::new("call".to_owned(), stages)
    }

    #[test]
    fn callsite_classes_are_cached_and_match_classification() {
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry());
        let metas: Vec<&'static Metadata<'static>> =
            tracing::dispatcher::with_default(&dispatch, || {
                vec![
                    tracing::info_span!("call").metadata().unwrap(),
                    tracing::info_span!("transport").metadata().unwrap(),
                    tracing::info_span!("other").metadata().unwrap(),
                    tracing::info_span!("other", stage = "infer")
                        .metadata()
                        .unwrap(),
                ]
            });
        let names = names();
        for &m in &metas {
            let fresh = names.classify(m);
            // Before registration: computed, not cached.
            assert_eq!(names.callsites.get(m), None);
            assert_eq!(names.class(m), fresh);
            assert_eq!(names.register(m), fresh);
            assert_eq!(names.callsites.get(m), Some(fresh));
            assert_eq!(names.class(m), fresh);
        }
        let c = |i: usize| names.class(metas[i]);
        assert_eq!(c(0).role(), Some(Role::Call));
        assert_eq!(c(1).role(), Some(Role::Stage(Stage::Transport)));
        assert_eq!(c(2).role(), None);
        assert!(!c(2).interesting());
        assert!(c(3).stage_field() && c(3).interesting() && c(3).role().is_none());
    }

    #[test]
    fn a_full_callsite_table_falls_back_to_classifying() {
        // More callsites than probes can place in one neighbourhood: every
        // lookup still returns the right class (cached or computed).
        let names = names();
        let metas: Vec<&'static Metadata<'static>> = (0..CALLSITE_SLOTS + 64)
            .map(|i| {
                let name: &'static str = match i % 3 {
                    0 => "capture",
                    1 => "call",
                    _ => Box::leak(format!("span{i}").into_boxed_str()),
                };
                let meta: &'static Metadata<'static> = Box::leak(Box::new(Metadata::new(
                    name,
                    "test",
                    tracing::Level::INFO,
                    None,
                    None,
                    None,
                    tracing_core::field::FieldSet::new(&[], tracing_core::identify_callsite!(&CS)),
                    tracing_core::metadata::Kind::SPAN,
                )));
                meta
            })
            .collect();
        for &m in &metas {
            names.register(m);
        }
        let cached = metas
            .iter()
            .filter(|m| names.callsites.get(m).is_some())
            .count();
        assert!(cached > CALLSITE_SLOTS / 2 && cached <= CALLSITE_SLOTS);
        for (i, &m) in metas.iter().enumerate() {
            let want = match i % 3 {
                0 => Some(Role::Stage(Stage::Capture)),
                1 => Some(Role::Call),
                _ => None,
            };
            assert_eq!(names.class(m), Class::new(want, false), "{i}");
        }
    }

    struct TestCallsite;
    static CS: TestCallsite = TestCallsite;
    impl tracing_core::Callsite for TestCallsite {
        fn set_interest(&self, _: Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unreachable!("not registered")
        }
    }
}
