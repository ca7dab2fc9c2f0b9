//! A server's process-wide counters ([`ServerStats`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Process-wide counters of a server, readable from its handle.
#[derive(Debug, Default)]
pub(crate) struct ServerCounters {
    pub(crate) requests: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) rejected_headers: AtomicU64,
    pub(crate) connections: AtomicU64,
}

impl ServerCounters {
    pub(crate) fn snapshot(&self) -> ServerStats {
        ServerStats {
            connections: self.connections.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            rejected_headers: self.rejected_headers.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn reject_header(&self) {
        self.rejected_headers.fetch_add(1, Ordering::Relaxed);
        stagetrace::health::count_rejected_header();
    }
}

/// What a server has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections accepted (WebSocket) — 0 for the HTTP layer.
    pub connections: u64,
    /// Requests answered or failed.
    pub requests: u64,
    /// Requests whose handler failed or whose message was malformed.
    pub failed: u64,
    /// Trace context headers rejected (ignored, counted): a malformed or
    /// repeated `traceparent`, a malformed `tracestate` or one sent without a
    /// `traceparent`, a `tracestate` with a repeated key (its later members
    /// dropped).
    pub rejected_headers: u64,
}
