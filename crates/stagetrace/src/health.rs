//! Process-wide fault counters that every summary window reports.
//!
//! Parsers and transports anywhere in the process (the wire codecs, the
//! `stagetrace-net` integrations) call these; the counters are plain atomics,
//! so counting costs one relaxed add and never blocks. Each summary window
//! reports the increase since the previous window.

use std::sync::atomic::{AtomicU64, Ordering};

static REJECTED_HEADERS: AtomicU64 = AtomicU64::new(0);
static CLAMPED: AtomicU64 = AtomicU64::new(0);

/// Count one rejected `traceparent` / server-timing header (malformed,
/// oversized, unknown version). Reported as `rejected_headers`.
pub fn count_rejected_header() {
    REJECTED_HEADERS.fetch_add(1, Ordering::Relaxed);
}

/// Count one negative duration that was clamped to 0 before it was reported.
/// Reported as `clamped`.
pub fn count_clamped() {
    CLAMPED.fetch_add(1, Ordering::Relaxed);
}

/// Rejected headers counted so far in this process.
pub fn rejected_headers() -> u64 {
    REJECTED_HEADERS.load(Ordering::Relaxed)
}

/// Clamped negative durations counted so far in this process.
pub fn clamped() -> u64 {
    CLAMPED.load(Ordering::Relaxed)
}
