//! Reaching a span's stage state from outside the layer: the span helpers
//! ([`StageSpanExt`](crate::StageSpanExt)) hold a `tracing::Span`, not the
//! subscriber type, so the layer leaves a [`WithScope`] behind that walks a
//! span's scope in the concrete subscriber.

use std::fmt;

use tracing_core::{span, Dispatch, Subscriber};
use tracing_subscriber::registry::LookupSpan;

use super::live::{LiveSpans, Membership};
use super::span_state::SpanState;

/// Walks the scope of a span, innermost first, handing the state of each
/// span the layer tracks to `f` until it returns `true`. Set when the layer is attached, because
/// only then is the subscriber type known (tracing-opentelemetry's `WithContext`
/// does the same).
#[derive(Clone, Copy)]
pub(crate) struct WithScope(Option<WalkFn>);

impl WithScope {
    /// Not attached yet: set by the layer's `on_layer`.
    pub(crate) fn unset() -> Self {
        WithScope(None)
    }

    pub(crate) fn for_subscriber<S>() -> Self
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        WithScope(Some(walk_scope::<S>))
    }
}

type WalkFn = fn(&Dispatch, &span::Id, &mut dyn FnMut(&mut SpanState) -> bool);

impl fmt::Debug for WithScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WithScope")
    }
}

fn walk_scope<S>(dispatch: &Dispatch, id: &span::Id, f: &mut dyn FnMut(&mut SpanState) -> bool)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let (Some(subscriber), Some(live)) = (
        dispatch.downcast_ref::<S>(),
        dispatch.downcast_ref::<LiveSpans>(),
    ) else {
        return;
    };
    let Some(span) = subscriber.span(id) else {
        return;
    };
    for s in span.scope() {
        let raw = s.id().into_u64();
        let done = match live.find(raw) {
            Membership::Tracked(slot) => live.with(slot, raw, |state| f(state)),
            Membership::Untracked => None,
            Membership::Unknown => s.extensions_mut().get_mut::<SpanState>().map(&mut *f),
        };
        if done == Some(true) {
            return;
        }
    }
}

/// Runs `f` on the state of `span` and its ancestors (those the layer
/// tracks), innermost first, until `f` returns `true`. Does nothing when no stage layer is installed.
///
/// A span no layer enabled (e.g. a non-stage span when stagetrace is the only
/// layer) has no scope of its own: the current span stands in for it.
pub(crate) fn walk(span: &tracing::Span, f: &mut dyn FnMut(&mut SpanState) -> bool) {
    let walk_from =
        |dispatch: &Dispatch, id: &span::Id, f: &mut dyn FnMut(&mut SpanState) -> bool| {
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
