//! Why a wire input was rejected: [`Codec`] names the format, [`WireError`]
//! the reason and the fix, and the helpers every parser builds them with.

use std::fmt;

/// Which wire format an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    /// The W3C `traceparent` header.
    TraceParent,
    /// The W3C `tracestate` header.
    TraceState,
    /// The `stagetrace-timing` response header.
    TimingHeader,
    /// The standard `Server-Timing` response header.
    ServerTimingHeader,
    /// The `server_timing` map (msgpack or JSON).
    TimingMap,
}

impl Codec {
    fn name(self) -> &'static str {
        match self {
            Codec::TraceParent => "`traceparent` header",
            Codec::TraceState => "`tracestate` header",
            Codec::TimingHeader => "`stagetrace-timing` header",
            Codec::ServerTimingHeader => "`Server-Timing` header",
            Codec::TimingMap => "`server_timing` map",
        }
    }

    fn fix(self) -> &'static str {
        match self {
            Codec::TraceParent => {
                "the peer must send `00-<32 lowercase hex trace id>-<16 lowercase hex span id>-<2 hex flags>`, ids not all zero (W3C Trace Context)"
            }
            Codec::TraceState => {
                "the peer must send at most 32 comma-separated `key=value` members with W3C tracestate keys and values"
            }
            Codec::TimingHeader => {
                "the server must send `v=1;recv=<unix ns>;total=<ns>;...` with non-negative integer nanoseconds, `batch=<1..>` and `cache=hit|miss` (see docs/protocol.md)"
            }
            Codec::ServerTimingHeader => {
                "the server must send `name;dur=<ms>` metrics separated by commas, dur a non-negative decimal"
            }
            Codec::TimingMap => {
                "the server must send a map of non-negative numbers (`*_ns` integers, `*_ms` floats), `batch_size` a positive integer and `cache` \"hit\" or \"miss\" (see docs/protocol.md)"
            }
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an input was rejected. Rejections are meant to be counted and the
/// input ignored; the request itself goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The input is longer than the codec accepts.
    TooLong {
        /// The format.
        codec: Codec,
        /// Length received, in bytes.
        len: usize,
        /// Most accepted.
        max: usize,
    },
    /// The input does not follow the format's grammar.
    Syntax {
        /// The format.
        codec: Codec,
        /// What is wrong.
        reason: &'static str,
    },
    /// A field is well formed but its value is unusable (negative, NaN,
    /// beyond [`MAX_DURATION_NS`](super::MAX_DURATION_NS), all-zero id, ...).
    Value {
        /// The format.
        codec: Codec,
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// A version this implementation cannot read (`traceparent` version
    /// `ff`, or a `stagetrace-timing` version other than 1).
    Version {
        /// The format.
        codec: Codec,
    },
}

impl WireError {
    /// The format the error is about.
    pub fn codec(&self) -> Codec {
        match *self {
            WireError::TooLong { codec, .. }
            | WireError::Syntax { codec, .. }
            | WireError::Value { codec, .. }
            | WireError::Version { codec } => codec,
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::TooLong { codec, len, max } => {
                let unit = if codec == Codec::TimingMap {
                    "entries"
                } else {
                    "bytes"
                };
                write!(
                    f,
                    "{codec} ignored: {len} {unit}, more than the {max} accepted; {}",
                    codec.fix()
                )
            }
            WireError::Syntax { codec, reason } => {
                write!(f, "{codec} ignored: {reason}; {}", codec.fix())
            }
            WireError::Value {
                codec,
                field,
                reason,
            } => write!(f, "{codec} ignored: `{field}` {reason}; {}", codec.fix()),
            WireError::Version { codec } => {
                write!(f, "{codec} ignored: unsupported version; {}", codec.fix())
            }
        }
    }
}

impl std::error::Error for WireError {}

pub(super) fn syntax(codec: Codec, reason: &'static str) -> WireError {
    WireError::Syntax { codec, reason }
}

pub(super) fn value_err(codec: Codec, field: &'static str, reason: &'static str) -> WireError {
    WireError::Value {
        codec,
        field,
        reason,
    }
}

pub(super) fn check_len(codec: Codec, len: usize, max: usize) -> Result<(), WireError> {
    if len > max {
        Err(WireError::TooLong { codec, len, max })
    } else {
        Ok(())
    }
}
