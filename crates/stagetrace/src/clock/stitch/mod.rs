//! Stitching: a call's client times and the server's timing → the uplink /
//! queue / infer / downlink split, per peer, in the chosen [`ClockMode`].

use crate::record::ClockBasis;
use stagetrace_schema::Figure;
use stagetrace_wire::ServerTiming;

use super::filter::{FilterConfig, OffsetFilter};
use super::sample::{diff, NtpSample};

/// How the uplink/downlink split is obtained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockMode {
    /// Estimate the server−client offset from each call's timestamps (default).
    #[default]
    Estimate,
    /// Clocks are already synchronised (PTP/NTP): use raw wall times.
    Trusted,
    /// Report `net_ms` only.
    None,
}

/// The client's times of one call, ns since the Unix epoch on the client
/// clock, derived from the monotonic clock through the process anchor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientTimes {
    /// Request handed to the send API (`t0`).
    pub send_unix_ns: u64,
    /// Whole response received (`t3`).
    pub recv_unix_ns: u64,
    /// The response's first byte arrived, when the transport stamped it
    /// (`docs/clocks.md`: it keeps the response's transfer out of the
    /// offset estimate).
    pub first_byte_unix_ns: Option<u64>,
    /// The request's first byte left (a stamp taken before the write), when
    /// the transport stamped it: the client's work before it (encoding,
    /// masking) stays out of the offset estimate.
    pub request_first_byte_unix_ns: Option<u64>,
}

impl NtpSample {
    /// The sample of one call, when the server gave its receive time and
    /// total: the whole request (`t1`) and the whole response (`t3`).
    pub fn from_call(client: ClientTimes, server: &ServerTiming) -> Option<Self> {
        let t1 = server.recv_unix_ns?;
        let t2 = t1.checked_add(server.total_ns?)?;
        Some(NtpSample {
            t0: client.send_unix_ns,
            t1,
            t2,
            t3: client.recv_unix_ns,
        })
    }

    /// The sample the offset is estimated from: [`from_call`](Self::from_call)
    /// with `t0` moved to the request's first byte out and `t3` to the
    /// response's first byte in (the client's stamps), and `t1` back to the
    /// request's first byte in (by the server's `transfer_ns`), where known.
    /// What happens between first and last byte (transfer, the client's
    /// encoding), measured each on one clock, then stays out of the delay δ,
    /// so a big frame neither widens the bound nor moves the offset. The
    /// bound stays true as long as the first byte out was stamped no later
    /// than it left (`t0' ≤ t1'` in true time) and `t2 ≤ t3'`.
    ///
    /// The second value is true when a first-byte input contradicted the
    /// call (a client stamp outside the roundtrip, or transfers longer than
    /// the network time): it is then ignored, and the caller counts it.
    pub fn first_byte(client: ClientTimes, server: &ServerTiming) -> (Option<Self>, bool) {
        let Some(full) = NtpSample::from_call(client, server) else {
            return (None, false);
        };
        if full.delay_ns() < 0.0 {
            // The filter rejects (and counts) this sample as it is.
            return (Some(full), false);
        }
        let mut s = full;
        let mut rejected = false;
        if let Some(fb) = client.first_byte_unix_ns {
            if (full.t0..=full.t3).contains(&fb) {
                s.t3 = fb;
            } else {
                rejected = true;
            }
        }
        if let Some(out) = client.request_first_byte_unix_ns {
            if (full.t0..=s.t3).contains(&out) {
                s.t0 = out;
            } else {
                rejected = true;
            }
        }
        if let Some(x) = server.transfer_ns {
            match full.t1.checked_sub(x) {
                Some(t1) => s.t1 = t1,
                None => rejected = true,
            }
        }
        // What was taken out (request transfer and the client's work before
        // the first byte left, the response's transfer) fits in the network
        // time; more is a broken stamp: fall back to the whole sample.
        if s.delay_ns() < 0.0 {
            return (Some(full), true);
        }
        (Some(s), rejected)
    }
}

