//! Seeded generator of record files with a known ground truth (shared by the
//! analyze and CLI tests through `#[path]`).

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::Path;

use stagetrace_analyze::stats::SplitMix64;

/// What to inject into an otherwise steady run.
#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    pub(crate) seed: u64,
    pub(crate) calls: usize,
    pub(crate) hz: f64,
    pub(crate) start_unix_ms: f64,
    pub(crate) warmup: usize,
    pub(crate) kind: &'static str,
    /// Multiplies every infer time (1.2 = a 20 % median shift).
    pub(crate) infer_factor: f64,
    /// Fraction of calls whose uplink (and, half as often, downlink) is held up, and by how much (ms, uniform in [x, 2x]).
    pub(crate) transport_tail: Option<(f64, f64)>,
    /// Dispatch spike every `period_s` seconds, adding `extra_ms`.
    pub(crate) dispatch_spikes: Option<(f64, f64)>,
    /// Mean of an exponential extra gap per call (ms): jitter no stage explains.
    pub(crate) gap_jitter_ms: f64,
    /// Write `output_digest` fields.
    pub(crate) digests: bool,
    /// Change the digest of these seqs (an optimisation that altered outputs).
    pub(crate) flip_digests: Vec<u64>,
    /// Failed calls mixed in (every n-th call).
    pub(crate) fail_every: Option<usize>,
    /// Target rate fields (`late_ms`, `deadline_miss`).
    pub(crate) deadline: bool,
    /// Median and spread of infer (ms), before `infer_factor`.
    pub(crate) infer_ms: (f64, f64),
    /// Median and spread of queue (ms).
    pub(crate) queue_ms: (f64, f64),
    /// Median and spread of dispatch (ms).
    pub(crate) dispatch_ms: (f64, f64),
    /// Median of the observer's own cost (µs).
    pub(crate) observer_us: f64,
    /// Fraction of calls whose infer is replaced by a spike, and its value (ms).
    pub(crate) infer_spikes: Option<(f64, f64)>,
    /// Fraction of calls whose dispatch is replaced by this value (ms).
    pub(crate) dispatch_bumps: Option<(f64, f64)>,
    /// Fraction of calls paused inside the call outside every stage (the
    /// gap), and by how much (ms).
    pub(crate) gap_pauses: Option<(f64, f64)>,
    /// Added to every uplink and downlink (ms), as a split would read it.
    pub(crate) link_shift_ms: (f64, f64),
    /// The records' `split_err_ms`.
    pub(crate) split_err_ms: f64,
    /// A server that reports no timing: the records carry `roundtrip` cut
    /// at the response's first byte (`ttfb`, `rx`, half of the downlink
    /// after it), no split, no server figures, no clock.
    pub(crate) silent_server: bool,
    /// A remote executor acknowledging each chunk: dispatch is its transfer
    /// (`exec_tx`) plus its wait (`exec_wait`), and on every `n`-th call
    /// (`Some((n, busy_ms))`) the executor is still busy with the previous
    /// action for `busy_ms`.
    pub(crate) remote_executor: Option<(usize, f64)>,
    /// Calls through one gateway: the records carry `relay_ms` and a
    /// two-hop `hops` array, and the path's uplink / downlink are the
    /// hops' plus half the gateway's time each way.
    pub(crate) gateway: Option<Gateway>,
    /// A second mode of infer: on this fraction of the calls, this much
    /// (ms) is added (a healthy timer or a cache miss when small).
    pub(crate) infer_mode: Option<(f64, f64)>,
    /// Every stage value rounded to this step (ms): a coarse clock.
    pub(crate) quantum_ms: Option<f64>,
    /// Infer multiplied by a lognormal factor of this σ (median 1): a
    /// right-skewed tail.
    pub(crate) infer_lognormal: Option<f64>,
    /// On this fraction of the calls, this much (ms) added to one stage
    /// (`capture`, `uplink`, `queue`, `infer`, `downlink`, `dispatch`).
    pub(crate) stage_spikes: Option<(&'static str, f64, f64)>,
    /// These calls (by index after the warm-up) get this much (ms) added to
    /// one stage: a few isolated hiccups, placed exactly.
    pub(crate) hiccups: Option<(&'static str, &'static [usize], f64)>,
    /// One call (by index after the warm-up) paused this long (ms) outside
    /// every stage: a stall.
    pub(crate) stall: Option<(usize, f64)>,
    /// The records carry host figures (`run_wait_ms`, `cpu_stall_ms` and the
    /// server's, tens of µs; with `host_bumps`, 0.3 ms on 5 % of the calls
    /// that no stage shows).
    pub(crate) host_figures: bool,
    /// Healthy host noise: the occasional small run-queue wait.
    pub(crate) host_bumps: bool,
    /// A host whose cores are steadily busy: `cpu_stall_ms` is this share
    /// of every call's e2e, as the stall sampler gives it (the stall rate
    /// around the call times the call's time, docs/host.md), whatever made
    /// the call long.
    pub(crate) stall_rate: Option<f64>,
    /// The `stage_spikes` calls' cause: this host figure (record field)
    /// carries this share of each spike's extra time on those calls.
    pub(crate) host_cause: Option<(&'static str, f64)>,
    /// The robot's `voluntary_switches` on every call (1 or 2: a blocking
    /// client's wait for the response), and this many more on a spiked
    /// call: its thread blocked waiting (a lock, a queue).
    pub(crate) vol_switches: Option<u32>,
    /// Async inference: each record carries `margin_ms` (median this much,
    /// spread a third of it, with the occasional chunk far ahead), and on
    /// this fraction of the calls the chunk came after the action queue ran
    /// dry (margin −2 to −20 ms, with the idle ticks).
    pub(crate) action_queue: Option<(f64, f64)>,
    /// Infer timed in parts (`pre_ms`, `model_ms`, `post_ms`, `device_ms`):
    /// infer is then their sum, whatever `infer_ms` says.
    pub(crate) parts: Option<Parts>,
    /// The server's waits before it read the request (queue's parts:
    /// `accept_wait_ms`, `loop_wait_ms`), added to queue.
    pub(crate) waits: Vec<Wait>,
    /// On every `n`-th call, this much (ms) added to one stage, the spike
    /// `host_cause` explains: a robot whose GIL another thread holds on
    /// every 20th call.
    pub(crate) every_nth: Option<(&'static str, usize, f64)>,
    /// On every `n`-th call, the `k`-th of each `n` (`Some((n, k, extra_us))`),
    /// the observer's own cost is this much (µs) more: its callbacks run
    /// cold on a thread woken after a long wait (with `k = n - 1`, the
    /// calls `every_nth` spikes).
    pub(crate) observer_every: Option<(usize, usize, f64)>,
    /// Fields written on every call with a small host-like value (tens of
    /// µs): new figures present, explaining nothing.
    pub(crate) small_fields: &'static [&'static str],
    /// A delay added on the wire to each direction (ms, up and down): the
    /// truth. With an estimated clock (the default) the records read it as
    /// the offset estimate does — its midpoint rule puts half of the
    /// difference in the other direction, so each direction reads the mean
    /// of the two — and `split_err_ms` grows by half the added network
    /// time (the bound is half the tightest call's network time). With
    /// `trusted_clocks` the records read it as it is.
    pub(crate) link_delay_ms: (f64, f64),
    /// Synchronised clocks (`--clock trusted`): the records carry no
    /// `split_err_ms`, and uplink / downlink as measured.
    pub(crate) trusted_clocks: bool,
    /// The loop does not wait for its ticks: each call starts right after
    /// the previous one ends (0.05 ms later); its deadlines are read as
    /// the layer reads them (the last tick at or before the start).
    pub(crate) unpaced: bool,
}

/// Infer timed in parts: each part's median and spread (ms).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parts {
    pub(crate) pre: (f64, f64),
    /// The model's work (ms): the model stage when it waits for the device.
    pub(crate) model: (f64, f64),
    pub(crate) post: (f64, f64),
    /// Write `device_ms`: the device's own time, this share of the model's work.
    pub(crate) device: Option<f64>,
    /// The model stage closes at the dispatch, after this long (ms), and
    /// the rest of the model's work lands in post (an asynchronous device
    /// timed without a sync).
    pub(crate) dispatch_ms: Option<f64>,
    /// On this fraction of the calls, post takes this much longer (ms, uniform in [x, 1.5x]).
    pub(crate) post_tail: Option<(f64, f64)>,
}

