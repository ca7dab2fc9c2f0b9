//! Stitching a call that went through relays: one clock
//! estimate per hop, composed along the path.
//!
//! Every machine has its own clock. Hop `i` ends at node `i` (relay `i`, or
//! the policy server after the last relay) and starts at the node before it
//! (the client, or relay `i − 1`). Each hop is an NTP sample of its own:
//! the client's send / receive against the first relay's receive / total,
//! then each relay's forward / reply stamps (its clock) against the next
//! node's receive / total (that node's clock). Each hop keeps its own
//! [`OffsetFilter`](super::OffsetFilter) (peer `"<peer>#hop<i>"`), so each
//! gets its own offset, bound and drift. The policy server's offset from the
//! client is the sum of the hops' offsets, and its bound the sum of their
//! bounds: that is what `uplink` / `downlink` (client send → the policy
//! server has the whole request, however many hops between) rest on.

use crate::hop_record::HopFigures;
use stagetrace_wire::{Hops, RelayTiming, ServerTiming};

use super::sample::{diff, NtpSample};
use super::stitch::{ClientTimes, ClockMode, Stitched, Stitcher};

/// The clamp arithmetic of `stitch.rs`, for one hop.
fn clamp(v: f64, max: f64, clamped: &mut bool) -> f64 {
    if v < 0.0 || v.is_nan() {
        *clamped = true;
        0.0
    } else if v > max {
        *clamped = true;
        max
    } else {
        v
    }
}

fn whole(ns: f64) -> i64 {
    ns.round() as i64
}

/// One hop's stamps: the sender's send / receive (sender's clock, ns since
/// the epoch, with the client's first-byte stamps on the first hop) and
/// the receiving node's timing.
struct Hop {
    from: ClientTimes,
    to: ServerTiming,
    relay: Option<RelayTiming>,
}

