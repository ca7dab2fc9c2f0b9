//! The truth of the hops: per call, each hop's true
//! uplink and downlink from the real stamps of both its ends less each
//! machine's known clock error (never from the estimate, as
//! `crates/stagetrace-net/tests/ws_hop_truth.rs` does), against the record's
//! `hops` and their bounds; the gateway's own time, `net` and `infer`; the
//! estimated drift against the injected one; and the executor's wait
//! against its controller's own record of each chunk.

use serde::Serialize;
use stagetrace::{hop_record::HopFigures, record::CallRecord};
use stagetrace_net::ServerClock;
use stagetrace_schema::ns_to_ms;
use stagetrace_schema::Figure;

use crate::args::DemoArgs;
use crate::figures::steady;
use crate::hop_services::HopRun;

/// One µs of rounding (the record's resolution).
const ROUND_MS: f64 = 1e-3;

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) / 2]
}

fn max(v: impl Iterator<Item = f64>) -> f64 {
    v.fold(0.0, f64::max)
}

/// A stamp of `clock` back on the host's clock, ns.
fn true_ns(clock: &ServerClock, stamp: u64) -> i64 {
    let approx = stamp as i64 - clock.offset_ns();
    stamp as i64 - clock.offset_at(approx.max(0) as u64)
}

/// One hop: the truth, what the record says, and whether the truth lies
/// inside the stated bound.
#[derive(Debug, Serialize)]
pub(crate) struct LinkTruth {
    /// Its index in the record's `hops` array (0: robot → gateway, 1:
    /// gateway → server); the text says hop 1, hop 2.
    pub(crate) index: usize,
    pub(crate) from: &'static str,
    pub(crate) to: &'static str,
    /// Calls compared.
    pub(crate) calls: usize,
    pub(crate) injected_up_ms: f64,
    pub(crate) injected_down_ms: f64,
    /// Medians: the truth per call, the record's figures, its bound.
    pub(crate) true_up_ms: f64,
    pub(crate) true_down_ms: f64,
    pub(crate) up_ms: f64,
    pub(crate) down_ms: f64,
    pub(crate) err_ms: f64,
    pub(crate) net_ms: f64,
    pub(crate) true_net_ms: f64,
    /// Largest |net − truth| of one call.
    pub(crate) net_max_err_ms: f64,
    /// Share of calls whose true up and down both lie within ± err.
    pub(crate) inside: f64,
    /// This node's clock − the previous node's: the last call's estimate
    /// and the truth then.
    pub(crate) offset_ms: Option<f64>,
    pub(crate) injected_offset_ms: f64,
    /// The last call's drift estimate against the injected rate difference.
    pub(crate) drift_ppm: Option<f64>,
    pub(crate) injected_drift_ppm: f64,
}

/// The gateway path: per hop, the gateway's own time, `net`, `infer`.
#[derive(Debug, Serialize)]
pub(crate) struct HopTruth {
    pub(crate) hops: Vec<LinkTruth>,
    /// The gateway's own time (`hops[0].relay_ms`), median, and its largest
    /// error against the gateway's own stamps.
    pub(crate) gateway_ms: f64,
    pub(crate) true_gateway_ms: f64,
    pub(crate) gateway_max_err_ms: f64,
    /// Largest |net − truth| and |infer − truth| of one call.
    pub(crate) net_max_err_ms: f64,
    pub(crate) infer_max_err_ms: f64,
    /// Share of calls whose whole-path uplink / downlink lie within ± split_err.
    pub(crate) path_inside: f64,
}