impl Default for Parts {
    fn default() -> Self {
        Parts {
            pre: (3.0, 0.2),
            model: (20.0, 1.0),
            post: (2.0, 0.15),
            device: None,
            dispatch_ms: None,
            post_tail: None,
        }
    }
}

/// One of the server's waits: a hand-over on every call, and on a fraction
/// of the calls a wait uniform in `range` (ms).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wait {
    /// `accept_wait_ms` or `loop_wait_ms`.
    pub(crate) field: &'static str,
    /// The healthy hand-over's median (ms).
    pub(crate) base_ms: f64,
    pub(crate) frac: f64,
    pub(crate) range: (f64, f64),
}

/// The hops of a call through one gateway (medians, ms; spread 0.1 ms on
/// a hop, 0.02 ms on the gateway's time).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gateway {
    /// Uplink of hop 1 (robot → gateway) and hop 2 (gateway → server).
    pub(crate) up: [f64; 2],
    /// Downlink of each hop.
    pub(crate) down: [f64; 2],
    /// The gateway's own time.
    pub(crate) relay_ms: f64,
    /// Each hop's `err_ms` (the path's `split_err_ms` is their sum).
    pub(crate) err_ms: [f64; 2],
}

impl Default for Gateway {
    fn default() -> Self {
        Gateway {
            up: [3.0, 1.0],
            down: [1.0, 2.0],
            relay_ms: 0.2,
            err_ms: [0.05, 0.04],
        }
    }
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            seed: 1,
            calls: 3000,
            hz: 50.0,
            start_unix_ms: 1_764_000_000_000.0,
            warmup: 20,
            kind: "call",
            infer_factor: 1.0,
            transport_tail: None,
            dispatch_spikes: None,
            gap_jitter_ms: 0.0,
            digests: false,
            flip_digests: Vec::new(),
            fail_every: None,
            deadline: false,
            infer_ms: (30.0, 1.5),
            queue_ms: (0.2, 0.03),
            dispatch_ms: (1.0, 0.08),
            observer_us: 3.0,
            infer_spikes: None,
            dispatch_bumps: None,
            gap_pauses: None,
            link_shift_ms: (0.0, 0.0),
            split_err_ms: 0.05,
            silent_server: false,
            remote_executor: None,
            gateway: None,
            infer_mode: None,
            quantum_ms: None,
            infer_lognormal: None,
            stage_spikes: None,
            hiccups: None,
            stall: None,
            host_figures: false,
            stall_rate: None,
            host_bumps: false,
            host_cause: None,
            vol_switches: None,
            action_queue: None,
            parts: None,
            waits: Vec::new(),
            every_nth: None,
            observer_every: None,
            small_fields: &[],
            link_delay_ms: (0.0, 0.0),
            trusted_clocks: false,
            unpaced: false,
        }
    }
}

