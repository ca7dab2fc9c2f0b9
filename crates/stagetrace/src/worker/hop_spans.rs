//! A relayed call's hops on the call's timeline, for exporters that draw
//! one network span per hop (`Timeline::hops`).
//!
//! Hop 0's request leaves when the transport span starts and its reply
//! ends when the transport span ends. Hop `i` ends at relay `i`, whose
//! receive is where that hop's request ends (`up` already holds the hop's
//! own clock offset); the relay forwards `forward_ns` after it and has the
//! reply back `reply_ns` after it (its monotonic clock): there the next
//! hop's request leaves and its reply ends.

use crate::hop_record::HopFigures;
use crate::record::{HopTime, SpanTime};
use stagetrace_wire::RelayTiming;

/// Places the hops of `figures` (the record's `hops`, with `relays` the
/// relays' stamps, outermost first) inside `transport` into `out`; stops at
/// the first hop the clocks could not split. Every span stays inside the
/// transport span.
pub(super) fn place(
    transport: SpanTime,
    figures: &[HopFigures],
    relays: &[RelayTiming],
    out: &mut [HopTime],
) {
    let first = transport.start_ns;
    let last = first.saturating_add(transport.dur_ns);
    let clip = |t: u64| t.clamp(first, last);
    let ns = |v: i64| u64::try_from(v).unwrap_or(0);
    // Where this hop's request leaves and where its reply ends.
    let (mut send, mut back) = (first, last);
    for (i, (h, slot)) in figures.iter().zip(out.iter_mut()).enumerate() {
        let (Some(up), Some(down)) = (h.up_ns, h.down_ns) else {
            return;
        };
        let arrive = clip(send.saturating_add(ns(up)));
        let down_from = clip(back.saturating_sub(ns(down))).max(arrive);
        *slot = HopTime {
            up: Some(SpanTime {
                start_ns: send,
                dur_ns: arrive - send,
            }),
            down: Some(SpanTime {
                start_ns: down_from,
                dur_ns: back.saturating_sub(down_from),
            }),
        };
        let Some(relay) = relays.get(i) else {
            return;
        };
        send = clip(arrive.saturating_add(relay.forward_ns));
        // Not `clamp`: stamps that contradict each other (clamped splits)
        // must not panic; the next hop then gets no length.
        back = clip(arrive.saturating_add(relay.reply_ns))
            .min(back)
            .max(send);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn hop(up: u64, down: u64) -> HopFigures {
        HopFigures {
            up_ns: Some((up * MS) as i64),
            down_ns: Some((down * MS) as i64),
            ..HopFigures::default()
        }
    }

    fn at(start: u64, dur: u64) -> Option<SpanTime> {
        Some(SpanTime {
            start_ns: start * MS,
            dur_ns: dur * MS,
        })
    }

    #[test]
    fn each_hop_sits_where_its_sender_sent_and_its_receiver_received() {
        // Transport 10 → 40 ms. Client → relay 3 ms, relay forwards 1 ms
        // after, relay → server 5 ms, server 10 ms, back 2 ms, relay
        // answers 2 ms after the reply, back to the client 7 ms.
        let transport = SpanTime {
            start_ns: 10 * MS,
            dur_ns: 30 * MS,
        };
        let relay = RelayTiming {
            recv_unix_ns: 0,
            total_ns: 20 * MS,
            transfer_ns: None,
            forward_ns: MS,
            reply_ns: 18 * MS,
        };
        let mut out = [HopTime::default(); 3];
        place(transport, &[hop(3, 7), hop(5, 2)], &[relay], &mut out);
        assert_eq!(out[0].up, at(10, 3));
        assert_eq!(out[0].down, at(33, 7));
        assert_eq!(out[1].up, at(14, 5));
        assert_eq!(out[1].down, at(29, 2));
        assert_eq!(out[2], HopTime::default());
    }

    #[test]
    fn contradicting_stamps_stay_inside_the_transport_and_never_panic() {
        // Relay 1 has the reply 2 ms after it received the request, but
        // its hop's request alone took 5 ms: the second relay then
        // forwards after the first one had the reply.
        let transport = SpanTime {
            start_ns: 0,
            dur_ns: 10 * MS,
        };
        let relay = |forward_ns, reply_ns| RelayTiming {
            recv_unix_ns: 0,
            total_ns: 3 * MS,
            transfer_ns: None,
            forward_ns,
            reply_ns,
        };
        let mut out = [HopTime::default(); 3];
        let hops = [hop(1, 1), hop(5, 1), hop(1, 1)];
        place(
            transport,
            &hops,
            &[relay(0, 2 * MS), relay(MS, MS)],
            &mut out,
        );
        for t in out.iter().flat_map(|h| [h.up, h.down]).flatten() {
            assert!(t.start_ns + t.dur_ns <= 10 * MS, "{out:?}");
        }
        assert_eq!(out[0].up, at(0, 1));
        assert_eq!(out[2].up, at(7, 1));
    }

    #[test]
    fn a_hop_without_a_split_ends_the_placement() {
        let transport = SpanTime {
            start_ns: 0,
            dur_ns: 30 * MS,
        };
        let mut out = [HopTime::default(); 2];
        let unsplit = HopFigures {
            net_ns: Some(4 * MS as i64),
            ..HopFigures::default()
        };
        place(transport, &[unsplit, hop(1, 1)], &[], &mut out);
        assert_eq!(out, [HopTime::default(); 2]);
    }
}