/// The remote executor: its wait against the controller's own record.
#[derive(Debug, Serialize)]
pub(crate) struct ExecTruth {
    pub(crate) calls: usize,
    pub(crate) busy_ms: f64,
    pub(crate) busy_every: u64,
    /// Steady calls whose chunk found the executor busy, and how many of
    /// them show at least the busy time as `exec_wait`.
    pub(crate) busy_calls: usize,
    pub(crate) busy_shown: usize,
    /// Median `exec_wait` of the busy calls; largest of the others.
    pub(crate) busy_wait_ms: f64,
    pub(crate) other_wait_max_ms: f64,
    /// Largest |exec_wait − the controller's own wait| of one call.
    pub(crate) wait_max_err_ms: f64,
    /// Median `exec_tx`, the truth (dispatch start → the executor's
    /// receive stamp, both on the host's clock), the injected delay, and
    /// the share of calls whose truth lies within ± `exec_err`.
    pub(crate) exec_tx_ms: f64,
    pub(crate) true_tx_ms: f64,
    pub(crate) injected_tx_ms: f64,
    pub(crate) tx_inside: f64,
    /// The last call's executor offset, the truth then, its bound (median),
    /// and the share of calls whose true offset lies within it.
    pub(crate) exec_offset_ms: Option<f64>,
    pub(crate) injected_offset_ms: f64,
    pub(crate) exec_err_ms: f64,
    pub(crate) offset_inside: f64,
}

/// Per call: hop 0, hop 1 (true up, true down, up, down, err), path.
struct CallTruth {
    hops: [[f64; 7]; 2],
    net_err: f64,
    relay: (f64, f64),
    infer_err: f64,
    path_inside: bool,
}

fn call_truth(run: &HopRun, gw: &ServerClock, rec: &CallRecord) -> Option<CallTruth> {
    let r = run.relays.get(&rec.seq)?;
    let server = run.server.get(rec.trace_id.as_ref()?)?;
    let h = &rec.hops;
    if h.len() != 2 {
        return None;
    }
    let tr = rec.timeline.transport?;
    let t0 = (rec.timeline.call_start_unix_ns + tr.start_ns) as i64;
    // The reply was in when the robot's kernel had it: the record's
    // roundtrip ends there (kernel receive stamps), and the robot's late
    // read (`rx_wait`) is its host's, not the way back's.
    let t3 = t0 + tr.dur_ns as i64 - rec.get(Figure::RxWait).unwrap_or(0);
    let g_recv = true_ns(gw, r.recv_unix_ns);
    let (g_fwd, g_reply) = (g_recv + r.forward_ns as i64, g_recv + r.reply_ns as i64);
    let g_sent = g_recv + r.total_ns as i64;
    let s_recv = true_ns(&run.server_clock, server.recv_unix_ns?);
    let s_sent = s_recv + server.total_ns? as i64;
    let hop = |i: usize, up: i64, down: i64| -> Option<[f64; 7]> {
        Some([
            ns_to_ms(up),
            ns_to_ms(down),
            ns_to_ms(h[i].up_ns?),
            ns_to_ms(h[i].down_ns?),
            ns_to_ms(h[i].err_ns?),
            ns_to_ms(h[i].net_ns?),
            ns_to_ms(up + down),
        ])
    };
    let true_relay = r.own_ns() as i64;
    let true_path = (s_recv - t0, t3 - s_sent);
    let inside = |m: f64, t: f64, e: f64| (m - t).abs() <= e + ROUND_MS;
    let err = rec.ms(Figure::SplitErr)?;
    Some(CallTruth {
        hops: [
            hop(0, g_recv - t0, t3 - g_sent)?,
            hop(1, s_recv - g_fwd, g_reply - s_sent)?,
        ],
        net_err: (rec.ms(Figure::Net)? - ns_to_ms(true_path.0 + true_path.1)).abs(),
        relay: (ns_to_ms(h[0].relay_ns?), ns_to_ms(true_relay)),
        infer_err: (rec.ms(Figure::Infer)? - ns_to_ms(server.infer_ns? as i64)).abs(),
        path_inside: inside(rec.ms(Figure::Uplink)?, ns_to_ms(true_path.0), err)
            && inside(rec.ms(Figure::Downlink)?, ns_to_ms(true_path.1), err),
    })
}