impl Stitcher {
    /// Stitch one call whose response came through `hops` (outermost first)
    /// from the policy server, whose timing is `server`: the path's figures
    /// (as [`stitch`](Self::stitch) gives for a direct call, with the offset
    /// and bound composed along the path) and one [`HopFigures`] per hop.
    /// Without hops, [`stitch`](Self::stitch) and no hops.
    pub fn stitch_hops(
        &mut self,
        peer: &str,
        client: ClientTimes,
        hops: &Hops,
        server: &ServerTiming,
    ) -> (Stitched, Vec<HopFigures>) {
        // The path as one two-party call: roundtrip, server, net, queue,
        // infer, and a (wider) end-to-end split the composed one replaces.
        let mut out = self.stitch(peer, client, server);
        let Some(first) = hops.as_slice().first() else {
            return (out, Vec::new());
        };
        let mut path: Vec<Hop> = Vec::with_capacity(hops.len() + 1);
        path.push(Hop {
            from: client,
            to: first.as_server(),
            relay: Some(*first),
        });
        for (i, r) in hops.as_slice().iter().enumerate() {
            let next = hops.as_slice().get(i + 1);
            path.push(Hop {
                from: ClientTimes {
                    send_unix_ns: r.recv_unix_ns.saturating_add(r.forward_ns),
                    recv_unix_ns: r.recv_unix_ns.saturating_add(r.reply_ns),
                    first_byte_unix_ns: None,
                    request_first_byte_unix_ns: None,
                },
                to: next.map_or(*server, RelayTiming::as_server),
                relay: next.copied(),
            });
        }
        let mut clamped = false;
        let mut figures = Vec::with_capacity(path.len());
        // Σ offsets and Σ bounds, while every hop has an estimate.
        let mut composed: Option<(f64, f64)> = Some((0.0, 0.0));
        for (i, hop) in path.iter().enumerate() {
            let span = diff(hop.from.recv_unix_ns, hop.from.send_unix_ns);
            let inside = hop.to.total_ns.or(hop.to.infer_ns);
            let net = inside.map(|s| clamp(span - s as f64, f64::INFINITY, &mut clamped));
            let mut h = HopFigures {
                net_ns: net.map(whole),
                relay_ns: hop
                    .relay
                    .map(|r| i64::try_from(r.own_ns()).unwrap_or(i64::MAX)),
                ..HopFigures::default()
            };
            let sample = NtpSample::from_call(hop.from, &hop.to);
            let est = match (self.mode(), sample) {
                (ClockMode::Trusted, Some(_)) => Some((0.0, 0.0, None, None)),
                (ClockMode::Estimate, Some(_)) => {
                    let (from, _) = NtpSample::first_byte(hop.from, &hop.to);
                    let key = format!("{peer}#hop{i}");
                    from.and_then(|s| self.filter_mut(&key).add(s))
                        .map(|e| (e.offset_ns, e.err_ns, e.drift_ppm, e.drift_err_ppm))
                }
                _ => None,
            };
            match (est, sample, net) {
                (Some((offset, err, drift, drift_err)), Some(s), Some(net)) => {
                    let up = clamp(diff(s.t1, s.t0) - offset, net, &mut clamped);
                    h.up_ns = Some(whole(up));
                    h.down_ns = Some(whole(net - up));
                    h.offset_ns = Some(whole(offset));
                    h.err_ns = Some(whole(err));
                    h.drift_ppm = drift;
                    h.drift_err_ppm = drift_err;
                    // The path's offset and bound are the sums of the
                    // hops' as the record shows them (whole ns), so the
                    // numbers a user adds up agree to the nanosecond.
                    let (o_ns, e_ns) = (whole(offset) as f64, whole(err) as f64);
                    composed = composed.map(|(o, e)| (o + o_ns, e + e_ns));
                }
                _ => composed = None,
            }
            figures.push(h);
        }
        if let (Some((offset, err)), Some(t1), Some(net)) =
            (composed, server.recv_unix_ns, out.net_ns)
        {
            if self.mode() == ClockMode::Estimate {
                let net = net as f64;
                let up = clamp(diff(t1, client.send_unix_ns) - offset, net, &mut clamped);
                out.uplink_ns = Some(whole(up));
                out.downlink_ns = Some(whole(net - up));
                out.offset_ns = Some(whole(offset));
                out.split_err_ns = Some(whole(err));
            }
        }
        out.clamped |= clamped;
        (out, figures)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Client → relay (+300 ms) → server (relay − 80 ms), with known one-way
    /// delays: 3 / 1 ms on the first hop, 5 / 2 ms on the second, relay
    /// 0.2 ms in and 0.3 ms out, server 10 ms.
    fn call(at: u64) -> (ClientTimes, Hops, ServerTiming) {
        let relay_skew = 300 * MS;
        let server_skew = 220 * MS;
        let t0 = at;
        let relay_recv = t0 + 3 * MS; // true time
        let fwd = 200_000;
        let server_recv = relay_recv + fwd + 5 * MS;
        let server_total = 10 * MS;
        let reply = fwd + 5 * MS + server_total + 2 * MS;
        let relay_total = reply + 300_000;
        let t3 = relay_recv + relay_total + MS;
        let mut hops = Hops::new();
        hops.push(RelayTiming {
            recv_unix_ns: relay_recv + relay_skew,
            total_ns: relay_total,
            transfer_ns: None,
            forward_ns: fwd,
            reply_ns: reply,
        });
        let client = ClientTimes {
            send_unix_ns: t0,
            recv_unix_ns: t3,
            first_byte_unix_ns: None,
            request_first_byte_unix_ns: None,
        };
        let server = ServerTiming {
            recv_unix_ns: Some(server_recv + server_skew),
            total_ns: Some(server_total),
            infer_ns: Some(server_total),
            ..ServerTiming::default()
        };
        (client, hops, server)
    }

    #[test]
    fn hops_split_within_their_bounds_and_offsets_compose() {
        let mut st = Stitcher::new(ClockMode::Estimate);
        let (client, hops, server) = call(1_700_000_000 * 1_000 * MS);
        let (out, figures) = st.stitch_hops("gw", client, &hops, &server);
        assert_eq!(figures.len(), 2);
        let (a, b) = (figures[0], figures[1]);
        // Network time per hop is exact; the relay's own time too.
        assert_eq!(a.net_ns, Some(4 * MS as i64));
        assert_eq!(b.net_ns, Some(7 * MS as i64));
        assert_eq!(a.relay_ns, Some(500_000));
        assert_eq!(b.relay_ns, None);
        // The split: truth 3 / 1 and 5 / 2 ms, inside each hop's bound.
        let inside = |v: Option<i64>, truth: u64, err: Option<i64>| {
            (v.unwrap() - truth as i64).abs() <= err.unwrap()
        };
        assert!(inside(a.up_ns, 3 * MS, a.err_ns), "{a:?}");
        assert!(inside(b.down_ns, 2 * MS, b.err_ns), "{b:?}");
        // One sample each: the bound is δ/2 of the hop.
        assert_eq!((a.err_ns, b.err_ns), (Some(2 * MS as i64), Some(3_500_000)));
        // Offsets and bounds compose along the path.
        assert_eq!(
            out.offset_ns.unwrap(),
            a.offset_ns.unwrap() + b.offset_ns.unwrap()
        );
        assert_eq!(out.split_err_ns, Some(5_500_000));
        // Uplink: client send → the server has the request (8.2 ms true).
        assert!((out.uplink_ns.unwrap() - 8_200_000).abs() <= 5_500_000);
        // net keeps its meaning: roundtrip − server, relay time included.
        assert_eq!(out.net_ns, Some(11_500_000));
    }
}
