//! Rolling and cumulative summaries: per-stage and per-kind latency
//! distributions (HdrHistogram in µs, exact min / max / mean kept apart),
//! the observer's own cost, fault counters and deadline figures.
//!
//! One [`WindowSummary`] is one line of `summary.*.jsonl` (`window.rs`); the
//! worker aggregates it in an accumulator (`accumulator.rs`) from per-figure
//! distributions (`dist.rs`) and deadline ticks (`deadline.rs`);
//! [`WindowSummary::table`] renders it for people (`table.rs`).

mod accumulator;
mod deadline;
mod dist;
mod exec_clock;
mod table;
mod window;

pub use accumulator::{MAX_KINDS, OTHER_KINDS};
pub use dist::SIGFIG;
pub use exec_clock::ExecutorClockSummary;
pub use window::{
    figures, ClockSummary, DeadlineSummary, Drift, KindSummary, OffsetRange, Quantiles, StageStats,
    Summary, WindowSummary,
};

pub(crate) use accumulator::{Accum, Counters, Span};
pub(crate) use deadline::{DeadlineObs, DeadlineTracker};