impl HopTruth {
    /// The truth of the gateway path over the steady calls of `records`;
    /// `None` without a gateway or without a call whose truth is known.
    pub(crate) fn of(a: &DemoArgs, run: &HopRun, records: &[CallRecord]) -> Option<HopTruth> {
        let gw = run.gateway_clock.as_ref()?;
        let calls: Vec<CallTruth> = records
            .iter()
            .filter(|r| steady(r))
            .filter_map(|r| call_truth(run, gw, r))
            .collect();
        if calls.is_empty() {
            return None;
        }
        let last = records
            .iter()
            .rev()
            .find(|r| steady(r) && r.hops.len() == 2);
        // The truth of each hop's offset at the last call: that node's
        // clock − the previous node's, both read at the call's start.
        let at = last.map_or(0, |r| r.timeline.call_start_unix_ns);
        let hops = injected(a, run, gw, at)
            .iter()
            .enumerate()
            .map(|(i, inj)| LinkTruth::of(i, inj, &calls, last.and_then(|r| r.hops.get(i))))
            .collect();
        let n = calls.len() as f64;
        Some(HopTruth {
            hops,
            gateway_ms: median(calls.iter().map(|c| c.relay.0).collect()),
            true_gateway_ms: median(calls.iter().map(|c| c.relay.1).collect()),
            gateway_max_err_ms: max(calls.iter().map(|c| (c.relay.0 - c.relay.1).abs())),
            net_max_err_ms: max(calls.iter().map(|c| c.net_err)),
            infer_max_err_ms: max(calls.iter().map(|c| c.infer_err)),
            path_inside: calls.iter().filter(|c| c.path_inside).count() as f64 / n,
        })
    }
}

/// What the demo injected on one hop: its two ends, its delays, and the
/// offset and drift of its far end's clock against its near end's.
struct Injected {
    from: &'static str,
    to: &'static str,
    up_ms: f64,
    down_ms: f64,
    offset_ns: i64,
    drift_ppm: f64,
}

/// What the demo injected on robot → gateway and on gateway → server, the
/// clock offsets as they stood at `at` (ns since the epoch).
fn injected(a: &DemoArgs, run: &HopRun, gw: &ServerClock, at: u64) -> [Injected; 2] {
    let (g_off, s_off) = (gw.offset_at(at), run.server_clock.offset_at(at));
    let h = &a.hops;
    [
        Injected {
            from: "robot",
            to: "gateway",
            up_ms: h.gateway_uplink_delay_ms,
            down_ms: h.gateway_downlink_delay_ms,
            offset_ns: g_off,
            drift_ppm: h.gateway_drift_ppm,
        },
        Injected {
            from: "gateway",
            to: "server",
            up_ms: a.uplink_delay_ms,
            down_ms: a.downlink_delay_ms,
            offset_ns: s_off - g_off,
            drift_ppm: a.server_drift_ppm - h.gateway_drift_ppm,
        },
    ]
}

impl LinkTruth {
    /// Hop `i` over `calls`: its truth against what the records say, the
    /// clock's offset and drift from `last`, the last steady call's record
    /// of the hop.
    fn of(i: usize, inj: &Injected, calls: &[CallTruth], last: Option<&HopFigures>) -> LinkTruth {
        let col = |k: usize| median(calls.iter().map(|c| c.hops[i][k]).collect());
        let inside = calls
            .iter()
            .filter(|c| {
                let l = c.hops[i];
                (l[2] - l[0]).abs() <= l[4] + ROUND_MS && (l[3] - l[1]).abs() <= l[4] + ROUND_MS
            })
            .count();
        LinkTruth {
            index: i,
            from: inj.from,
            to: inj.to,
            calls: calls.len(),
            injected_up_ms: inj.up_ms,
            injected_down_ms: inj.down_ms,
            true_up_ms: col(0),
            true_down_ms: col(1),
            up_ms: col(2),
            down_ms: col(3),
            err_ms: col(4),
            net_ms: col(5),
            true_net_ms: col(6),
            net_max_err_ms: max(calls.iter().map(|c| (c.hops[i][5] - c.hops[i][6]).abs())),
            inside: inside as f64 / calls.len() as f64,
            offset_ms: last.and_then(|x| x.offset_ns).map(ns_to_ms),
            injected_offset_ms: ns_to_ms(inj.offset_ns),
            drift_ppm: last.and_then(|x| x.drift_ppm),
            injected_drift_ppm: inj.drift_ppm,
        }
    }
}

