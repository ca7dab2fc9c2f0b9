//! The trace context one request carries, taken as W3C Trace Context Level 2
//! says a service that receives a request takes it (its "Processing Model",
//! "A traceparent is received"), so that the service can continue the trace
//! in the calls it makes (`docs/protocol.md`, "Trace continuation").

use super::error::{syntax, Codec, WireError};
use super::lex::trim_ows;
use super::traceparent::TraceParent;
use super::tracestate::{parse_lines, OnDuplicate, TraceState};

/// A remote parent: the caller's valid `traceparent` and the `tracestate`
/// that came with it (empty when none came or it was discarded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    /// The caller's context: trace id, its span's id, its flags.
    pub parent: TraceParent,
    /// The vendors' list, in the order received.
    pub state: TraceState,
}

/// What [`TraceContext::extract`] made of one request's headers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extracted {
    /// The context to continue; `None`: the request carries none (or none
    /// usable), and a call made on its behalf starts a new trace.
    pub context: Option<TraceContext>,
    /// Why the `traceparent` headers were not used (absent, malformed, sent
    /// more than once): one rejected header.
    pub traceparent_error: Option<WireError>,
    /// Why the `tracestate` lines were discarded (malformed, too long, more
    /// than 32 members, sent without a `traceparent`) or repaired (a key
    /// repeated: only its left-most member kept): one rejected header.
    pub tracestate_error: Option<WireError>,
}

impl Extracted {
    /// Headers to count as rejected (0, 1 or 2): each error above is one.
    pub fn rejected(&self) -> u32 {
        u32::from(self.traceparent_error.is_some()) + u32::from(self.tracestate_error.is_some())
    }
}

impl TraceContext {
    /// Take the trace context of one request from all its `traceparent`
    /// values and all its `tracestate` lines, in the order received (HTTP
    /// field lines, or repeated keys of a msgpack request map).
    ///
    /// - No `traceparent`: no context; a `tracestate` without one is
    ///   discarded (the spec: it is invalid).
    /// - More than one `traceparent`: no context (the spec leaves no room
    ///   for two parents; a new trace starts), `tracestate` not read.
    /// - One malformed `traceparent`: no context, `tracestate` not read (the
    ///   spec: it MUST NOT be parsed then).
    /// - One valid `traceparent`: the context, with the `tracestate` lines
    ///   combined in order as RFC 9110 combines field lines; a malformed
    ///   combined list is discarded whole (the context stays: a bad
    ///   `tracestate` never spoils the `traceparent`), a key repeated further
    ///   right is dropped there.
    ///
    /// Bounded: at most [`MAX_TRACEPARENT_LEN`](super::MAX_TRACEPARENT_LEN)
    /// bytes per `traceparent` and
    /// [`MAX_TRACESTATE_INPUT`](super::MAX_TRACESTATE_INPUT) combined
    /// `tracestate` bytes are read. Never panics.
    pub fn extract(traceparents: &[&[u8]], tracestates: &[&[u8]]) -> Extracted {
        let mut out = Extracted::default();
        let parent = match traceparents {
            [] => {
                if tracestates.iter().any(|l| !trim_ows(l).is_empty()) {
                    out.tracestate_error = Some(syntax(
                        Codec::TraceState,
                        "sent without a `traceparent` (discarded, as the spec requires)",
                    ));
                }
                return out;
            }
            [one] => match TraceParent::parse_bytes(one) {
                Ok(tp) => tp,
                Err(e) => {
                    out.traceparent_error = Some(e);
                    return out;
                }
            },
            _ => {
                out.traceparent_error = Some(syntax(
                    Codec::TraceParent,
                    "sent more than once (the parent is ambiguous: a new trace starts)",
                ));
                return out;
            }
        };
        let state = match parse_lines(tracestates, OnDuplicate::KeepFirst) {
            Ok((state, 0)) => state,
            Ok((state, _)) => {
                out.tracestate_error = Some(syntax(
                    Codec::TraceState,
                    "a key appears twice (only its left-most member was kept)",
                ));
                state
            }
            Err(e) => {
                out.tracestate_error = Some(e);
                TraceState::new()
            }
        };
        out.context = Some(TraceContext { parent, state });
        out
    }
}
