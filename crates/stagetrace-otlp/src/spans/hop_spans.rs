//! The client's synthesized network spans of the services in the middle and
//! at the end of a call's path: one per hop through relays (gateways),
//! under the path's `uplink` / `downlink`, and the way to and from a remote
//! executor under `dispatch`. Each is named after its hop, so the trace view
//! says which one it is: `uplink client → gateway`, `uplink gateway →
//! server`, `downlink server → gateway`, `downlink gateway → client`;
//! `uplink client → executor`, `ack executor → client`.

use std::time::SystemTime;

use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{IdGenerator, SpanData};
use stagetrace::record::SpanTime;
use stagetrace::{hop_record::HopFigures, record::CallRecord};
use stagetrace_schema::Figure;
use stagetrace_schema::HOP_KEYS;

use super::attributes::{key, stage_attributes};
use super::SpanMaker;

/// The node at each end of hop `i` of `hops` (client, gateways, server).
fn node(i: usize, hops: usize) -> String {
    match i {
        0 => "client".to_owned(),
        i if i == hops => "server".to_owned(),
        // One gateway needs no number.
        _ if hops == 2 => "gateway".to_owned(),
        i => format!("gateway {i}"),
    }
}

/// The name of hop `i`'s span in `direction` (`uplink` / `downlink`).
pub(super) fn hop_span_name(direction: Figure, i: usize, hops: usize) -> String {
    let (near, far) = (node(i, hops), node(i + 1, hops));
    match direction {
        Figure::Downlink => format!("downlink {far} → {near}"),
        _ => format!("uplink {near} → {far}"),
    }
}

/// A hop's figures as `stagetrace.hop.<key>` attributes (the record's
/// `hops[i]` keys and units), with its index.
fn hop_attributes(i: usize, h: &HopFigures, out: &mut Vec<KeyValue>) {
    out.push(KeyValue::new(
        key::HOP,
        i64::try_from(i).unwrap_or(i64::MAX),
    ));
    let ns = [
        h.up_ns,
        h.down_ns,
        h.net_ns,
        h.relay_ns,
        h.offset_ns,
        h.err_ns,
    ];
    for (name, v) in HOP_KEYS.iter().zip(ns) {
        if let Some(v) = v {
            out.push(KeyValue::new(
                format!("{}.{name}", key::HOP),
                Value::F64(Figure::Net.to_unit(v)),
            ));
        }
    }
}

impl<G: IdGenerator> SpanMaker<G> {
    /// Hop by hop, the request's way (`direction` = uplink) or the
    /// reply's (downlink) through the record's relays, as children of the
    /// path's span `parent`. Nothing for a direct call.
    pub(super) fn hop_spans(
        &self,
        rec: &CallRecord,
        trace_id: TraceId,
        parent: SpanId,
        direction: Figure,
        at: &dyn Fn(SpanTime) -> (SystemTime, SystemTime),
        out: &mut Vec<SpanData>,
    ) {
        let hops = rec.hops.len();
        for (i, (h, place)) in rec.hops.iter().zip(rec.timeline.hops).enumerate() {
            let time = match direction {
                Figure::Downlink => place.down,
                _ => place.up,
            };
            let Some(time) = time else { continue };
            let mut attrs = stage_attributes(rec, direction.name(), &[]);
            hop_attributes(i, h, &mut attrs);
            attrs.push(KeyValue::new(key::SYNTHESIZED, true));
            out.push(self.child(
                trace_id,
                parent,
                hop_span_name(direction, i, hops),
                SpanKind::Internal,
                at(time),
                attrs,
            ));
        }
    }

    /// A remote executor's hops under the `dispatch` span `parent`: the
    /// chunk's way (`exec_tx`: the dispatch's start → the executor has the
    /// chunk, placed with the executor's clock offset) and the ack's way
    /// back (`exec_ack`: the executor's start → the dispatch span's end).
    /// The executor's own wait between them is the executor's span.
    pub(super) fn executor_hop_spans(
        &self,
        rec: &CallRecord,
        trace_id: TraceId,
        parent: SpanId,
        at: &dyn Fn(SpanTime) -> (SystemTime, SystemTime),
        out: &mut Vec<SpanData>,
    ) {
        let tl = &rec.timeline;
        let (Some(span), Some(tx), Some(dispatch)) = (
            tl.dispatch,
            rec.get(Figure::ExecTx),
            rec.get(Figure::Dispatch),
        ) else {
            return;
        };
        let ns = |v: i64| u64::try_from(v).unwrap_or(0);
        let end = span.start_ns.saturating_add(span.dur_ns);
        let started = span.start_ns.saturating_add(ns(dispatch)).min(end);
        let tx_end = span.start_ns.saturating_add(ns(tx)).min(started);
        let clock = [Figure::ExecOffset, Figure::ExecErr];
        let parts = [
            (
                "uplink client → executor",
                Figure::ExecTx,
                span.start_ns,
                tx_end,
            ),
            ("ack executor → client", Figure::ExecAck, started, end),
        ];
        for (name, figure, from, to) in parts {
            let mut figures = vec![figure];
            figures.extend(clock);
            let mut attrs = stage_attributes(rec, figure.name(), &figures);
            attrs.push(KeyValue::new(key::SYNTHESIZED, true));
            let time = SpanTime {
                start_ns: from,
                dur_ns: to - from,
            };
            out.push(self.child(trace_id, parent, name, SpanKind::Internal, at(time), attrs));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_are_named_by_their_ends() {
        assert_eq!(
            hop_span_name(Figure::Uplink, 0, 2),
            "uplink client → gateway"
        );
        assert_eq!(
            hop_span_name(Figure::Uplink, 1, 2),
            "uplink gateway → server"
        );
        assert_eq!(
            hop_span_name(Figure::Downlink, 1, 2),
            "downlink server → gateway"
        );
        assert_eq!(
            hop_span_name(Figure::Downlink, 0, 2),
            "downlink gateway → client"
        );
        assert_eq!(
            hop_span_name(Figure::Uplink, 1, 3),
            "uplink gateway 1 → gateway 2"
        );
        assert_eq!(
            hop_span_name(Figure::Downlink, 2, 3),
            "downlink server → gateway 2"
        );
    }
}
