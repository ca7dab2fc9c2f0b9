//! What a span's close does: a stage adds its time to the call it found
//! when it opened; a call becomes one fixed-size message on the queue to
//! the worker.

use std::sync::atomic::Ordering;

use tracing_core::{span, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::live::Membership;
use super::span_state::{Enclosing, SpanState, TransportState};
use super::StageLayer;
use crate::call_state::{CallState, TransportAcc};
use crate::health::Health;
use crate::message::{Msg, RawCall};
use crate::stage::Stage;
use crate::stamp::{self, Stamp};
use crate::thread_sample::RunWaitMark;

/// What a closed stage span hands to its call.
struct ClosedStage<'a> {
    stage: Stage,
    start: Stamp,
    observer_ticks: u64,
    /// A dispatch span's id (0 for the others).
    dispatch_id: u64,
    transport: Option<&'a mut TransportState>,
    /// The thread's run-queue wait inside the span (a robot's own stage,
    /// opened and closed on one thread, with host figures on).
    run_wait_ns: Option<u64>,
    /// The call it belongs to.
    to: Enclosing,
}

impl StageLayer {
    /// `on_close` of a span the table says is tracked (at `found`) or may
    /// be (its state in the registry). Kept out of line: the app's own
    /// spans cost `on_close` one probe of the table, not this call's frame.
    #[inline(never)]
    pub(super) fn close<S>(&self, id: &span::Id, found: Membership, ctx: &Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let raw = id.into_u64();
        let closed = match found {
            Membership::Tracked(slot) => self
                .live
                .remove_at(slot, raw, |state| self.closed(state, ctx)),
            other => Err(other),
        };
        let Err(Membership::Unknown) = closed else {
            return;
        };
        // Some spans' state is in the registry (the table was full): this
        // may be one of them.
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(state) = ext.get_mut::<SpanState>() {
            self.live.overflowed_closed(id.into_u64());
            self.closed(state, ctx);
        }
    }

    /// A tracked span closed with `state`.
    #[inline]
    fn closed<S>(&self, state: &mut SpanState, ctx: &Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let end = stamp::now();
        let mut closed = match state {
            SpanState::Stage(st) => ClosedStage {
                stage: st.stage,
                start: st.start,
                observer_ticks: st.observer_ticks,
                dispatch_id: st.span_id,
                transport: None,
                run_wait_ns: st.run_wait_at_open.and_then(RunWaitMark::elapsed),
                to: st.to,
            },
            SpanState::Transport(t) => ClosedStage {
                stage: Stage::Transport,
                start: t.start,
                observer_ticks: t.observer_ticks,
                dispatch_id: 0,
                run_wait_ns: None,
                to: t.to,
                transport: Some(t),
            },
            SpanState::Call(call) => return self.finish_call(call, end),
            SpanState::Remote(_) => {
                let _ = self
                    .remote_open
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
                return;
            }
            SpanState::Vacant => return,
        };
        self.credit(&mut closed, end, ctx);
    }

    /// Adds a closed stage to its call; a stage under no call is counted as
    /// ignored.
    #[inline]
    fn credit<S>(&self, closed: &mut ClosedStage<'_>, end: Stamp, ctx: &Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let to = closed.to;
        let credited = to.call.and_then(|home| {
            self.with_home(home, ctx, |state, _| match state {
                SpanState::Call(call) => {
                    add_stage(call, closed, to.nested, end);
                    true
                }
                _ => false,
            })
        });
        if credited != Some(true) {
            Health::bump(&self.health.ignored_spans);
            if to.in_service {
                Health::bump(&self.health.service_spans);
            }
        }
    }

    /// Queues the finished call: one fixed-size message, built from the
    /// call's state where it is kept (one copy, into the queue's slot).
    #[inline]
    fn finish_call(&self, state: &mut CallState, end: Stamp) {
        state.close_host();
        state.observer_ticks = state
            .observer_ticks
            .saturating_add(stamp::now().ticks_since(end));
        // Built in one expression, so the state is copied once on its way
        // to the queue (the executor ack is moved out, not copied).
        let panicking = std::thread::panicking();
        if self
            .tx
            .try_send(Msg::Call(RawCall {
                state: state.take(),
                end,
                panicking,
            }))
            .is_err()
        {
            Health::bump(&self.health.queue_drops);
        }
    }
}

/// Adds one closed stage to its call's state.
#[inline]
fn add_stage(call: &mut CallState, closed: &mut ClosedStage<'_>, nested: bool, end: Stamp) {
    // The first dispatch span is the one exporters draw.
    if call.dispatch_span_id == 0 {
        call.dispatch_span_id = closed.dispatch_id;
    }
    call.add_span(closed.stage, closed.start, end, nested);
    if let Some(t) = closed
        .transport
        .as_deref_mut()
        .filter(|t| call.keeps_transport(t.timing.is_some()))
    {
        // Written in place: a transport's findings are half a call's state.
        call.transport = Some(TransportAcc {
            start: closed.start,
            end,
            span_id: t.span_id,
            timing: t.timing.take(),
            stamps: t.stamps,
        });
        call.relays = t.hops.take();
    }
    // A nested span's wait is inside its outer stage's.
    if let (Some(ns), false) = (closed.run_wait_ns, nested) {
        call.add_stage_run_wait(closed.stage, ns);
    }
    call.observer_ticks = call
        .observer_ticks
        .saturating_add(closed.observer_ticks)
        .saturating_add(stamp::now().ticks_since(end));
}
