//! Records → OpenTelemetry spans: one trace per call.
//!
//! Client side (a [`CallRecord`]):
//!
//! ```text
//! call                      root, every derived field of the record as attributes
//! ├── capture
//! ├── transport             id = the parent id sent in traceparent
//! │   ├── uplink            synthesized, placed with the clock offset
//! │   ├── (queue, infer)    from the server's own exporter (or synthesized on request)
//! │   └── downlink          synthesized
//! └── dispatch
//! ```
//!
//! Server side (a [`ServerRecord`]): `queue` and `infer`, children of the
//! client's `transport` span through the request's `traceparent`.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{IdGenerator, SpanData, SpanEvents, SpanLinks};
use stagetrace::record::{SpanTime, Timeline};
use stagetrace::schema::{Field, FIELDS};
use stagetrace::{CallRecord, ClockBasis, Figure, ServerRecord};

/// Converts records to spans; holds what every span shares.
#[derive(Debug)]
pub(crate) struct SpanMaker<G> {
    scope: InstrumentationScope,
    ids: G,
    synthesize_server_spans: bool,
}

/// Attribute keys (all under `stagetrace.`).
pub(crate) mod key {
    pub(crate) const STAGE: &str = "stagetrace.stage";
    pub(crate) const KIND: &str = "stagetrace.kind";
    pub(crate) const SEQ: &str = "stagetrace.seq";
    pub(crate) const CLOCK: &str = "stagetrace.clock";
    pub(crate) const SYNTHESIZED: &str = "stagetrace.synthesized";
}

impl<G: IdGenerator> SpanMaker<G> {
    pub(crate) fn new(ids: G, synthesize_server_spans: bool) -> Self {
        SpanMaker {
            scope: InstrumentationScope::builder("stagetrace")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            ids,
            synthesize_server_spans,
        }
    }

    /// Appends the spans of one call to `out`; returns how many.
    pub(crate) fn call_spans(&self, rec: &CallRecord, out: &mut Vec<SpanData>) -> usize {
        let before = out.len();
        let tl = &rec.timeline;
        let trace_id = rec
            .trace_id
            .as_deref()
            .and_then(parse_trace_id)
            .unwrap_or_else(|| self.ids.new_trace_id());
        let call_id = valid_span_id(tl.call_span_id).unwrap_or_else(|| self.ids.new_span_id());
        let (base_ns, call_dur_ns) = call_extent(rec);
        let at = |t: SpanTime| {
            (
                unix(base_ns.saturating_add(t.start_ns)),
                unix(base_ns.saturating_add(t.start_ns).saturating_add(t.dur_ns)),
            )
        };

        if tl.shared_context {
            // The app's own tracing-opentelemetry layer exports the call and
            // its stage spans under these very ids; add only what it cannot
            // know, under its transport span: the clock-corrected uplink and
            // downlink, carrying the whole record (the call span that
            // carries it otherwise is not ours to write).
            if let (Some(transport_id), Some(_)) =
                (valid_span_id(tl.transport_span_id), tl.transport)
            {
                let mut record = Vec::new();
                record_attributes(rec, &mut record);
                self.link_spans(rec, trace_id, transport_id, &at, &record, out);
                self.queue_infer_spans(rec, trace_id, None, transport_id, &at, out);
            }
            return out.len() - before;
        }

        // The call span carries the whole record.
        let mut attrs = vec![
            KeyValue::new(key::KIND, rec.kind.clone()),
            KeyValue::new(key::SEQ, seq_value(rec.seq)),
        ];
        record_attributes(rec, &mut attrs);
        let status = match (rec.failed, &rec.error) {
            (Some(true), Some(e)) => Status::error(e.clone()),
            (Some(true), None) => Status::error("call failed"),
            _ => Status::Unset,
        };
        out.push(self.span(
            trace_id,
            call_id,
            SpanId::INVALID,
            false,
            "call",
            SpanKind::Internal,
            (unix(base_ns), unix(base_ns.saturating_add(call_dur_ns))),
            attrs,
            status,
        ));

        let stage_attrs =
            |stage: &'static str, extra: &[Figure]| stage_attributes(rec, stage, extra);

        if let Some(t) = tl.capture {
            let attrs = stage_attrs("capture", &[Figure::Capture]);
            out.push(self.child(
                trace_id,
                call_id,
                "capture",
                SpanKind::Internal,
                at(t),
                attrs,
            ));
        }

        // The id sent as the parent in traceparent, so the server's spans join here.
        let transport_id =
            valid_span_id(tl.transport_span_id).unwrap_or_else(|| self.ids.new_span_id());
        if let Some(t) = tl.transport {
            {
                let attrs = stage_attrs(
                    "transport",
                    &[Figure::Roundtrip, Figure::Server, Figure::Net],
                );
                let status = if rec.failed == Some(true) {
                    Status::error(rec.error.clone().unwrap_or_else(|| "call failed".into()))
                } else {
                    Status::Unset
                };
                out.push(self.span(
                    trace_id,
                    transport_id,
                    call_id,
                    false,
                    "transport",
                    SpanKind::Client,
                    at(t),
                    attrs,
                    status,
                ));
                self.link_spans(rec, trace_id, transport_id, &at, &[], out);
            }
        }

        self.queue_infer_spans(rec, trace_id, Some(call_id), transport_id, &at, out);

        if let Some(t) = tl.dispatch {
            let attrs = stage_attrs("dispatch", &[Figure::Dispatch]);
            out.push(self.child(
                trace_id,
                call_id,
                "dispatch",
                SpanKind::Internal,
                at(t),
                attrs,
            ));
        }
        out.len() - before
    }

