//! Wire formats (DESIGN section 3): W3C trace context and server timing.
//!
//! Every parser here takes untrusted bytes: bounded lengths, no panics; a
//! rejected input returns an error the caller counts and otherwise ignores.

/// Server timing carried back by a response: one absolute anchor plus
/// monotonic durations, all measured on the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerTiming {
    /// Wall time the whole request was received (server clock), ns since the epoch.
    pub recv_unix_ns: Option<u64>,
    /// Receive → send on the server's monotonic clock.
    pub total_ns: Option<u64>,
    /// Receive → inference start.
    pub queue_ns: Option<u64>,
    /// Inference, pre/post-processing included.
    pub infer_ns: Option<u64>,
    /// Pre-processing part of `infer_ns`, when known.
    pub pre_ns: Option<u64>,
    /// Post-processing part of `infer_ns`, when known.
    pub post_ns: Option<u64>,
}

/// A W3C `traceparent` (version, trace id, parent span id, flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// Version byte; we emit `00`.
    pub version: u8,
    /// 16-byte trace id, never all zero.
    pub trace_id: [u8; 16],
    /// 8-byte id of the parent span, never all zero.
    pub parent_id: [u8; 8],
    /// Trace flags (`01` = sampled).
    pub flags: u8,
}