impl ExecTruth {
    pub(crate) fn of(a: &DemoArgs, run: &HopRun, records: &[CallRecord]) -> Option<ExecTruth> {
        let (clock, starts) = run.executor.as_ref()?;
        let h = &a.hops;
        let busy_ms = h.executor_busy_ms;
        // (record, the controller's own wait as (earliest, latest), busy,
        // true exec_tx)
        let calls: Vec<(&CallRecord, (f64, f64), bool, f64)> = records
            .iter()
            .filter(|r| steady(r))
            .filter_map(|r| {
                let s = starts.iter().find(|s| s.seq == r.seq)?;
                let d = r.timeline.dispatch?;
                let start = r.timeline.call_start_unix_ns + d.start_ns;
                let tx = ns_to_ms(s.received_unix_ns as i64 - start as i64);
                let w = |d: std::time::Duration| d.as_nanos() as f64 / 1e6;
                Some((r, (w(s.wait), w(s.wait_late)), s.busy, tx))
            })
            .filter(|(r, ..)| r.get(Figure::ExecWait).is_some())
            .collect();
        if calls.is_empty() {
            return None;
        }
        let wait = |r: &CallRecord| r.ms(Figure::ExecWait).unwrap_or(f64::NAN);
        let busy: Vec<f64> = calls.iter().filter(|c| c.2).map(|c| wait(c.0)).collect();
        let offset_truth =
            |r: &CallRecord| ns_to_ms(clock.offset_at(r.timeline.call_start_unix_ns));
        let last = calls.last().map(|c| c.0);
        Some(ExecTruth {
            calls: calls.len(),
            busy_ms,
            busy_every: h.executor_busy_every,
            busy_calls: busy.len(),
            // 50 µs: the record's rounding and the spin's exit.
            busy_shown: busy.iter().filter(|w| **w >= busy_ms - 0.05).count(),
            busy_wait_ms: median(busy),
            other_wait_max_ms: max(calls.iter().filter(|c| !c.2).map(|c| wait(c.0))),
            // Outside the controller's bracket around the executor's stamp.
            wait_max_err_ms: max(calls
                .iter()
                .map(|c| (c.1 .0 - wait(c.0)).max(wait(c.0) - c.1 .1).max(0.0))),
            exec_tx_ms: median(
                calls
                    .iter()
                    .filter_map(|c| c.0.ms(Figure::ExecTx))
                    .collect(),
            ),
            true_tx_ms: median(calls.iter().map(|c| c.3).collect()),
            injected_tx_ms: h.executor_uplink_delay_ms,
            tx_inside: calls
                .iter()
                .filter(
                    |c| match (c.0.ms(Figure::ExecTx), c.0.ms(Figure::ExecErr)) {
                        (Some(t), Some(e)) => (t - c.3).abs() <= e + 0.1,
                        _ => false,
                    },
                )
                .count() as f64
                / calls.len() as f64,
            exec_offset_ms: last.and_then(|r| r.ms(Figure::ExecOffset)),
            injected_offset_ms: last.map_or(h.executor_skew_ms, offset_truth),
            exec_err_ms: median(
                calls
                    .iter()
                    .filter_map(|c| c.0.ms(Figure::ExecErr))
                    .collect(),
            ),
            offset_inside: calls
                .iter()
                .filter(|c| {
                    match (c.0.ms(Figure::ExecOffset), c.0.ms(Figure::ExecErr)) {
                        // 0.1 ms: two clocks read at different instants on
                        // one host (the bound does not cover it).
                        (Some(o), Some(e)) => (o - offset_truth(c.0)).abs() <= e + 0.1,
                        _ => false,
                    }
                })
                .count() as f64
                / calls.len() as f64,
        })
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "not yet".to_owned(), f)
}