    /// `queue` / `infer`. Inside the transport they ran on the server: its own
    /// exporter sends them, unless asked to draw them here or the server is
    /// an unmodified one (degraded timing) that exports nothing. Outside a
    /// transport they ran in this process (local inference): children of
    /// `local_parent`, skipped when `None` (another layer exports them).
    fn queue_infer_spans(
        &self,
        rec: &CallRecord,
        trace_id: TraceId,
        local_parent: Option<SpanId>,
        transport_id: SpanId,
        at: &dyn Fn(SpanTime) -> (SystemTime, SystemTime),
        out: &mut Vec<SpanData>,
    ) {
        let tl = &rec.timeline;
        let synthesize = self.synthesize_server_spans || rec.clock == Some(ClockBasis::Degraded);
        for (name, time, figure) in [
            ("queue", tl.queue, Figure::Queue),
            ("infer", tl.infer, Figure::Infer),
        ] {
            let Some(time) = time else { continue };
            let on_server = tl.transport.is_some_and(|tr| {
                time.start_ns >= tr.start_ns
                    && time.start_ns <= tr.start_ns.saturating_add(tr.dur_ns)
            });
            let (parent, attrs) = if !on_server {
                let Some(parent) = local_parent else { continue };
                (parent, stage_attributes(rec, name, &[figure]))
            } else if synthesize {
                let mut attrs = stage_attributes(rec, name, &[figure, Figure::Offset]);
                attrs.push(KeyValue::new(key::SYNTHESIZED, true));
                (transport_id, attrs)
            } else {
                continue;
            };
            out.push(self.child(trace_id, parent, name, SpanKind::Internal, at(time), attrs));
        }
    }

