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
