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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ClockMode;
    use crate::executor::ExecutorAck;
    use crate::wire::ServerTiming;

    const MS: u64 = 1_000_000;

    /// A dispatch span from 1 ms to 31 ms after the call's start; the chunk
    /// leaves at 2 ms, reaches an executor whose clock is 250 ms ahead 3 ms
    /// later, waits `wait_ms` there, and the ack is back 2 ms after the start.
    fn ack(call: Instant, wait_ms: u64) -> (ExecAcc, Anchor) {
        let anchor = Anchor::from_parts(1_700_000_000_000_000_000, call);
        let sent = call + Duration::from_millis(2);
        let recv = anchor.to_unix_ns(sent) + 3 * MS + 250 * MS;
        let timing = ServerTiming {
            recv_unix_ns: Some(recv),
            queue_ns: Some(wait_ms * MS),
            total_ns: Some(wait_ms * MS + MS / 10),
            ..ServerTiming::default()
        };
        // Symmetric 3 ms links: the offset estimate is exact.
        let acked = sent + Duration::from_nanos(3 * MS + wait_ms * MS + MS / 10 + 3 * MS);
        (
            ExecutorAck::new("ws://e", timing, sent, acked).into(),
            anchor,
        )
    }

    const SPAN: SpanTime = SpanTime {
        start_ns: MS,
        dur_ns: 30 * MS,
    };

    #[test]
    fn dispatch_ends_at_the_executors_start() {
        let call = Instant::now();
        let (a, anchor) = ack(call, 12);
        let mut st = Stitcher::new(ClockMode::Estimate);
        let x = split(&mut st, &a, Some(SPAN), call, &anchor);
        // span start 1 ms → sent 2 ms → whole chunk 5 ms → start 17 ms.
        assert_eq!(x.exec_wait_ns, Some((12 * MS) as i64));
        assert_eq!(x.exec_tx_ns, Some((4 * MS) as i64));
        assert_eq!(x.dispatch_ns, Some((16 * MS) as i64));
        assert_eq!(x.exec_ack_ns, Some((14 * MS) as i64));
        assert_eq!(x.offset_ns, Some((250 * MS) as i64));
        assert_eq!(x.err_ns, Some((3 * MS) as i64));
        assert!(!x.clamped && !x.rejected);
    }

    #[test]
    fn stamps_outside_the_span_and_waits_beyond_the_total_are_caught() {
        let call = Instant::now();
        let (mut a, anchor) = ack(call, 12);
        let mut st = Stitcher::new(ClockMode::Estimate);
        // The ack arrived after the dispatch span closed: no split, the wait stays.
        a.acked = call + Duration::from_millis(40);
        let x = split(&mut st, &a, Some(SPAN), call, &anchor);
        assert!(x.rejected);
        assert_eq!(x.exec_wait_ns, Some((12 * MS) as i64));
        assert_eq!(
            (x.dispatch_ns, x.exec_tx_ns, x.exec_ack_ns),
            (None, None, None)
        );
        // A wait longer than the executor's own total is clamped to it.
        let (mut a, _) = ack(call, 12);
        a.timing.queue_ns = Some(99 * MS);
        let x = split(&mut st, &a, None, call, &anchor);
        assert!(x.clamped);
        assert_eq!(x.exec_wait_ns, Some((12 * MS + MS / 10) as i64));
        // No start reported: nothing at all.
        a.timing.queue_ns = None;
        assert_eq!(
            split(&mut st, &a, Some(SPAN), call, &anchor),
            ExecSplit::default()
        );
    }
}
