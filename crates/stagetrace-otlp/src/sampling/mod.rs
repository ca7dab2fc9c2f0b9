//! Tail sampling at the source: which finished calls are exported as traces.
//!
//! The layer knows a call's whole breakdown when it ends, which a collector's
//! tail sampler only learns after every span was shipped. With
//! [`TailSampling`] the exporter keeps, as full traces, only the calls worth
//! a look — failed, deadline missed, slower than the rolling p99 of their
//! kind, over a threshold of the user's on any figure — plus a rate-limited
//! random sample of the rest, and drops the others before they are queued.
//! Every decision is counted (`otlp.sample.*` in every summary window).
//!
//! `config` holds the public settings, `rolling` the per-kind p99, `bucket`
//! the token bucket and its seeded generator, `decide` the decision and
//! its counters. Nothing here imports the exporter: it asks `decide`.

mod bucket;
mod config;
mod decide;
mod rolling;

pub use self::config::TailSampling;
pub use self::decide::{KeepReason, SampleStats};
pub(crate) use self::decide::{SampleCounters, Sampler};
