//! [`ReadTrailers`]: the response body as tonic reads it, handing the
//! trailers to the call's span and slot as they pass.

use std::sync::Arc;
use std::time::Instant;

use http::HeaderMap;
use http_body::Frame;
use stagetrace::StageSpanExt;
use tonic::metadata::MetadataMap;
use tracing::Span;

use super::slot::{TrailerSlot, Trailers};
use super::Shared;
use crate::watched::{Watch, Watched};
use crate::wire::{
    GrpcTiming, ObsOutcome, TrailerError, MAX_TRAILER_BYTES, OUTCOME_KEY, TIMING_KEY,
};

/// Where one call's trailers go: its transport span, its slot, the
/// layer's counters.
pub(crate) struct Reader {
    span: Option<Span>,
    slot: Option<TrailerSlot>,
    shared: Arc<Shared>,
}

impl Reader {
    pub(crate) fn new(span: Option<Span>, slot: Option<TrailerSlot>, shared: Arc<Shared>) -> Self {
        Reader { span, slot, shared }
    }

    /// The call failed before its trailers: its call's record says why.
    pub(crate) fn failed(self, reason: &'static str) {
        if let Some(span) = &self.span {
            span.mark_failed(reason);
        }
    }

    /// The response's head arrived at `at`: its first byte, as near as a
    /// tower layer sees it (the clock estimate leaves its transfer out).
    pub(crate) fn head_arrived(&self, at: Instant) {
        if let Some(span) = &self.span {
            span.record_response_first_byte(at);
        }
    }

    /// The trailers arrived: read them into the span and the slot. Ends
    /// the layer's own transport span (the last handle is dropped here).
    pub(crate) fn trailers(self, map: &HeaderMap) {
        let at = Instant::now();
        let mut rejected = 0;
        let mut read = |key: &'static str| match bin_value(map, key) {
            Ok(v) => v,
            Err(_) => {
                rejected += 1;
                self.shared.reject();
                None
            }
        };
        let timing = read(TIMING_KEY).map(|b| GrpcTiming::from_bytes(&b));
        let outcome = read(OUTCOME_KEY).map(|b| ObsOutcome::from_bytes(&b));
        let status = map
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.parse::<i32>().ok());
        let rejected = rejected
            + u32::from(timing.as_ref().is_some_and(Result::is_err))
            + u32::from(outcome.as_ref().is_some_and(Result::is_err));
        let timing = timing.and_then(|r| self.keep(r));
        let outcome = outcome.and_then(|r| self.keep(r));
        if let Some(span) = &self.span {
            if let Some(t) = timing.filter(|t| !t.timing.is_empty()) {
                span.record_server_timing(t.timing);
            }
            match status {
                Some(0) => {}
                Some(code) => span.mark_failed(reason(code)),
                None => span.mark_failed("bad response"),
            }
        }
        if let Some(slot) = &self.slot {
            slot.fill(Trailers {
                timing,
                outcome,
                status,
                rejected,
                at,
            });
        }
    }

    /// A parsed entry, or `None` (counted) when it was malformed.
    fn keep<T>(&self, r: Result<T, TrailerError>) -> Option<T> {
        r.map_err(|_| self.shared.reject()).ok()
    }
}

/// A `-bin` entry's bytes (base64 on the wire: tonic decodes it), `None`
/// when absent; an error when not base64 or too long to be ours.
fn bin_value(map: &HeaderMap, key: &'static str) -> Result<Option<Vec<u8>>, TrailerError> {
    let Some(v) = map.get(key) else {
        return Ok(None);
    };
    // base64 of MAX_TRAILER_BYTES, unpadded: decoded only when it can fit.
    let longest = MAX_TRAILER_BYTES.div_ceil(3) * 4;
    if v.len() > longest {
        return Err(TrailerError::TooLong(v.len()));
    }
    let mut one = HeaderMap::new();
    one.insert(key, v.clone());
    MetadataMap::from_headers(one)
        .get_bin(key)
        .map(|b| b.to_bytes().map(|b| b.to_vec()))
        .transpose()
        .map_err(|_| TrailerError::NotMsgpack)
}

/// The record's failure reason for a gRPC status (the Python package's words).
fn reason(code: i32) -> &'static str {
    match tonic::Code::from_i32(code) {
        tonic::Code::DeadlineExceeded => "timeout",
        tonic::Code::Unavailable => "disconnected",
        tonic::Code::Cancelled => "cancelled",
        _ => "server error",
    }
}

/// A response body that hands its trailers to the call's span and slot as
/// they pass (tonic reads a unary response's trailers before the call
/// returns).
pub type ReadTrailers<B> = Watched<B, TrailerReader>;

/// What a [`ReadTrailers`] hands its trailers to, until it has.
pub struct TrailerReader {
    reader: Option<Reader>,
}

impl std::fmt::Debug for TrailerReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrailerReader")
            .field("waiting", &self.reader.is_some())
            .finish()
    }
}

impl TrailerReader {
    /// `body`, whose trailers go to `reader`.
    pub(crate) fn body<B>(body: B, reader: Reader) -> ReadTrailers<B> {
        Watched::new(
            body,
            TrailerReader {
                reader: Some(reader),
            },
        )
    }

    /// `body`, whose trailers were read already (a trailers-only response).
    pub(crate) fn done<B>(body: B) -> ReadTrailers<B> {
        Watched::new(body, TrailerReader { reader: None })
    }
}

impl<D, E> Watch<D, E> for TrailerReader {
    fn saw(&mut self, frame: &mut Option<Result<Frame<D>, E>>, _ended: bool) {
        match frame {
            Some(Ok(f)) => {
                if let Some(map) = f.trailers_ref() {
                    if let Some(r) = self.reader.take() {
                        r.trailers(map);
                    }
                }
            }
            Some(Err(_)) => {
                if let Some(r) = self.reader.take() {
                    r.failed("disconnected");
                }
            }
            None => {
                // Ended without trailers: no status, no timing.
                if let Some(r) = self.reader.take() {
                    r.trailers(&HeaderMap::new());
                }
            }
        }
    }
}

impl Drop for TrailerReader {
    fn drop(&mut self) {
        // Dropped before its trailers: the caller gave up on the response.
        if let Some(r) = self.reader.take() {
            r.failed("cancelled");
        }
    }
}