fn r3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The JSON lines of a scenario.
pub(crate) fn lines(s: &Scenario) -> String {
    let mut rng = SplitMix64::new(s.seed.wrapping_mul(0x9e37_79b9) ^ 0xabcdef);
    let mut out = String::new();
    let period = 1000.0 / s.hz;
    let mut next_spike_ms = s.dispatch_spikes.map(|(p, _)| p * 1000.0 * 0.5);
    // An unpaced loop: where the next call starts (after the previous one).
    let mut next_start = s.start_unix_ms;
    // How the records read the wire's delays (see `link_delay_ms`).
    let (up_delay, down_delay) = s.link_delay_ms;
    let (read_up, read_down, err_added) = if s.trusted_clocks {
        (up_delay, down_delay, 0.0)
    } else {
        let mean = (up_delay + down_delay) / 2.0;
        (mean, mean, mean)
    };
    for i in 0..(s.calls + s.warmup) {
        let seq = i as u64;
        let mut ts = s.start_unix_ms + i as f64 * period + rng.normal() * 0.2;
        if s.unpaced {
            ts = next_start;
        }
        let rel = i as f64 * period;
        let warm = i < s.warmup;
        let pos = |v: f64| v.max(0.01);
        let mut capture = pos(2.0 + 0.1 * rng.normal());
        let mut uplink = pos(1.5 + 0.15 * rng.normal()) + s.link_shift_ms.0 + read_up;
        let mut queue = pos(s.queue_ms.0 + s.queue_ms.1 * rng.normal());
        let mut infer = pos(s.infer_ms.0 + s.infer_ms.1 * rng.normal()) * s.infer_factor;
        let mut downlink = pos(1.2 + 0.1 * rng.normal()) + s.link_shift_ms.1 + read_down;
        let mut dispatch = pos(s.dispatch_ms.0 + s.dispatch_ms.1 * rng.normal());
        let mut observer_us = pos(s.observer_us + 0.5 * rng.normal());
        let mut gap = pos(0.3 + 0.03 * rng.normal());
        if let Some((n, k, extra)) = s.observer_every {
            if i % n == k {
                // The observer's time is inside the gap.
                observer_us += extra;
                gap += extra / 1000.0;
            }
        }
        if warm {
            infer *= 3.0;
        }
        if let Some((frac, extra)) = s.transport_tail {
            if rng.next_f64() < frac {
                uplink += extra * (1.0 + rng.next_f64());
            }
            if rng.next_f64() < frac / 2.0 {
                downlink += extra * (1.0 + rng.next_f64());
            }
        }
        if let (Some((p, extra)), Some(next)) = (s.dispatch_spikes, next_spike_ms.as_mut()) {
            if rel >= *next {
                dispatch += extra;
                *next += p * 1000.0;
            }
        }
        // Each knob draws only when set: the other scenarios' draws stay as they were.
        if let Some((frac, v)) = s.infer_spikes {
            if rng.next_f64() < frac {
                infer = v;
            }
        }
        if let Some((frac, v)) = s.dispatch_bumps {
            if rng.next_f64() < frac {
                dispatch = v;
            }
        }
        if let Some((frac, extra)) = s.gap_pauses {
            if rng.next_f64() < frac {
                gap += extra;
            }
        }
        if s.gap_jitter_ms > 0.0 {
            gap += -s.gap_jitter_ms * (1.0 - rng.next_f64()).ln();
        }
        if let Some((frac, extra)) = s.infer_mode {
            if rng.next_f64() < frac {
                infer += extra;
            }
        }
        if let Some(sigma) = s.infer_lognormal {
            infer *= (sigma * rng.normal()).exp();
        }
        let mut spike = |stage: &str, extra: f64| match stage {
            "capture" => capture += extra,
            "uplink" => uplink += extra,
            "queue" => queue += extra,
            "infer" => infer += extra,
            "downlink" => downlink += extra,
            "dispatch" => dispatch += extra,
            // Time inside the call outside every stage (a blocked logger).
            "gap" => gap += extra,
            other => panic!("no stage {other} to spike"),
        };
        let mut spiked: Option<f64> = None;
        if let Some((stage, frac, extra)) = s.stage_spikes {
            if rng.next_f64() < frac {
                spike(stage, extra);
                spiked = Some(extra);
            }
        }
        if let Some((stage, n, extra)) = s.every_nth {
            if i % n == n - 1 {
                spike(stage, extra);
                spiked = Some(extra);
            }
        }
        if let Some((stage, at, extra)) = s.hiccups {
            if i >= s.warmup && at.contains(&(i - s.warmup)) {
                spike(stage, extra);
            }
        }
        if let Some((at, extra)) = s.stall {
            if i == s.warmup + at {
                gap += extra;
            }
        }
        if let Some(q) = s.quantum_ms {
            let round = |v: f64| ((v / q).round() * q).max(q);
            capture = round(capture);
            uplink = round(uplink);
            queue = round(queue);
            infer = round(infer);
            downlink = round(downlink);
            dispatch = round(dispatch);
        }
        // Drawn last: the other scenarios' draws stay as they were.
        let hops = s.gateway.map(|g| {
            let mut draw = |m: f64, sd: f64| r3(pos(m + sd * rng.normal()));
            let (u0, u1) = (draw(g.up[0], 0.1), draw(g.up[1], 0.1));
            let (d0, d1) = (draw(g.down[0], 0.1), draw(g.down[1], 0.1));
            let relay = draw(g.relay_ms, 0.02);
            uplink = u0 + u1 + relay / 2.0;
            downlink = d0 + d1 + relay / 2.0;
            format!(
                ",\"relay_ms\":{relay},\"hops\":[{{\"up_ms\":{u0},\"down_ms\":{d0},\"net_ms\":{},\"relay_ms\":{relay},\"offset_ms\":300.0,\"err_ms\":{}}},{{\"up_ms\":{u1},\"down_ms\":{d1},\"net_ms\":{},\"offset_ms\":-380.0,\"err_ms\":{},\"drift_ppm\":-350.0}}]",
                r3(u0 + d0),
                g.err_ms[0],
                r3(u1 + d1),
                g.err_ms[1]
            )
        });
        // Drawn after the others: their draws stay as they were.
        let mut extra_fields = String::new();
        for w in &s.waits {
            let mut v = pos(w.base_ms + w.base_ms / 3.0 * rng.normal()).min(3.0 * w.base_ms);
            if rng.next_f64() < w.frac {
                let extra = w.range.0 + (w.range.1 - w.range.0) * rng.next_f64();
                v += extra;
                // A host cause (the server's run-queue wait of a worker
                // thread that started late) explains the wait as it would
                // a stage's spike.
                spiked = spiked.or(Some(extra));
            }
            let v = r3(v);
            queue += v;
            let _ = write!(extra_fields, ",\"{}\":{v}", w.field);
        }
        if let Some(p) = s.parts {
            let mut draw = |(m, sd): (f64, f64)| pos(m + sd * rng.normal());
            let pre = draw(p.pre);
            let work = draw(p.model);
            let mut post = draw(p.post);
            if let Some((frac, extra)) = p.post_tail {
                if rng.next_f64() < frac {
                    post += extra * (1.0 + 0.5 * rng.next_f64());
                }
            }
            let model = match p.dispatch_ms {
                Some(d) => {
                    let d = pos(d + 0.1 * d * rng.normal());
                    post += (work - d).max(0.0);
                    d
                }
                None => work,
            };
            let (pre, model, post) = (r3(pre), r3(model), r3(post));
            infer = pre + model + post;
            let _ = write!(
                extra_fields,
                ",\"pre_ms\":{pre},\"model_ms\":{model},\"post_ms\":{post}"
            );
            if let Some(share) = p.device {
                let _ = write!(extra_fields, ",\"device_ms\":{}", r3(share * work));
            }
        }
        for f in s.small_fields {
            let v = 0.01 - 0.02 * (1.0 - rng.next_f64()).ln();
            let _ = write!(extra_fields, ",\"{f}\":{}", r3(v));
        }
        let (capture, uplink, queue, infer, downlink, dispatch, gap) = (
            r3(capture),
            r3(uplink),
            r3(queue),
            r3(infer),
            r3(downlink),
            r3(dispatch),
            r3(gap),
        );
        let server = r3(queue + infer + 0.1);
        let roundtrip = r3(uplink + server + downlink);
        let net = r3(roundtrip - server);
        let e2e = r3(capture + roundtrip + dispatch + gap);
        let mut l = if s.silent_server {
            let ttfb = r3(uplink + server + downlink / 2.0);
            let rx = r3(roundtrip - ttfb);
            format!(
                "{{\"seq\":{seq},\"ts_unix_ms\":{:.3},\"kind\":\"{}\",\"trace_id\":\"{:032x}\",\"capture_ms\":{capture},\"dispatch_ms\":{dispatch},\"roundtrip_ms\":{roundtrip},\"ttfb_ms\":{ttfb},\"rx_ms\":{rx},\"e2e_ms\":{e2e},\"gap_ms\":{gap},\"observer_us\":{:.3}",
                ts,
                s.kind,
                u128::from(seq) + 1,
                observer_us
            )
        } else {
            format!(
            "{{\"seq\":{seq},\"ts_unix_ms\":{:.3},\"kind\":\"{}\",\"trace_id\":\"{:032x}\",\"capture_ms\":{capture},\"uplink_ms\":{uplink},\"queue_ms\":{queue},\"infer_ms\":{infer},\"downlink_ms\":{downlink},\"dispatch_ms\":{dispatch},\"roundtrip_ms\":{roundtrip},\"server_ms\":{server},\"net_ms\":{net},\"e2e_ms\":{e2e},\"gap_ms\":{gap},{},\"observer_us\":{:.3}",
            ts,
            s.kind,
            u128::from(seq) + 1,
            if s.trusted_clocks {
                "\"clock\":\"trusted\"".to_string()
            } else {
                // The estimate's midpoint rule moves the offset by half
                // the difference of the added delays (the true offset is
                // 0.5 ms): what the two clocks read, uplink + offset and
                // downlink − offset, stays the truth.
                format!(
                    "\"offset_ms\":{},\"split_err_ms\":{},\"clock\":\"estimate\"",
                    r3(0.5 + (up_delay - down_delay) / 2.0),
                    r3(s.split_err_ms + err_added)
                )
            },
            observer_us
        )
        };
        if let Some((n, busy_ms)) = s.remote_executor {
            // The dispatch drawn above is the executor's transfer; its wait
            // is short unless it is busy.
            let wait = if i % n == n - 1 { busy_ms } else { 0.05 };
            let (tx, wait) = (dispatch, r3(wait));
            let d = r3(tx + wait);
            l = l.replace(
                &format!("\"dispatch_ms\":{dispatch},"),
                &format!("\"dispatch_ms\":{d},\"exec_tx_ms\":{tx},\"exec_wait_ms\":{wait},"),
            );
            l = l.replace(
                &format!("\"e2e_ms\":{e2e},"),
                &format!("\"e2e_ms\":{},", r3(e2e + wait)),
            );
            let _ = write!(l, ",\"exec_offset_ms\":-3.2,\"exec_err_ms\":0.08");
        }
        if let (Some(h), Some(g)) = (&hops, s.gateway) {
            l.push_str(h);
            l = l.replace(
                &format!("\"split_err_ms\":{},", s.split_err_ms),
                &format!("\"split_err_ms\":{},", r3(g.err_ms[0] + g.err_ms[1])),
            );
        }
        if s.unpaced {
            next_start = ts + e2e + 0.05;
        }
        if s.deadline {
            // Signed, as the layer writes it: negative is slack. A paced
            // call starts on its tick; an unpaced one is held to the last
            // tick at or before its start.
            let late = if s.unpaced {
                let since = ts - s.start_unix_ms;
                since + e2e - ((since / period).floor() + 1.0) * period
            } else {
                e2e - period
            };
            let _ = write!(l, ",\"late_ms\":{late:.3},\"deadline_miss\":{}", late > 0.0);
        }
        if warm {
            l.push_str(",\"warmup\":true");
        }
        if s.fail_every.is_some_and(|n| i % n == n - 1) {
            l.push_str(",\"failed\":true,\"error\":\"timeout\"");
        }
        l.push_str(&extra_fields);
        if s.host_figures {
            l.push_str(&host_fields(s, &mut rng, spiked));
        }
        if let Some(rate) = s.stall_rate {
            let _ = write!(l, ",\"cpu_stall_ms\":{}", r3(rate * e2e));
        }
        if let Some(more) = s.vol_switches {
            let n = 1 + u32::from(rng.next_f64() < 0.3) + if spiked.is_some() { more } else { 0 };
            let _ = write!(l, ",\"voluntary_switches\":{n}");
        }
        if let Some((median, dry_share)) = s.action_queue {
            let margin = if rng.next_f64() < dry_share {
                -(2.0 + 18.0 * rng.next_f64())
            } else if rng.next_f64() < 0.03 {
                // A chunk that came far ahead: more margin, no fault.
                median * (3.0 + rng.next_f64())
            } else {
                (median + median / 3.0 * rng.normal()).max(0.5)
            };
            let _ = write!(l, ",\"margin_ms\":{}", r3(margin));
            if margin < 0.0 {
                let ticks = (-margin / period).ceil().max(1.0);
                let _ = write!(l, ",\"dry_ticks\":{ticks}");
            }
        }
        if s.digests {
            let mut d = seq.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x1234;
            if s.flip_digests.contains(&seq) {
                d ^= 1;
            }
            let _ = write!(l, ",\"output_digest\":\"{d:016x}\"");
        }
        l.push_str("}\n");
        out.push_str(&l);
    }
    out
}

