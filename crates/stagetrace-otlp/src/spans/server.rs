//! A server request as spans: `queue` and `infer` under the client's
//! `transport` span (through the request's `traceparent`), or under a
//! `request` span of their own when it carried none. A relay's or an
//! executor's record goes to `relay.rs`.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{IdGenerator, SpanData};
use stagetrace::{record::ServerRecord, record::ServiceRole};
use stagetrace_schema::Figure;

use super::attributes::{duration_attribute, key};
use super::relay::{error_status, remote_parent};
use super::{unix, SpanMaker};

/// Where a request's spans hang: a trace and a parent span in it, remote
/// when it is the client's transport span.
struct Parent {
    trace_id: TraceId,
    span_id: SpanId,
    remote: bool,
}

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
        let parent = self.request_parent(rec, recv_ns, total_ns, out);

        let queue_ns = timing.queue_ns.unwrap_or(0);
        if let Some(q) = timing.queue_ns {
            out.push(self.span(
                parent.trace_id,
                self.ids.new_span_id(),
                parent.span_id,
                parent.remote,
                Figure::Queue.name(),
                SpanKind::Server,
                (unix(recv_ns), unix(recv_ns.saturating_add(q))),
                server_attributes(rec, Figure::Queue, q),
                Status::Unset,
            ));
        }
        if let Some(infer) = timing.infer_ns {
            let start = recv_ns.saturating_add(queue_ns);
            out.push(self.infer_span(rec, &parent, start, infer));
        }
        if timing.queue_ns.is_none() && timing.infer_ns.is_none() && parent.remote {
            // The server gave only its total: still show where it spent the time.
            let attrs = vec![
                KeyValue::new(key::KIND, rec.kind.clone()),
                duration_attribute(Figure::Server, total_ns),
            ];
            out.push(self.span(
                parent.trace_id,
                self.ids.new_span_id(),
                parent.span_id,
                parent.remote,
                Figure::Server.name(),
                SpanKind::Server,
                (unix(recv_ns), unix(recv_ns.saturating_add(total_ns))),
                attrs,
                error_status(rec),
            ));
        }
        out.len() - before
    }

    /// The client's transport span from the request's `traceparent`; without
    /// a valid one, a root `request` span (appended to `out`) of a new trace.
    fn request_parent(
        &self,
        rec: &ServerRecord,
        recv_ns: u64,
        total_ns: u64,
        out: &mut Vec<SpanData>,
    ) -> Parent {
        match remote_parent(rec) {
            Some((trace_id, span_id)) => Parent {
                trace_id,
                span_id,
                remote: true,
            },
            None => {
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
                    error_status(rec),
                ));
                Parent {
                    trace_id,
                    span_id: root,
                    remote: false,
                }
            }
        }
    }

    /// The `infer` span, `infer_ns` long from `start_ns`, with its `pre` and
    /// `post` parts as attributes.
    fn infer_span(
        &self,
        rec: &ServerRecord,
        parent: &Parent,
        start_ns: u64,
        infer_ns: u64,
    ) -> SpanData {
        let timing = &rec.timing;
        let mut attrs = server_attributes(rec, Figure::Infer, infer_ns);
        // Parts of `infer`, in its unit.
        for (k, v) in [(key::PRE_MS, timing.pre_ns), (key::POST_MS, timing.post_ns)] {
            if let Some(v) = v {
                let ns = i64::try_from(v).unwrap_or(i64::MAX);
                attrs.push(KeyValue::new(k, Figure::Infer.to_unit(ns)));
            }
        }
        self.span(
            parent.trace_id,
            self.ids.new_span_id(),
            parent.span_id,
            parent.remote,
            Figure::Infer.name(),
            SpanKind::Server,
            (unix(start_ns), unix(start_ns.saturating_add(infer_ns))),
            attrs,
            error_status(rec),
        )
    }
}

/// The attributes of a server stage span: stage, kind, its duration and the
/// server's total when reported.
fn server_attributes(rec: &ServerRecord, stage: Figure, dur_ns: u64) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new(key::STAGE, stage.name()),
        KeyValue::new(key::KIND, rec.kind.clone()),
        duration_attribute(stage, dur_ns),
    ];
    if let Some(total) = rec.timing.total_ns {
        a.push(duration_attribute(Figure::Server, total));
    }
    a
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
