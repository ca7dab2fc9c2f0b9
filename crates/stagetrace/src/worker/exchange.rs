//! A transport span's exchange as its socket stamps place it on the call's
//! timeline (the converter's first step for a transport stage), the
//! robot's side of it for the stitch, and the black box's cut without a
//! server timing.

use std::time::Instant;

use crate::call_state::{CallState, TransportAcc};
use crate::clock::{Anchor, ClientTimes};
use crate::record::{CallRecord, SpanTime, Timeline};
use crate::stage::Stage;
use crate::stamp::Calibration;
use stagetrace_schema::Figure;

/// A transport span's exchange as its socket stamps place it: where it
/// starts and (at the kernel's stamp, when there is one) ends.
pub(super) struct Exchange {
    /// On the call's timeline, ending where the kernel had the response.
    pub(super) span: SpanTime,
    start_at: Instant,
    end_at: Instant,
    /// The kernel's stamp of the response's last byte, inside the span.
    kernel_end: Option<Instant>,
    /// The robot's wait from that stamp to the app's read (0 without one).
    pub(super) rx_wait_ns: u64,
}

/// The transport span on the call's timeline, with what its socket stamps
/// say: the roundtrip ending where the kernel had the response (the app's
/// wait after it is the robot's `rx_wait`), the robot's `tx_wait` before
/// the kernel had the request, and the response's first byte.
pub(super) fn exchange(
    s: &CallState,
    t: &TransportAcc,
    cal: Calibration,
    rec: &mut CallRecord,
    tl: &mut Timeline,
) -> Exchange {
    let mut span = SpanTime {
        start_ns: cal.ns(t.start.ticks_since(s.start)),
        dur_ns: cal.ns(t.end.ticks_since(t.start)),
    };
    tl.transport = Some(span);
    tl.transport_span_id = Some(t.span_id.to_be_bytes());
    let start_at = cal.instant(t.start);
    let read_at = cal.instant(t.end);
    let kernel_end = t
        .stamps
        .kernel_rx
        .filter(|k| (start_at..=read_at).contains(k));
    let rx_wait_ns = kernel_end.map_or(0, |k| ns_since(k, read_at));
    if kernel_end.is_some() {
        rec.set(Figure::RxWait, to_i64(rx_wait_ns));
        span.dur_ns = span.dur_ns.saturating_sub(rx_wait_ns);
    }
    let end_at = kernel_end.unwrap_or(read_at);
    rec.set(Figure::Roundtrip, to_i64(span.dur_ns));
    // The robot's own time before the kernel had the request: inside
    // the uplink, not the network's. One attempt only: a retry's
    // write is not the first span's.
    let written = t
        .stamps
        .request_written
        .filter(|w| (start_at..=end_at).contains(w));
    if let (Some(w), true) = (written, s.stages[Stage::Transport.index()].count <= 1) {
        rec.set(Figure::TxWait, to_i64(ns_since(start_at, w)));
    }
    // The first byte on the call's timeline; a stamp outside the
    // transport span is kept off it (the stitch counts it). A response
    // in one segment is all in before its first read: its first byte
    // is then the kernel's stamp too.
    let first_byte = t
        .stamps
        .first_byte
        .filter(|fb| (start_at..=read_at).contains(fb))
        .map(|fb| fb.min(end_at));
    tl.response_first_byte_ns = first_byte.map(|fb| ns_since(cal.instant(s.start), fb));
    Exchange {
        span,
        start_at,
        end_at,
        kernel_end,
        rx_wait_ns,
    }
}

/// The robot's side of the exchange, on the wall clock, for the stitch.
pub(super) fn client_times(t: &TransportAcc, anchor: &Anchor, ex: &Exchange) -> ClientTimes {
    ClientTimes {
        send_unix_ns: anchor.to_unix_ns(ex.start_at),
        recv_unix_ns: anchor.to_unix_ns(ex.end_at),
        first_byte_unix_ns: t
            .stamps
            .first_byte
            .map(|fb| anchor.to_unix_ns(ex.kernel_end.map_or(fb, |k| fb.min(k)))),
        request_first_byte_unix_ns: t.stamps.request_first_byte.map(|at| anchor.to_unix_ns(at)),
    }
}

/// No server timing: the first byte cuts the black box in two, the wait
/// for it (server and network unsplit) and the response's transfer, both
/// on this clock (ttfb + rx = roundtrip). Never drawn as queue or infer.
pub(super) fn black_box_split(span: SpanTime, tl: &Timeline, rec: &mut CallRecord) {
    if let Some(fb_ns) = tl.response_first_byte_ns {
        let end_ns = span.start_ns.saturating_add(span.dur_ns);
        rec.set(Figure::Ttfb, to_i64(fb_ns.saturating_sub(span.start_ns)));
        rec.set(Figure::Rx, to_i64(end_ns.saturating_sub(fb_ns)));
    }
}

/// `earlier` → `later` in ns (0 when `later` is not after it).
pub(super) fn ns_since(earlier: Instant, later: Instant) -> u64 {
    u64::try_from(later.saturating_duration_since(earlier).as_nanos()).unwrap_or(u64::MAX)
}

/// A figure from integer ns: durations fit i64 for 292 years.
pub(super) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
