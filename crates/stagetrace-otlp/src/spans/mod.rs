//! Records → OpenTelemetry spans: one trace per call.
//!
//! Client side (a [`CallRecord`]):
//!
//! ```text
//! call                      root, every derived field of the record as attributes
//! ├── capture
//! ├── transport             id = the parent id sent in traceparent
//! │   ├── uplink            synthesized, placed with the clock offset
//! │   │   └── uplink client → gateway, …   through gateways: one per hop (`hops`)
//! │   ├── (queue, infer)    from the server's own exporter (or synthesized on request)
//! │   ├── downlink          synthesized
//! │   │   └── downlink server → gateway, …
//! │   ├── ttfb (black box)  a server that reports no timing: send → the response's first byte
//! │   └── rx                … → the whole response
//! └── dispatch              id = the parent id sent to a remote executor
//!     ├── uplink client → executor          exec_tx (`hops`)
//!     └── ack executor → client             exec_ack
//! ```
//!
//! Server side (a [`ServerRecord`]): `queue` and `infer`, children of the
//! client's `transport` span through the request's `traceparent`; a
//! gateway's record is its `relay` and `forward` spans, an executor's its
//! `exec_wait` (`relay`).

//!
//! `call` makes the client's spans (`hops` those of its gateways' and
//! executor's hops), `server` the policy server's, `relay` a gateway's and
//! an executor's, `attributes` what they carry; every span is made by
//! [`SpanMaker`] here.

mod attributes;
mod call;
pub use call::BLACK_BOX_SPAN;
mod hop_spans;
mod relay;
mod server;

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, SpanData, SpanEvents, SpanLinks};

pub(crate) use self::attributes::key;

/// Converts records to spans; holds what every span shares.
#[derive(Debug)]
pub(crate) struct SpanMaker<G> {
    scope: InstrumentationScope,
    ids: G,
    synthesize_server_spans: bool,
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

    fn child(
        &self,
        trace_id: TraceId,
        parent: SpanId,
        name: impl Into<Cow<'static, str>>,
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
        name: impl Into<Cow<'static, str>>,
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
            name: name.into(),
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

/// Unix nanoseconds as a span time.
fn unix(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}
