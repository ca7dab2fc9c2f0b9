//! A server request as spans: `queue` and `infer` under the client's
//! `transport` span (through the request's `traceparent`), or under a
//! `request` span of their own when it carried none. A relay's or an
//! executor's record goes to `relay.rs`.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{IdGenerator, SpanData};
use stagetrace::{Figure, ServerRecord, ServiceRole};

use super::attributes::{duration_attribute, key};
use super::{unix, SpanMaker};

impl<G: IdGenerator> SpanMaker<G> {
    /// Appends the server's spans for one request to `out`; returns how many.
    ///
    /// With a `traceparent`, `queue` and `infer` become children of the
    /// client's transport span in the client's trace. Without one they hang
    /// under a root `request` span of a trace of their own.
    pub(crate) fn server_spans(&self, rec: &ServerRecord, out: &mut Vec<SpanData>) -> usize {
        match rec.role {
            ServiceRole::Relay => return self.relay_spans(rec, out),
            ServiceRole::Executor => return self.executor_spans(rec, out),
            _ => {}
        }
        let before = out.len();
        let timing = &rec.timing;
        let total_ns = timing.total_ns.unwrap_or(0);
        let recv_ns = timing.recv_unix_ns.unwrap_or_else(|| {
            // No anchor: the record is made right after the response was sent.
            now_unix_ns().saturating_sub(total_ns)
        });
        let error_status = || match &rec.error {
            Some(e) => Status::error(e.clone()),
            None => Status::Unset,
        };
        let (trace_id, parent_id, remote) = match rec.trace_parent {
            Some(tp) if tp.trace_id != [0; 16] && tp.parent_id != [0; 8] => (
                TraceId::from_bytes(tp.trace_id),
                SpanId::from_bytes(tp.parent_id),
                true,
            ),
            _ => {
                let trace_id = self.ids.new_trace_id();
                let root = self.ids.new_span_id();
                let attrs = vec![
                    KeyValue::new(key::KIND, rec.kind.clone()),
                    duration_attribute(Figure::Server, total_ns),
                ];
                out.push(self.span(
                    trace_id,
                    root,
                    SpanId::INVALID,
                    false,
                    "request",
                    SpanKind::Server,
                    (unix(recv_ns), unix(recv_ns.saturating_add(total_ns))),
                    attrs,
                    error_status(),
                ));
                (trace_id, root, false)
            }
        };
        let server_attrs = |stage: Figure, dur_ns: u64| {
            let mut a = vec![
                KeyValue::new(key::STAGE, stage.name()),
                KeyValue::new(key::KIND, rec.kind.clone()),
                duration_attribute(stage, dur_ns),
            ];
            if let Some(total) = timing.total_ns {
                a.push(duration_attribute(Figure::Server, total));
            }
            a
        };

        let queue_ns = timing.queue_ns.unwrap_or(0);
        if let Some(q) = timing.queue_ns {
            out.push(self.span(
                trace_id,
                self.ids.new_span_id(),
                parent_id,
                remote,
                Figure::Queue.name(),
                SpanKind::Server,
                (unix(recv_ns), unix(recv_ns.saturating_add(q))),
                server_attrs(Figure::Queue, q),
                Status::Unset,
            ));
        }
        if let Some(infer) = timing.infer_ns {
            let start = recv_ns.saturating_add(queue_ns);
            let mut attrs = server_attrs(Figure::Infer, infer);
            // Parts of `infer`, in its unit.
            for (k, v) in [(key::PRE_MS, timing.pre_ns), (key::POST_MS, timing.post_ns)] {
                if let Some(v) = v {
                    let ns = i64::try_from(v).unwrap_or(i64::MAX);
                    attrs.push(KeyValue::new(k, Figure::Infer.to_unit(ns)));
                }
            }
            out.push(self.span(
                trace_id,
                self.ids.new_span_id(),
                parent_id,
                remote,
                Figure::Infer.name(),
                SpanKind::Server,
                (unix(start), unix(start.saturating_add(infer))),
                attrs,
                error_status(),
            ));
        }
        if timing.queue_ns.is_none() && timing.infer_ns.is_none() && remote {
            // The server gave only its total: still show where it spent the time.
            let attrs = vec![
                KeyValue::new(key::KIND, rec.kind.clone()),
                duration_attribute(Figure::Server, total_ns),
            ];
            out.push(self.span(
                trace_id,
                self.ids.new_span_id(),
                parent_id,
                remote,
                Figure::Server.name(),
                SpanKind::Server,
                (unix(recv_ns), unix(recv_ns.saturating_add(total_ns))),
                attrs,
                error_status(),
            ));
        }
        out.len() - before
    }
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
