//! stagetrace: where does a control loop's latency go?
//!
//! A robot client captures frames, sends an observation to a policy server,
//! gets an action chunk back and hands it to the actuators. When the
//! end-to-end time jitters, the total alone cannot say whether inference or
//! communication is to blame. `stagetrace` is a [`tracing`] Layer that cuts
//! every call into canonical stages and reports per-stage distributions.
//!
//! # Core concepts
//!
//! - A **call** is one control cycle: the span named `call` (configurable with
//!   [`StageLayerBuilder::call_span_name`]), optionally with `kind` and `seq`
//!   fields.
//! - **Stages** are spans inside a call named `capture`, `transport`, `queue`,
//!   `infer`, `dispatch` ([`Stage`]), any span with a field `stage = "…"`, or
//!   names mapped with [`StageLayerBuilder::map_span`].
//! - The `transport` span's response may carry the server's timing
//!   ([`ServerTiming`], attached with
//!   [`StageSpanExt::record_server_timing`]); the worker
//!   then splits the round trip into `uplink`, `queue`, `infer`, `downlink`
//!   with the clock offset between the machines estimated ([`clock`]).
//! - Every finished call becomes one [`CallRecord`](record::CallRecord), handed from the app thread
//!   to one worker thread through a bounded queue (full = dropped and counted,
//!   never blocking). The worker writes `records-*.jsonl`, rolling
//!   `summary.*.jsonl` windows and feeds any [`RecordSink`](sink::RecordSink).
//! - What the app knows about a call and the layer cannot see — the server's
//!   timing, a failure, an output digest — it tells through its spans, with
//!   the [`StageSpanExt`] methods on `tracing::Span` (also in the
//!   [`prelude`]).
//!
//! # Usage
//!
//! ```
//! use std::time::Duration;
//! use tracing_subscriber::prelude::*;
//!
//! # fn main() -> Result<(), stagetrace::BuildError> {
//! # let dir = std::env::temp_dir().join(format!("stagetrace-doc-{}", std::process::id()));
//! let (stages, guard) = stagetrace::StageLayer::builder()
//!     .output_dir(&dir)                    // records-*.jsonl + summary.*.jsonl
//!     .window(Duration::from_secs(10))     // rolling summary window
//!     .target_hz(30.0)                     // deadline misses, lateness, jitter
//!     .build()?;
//! let subscriber = tracing_subscriber::registry().with(stages);
//! tracing::subscriber::with_default(subscriber, || {
//!     for _ in 0..3 {
//!         let call = tracing::info_span!("call", kind = "infer");
//!         let _call = call.enter();
//!         tracing::info_span!("capture").in_scope(|| { /* grab frames */ });
//!         tracing::info_span!("transport").in_scope(|| { /* send, await the action */ });
//!         tracing::info_span!("dispatch").in_scope(|| { /* hand to the actuators */ });
//!     }
//! });
//! let summary = guard.finish();            // drains the worker
//! println!("{}", summary.table());
//! # let _ = std::fs::remove_dir_all(&dir);
//! # Ok(())
//! # }
//! ```
//!
//! See `docs/stages.md` for what every number means.
//!
//! # Supported Rust versions
//!
//! stagetrace is built and tested on stable Rust; the minimum supported
//! version is 1.85.
//!
//! # Public API
//!
//! At the root, what an app writes in its first lines:
//!
//! - [`StageLayer`]: the layer; [`StageLayer::builder`] starts its
//!   configuration.
//! - [`StageLayerBuilder`]: output directory, window, target rate, sinks,
//!   span mapping; `build()` returns the layer and its guard.
//! - [`FilteredStageLayer`]: what `build()` returns, the layer with its
//!   per-layer filter [`StageFilter`], for `registry().with(...)`.
//! - [`FlushGuard`]: keep it alive; dropping it or [`FlushGuard::finish`]
//!   drains the worker and returns the cumulative summary.
//! - [`BuildError`]: why the layer could not be built.
//! - [`Rotation`]: how the records and summary files rotate, for
//!   [`StageLayerBuilder::rotation`] (`tracing-appender`'s).
//! - [`AdviceFor`]: which API (Rust, Python) the layer's warnings name in
//!   their fixes, for bindings.
//! - [`Stage`]: a stage a span can be mapped onto; [`UnknownStage`] is the
//!   error of parsing one from a string.
//! - [`StageSpanExt`]: methods on `tracing::Span` to tell the layer what it
//!   cannot see (server timing, first-byte stamps, a failure, an output
//!   digest, an executor's ack, a remote parent).
//! - [`ServerTiming`], [`TraceParent`]: `stagetrace-wire`'s types, which the
//!   span helpers take.
//! - [`ExecutorAck`]: one acknowledged action chunk from a remote executor,
//!   for [`StageSpanExt::record_executor_ack`].
//! - [`remote_parent_span`]: a span to run a server's request handler in,
//!   under the caller's trace context; [`REMOTE_PARENT_SPAN`] is its name.
//! - [`prelude`]: `use stagetrace::prelude::*;` brings [`StageLayer`],
//!   [`StageSpanExt`], [`ServerTiming`] and [`TraceParent`].
//!
//! [`record`]: the call record every sink receives, and its JSON format:
//!
//! - [`record::CallRecord`]: one call (one line of `records-*.jsonl`).
//! - [`record::ServerRecord`]: one request as a service on the call's path
//!   saw it, made by [`record::ServiceRole`] (policy server, relay,
//!   executor), with a relay's [`record::Forwarded`] call.
//! - [`record::Figures`]: a call's duration figures in ns, indexed by
//!   `stagetrace_schema::Figure`.
//! - [`record::Timeline`], [`record::SpanTime`], [`record::HopTime`]: where
//!   each stage and hop sat on the call's timeline, for exporters that draw
//!   spans.
//! - [`record::HostCounts`]: what the hosts did to a call, counted.
//! - [`record::ClockBasis`], [`record::CacheOutcome`]: the `clock` and
//!   `cache` fields.
//! - [`record::round_us`]: round ms to microsecond resolution.
//!
//! [`sink`]: where finished calls go:
//!
//! - [`sink::RecordSink`]: implement it to receive every record and summary
//!   window on the worker thread; register with
//!   [`StageLayerBuilder::sink`].
//! - [`sink::Loss`]: data a sink lost for good, from
//!   [`RecordSink::loss_report`](sink::RecordSink::loss_report).
//! - [`sink::report_loss`]: report such a loss as a warning in the app's
//!   log.
//!
//! [`summary`]: rolling and cumulative summaries:
//!
//! - [`summary::WindowSummary`]: one line of `summary.*.jsonl`;
//!   [`summary::Summary`] is the cumulative one [`FlushGuard::finish`]
//!   returns.
//! - [`summary::StageStats`], [`summary::KindSummary`],
//!   [`summary::DeadlineSummary`], [`summary::ClockSummary`],
//!   [`summary::ExecutorClockSummary`], [`summary::OffsetRange`],
//!   [`summary::Drift`], [`summary::Quantiles`]: the parts of a window.
//! - [`summary::figures`]: the figures a summary reports, in display order.
//! - Constants: [`summary::MAX_KINDS`], [`summary::OTHER_KINDS`],
//!   [`summary::SIGFIG`].
//!
//! [`clock`]: clock anchoring, offset estimation and stitching:
//!
//! - [`clock::Anchor`], [`clock::WallClock`]: place a monotonic instant on
//!   the wall clock.
//! - [`clock::OffsetFilter`] (tuned by [`clock::FilterConfig`]) gives an
//!   [`clock::OffsetEstimate`] from [`clock::NtpSample`]s: one peer's clock
//!   offset and drift.
//! - [`clock::Stitcher`]: per-layer stitching of server timing onto the
//!   client's [`clock::ClientTimes`], giving [`clock::Stitched`] figures, in
//!   a [`clock::ClockMode`].
//! - Constants: [`clock::ANCHOR_REFRESH`], [`clock::RATE_BASELINE`],
//!   [`clock::MAX_PEERS`].
//!
//! [`context`]: sharing another tracing layer's trace context:
//!
//! - [`context::TraceContextHook`]: looks up the ids another layer (e.g.
//!   `tracing-opentelemetry`) gave a span; [`context::SharedIds`] is what it
//!   returns.
//!
//! [`direct`]: calls timed without `tracing` spans, for language bindings:
//!
//! - [`direct::DirectCalls`]: the layer's queue for such calls;
//!   [`direct::DirectCall`] is one call being timed,
//!   [`direct::DirectTransport`] its open transport stage, and
//!   [`direct::Mark`] a point on the layer's clock.
//!
//! [`health`]: the layer's fault counters, reported in every window:
//!
//! - [`health::count_rejected_header`], [`health::count_clamped`]: count a
//!   rejected header or a clamped duration on the current layer.
//! - [`health::rejected_headers`], [`health::clamped`]: read those counts.
//!
//! [`hop_record`]: the record's per-hop figures:
//!
//! - [`hop_record::HopFigures`]: one hop between client and policy server.
//!
//! [`host`]: what the host did to a thread:
//!
//! - [`host::HostCounters`]: the calling thread's counters (run-queue wait,
//!   switches, faults) and the host's CPU stall, by now.
//! - [`host::thread_cpu_ns`], [`host::mono_ns`]: the thread's CPU time and
//!   `CLOCK_MONOTONIC`, in ns.
//! - [`host::stall_between_us`], [`host::keep_stall_sampler`]: the host's
//!   CPU stall between two instants, and keeping its sampler running.
//! - Constants: [`host::RUN_WAIT_REUSE`], [`host::STALL_SAMPLE_PERIOD`],
//!   [`host::STALL_SAMPLER_IDLE_AFTER`].
//!
//! [`log_writer`]: a log writer that times itself (`log_write_ms`):
//!
//! - [`log_writer::timed`]: wrap the writer of a `fmt` layer;
//!   [`log_writer::TimedMakeWriter`] and [`log_writer::TimedWriter`] are
//!   what it makes.
//! - [`log_writer::add_thread_ns`]: add log writing timed elsewhere (another
//!   language's logger) to the thread's total.
//!
//! [`thread_sample`]: per-thread host figures:
//!
//! - [`thread_sample::ThreadSample`]: a `HostShare` read from the kernel
//!   and the thread it was taken on.

