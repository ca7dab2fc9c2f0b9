//! Reusing the trace context of an app's own `tracing-opentelemetry` layer.
//!
//! When an app already exports its spans with `tracing-opentelemetry`, the
//! stage layer should not start a second trace for the same call. Give it
//! [`tracing_opentelemetry_context`] and register the OpenTelemetry layer
//! first:
//!
//! ```no_run
//! use opentelemetry::trace::TracerProvider as _;
//! use tracing_subscriber::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
//! let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("robot"));
//! let exporter = stagetrace_otlp::OtlpExporter::builder().build()?;
//! let (stages, _guard) = stagetrace::StageLayer::builder()
//!     .share_trace_context(stagetrace_otlp::tracing_opentelemetry_context)
//!     .sink(Box::new(exporter))
//!     .build()?;
//! tracing_subscriber::registry().with(otel).with(stages).init();
//! # Ok(())
//! # }
//! ```
//!
//! Then each call is one trace, the app's: its `call`, `capture`,
//! `transport` and `dispatch` spans (exported by the app's layer, labelled
//! `stagetrace.stage`), the server's spans joined under the app's
//! `transport` span through `traceparent`, and the clock-corrected `uplink` /
//! `downlink` spans that only stagetrace can place, exported by
//! [`OtlpExporter`](crate::OtlpExporter) under that same `transport` span.

use opentelemetry::trace::TraceContextExt;
use opentelemetry::KeyValue;
use stagetrace::context::SharedIds;
use tracing_core::{span, Dispatch};

/// A [`stagetrace::context::TraceContextHook`] for `tracing-opentelemetry` 0.34: the
/// OpenTelemetry trace and span id of span `id`, read through
/// [`tracing_opentelemetry::get_otel_context`] (which starts the
/// OpenTelemetry span if that layer has not yet), and the span labelled
/// with its stage (`stagetrace.stage`).
///
/// `None` when no `tracing-opentelemetry` layer is in the subscriber, or it
/// has no context for the span (it sits after the stage layer, or its filter
/// left the span out).
pub fn tracing_opentelemetry_context(
    dispatch: &Dispatch,
    id: &span::Id,
    stage: &'static str,
) -> Option<SharedIds> {
    let cx = tracing_opentelemetry::get_otel_context(id, dispatch)?;
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    span.set_attribute(KeyValue::new(crate::spans::key::STAGE, stage));
    Some(SharedIds {
        trace_id: u128::from_be_bytes(sc.trace_id().to_bytes()),
        span_id: u64::from_be_bytes(sc.span_id().to_bytes()),
    })
}
