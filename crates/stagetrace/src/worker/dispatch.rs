//! A remote executor's acknowledgement → the dispatch split: `exec_wait`
//! (the executor's own clock), and with the executor's clock offset (one
//! estimate per executor, the same per-peer stitcher as a policy server's)
//! the executor's start on the client's timeline, where `dispatch` ends:
//! `dispatch = exec_tx + exec_wait`; the rest of the span is `exec_ack`.

use std::time::Instant;

use crate::clock::{Anchor, ClientTimes, Stitcher};
use crate::executor::ExecAcc;
use crate::record::SpanTime;

/// The figures an ack gives, integer ns; `None` where it cannot tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ExecSplit {
    /// `dispatch` ending at the executor's start (replaces the span's time).
    pub(super) dispatch_ns: Option<i64>,
    pub(super) exec_tx_ns: Option<i64>,
    pub(super) exec_wait_ns: Option<i64>,
    /// The executor's start → the dispatch span's end.
    pub(super) exec_ack_ns: Option<i64>,
    pub(super) offset_ns: Option<i64>,
    pub(super) err_ns: Option<i64>,
    /// A negative figure had to be clamped.
    pub(super) clamped: bool,
    /// A stamp contradicted the call (outside the dispatch span, a first
    /// byte outside the exchange) and was ignored.
    pub(super) rejected: bool,
}

fn since(at: Instant, origin: Instant) -> Option<u64> {
    at.checked_duration_since(origin)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Splits the dispatch `span` (on the call's timeline, which starts at
/// `call_start`) with the executor's `ack`. Without a `dispatch` span only
/// the wait is known.
pub(super) fn split(
    stitcher: &mut Stitcher,
    ack: &ExecAcc,
    span: Option<SpanTime>,
    call_start: Instant,
    anchor: &Anchor,
) -> ExecSplit {
    let t = &ack.timing;
    // The executor did not say when it started: nothing to split on.
    let Some(wait) = t.queue_ns else {
        return ExecSplit::default();
    };
    let mut out = ExecSplit::default();
    let wait = match t.total_ns {
        Some(total) if wait > total => {
            out.clamped = true;
            total
        }
        _ => wait,
    };
    out.exec_wait_ns = Some(signed(wait));
    let Some(span) = span else {
        return out;
    };
    let span_end = span.start_ns.saturating_add(span.dur_ns);
    let (Some(sent), Some(acked)) = (since(ack.sent, call_start), since(ack.acked, call_start))
    else {
        out.rejected = true;
        return out;
    };
    if !(span.start_ns <= sent && sent <= acked && acked <= span_end) {
        out.rejected = true;
        return out;
    }
    let client = ClientTimes {
        send_unix_ns: anchor.to_unix_ns(ack.sent),
        recv_unix_ns: anchor.to_unix_ns(ack.acked),
        first_byte_unix_ns: ack.ack_first_byte.map(|at| anchor.to_unix_ns(at)),
        request_first_byte_unix_ns: ack.sent_first_byte.map(|at| anchor.to_unix_ns(at)),
    };
    let st = stitcher.stitch(ack.peer.as_str(), client, t);
    out.clamped |= st.clamped;
    out.rejected |= st.rejected_first_byte;
    // The transfer, clamped by the stitcher to the exchange's network time.
    let Some(up) = st.uplink_ns else {
        return out;
    };
    let up = u64::try_from(up).unwrap_or(0);
    let started = sent.saturating_add(up).saturating_add(wait).min(acked);
    let dispatch = started - span.start_ns;
    out.dispatch_ns = Some(signed(dispatch));
    out.exec_tx_ns = Some(signed(dispatch.saturating_sub(wait)));
    out.exec_ack_ns = Some(signed(span_end - started));
    out.offset_ns = st.offset_ns;
    out.err_ns = st.split_err_ns;
    out
}