mod advice;
mod builder;
mod call_state;
pub mod clock;
pub mod context;
pub mod direct;
mod executor;
pub mod health;
pub mod hop_record;
pub mod host;
mod ids;
mod inline_str;
mod layer;
pub mod log_writer;
mod message;
pub mod record;
pub mod sink;
mod stage;
mod stamp;
pub mod summary;
pub mod thread_sample;
mod worker;

// The root names only what an app writes in its first lines: the layer, its
// builder and options, the span helpers and what they take. Everything else
// has one path, through its module (`stagetrace::record::CallRecord`,
// `stagetrace::sink::RecordSink`, …); the schema's figures are
// `stagetrace_schema`'s and the wire's types `stagetrace_wire`'s, re-exported
// here only where a span helper takes them.
pub use advice::AdviceFor;
pub use builder::{BuildError, FlushGuard, Rotation, StageLayerBuilder};
pub use executor::ExecutorAck;
pub use layer::callsite::REMOTE_PARENT_SPAN;
pub use layer::span_ext::{remote_parent_span, StageSpanExt};
pub use layer::{FilteredStageLayer, StageFilter, StageLayer};
pub use stage::{Stage, UnknownStage};
pub use stagetrace_wire::{ServerTiming, TraceParent};

/// What an instrumented app needs in scope: `use stagetrace::prelude::*;`
/// brings the span helpers ([`StageSpanExt`]) and the types they take.
pub mod prelude {
    pub use crate::{ServerTiming, StageLayer, StageSpanExt, TraceParent};
}
