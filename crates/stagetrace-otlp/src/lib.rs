//! OTLP export of stagetrace call records: every call becomes one trace in
//! Jaeger (or any OpenTelemetry collector), spanning client and server.
//!
//! # Core concepts
//!
//! - The client exports each [`CallRecord`](stagetrace::record::CallRecord) as a trace: a root `call` span
//!   with `capture`, `transport` and `dispatch` children, and under
//!   `transport` the synthesized `uplink` and `downlink` spans, placed with
//!   the estimated clock offset (attributes `stagetrace.offset_ms`,
//!   `stagetrace.split_err_ms`). The `call` span carries every field of the
//!   record as a `stagetrace.*` attribute; every stage span carries
//!   `stagetrace.stage`, `stagetrace.kind` and `stagetrace.seq`.
//! - The server exports each [`ServerRecord`](stagetrace::record::ServerRecord) as `queue` and `infer` spans in
//!   the client's trace, children of the client's `transport` span through
//!   the request's `traceparent`: the ids in `traceparent` are the exported
//!   ids. Client and server appear as two services.
//! - Through a gateway and to a remote executor, each service exports its
//!   own record the same way ([`OtlpExporter::server_hook`] for the
//!   `on_request` of `stagetrace-net`'s servers): the gateway's `relay` span
//!   under the client's `transport`, its `forward` span (the id it sent on)
//!   above the policy server's spans, the executor's `exec_wait` under the
//!   client's `dispatch`; the client adds one synthesized network span per
//!   hop (`uplink client → gateway`, `uplink gateway → server`, …), each
//!   placed with that hop's clock offset. Four services, one trace.
//! - Start and end times come from the records (the call's timeline), never
//!   from when the exporter ran.
//! - Export runs on a thread of its own behind a bounded queue: handing a
//!   record over never blocks, a full queue drops and counts, and a collector
//!   that is down, slow or refusing only shows up in [`ExportStats`]. Export
//!   resumes by itself when the collector is back.
//! - Shutdown waits one bound: flushing at shutdown (the layer flushing its
//!   sinks, [`OtlpExporter::shutdown`], dropping the exporter) stops sending
//!   when the shutdown timeout has passed since the first of them, shared by
//!   exporters given one [`ShutdownDeadline`]; what it could not send is
//!   counted as abandoned, so `exported + dropped + failed + abandoned` is
//!   every record handed over.
//! - Nothing is lost silently: what the collector never got is one warning
//!   in the app's `tracing` log when the layer's flush guard finishes (or,
//!   without a layer, when the last clone is dropped) — how many calls, how,
//!   and what to check ("is the collector (e.g. Jaeger) running at …?") —
//!   and `otlp.lost` in the summaries.
//!
//! - With [`TailSampling`] the exporter sends as traces only the calls worth
//!   a look (failed, deadline missed, slow for their kind, over a threshold)
//!   plus a rate-limited random sample, and counts the rest.
//! - [`OtlpMetrics`] exports every stage figure as an OTLP histogram
//!   (exponential by default) with counters, through the OpenTelemetry
//!   SDK's metrics pipeline: for Prometheus and fleets (`docs/fleet.md`).
//!
//! # Usage
//!
//! Settings resolve as: the builder call, else the standard variables — the
//! traces-specific `OTEL_EXPORTER_OTLP_TRACES_{ENDPOINT,PROTOCOL,HEADERS,TIMEOUT}`
//! before `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`;
//! `OTEL_TRACES_EXPORTER` (`otlp`, `none`); `OTEL_SERVICE_NAME`, then a
//! `service.name` in `OTEL_RESOURCE_ATTRIBUTES` — else the defaults
//! (OTLP/HTTP with protobuf to `http://localhost:4318`, service
//! `stagetrace`). `http/json` is supported.
//!
//! ```no_run
//! use std::time::Duration;
//! use stagetrace_otlp::OtlpExporter;
//!
//! // Client side.
//! let client = OtlpExporter::builder()
//!     .endpoint("http://127.0.0.1:4318")
//!     .service_name("robot-client")
//!     .header("authorization", "Bearer s3cret")
//!     .build()?;
//! # let record = stagetrace::record::CallRecord::default();
//! client.export_call(&record);
//!
//! // Server side, in the policy server's process.
//! let server = OtlpExporter::builder().service_name("policy-server").build()?;
//! # let request = stagetrace::record::ServerRecord::default();
//! server.export_server(&request);
//!
//! client.flush(Duration::from_secs(2));
//! eprintln!("{}", client.stats());
//!
//! // At the end: what is still queued is sent within the shutdown timeout
//! // (3 s by default), the rest is counted as abandoned.
//! eprintln!("{}", client.shutdown());
//! # Ok::<(), stagetrace_otlp::BuildError>(())
//! ```
//!
//! OTLP/gRPC needs the crate feature `grpc` (it brings tonic and a small
//! Tokio runtime on the export thread); HTTP/protobuf needs no async runtime.
//! `https://` endpoints use TLS (rustls); a private CA can be added with
//! [`OtlpBuilder::ca_certificate_pem`].
//!
//! # Supported Rust versions
//!
//! The workspace's `rust-version` (1.85) and newer.
//!
//! # Public API
//!
//! Everything is at the root. Traces:
//!
//! - [`OtlpExporter`]: the trace exporter; a
//!   [`RecordSink`](stagetrace::sink::RecordSink) for the layer, or call
//!   [`export_call`](OtlpExporter::export_call) /
//!   [`export_server`](OtlpExporter::export_server) yourself; built by
//!   [`OtlpExporter::builder`].
//! - [`OtlpBuilder`]: endpoint, protocol, headers, service name, timeouts,
//!   TLS, tail sampling; resolves the `OTEL_*` variables.
//! - [`BuildError`]: why an exporter could not be built (the setting and its
//!   [`Origin`]); [`Protocol`]: HTTP/protobuf, HTTP/JSON or gRPC.
//! - [`ExportStats`]: what an exporter has sent, dropped, failed and
//!   abandoned so far.
//! - [`ShutdownDeadline`]: one shutdown bound shared by several exporters.
//! - [`TailSampling`]: which calls to send as traces when sampling at the
//!   source; [`KeepReason`]: why a call was kept; [`SampleStats`]: what was
//!   kept and skipped.
//! - [`tracing_opentelemetry_context`]: shares `tracing-opentelemetry`'s
//!   ids with the stage layer, as a
//!   [`TraceContextHook`](stagetrace::context::TraceContextHook).
//! - [`BLACK_BOX_SPAN`]: the name of a silent server's first-byte wait span.
//!
//! Metrics:
//!
//! - [`OtlpMetrics`]: stage histograms and counters as OTLP metrics (a
//!   `RecordSink` too), built by [`MetricsBuilder`]; [`MetricsStats`]: what
//!   it has done.
//! - [`Histograms`]: exponential or explicit buckets; [`Temporality`]:
//!   cumulative (Prometheus) or delta (`opentelemetry_sdk`'s).
//!
//! Constants: the defaults [`DEFAULT_HTTP_ENDPOINT`],
//! [`DEFAULT_GRPC_ENDPOINT`], [`DEFAULT_SERVICE_NAME`], and the names of
//! the variables read: [`ENV_ENDPOINT`], [`ENV_PROTOCOL`], [`ENV_HEADERS`],
//! [`ENV_TIMEOUT`], [`ENV_TRACES_ENDPOINT`], [`ENV_TRACES_PROTOCOL`],
//! [`ENV_TRACES_HEADERS`], [`ENV_TRACES_TIMEOUT`], [`ENV_TRACES_EXPORTER`],
//! [`ENV_METRICS_EXPORTER`], [`ENV_SERVICE_NAME`],
//! [`ENV_RESOURCE_ATTRIBUTES`].