    /// The synthesized `uplink` and `downlink` spans, children of the
    /// transport span `transport_id`, with `extra` attributes added.
    fn link_spans(
        &self,
        rec: &CallRecord,
        trace_id: TraceId,
        transport_id: SpanId,
        at: &dyn Fn(SpanTime) -> (SystemTime, SystemTime),
        extra: &[KeyValue],
        out: &mut Vec<SpanData>,
    ) {
        let tl = &rec.timeline;
        for (name, time, figure) in [
            ("uplink", tl.uplink, Figure::Uplink),
            ("downlink", tl.downlink, Figure::Downlink),
        ] {
            let Some(time) = time else { continue };
            let mut attrs =
                stage_attributes(rec, name, &[figure, Figure::Offset, Figure::SplitErr]);
            if let Some(clock) = clock_name(rec) {
                attrs.push(KeyValue::new(key::CLOCK, clock));
            }
            attrs.push(KeyValue::new(key::SYNTHESIZED, true));
            for kv in extra {
                if !attrs.iter().any(|a| a.key == kv.key) {
                    attrs.push(kv.clone());
                }
            }
            out.push(self.child(
                trace_id,
                transport_id,
                name,
                SpanKind::Internal,
                at(time),
                attrs,
            ));
        }
    }

    /// Appends the server's spans for one request to `out`; returns how many.
    ///
    /// With a `traceparent`, `queue` and `infer` become children of the
    /// client's transport span in the client's trace. Without one they hang
    /// under a root `request` span of a trace of their own.
    pub(crate) fn server_spans(&self, rec: &ServerRecord, out: &mut Vec<SpanData>) -> usize {
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
                    KeyValue::new("stagetrace.server_ms", ns_to_ms(total_ns)),
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
        let server_attrs = |stage: &'static str, dur_ns: u64| {
            let mut a = vec![
                KeyValue::new(key::STAGE, stage),
                KeyValue::new(key::KIND, rec.kind.clone()),
                KeyValue::new(format!("stagetrace.{stage}_ms"), ns_to_ms(dur_ns)),
            ];
            if let Some(total) = timing.total_ns {
                a.push(KeyValue::new("stagetrace.server_ms", ns_to_ms(total)));
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
                "queue",
                SpanKind::Server,
                (unix(recv_ns), unix(recv_ns.saturating_add(q))),
                server_attrs("queue", q),
                Status::Unset,
            ));
        }
        if let Some(infer) = timing.infer_ns {
            let start = recv_ns.saturating_add(queue_ns);
            let mut attrs = server_attrs("infer", infer);
            for (k, v) in [
                ("stagetrace.pre_ms", timing.pre_ns),
                ("stagetrace.post_ms", timing.post_ns),
            ] {
                if let Some(v) = v {
                    attrs.push(KeyValue::new(k, ns_to_ms(v)));
                }
            }
            out.push(self.span(
                trace_id,
                self.ids.new_span_id(),
                parent_id,
                remote,
                "infer",
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
                KeyValue::new("stagetrace.server_ms", ns_to_ms(total_ns)),
            ];
            out.push(self.span(
                trace_id,
                self.ids.new_span_id(),
                parent_id,
                remote,
                "server",
                SpanKind::Server,
                (unix(recv_ns), unix(recv_ns.saturating_add(total_ns))),
                attrs,
                error_status(),
            ));
        }
        out.len() - before
    }

    fn child(
        &self,
        trace_id: TraceId,
        parent: SpanId,
        name: &'static str,
        kind: SpanKind,
        times: (SystemTime, SystemTime),
        attrs: Vec<KeyValue>,
    ) -> SpanData {
        self.span(
            trace_id,
            self.ids.new_span_id(),
            parent,
            false,
            name,
            kind,
            times,
            attrs,
            Status::Unset,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn span(
        &self,
        trace_id: TraceId,
        span_id: SpanId,
        parent: SpanId,
        parent_is_remote: bool,
        name: &'static str,
        kind: SpanKind,
        (start_time, end_time): (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
        status: Status,
    ) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                trace_id,
                span_id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: parent_is_remote,
            span_kind: kind,
            name: Cow::Borrowed(name),
            start_time,
            end_time,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        }
    }
}