/// The host figures of one call: small waits and stalls, the occasional
/// 0.3 ms bump with `host_bumps`, and the spike's cause on a spiked call.
fn host_fields(s: &Scenario, rng: &mut SplitMix64, spiked: Option<f64>) -> String {
    let mut out = String::new();
    let gc = s.host_cause.is_some_and(|(f, _)| f.contains("gc"));
    let mut fields = vec![
        "run_wait_ms",
        "cpu_stall_ms",
        "server_run_wait_ms",
        "server_cpu_stall_ms",
    ];
    if gc {
        fields.extend(["server_gc_ms", "gc_ms"]);
    }
    // A cause outside the usual set (the robot's tx_wait) is on every call.
    if let Some((cause, _)) = s.host_cause {
        if !fields.contains(&cause) {
            fields.push(cause);
        }
    }
    for f in &fields {
        let mut v = if f.contains("gc") {
            0.0
        } else {
            0.01 - 0.02 * (1.0 - rng.next_f64()).ln()
        };
        if s.host_bumps && f.contains("run_wait") && rng.next_f64() < 0.05 {
            v += 0.3;
        }
        if let (Some((cause, share)), Some(extra)) = (s.host_cause, spiked) {
            if cause == *f {
                v += share * extra;
            }
        }
        if s.stall_rate.is_some() && *f == "cpu_stall_ms" {
            // Written from the call's e2e instead (`stall_rate`).
            continue;
        }
        let _ = write!(out, ",\"{f}\":{}", r3(v));
    }
    out
}

/// Writes a scenario to `path`.
pub(crate) fn write(path: &Path, s: &Scenario) {
    std::fs::write(path, lines(s)).unwrap();
}

/// A scenario loaded as `report` loads a file.
pub(crate) fn dataset(s: &Scenario) -> stagetrace_analyze::load::Dataset {
    stagetrace_analyze::load::Dataset::load_reader(
        lines(s).as_bytes(),
        Path::new("generated"),
        stagetrace_analyze::load::LoadOptions::default(),
    )
    .unwrap()
}

/// A scenario analyzed (against a baseline scenario if given): the report
/// and its text, printed for `--nocapture`.
pub(crate) fn run(
    s: &Scenario,
    base: Option<&Scenario>,
) -> (stagetrace_analyze::analysis::Report, String) {
    let ds = dataset(s);
    let b = base.map(dataset);
    let a = stagetrace_analyze::analysis::analyze(
        &ds,
        b.as_ref(),
        &stagetrace_analyze::analysis::AnalyzeOptions::default(),
    );
    let text = stagetrace_analyze::render::text(&a.report);
    eprintln!("{text}");
    (a.report, text)
}
