//! A client call as spans: `call`, its stages, and under `transport` the
//! synthesized `uplink` / `downlink` (and, on request, `queue` / `infer`),
//! or, for a server that reports no timing, the black box cut at the
//! response's first byte: `ttfb (black box)` and `rx`.

use std::time::SystemTime;

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{IdGenerator, SpanData};
use stagetrace::record::{SpanTime, Timeline};
use stagetrace::{record::CallRecord, record::ClockBasis};
use stagetrace_schema::Figure;
use stagetrace_schema::BLACK_BOX_NOTE;

use super::attributes::{clock_name, key, record_attributes, seq_value, stage_attributes};
use super::{unix, SpanMaker};

impl<G: IdGenerator> SpanMaker<G> {
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
            self.shared_context_spans(rec, trace_id, &at, out);
            return out.len() - before;
        }

        let call_time = (unix(base_ns), unix(base_ns.saturating_add(call_dur_ns)));
        out.push(self.call_span(rec, trace_id, call_id, call_time));

        if let Some(t) = tl.capture {
            let f = Figure::Capture;
            let attrs = stage_attributes(rec, f.name(), &[f]);
            out.push(self.child(
                trace_id,
                call_id,
                f.name(),
                SpanKind::Internal,
                at(t),
                attrs,
            ));
        }

        // The id sent as the parent in traceparent, so the server's spans join here.
        let transport_id =
            valid_span_id(tl.transport_span_id).unwrap_or_else(|| self.ids.new_span_id());
        self.transport_spans(rec, trace_id, call_id, transport_id, &at, out);
        self.queue_infer_spans(rec, trace_id, Some(call_id), transport_id, &at, out);
        self.dispatch_spans(rec, trace_id, call_id, &at, out);
        out.len() - before
    }

    /// The spans of a call whose app exports the call and its stage spans
    /// itself (`shared_context`), under those very ids.
    fn shared_context_spans(
        &self,
        rec: &CallRecord,
        trace_id: TraceId,
        at: &dyn Fn(SpanTime) -> (SystemTime, SystemTime),
        out: &mut Vec<SpanData>,
    ) {
        let tl = &rec.timeline;
        // The app's own tracing-opentelemetry layer exports the call and
        // its stage spans under these very ids; add only what it cannot
        // know, under its transport span: the clock-corrected uplink and
        // downlink, carrying the whole record (the call span that
        // carries it otherwise is not ours to write).
        if let (Some(transport_id), Some(_)) = (valid_span_id(tl.transport_span_id), tl.transport) {
            let mut record = Vec::new();
            record_attributes(rec, &mut record);
            self.link_spans(rec, trace_id, transport_id, at, &record, out);
            self.black_box_spans(rec, trace_id, transport_id, at, out);
            self.queue_infer_spans(rec, trace_id, None, transport_id, at, out);
        }
        if let Some(dispatch_id) = valid_span_id(tl.dispatch_span_id) {
            self.executor_hop_spans(rec, trace_id, dispatch_id, at, out);
        }
    }

    /// The root `call` span, `call_id`, spanning `time`: it carries the
    /// whole record.
    fn call_span(
        &self,
        rec: &CallRecord,
        trace_id: TraceId,
        call_id: SpanId,
        time: (SystemTime, SystemTime),
    ) -> SpanData {
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
        self.span(
            trace_id,
            call_id,
            SpanId::INVALID,
            false,
            "call",
            SpanKind::Internal,
            time,
            attrs,
            status,
        )
    }

    /// The `transport` span `transport_id` under the call, with its
    /// synthesized hops and black box; nothing when the call has no
    /// transport.
    fn transport_spans(
        &self,
        rec: &CallRecord,
        trace_id: TraceId,
        call_id: SpanId,
        transport_id: SpanId,
        at: &dyn Fn(SpanTime) -> (SystemTime, SystemTime),
        out: &mut Vec<SpanData>,
    ) {
        let Some(t) = rec.timeline.transport else {
            return;
        };
        let attrs = stage_attributes(
            rec,
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
        self.link_spans(rec, trace_id, transport_id, at, &[], out);
        self.black_box_spans(rec, trace_id, transport_id, at, out);
    }

    /// The `dispatch` span under the call and its executor's hops;
    /// nothing when the call dispatched nothing.
    fn dispatch_spans(
        &self,
        rec: &CallRecord,
        trace_id: TraceId,
        call_id: SpanId,
        at: &dyn Fn(SpanTime) -> (SystemTime, SystemTime),
        out: &mut Vec<SpanData>,
    ) {
        let Some(t) = rec.timeline.dispatch else {
            return;
        };
        let f = Figure::Dispatch;
        // A remote executor's split of it, where the record has one.
        let attrs = stage_attributes(rec, f.name(), &[f, Figure::ExecTx, Figure::ExecWait]);
        // The id sent to a remote executor, so its spans join here.
        let dispatch_id =
            valid_span_id(rec.timeline.dispatch_span_id).unwrap_or_else(|| self.ids.new_span_id());
        out.push(self.span(
            trace_id,
            dispatch_id,
            call_id,
            false,
            f.name(),
            SpanKind::Internal,
            at(t),
            attrs,
            Status::Unset,
        ));
        self.executor_hop_spans(rec, trace_id, dispatch_id, at, out);
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
        for (figure, time) in [(Figure::Queue, tl.queue), (Figure::Infer, tl.infer)] {
            let Some(time) = time else { continue };
            let name = figure.name();
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
        for (figure, time) in [(Figure::Uplink, tl.uplink), (Figure::Downlink, tl.downlink)] {
            let Some(time) = time else { continue };
            let name = figure.name();
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
            // Through relays: each hop of the path under it.
            let path = out.last().map(|s| s.span_context.span_id());
            self.hop_spans(rec, trace_id, path.unwrap_or(transport_id), figure, at, out);
        }
        if rec.timeline.uplink.is_none() && rec.timeline.downlink.is_none() {
            // Hops the clocks split though the whole path's split is
            // missing: under the transport.
            for figure in [Figure::Uplink, Figure::Downlink] {
                self.hop_spans(rec, trace_id, transport_id, figure, at, out);
            }
        }
    }

    /// A silent server's roundtrip cut at the response's first byte, as
    /// two children of the transport span `transport_id`: `ttfb (black
    /// box)`, labelled as server and network together (never `infer`), and
    /// `rx`, the response's transfer. Only when the record has `ttfb`.
    fn black_box_spans(
        &self,
        rec: &CallRecord,
        trace_id: TraceId,
        transport_id: SpanId,
        at: &dyn Fn(SpanTime) -> (SystemTime, SystemTime),
        out: &mut Vec<SpanData>,
    ) {
        let tl = &rec.timeline;
        let (Some(tr), Some(fb), Some(_)) = (
            tl.transport,
            tl.response_first_byte_ns,
            rec.get(Figure::Ttfb),
        ) else {
            return;
        };
        let end = tr.start_ns.saturating_add(tr.dur_ns);
        let fb = fb.clamp(tr.start_ns, end);
        let parts = [
            (Figure::Ttfb, BLACK_BOX_SPAN, tr.start_ns, fb),
            (Figure::Rx, Figure::Rx.name(), fb, end),
        ];
        for (figure, name, from, to) in parts {
            let mut attrs = stage_attributes(rec, figure.name(), &[figure]);
            attrs.push(KeyValue::new(key::SYNTHESIZED, true));
            if figure == Figure::Ttfb {
                attrs.push(KeyValue::new(key::BLACK_BOX, BLACK_BOX_NOTE));
            }
            let time = SpanTime {
                start_ns: from,
                dur_ns: to - from,
            };
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
}

/// Name of the span of a silent server's wait for the first byte: labelled
/// in the trace view itself, where a bare `ttfb` could pass for a stage.
pub const BLACK_BOX_SPAN: &str = "ttfb (black box)";

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

fn valid_span_id(id: Option<[u8; 8]>) -> Option<SpanId> {
    id.filter(|b| *b != [0; 8]).map(SpanId::from_bytes)
}

/// 32 lowercase (or uppercase) hex digits, not all zero.
fn parse_trace_id(hex: &str) -> Option<TraceId> {
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let v = u128::from_str_radix(hex, 16).ok()?;
    (v != 0).then(|| TraceId::from(v))
}
