//! The spans of the services between the client and the policy server and
//! at the end of the dispatch, each exported by that service under its own
//! `service.name`, from its own [`ServerRecord`]:
//!
//! ```text
//! client transport ─┬─ relay (the gateway; SERVER, child of the caller's span)
//!                   │  └── forward (CLIENT; id = the parent id it sent on:
//!                   │       └── the policy server's queue / infer, or the next relay)
//! client dispatch ──┴─ exec_wait (the executor; SERVER, child of the robot's dispatch)
//! ```
//!
//! A record without a trace context starts a trace of its own, rooted at
//! the relay's span (or the executor's).

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{IdGenerator, SpanData};
use stagetrace::{record::ServerRecord, record::ServiceRole};
use stagetrace_schema::Figure;

use super::attributes::{duration_attribute, key};
use super::{unix, SpanMaker};

/// The caller's trace and span a record's spans join, when it carried a
/// valid context.
pub(super) fn remote_parent(rec: &ServerRecord) -> Option<(TraceId, SpanId)> {
    let tp = rec.trace_parent?;
    (tp.trace_id != [0; 16] && tp.parent_id != [0; 8]).then(|| {
        (
            TraceId::from_bytes(tp.trace_id),
            SpanId::from_bytes(tp.parent_id),
        )
    })
}

/// The status of a record's spans that its error ends: error or unset.
pub(super) fn error_status(rec: &ServerRecord) -> Status {
    match &rec.error {
        Some(e) => Status::error(e.clone()),
        None => Status::Unset,
    }
}

/// The `stagetrace.role` value of a record.
pub(super) fn role_name(role: ServiceRole) -> &'static str {
    match role {
        ServiceRole::Relay => "relay",
        ServiceRole::Executor => "executor",
        _ => "policy_server",
    }
}

impl<G: IdGenerator> SpanMaker<G> {
    /// The trace and parent of a record's top span: the caller's, or a new
    /// trace whose root it is.
    fn join(&self, rec: &ServerRecord) -> (TraceId, SpanId, bool) {
        match remote_parent(rec) {
            Some((trace, parent)) => (trace, parent, true),
            None => (self.ids.new_trace_id(), SpanId::INVALID, false),
        }
    }

    /// A relay's request: `relay` (received → reply sent, its clock) and,
    /// when it forwarded, `forward` (request handed on → downstream's reply
    /// in) with the id it sent downstream, so the downstream's spans hang
    /// under it. Returns how many spans.
    pub(super) fn relay_spans(&self, rec: &ServerRecord, out: &mut Vec<SpanData>) -> usize {
        let t = &rec.timing;
        let (Some(recv), Some(total)) = (t.recv_unix_ns, t.total_ns) else {
            return 0;
        };
        let (trace_id, parent, remote) = self.join(rec);
        let relay_id = self.ids.new_span_id();
        let kind = KeyValue::new(key::KIND, rec.kind.clone());
        let role = KeyValue::new(key::ROLE, role_name(rec.role));
        let mut attrs = vec![kind.clone(), role.clone()];
        // Its own time: received → forwarded, reply in → reply sent.
        let own = rec.forward.map_or(total, |f| {
            f.forward_ns
                .saturating_add(total.saturating_sub(f.reply_ns.min(total)))
        });
        attrs.push(duration_attribute(Figure::Relay, own));
        out.push(self.span(
            trace_id,
            relay_id,
            parent,
            remote,
            "relay",
            SpanKind::Server,
            (unix(recv), unix(recv.saturating_add(total))),
            attrs,
            error_status(rec),
        ));
        let Some(f) = rec.forward else {
            return 1;
        };
        let forward_id = f
            .span_id
            .filter(|id| *id != [0; 8])
            .map_or_else(|| self.ids.new_span_id(), SpanId::from_bytes);
        let (from, to) = (f.forward_ns.min(total), f.reply_ns.min(total));
        out.push(self.span(
            trace_id,
            forward_id,
            relay_id,
            false,
            "forward",
            SpanKind::Client,
            (
                unix(recv.saturating_add(from)),
                unix(recv.saturating_add(to.max(from))),
            ),
            vec![kind, role],
            Status::Unset,
        ));
        2
    }

    /// An executor's chunk: `exec_wait` (whole chunk in → execution
    /// started, its clock), under the robot's `dispatch` span. A chunk it
    /// never started (dropped, or the controller stopped) is one
    /// `executor` span over its whole time instead. Returns how many spans.
    pub(super) fn executor_spans(&self, rec: &ServerRecord, out: &mut Vec<SpanData>) -> usize {
        let t = &rec.timing;
        let Some(recv) = t.recv_unix_ns else {
            return 0;
        };
        let (trace_id, parent, remote) = self.join(rec);
        let mut attrs = vec![
            KeyValue::new(key::KIND, rec.kind.clone()),
            KeyValue::new(key::ROLE, role_name(rec.role)),
        ];
        let (name, dur) = match t.queue_ns {
            Some(wait) => {
                attrs.push(KeyValue::new(key::STAGE, Figure::ExecWait.name()));
                attrs.push(duration_attribute(Figure::ExecWait, wait));
                (Figure::ExecWait.name(), wait)
            }
            None => ("executor", t.total_ns.unwrap_or(0)),
        };
        out.push(self.span(
            trace_id,
            self.ids.new_span_id(),
            parent,
            remote,
            name,
            SpanKind::Server,
            (unix(recv), unix(recv.saturating_add(dur))),
            attrs,
            error_status(rec),
        ));
        1
    }
}