/// What stitching one call's client and server times gives, in integer
/// nanoseconds (the record's unit inside the process).
/// `None` where the inputs do not allow the figure.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stitched {
    /// `t3 − t0`.
    pub roundtrip_ns: Option<i64>,
    /// Server receive → send (server monotonic).
    pub server_ns: Option<i64>,
    /// `roundtrip − server`.
    pub net_ns: Option<i64>,
    /// Send → server receive, clock-corrected.
    pub uplink_ns: Option<i64>,
    /// Server send → client receive, clock-corrected.
    pub downlink_ns: Option<i64>,
    /// Server queue.
    pub queue_ns: Option<i64>,
    /// Server inference.
    pub infer_ns: Option<i64>,
    /// An async server's chunk ready → its reply sent.
    pub poll_wait_ns: Option<i64>,
    /// Inference's parts, as the server sent them.
    pub pre_ns: Option<i64>,
    /// The model's part of inference.
    pub model_ns: Option<i64>,
    /// Post-processing's part of inference.
    pub post_ns: Option<i64>,
    /// The device's own time for the model's work.
    pub device_ns: Option<i64>,
    /// The request was in → a worker picked it up: the server's own figure,
    /// or (a pickup stamp) the part of `t1 − t0` beyond the path's delay.
    pub accept_wait_ns: Option<i64>,
    /// The request was in → the server's event loop read it.
    pub loop_wait_ns: Option<i64>,
    /// Server − client offset used.
    pub offset_ns: Option<i64>,
    /// ± bound on the split.
    pub split_err_ns: Option<i64>,
    /// What the split rests on.
    pub basis: Option<ClockBasis>,
    /// True when a negative figure had to be clamped to 0.
    pub clamped: bool,
    /// True when a first-byte input (the server's `transfer_ns`, the
    /// client's first-byte stamp) contradicted the call and was ignored.
    pub rejected_first_byte: bool,
    /// Frequency error of the peer's clock against ours, ppm, once estimated.
    pub drift_ppm: Option<f64>,
    /// ± bound on `drift_ppm`.
    pub drift_err_ppm: Option<f64>,
    /// True when this call confirmed a step of the peer's clock (the
    /// estimator's window was reset).
    pub clock_step: bool,
}

impl Stitched {
    /// The record figures the stitch gives besides the roundtrip, each with
    /// its value (`None`: the inputs did not allow it).
    pub fn figures(&self) -> [(Figure, Option<i64>); 15] {
        [
            (Figure::Pre, self.pre_ns),
            (Figure::Model, self.model_ns),
            (Figure::Post, self.post_ns),
            (Figure::Device, self.device_ns),
            (Figure::AcceptWait, self.accept_wait_ns),
            (Figure::LoopWait, self.loop_wait_ns),
            (Figure::Server, self.server_ns),
            (Figure::Net, self.net_ns),
            (Figure::Uplink, self.uplink_ns),
            (Figure::Downlink, self.downlink_ns),
            (Figure::Queue, self.queue_ns),
            (Figure::Infer, self.infer_ns),
            (Figure::PollWait, self.poll_wait_ns),
            (Figure::Offset, self.offset_ns),
            (Figure::SplitErr, self.split_err_ns),
        ]
    }
}

/// A pickup stamp (`ServerTiming::recv_at_pickup`): the server stamped when a
/// worker took the request up, not when its bytes arrived, so `up` (send →
/// that stamp) holds the wait for a worker. The bytes are taken to have
/// crossed in the path's own time — `path_up`, half the delay of the offset
/// filter's tightest sample, the uplink the estimate already assumes — and
/// the rest moves from uplink and net to `accept_wait`, `queue` and
/// `server`. Its error is the split's own (`split_err`): the same sample
/// bounds both. Returns the uplink kept.
fn take_pickup_wait(out: &mut Stitched, up: f64, path_up: Option<f64>) -> f64 {
    let Some(path_up) = path_up.filter(|p| p.is_finite() && *p >= 0.0) else {
        return up;
    };
    if up <= path_up {
        out.accept_wait_ns = Some(out.accept_wait_ns.unwrap_or(0));
        return up;
    }
    let wait = whole_ns(up - path_up);
    let add = |v: &mut Option<i64>| *v = Some(v.unwrap_or(0) + wait);
    add(&mut out.accept_wait_ns);
    add(&mut out.queue_ns);
    out.server_ns = out.server_ns.map(|s| s + wait);
    out.net_ns = out.net_ns.map(|n| (n - wait).max(0));
    path_up
}

/// A clamped (finite, non-negative or offset) ns figure as the record's integer ns.
fn whole_ns(ns: f64) -> i64 {
    ns.round() as i64
}

