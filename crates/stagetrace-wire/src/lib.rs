//! What crosses the network (`docs/architecture.md` §3): W3C trace context,
//! the server's timing and the host's share of a call. Below the core crate:
//! `stagetrace` (the layer), `stagetrace-net` and `stagetrace-grpc` (the
//! servers and clients) and the Python bindings all read and write these
//! formats through this crate, and it depends on none of them.
//!
//! Every parser here takes untrusted bytes: bounded lengths, no panics; a
//! rejected input returns a [`WireError`] the caller counts and otherwise
//! ignores.
//!
//! `docs/protocol.md` describes the fields for server authors in other
//! languages.
//!
//! One file per format (`traceparent`, `tracestate`, `trace_context`,
//! `timing` with its `stagetrace-timing` header, `server_timing` for the
//! standard header, `timing_map`, `timing_chain`, `host_fields` with
//! `host_share`); `error` and `lex` hold what they share. This file only
//! names things: no file below imports it.
//!
//! # Public API
//!
//! Everything is at the root; the formats:
//!
//! - [`TraceParent`]: the W3C `traceparent` header (Trace Context Level 2,
//!   version `00`; higher versions parsed by the spec's forward-compatibility
//!   rules, always re-emitted as `00`; sampled and random flags).
//! - [`TraceState`]: the W3C `tracestate` header (≤ 32 members, Level 2
//!   grammar).
//! - [`TraceContext`]: both, taken from one request's headers as the spec's
//!   processing model says (several `traceparent`s, several `tracestate`
//!   lines, repeated keys), for a service that continues the trace;
//!   [`TraceContext::extract`] returns an [`Extracted`] (the context and what
//!   was rejected).
//! - [`ServerTiming`]: the server's timing of one request, with three
//!   encodings: the `stagetrace-timing` header
//!   ([`ServerTiming::to_timing_header`]), the standard `Server-Timing` header
//!   ([`ServerTiming::to_server_timing_header`]) and the `server_timing` map of
//!   the openpi / LingBot-VA protocol ([`TimingMap`]): its keys and checks
//!   live here, with the JSON form; the msgpack form is in `stagetrace-net`,
//!   which speaks msgpack, so this crate's API carries no msgpack type.
//! - [`MapValue`]: one value of a `server_timing` map in a self-describing
//!   encoding, what [`TimingMap`] reads and yields (for a codec outside
//!   this crate).
//! - [`TimingChain`]: the `server_timing` map of a response that came
//!   through relays, one nested `downstream` level per relay
//!   ([`RelayTiming`], at most [`MAX_HOPS`]), read through [`EncodedMap`]
//!   (implement it for your encoding); [`Hops`] is the relays of one
//!   response, fixed-size, for carrying on a call's state.
//! - [`HostShare`]: what one end's host did to one call ([`HostFigure`]),
//!   which a server sends inside its timing.
//! - [`WireError`]: why an input was rejected (count it, ignore the input);
//!   [`Codec`] says which format it was about.
//! - [`to_lc_hex`]: lowercase hex of bytes, e.g. a trace id for a record.
//!
//! Names and limits (constants):
//!
//! - Header and map keys: [`TRACEPARENT`], [`TRACESTATE`],
//!   [`TIMING_HEADER`], [`SERVER_TIMING_HEADER`], [`SERVER_TIMING_KEY`],
//!   [`TIMING_CHAIN_HEADER`], [`DOWNSTREAM_KEY`].
//! - Limits a parser enforces: [`TRACEPARENT_LEN`], [`MAX_TRACEPARENT_LEN`],
//!   [`MAX_TRACESTATE_INPUT`], [`MAX_TRACESTATE_LEN`],
//!   [`MAX_TRACESTATE_MEMBERS`], [`MAX_TIMING_HEADER_LEN`],
//!   [`MAX_TIMING_CHAIN_HEADER_LEN`], [`MAX_TIMING_MAP_ENTRIES`],
//!   [`MAX_HOPS`], [`MAX_BATCH_SIZE`], [`MAX_DURATION_NS`], [`MAX_UNIX_NS`].

mod error;
mod host_fields;
mod host_share;
mod lex;
mod limits;
mod server_timing;
mod timing;
mod timing_chain;
mod timing_map;
mod trace_context;
mod traceparent;
mod tracestate;

pub use error::{Codec, WireError};
pub use host_share::{HostFigure, HostShare};
pub use lex::to_lc_hex;
pub use timing::{
    ServerTiming, MAX_BATCH_SIZE, MAX_DURATION_NS, MAX_TIMING_HEADER_LEN, MAX_UNIX_NS,
};
pub use timing_chain::{
    EncodedMap, Hops, RelayTiming, TimingChain, DOWNSTREAM_KEY, MAX_HOPS,
    MAX_TIMING_CHAIN_HEADER_LEN, TIMING_CHAIN_HEADER,
};
pub use timing_map::{MapValue, TimingMap, MAX_TIMING_MAP_ENTRIES};
pub use trace_context::{Extracted, TraceContext};
pub use traceparent::{TraceParent, MAX_TRACEPARENT_LEN, TRACEPARENT_LEN};
pub use tracestate::{
    TraceState, MAX_TRACESTATE_INPUT, MAX_TRACESTATE_LEN, MAX_TRACESTATE_MEMBERS,
};

/// `traceparent`: request header (HTTP) and request map key (msgpack).
pub const TRACEPARENT: &str = "traceparent";
/// `tracestate`: request header (HTTP) and request map key (msgpack).
pub const TRACESTATE: &str = "tracestate";
/// The response header carrying [`ServerTiming`] in integer nanoseconds.
pub const TIMING_HEADER: &str = "stagetrace-timing";
/// The standard response header for browser / devtools users (lowercase, as
/// HTTP/2 requires).
pub const SERVER_TIMING_HEADER: &str = "server-timing";
/// Key of the timing map in an openpi / LingBot-VA msgpack response.
pub const SERVER_TIMING_KEY: &str = "server_timing";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_thing_and_the_fix() {
        let e = TraceParent::parse("nope").unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("traceparent") && s.contains("32 lowercase hex"),
            "{s}"
        );
        let e = ServerTiming::parse_timing_header("v=1;total=-1").unwrap_err();
        assert!(e.to_string().contains("total_ns"), "{e}");
        assert_eq!(e.codec(), Codec::TimingHeader);
    }
}