/// Every field of the public record (bar the ones that are the span's own
/// identity) as `stagetrace.<field>` attributes, so fields added to the
/// record later are exported too.
/// A stage span's attributes: its stage, the call's kind and seq, and the
/// `extra` figures that the record has.
fn stage_attributes(rec: &CallRecord, stage: &'static str, extra: &[Figure]) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new(key::STAGE, stage),
        KeyValue::new(key::KIND, rec.kind.clone()),
        KeyValue::new(key::SEQ, seq_value(rec.seq)),
    ];
    for f in extra {
        if let Some(ns) = rec.get(*f) {
            a.push(KeyValue::new(figure_key(*f), f.to_unit(ns)));
        }
    }
    a
}

/// `stagetrace.<record field name>` (`stagetrace.infer_ms`).
fn figure_key(f: Figure) -> String {
    format!("stagetrace.{}", f.field())
}

/// Every field of the public record the record has (bar the ones that are
/// the span's own identity) as `stagetrace.<field>` attributes, in the
/// record's units, read from the schema's field table: a field added to the
/// record is exported too.
fn record_attributes(rec: &CallRecord, out: &mut Vec<KeyValue>) {
    for info in &FIELDS {
        let value: Value = match info.field {
            Field::Seq | Field::Kind | Field::TraceId => continue,
            Field::TsUnix => Value::F64(rec.ts_unix_ms()),
            Field::Figure(f) => match rec.get(f) {
                Some(ns) => Value::F64(f.to_unit(ns)),
                None => continue,
            },
            Field::Clock => match clock_name(rec) {
                Some(c) => Value::String(c.into()),
                None => continue,
            },
            Field::DeadlineMiss => match rec.deadline_miss {
                Some(b) => Value::Bool(b),
                None => continue,
            },
            Field::Warmup => match rec.warmup {
                Some(b) => Value::Bool(b),
                None => continue,
            },
            Field::Failed => match rec.failed {
                Some(b) => Value::Bool(b),
                None => continue,
            },
            Field::Error => match &rec.error {
                Some(e) => Value::String(e.clone().into()),
                None => continue,
            },
            Field::OutputDigest => match &rec.output_digest {
                Some(d) => Value::String(d.clone().into()),
                None => continue,
            },
            Field::BatchSize => match rec.batch_size {
                Some(n) => Value::I64(i64::from(n)),
                None => continue,
            },
            Field::Cache => match rec.cache {
                Some(c) => Value::String(c.as_str().into()),
                None => continue,
            },
            Field::StaleDropped => match rec.stale_dropped {
                Some(n) => Value::I64(i64::from(n)),
                None => continue,
            },
        };
        out.push(KeyValue::new(format!("stagetrace.{}", info.name), value));
    }
}

fn clock_name(rec: &CallRecord) -> Option<&'static str> {
    rec.clock.map(|c| match c {
        ClockBasis::Estimate => "estimate",
        ClockBasis::Trusted => "trusted",
        ClockBasis::None => "none",
        ClockBasis::Degraded => "degraded",
    })
}

/// Start (Unix ns) and duration of the call span: from the timeline, or from
/// the record's own fields when the timeline was not filled in.
fn call_extent(rec: &CallRecord) -> (u64, u64) {
    let tl: &Timeline = &rec.timeline;
    let start = if tl.call_start_unix_ns > 0 {
        tl.call_start_unix_ns
    } else {
        rec.ts_unix_ns
    };
    let dur = if tl.call_dur_ns > 0 {
        tl.call_dur_ns
    } else {
        u64::try_from(rec.e2e_ns()).unwrap_or(0)
    };
    (start, dur)
}

fn seq_value(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

fn ns_to_ms(ns: u64) -> f64 {
    // µs resolution, as in the record.
    (ns as f64 / 1e3).round() / 1e3
}

fn unix(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn valid_span_id(id: Option<[u8; 8]>) -> Option<SpanId> {
    id.filter(|b| *b != [0; 8]).map(SpanId::from_bytes)
}

/// 32 lowercase (or uppercase) hex digits, not all zero.
pub(crate) fn parse_trace_id(hex: &str) -> Option<TraceId> {
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let v = u128::from_str_radix(hex, 16).ok()?;
    (v != 0).then(|| TraceId::from(v))
}
