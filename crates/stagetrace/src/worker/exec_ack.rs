//! A remote executor's acknowledgement → the dispatch split: `exec_wait`
//! (the executor's own clock), and with the executor's clock offset (one
//! estimate per executor, the same per-peer stitcher as a policy server's)
//! the executor's start on the client's timeline, where `dispatch` ends:
//! `dispatch = exec_tx + exec_wait`; the rest of the span is `exec_ack`.
//! Through gateways each hop is stitched with its own offset (as a policy
//! call's, `clock/hops.rs`), so the start is placed with the path's composed
//! offset, and the gateways' forwarding time is `exec_relay` (inside `exec_tx`).

use std::time::Instant;

use crate::clock::{Anchor, ClientTimes, Stitcher};
use crate::executor::ExecAcc;
use crate::record::SpanTime;
use stagetrace_schema::Figure;

/// The figures an ack gives, integer ns; `None` where it cannot tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ExecSplit {
    /// `dispatch` ending at the executor's start (replaces the span's time).
    pub(super) dispatch_ns: Option<i64>,
    pub(super) exec_tx_ns: Option<i64>,
    /// The gateways' received → forwarded on the chunk's way (inside `exec_tx`).
    pub(super) exec_relay_ns: Option<i64>,
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

impl ExecSplit {
    /// The record figures the split gives, each with its value (`None`:
    /// not known). `dispatch` only when the executor's start cut it.
    pub(super) fn figures(&self) -> impl Iterator<Item = (Figure, Option<i64>)> {
        let dispatch = self.dispatch_ns.map(|v| (Figure::Dispatch, Some(v)));
        dispatch.into_iter().chain([
            (Figure::ExecTx, self.exec_tx_ns),
            (Figure::ExecRelay, self.exec_relay_ns),
            (Figure::ExecWait, self.exec_wait_ns),
            (Figure::ExecAck, self.exec_ack_ns),
            (Figure::ExecOffset, self.offset_ns),
            (Figure::ExecErr, self.err_ns),
        ])
    }
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
    // Without gateways `stitch_hops` is `stitch`: one hop, one offset.
    let (st, _links) = stitcher.stitch_hops(ack.peer.as_str(), client, &ack.hops, t);
    if !ack.hops.is_empty() {
        let forwarding = ack
            .hops
            .as_slice()
            .iter()
            .map(|h| h.forward_ns)
            .fold(0u64, u64::saturating_add);
        out.exec_relay_ns = Some(signed(forwarding));
    }
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
    let exec_tx = dispatch.saturating_sub(wait);
    out.exec_tx_ns = Some(signed(exec_tx));
    // Gateway time inside a transfer the offset estimate made shorter than
    // it is can not be larger than the transfer: say so, as a clamp.
    if let Some(r) = out.exec_relay_ns {
        if r > signed(exec_tx) {
            out.clamped = true;
            out.exec_relay_ns = Some(signed(exec_tx));
        }
    }
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
    use stagetrace_wire::{Hops, RelayTiming, ServerTiming};

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
        // Symmetric 3 ms hops: the offset estimate is exact.
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

    /// The chunk through one gateway: client → gateway (clock +300 ms, 3 ms
    /// each way) → executor (gateway − 80 ms, 2 ms each way); the gateway
    /// forwards 2 ms after it has the chunk and sends the ack on 0.5 ms after
    /// it has it. Symmetric hops: every hop's offset estimate is exact.
    #[test]
    fn through_a_gateway_each_hop_has_its_offset_and_the_forwarding_is_exec_relay() {
        let call = Instant::now();
        let anchor = Anchor::from_parts(1_700_000_000_000_000_000, call);
        let at = |ms_x10: u64| anchor.to_unix_ns(call) + ms_x10 * MS / 10;
        let sent = call + Duration::from_millis(2);
        // Gateway has the chunk at 5 ms (client clock), forwards at 7 ms; the
        // executor has it at 9 ms, starts at 21 ms, acks at 21.1 ms; the
        // gateway has the ack at 23.1 ms, sends it at 23.6 ms; back at 26.6 ms.
        let gateway = RelayTiming {
            recv_unix_ns: at(50) + 300 * MS,
            total_ns: 186 * MS / 10,
            transfer_ns: None,
            forward_ns: 2 * MS,
            reply_ns: 181 * MS / 10,
        };
        let mut hops = Hops::new();
        hops.push(gateway);
        let timing = ServerTiming {
            recv_unix_ns: Some(at(90) + 220 * MS),
            queue_ns: Some(12 * MS),
            total_ns: Some(121 * MS / 10),
            ..ServerTiming::default()
        };
        let acked = call + Duration::from_nanos(266 * MS / 10);
        let a: ExecAcc = ExecutorAck::new("ws://e", timing, sent, acked)
            .hops(hops)
            .into();
        let mut st = Stitcher::new(ClockMode::Estimate);
        let x = split(&mut st, &a, Some(SPAN), call, &anchor);
        // span start 1 ms → executor starts at 21 ms.
        assert_eq!(x.dispatch_ns, Some((20 * MS) as i64));
        assert_eq!(x.exec_wait_ns, Some((12 * MS) as i64));
        // 1 ms before the send, 3 ms, the gateway's 2 ms, 2 ms.
        assert_eq!(x.exec_tx_ns, Some((8 * MS) as i64));
        assert_eq!(x.exec_relay_ns, Some((2 * MS) as i64));
        assert_eq!(x.exec_ack_ns, Some((10 * MS) as i64));
        // Offsets and bounds compose along the path: 300 − 80; 3 + 2.
        assert_eq!(x.offset_ns, Some((220 * MS) as i64));
        assert_eq!(x.err_ns, Some((5 * MS) as i64));
        assert!(!x.clamped && !x.rejected);

        // The same ack read as one hop (a two-party view) puts the
        // start with one blended offset: the gateway time is not told apart.
        let direct: ExecAcc = ExecutorAck::new("ws://e2", timing, sent, acked).into();
        let y = split(
            &mut Stitcher::new(ClockMode::Estimate),
            &direct,
            Some(SPAN),
            call,
            &anchor,
        );
        assert_eq!(y.exec_relay_ns, None);
        assert_ne!(y.offset_ns, Some((220 * MS) as i64));
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