impl HopTruth {
    /// The truth table's lines for the gateway path.
    pub(crate) fn text(&self, s: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(
            s,
            "  through the gateway, per hop (medians of {} calls; truth from each end's own stamps):",
            self.hops.first().map_or(0, |l| l.calls)
        );
        for l in &self.hops {
            let _ = writeln!(
                s,
                "    hop {} ({} → {}): up {:.3} ms (truth {:.3}, injected {}), down {:.3} ms (truth {:.3}, injected {}), ± {:.3} ms: truth inside on {:.1} % of calls; net {:.3} ms (truth {:.3}, worst call off by {:.3})",
                l.index + 1, l.from, l.to, l.up_ms, l.true_up_ms, l.injected_up_ms, l.down_ms,
                l.true_down_ms, l.injected_down_ms, l.err_ms, 100.0 * l.inside, l.net_ms,
                l.true_net_ms, l.net_max_err_ms
            );
            let _ = writeln!(
                s,
                "      clock of the {} − the {}: offset {} (truth {:+.3} ms), drift {} (injected {:+.1} ppm)",
                l.to,
                l.from,
                opt(l.offset_ms, |v| format!("{v:+.3} ms")),
                l.injected_offset_ms,
                opt(l.drift_ppm, |v| format!("{v:+.1} ppm")),
                l.injected_drift_ppm
            );
        }
        let _ = writeln!(
            s,
            "    the gateway's own time {:.3} ms (its stamps {:.3}; worst call off by {:.3} ms); worst call: net off by {:.3} ms, infer by {:.3} ms; path uplink/downlink inside ± split_err on {:.1} % of calls",
            self.gateway_ms, self.true_gateway_ms, self.gateway_max_err_ms, self.net_max_err_ms,
            self.infer_max_err_ms, 100.0 * self.path_inside
        );
    }
}

impl ExecTruth {
    /// The truth table's lines for the remote executor.
    pub(crate) fn text(&self, s: &mut String) {
        use std::fmt::Write as _;
        if self.busy_calls > 0 {
            let _ = writeln!(
                s,
                "  executor: busy {} ms on 1 chunk in {}: {} of {} busy calls show exec_wait ≥ {} ms (median {:.3} ms); the other calls wait ≤ {:.3} ms",
                self.busy_ms, self.busy_every, self.busy_shown, self.busy_calls, self.busy_ms,
                self.busy_wait_ms, self.other_wait_max_ms
            );
        } else {
            let _ = writeln!(
                s,
                "  executor: never busy; exec_wait ≤ {:.3} ms",
                self.other_wait_max_ms
            );
        }
        let _ = writeln!(
            s,
            "    exec_wait against the controller's own wait: worst call off by {:.3} ms ({} calls); exec_tx {:.3} ms (truth {:.3}, injected {}) and exec_offset {} (truth {:+.3} ms), ± {:.3} ms (exec_err_ms): truth inside on {:.1} % / {:.1} % of calls",
            self.wait_max_err_ms, self.calls, self.exec_tx_ms, self.true_tx_ms, self.injected_tx_ms,
            opt(self.exec_offset_ms, |v| format!("{v:+.3} ms")),
            self.injected_offset_ms, self.exec_err_ms, 100.0 * self.tx_inside,
            100.0 * self.offset_inside
        );
    }
}