mod config;
mod deadline;
mod export;
mod metrics;
mod resource;
mod sampling;
mod shared;
mod spans;

pub use config::{
    BuildError, Origin, OtlpBuilder, Protocol, DEFAULT_GRPC_ENDPOINT, DEFAULT_HTTP_ENDPOINT,
    DEFAULT_SERVICE_NAME, ENV_ENDPOINT, ENV_HEADERS, ENV_PROTOCOL, ENV_RESOURCE_ATTRIBUTES,
    ENV_SERVICE_NAME, ENV_TIMEOUT, ENV_TRACES_ENDPOINT, ENV_TRACES_EXPORTER, ENV_TRACES_HEADERS,
    ENV_TRACES_PROTOCOL, ENV_TRACES_TIMEOUT,
};
pub use deadline::ShutdownDeadline;
pub use export::{ExportStats, OtlpExporter};
pub use metrics::{Histograms, MetricsBuilder, MetricsStats, OtlpMetrics, ENV_METRICS_EXPORTER};
/// Metric temporality (cumulative: what Prometheus takes; delta).
pub use opentelemetry_sdk::metrics::Temporality;
pub use sampling::{KeepReason, SampleStats, TailSampling};
pub use shared::tracing_opentelemetry_context;
pub use spans::BLACK_BOX_SPAN;