/// Clamp a duration in ns to `[0, max]`, flagging when it had to move.
fn clamp_ns(v: f64, max: f64, clamped: &mut bool) -> f64 {
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

/// Most peers a [`Stitcher`] keeps an estimate for; the least recently used
/// one is forgotten beyond this.
pub const MAX_PEERS: usize = 64;

#[derive(Debug)]
struct Peer {
    name: String,
    filter: OffsetFilter,
    last_used: u64,
}

/// Per-layer stitching state: the offset estimator(s) and the mode.
#[derive(Debug)]
pub struct Stitcher {
    mode: ClockMode,
    cfg: FilterConfig,
    peers: Vec<Peer>,
    tick: u64,
    clamped: u64,
}

impl Stitcher {
    /// A stitcher in the given mode.
    pub fn new(mode: ClockMode) -> Self {
        Self::with_config(mode, FilterConfig::default())
    }

    /// A stitcher with explicit filter tuning.
    pub fn with_config(mode: ClockMode, cfg: FilterConfig) -> Self {
        Stitcher {
            mode,
            cfg,
            peers: Vec::new(),
            tick: 0,
            clamped: 0,
        }
    }

    /// The mode this stitcher runs in.
    pub fn mode(&self) -> ClockMode {
        self.mode
    }

    /// Calls that had a negative (or impossible) figure clamped.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// The offset filter of `peer`, when it has one.
    pub fn filter(&self, peer: &str) -> Option<&OffsetFilter> {
        self.peers
            .iter()
            .find(|p| p.name == peer)
            .map(|p| &p.filter)
    }

    pub(super) fn filter_mut(&mut self, peer: &str) -> &mut OffsetFilter {
        self.tick += 1;
        let tick = self.tick;
        let i = match self.peers.iter().position(|p| p.name == peer) {
            Some(i) => i,
            None => {
                if self.peers.len() >= MAX_PEERS {
                    if let Some(lru) =
                        (0..self.peers.len()).min_by_key(|&i| self.peers[i].last_used)
                    {
                        self.peers.swap_remove(lru);
                    }
                }
                self.peers.push(Peer {
                    name: peer.to_owned(),
                    filter: OffsetFilter::new(self.cfg),
                    last_used: tick,
                });
                self.peers.len() - 1
            }
        };
        let p = &mut self.peers[i];
        p.last_used = tick;
        &mut p.filter
    }

    /// Stitch one call. `peer` names the server (e.g. its address; "" for the
    /// only one), so each peer keeps its own offset estimate.
    pub fn stitch(&mut self, peer: &str, client: ClientTimes, server: &ServerTiming) -> Stitched {
        let mut clamped = false;
        let rt_ns = clamp_ns(
            diff(client.recv_unix_ns, client.send_unix_ns),
            f64::INFINITY,
            &mut clamped,
        );
        let mut out = Stitched {
            roundtrip_ns: Some(whole_ns(rt_ns)),
            queue_ns: server.queue_ns.map(|v| v as i64),
            infer_ns: server.infer_ns.map(|v| v as i64),
            poll_wait_ns: server.poll_wait_ns.map(|v| v as i64),
            pre_ns: server.pre_ns.map(|v| v as i64),
            model_ns: server.model_ns.map(|v| v as i64),
            post_ns: server.post_ns.map(|v| v as i64),
            device_ns: server.device_ns.map(|v| v as i64),
            accept_wait_ns: server.accept_wait_ns.map(|v| v as i64),
            loop_wait_ns: server.loop_wait_ns.map(|v| v as i64),
            ..Stitched::default()
        };
        // Server time inside the roundtrip: the total when given, else (an
        // unmodified openpi server) the inference time alone.
        let inside = server.total_ns.or(server.infer_ns);
        if let Some(total) = server.total_ns {
            out.server_ns = Some(whole_ns(total as f64));
        }
        let net_ns = inside.map(|s| clamp_ns(rt_ns - s as f64, f64::INFINITY, &mut clamped));
        out.net_ns = net_ns.map(whole_ns);

        let sample = NtpSample::from_call(client, server);
        let (estimate_from, rejected) = NtpSample::first_byte(client, server);
        out.rejected_first_byte = rejected;
        out.basis = Some(match (self.mode, sample, net_ns) {
            (ClockMode::None, _, _) => ClockBasis::None,
            (_, None, _) | (_, _, None) => ClockBasis::Degraded,
            (ClockMode::Trusted, Some(s), Some(net)) => {
                let mut up = clamp_ns(diff(s.t1, s.t0), net, &mut clamped);
                if server.recv_at_pickup {
                    // The filter runs only to learn the path's delay.
                    let path = estimate_from
                        .and_then(|e| self.filter_mut(peer).add(e))
                        .map(|e| e.delay_ns / 2.0);
                    up = take_pickup_wait(&mut out, up, path);
                }
                let net = out.net_ns.map_or(net, |n| n as f64);
                out.uplink_ns = Some(whole_ns(up));
                out.downlink_ns = Some(whole_ns(net - up));
                out.offset_ns = Some(0);
                ClockBasis::Trusted
            }
            (ClockMode::Estimate, Some(s), Some(net)) => {
                match estimate_from.and_then(|e| self.filter_mut(peer).add(e)) {
                    Some(est) => {
                        // Uplink ends at the whole request (`t1`), whichever
                        // sample the offset came from.
                        let mut up = clamp_ns(diff(s.t1, s.t0) - est.offset_ns, net, &mut clamped);
                        if server.recv_at_pickup {
                            up = take_pickup_wait(&mut out, up, Some(est.delay_ns / 2.0));
                        }
                        let net = out.net_ns.map_or(net, |n| n as f64);
                        out.uplink_ns = Some(whole_ns(up));
                        out.downlink_ns = Some(whole_ns(net - up));
                        out.offset_ns = Some(whole_ns(est.offset_ns));
                        out.split_err_ns = Some(whole_ns(est.err_ns));
                        out.drift_ppm = est.drift_ppm;
                        out.drift_err_ppm = est.drift_err_ppm;
                        out.clock_step = est.step;
                        ClockBasis::Estimate
                    }
                    // A sample the filter rejects, with nothing to fall back on.
                    None => ClockBasis::Degraded,
                }
            }
        });
        if clamped {
            self.clamped += 1;
        }
        out.clamped = clamped;
        out
    }
}

#[cfg(test)]
mod tests;
