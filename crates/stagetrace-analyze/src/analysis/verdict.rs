//! A group's conclusions in plain language, with machine-readable codes
//! and the numbers behind them.

use serde_json::json;
use stagetrace_schema::Figure;

use super::deadline::{BACK_TO_BACK_MS, LATE_START};
use super::moves::{dedupe, e2e_moved, moves, Context};
use super::options::MIN_SPIKES;
use super::report::{DeadlineCause, GroupReport, HostCause, Verdict};
use crate::figures;
use crate::format::{fmt_ms, signed_ms};

/// Order of verdicts: what slowed the call, by what it costs the call
/// (`cost_ms`, ms added to e2e), largest first; then deadline misses, what
/// got faster, and the verdicts that say nothing moved.
pub(super) fn verdict_order(a: &Verdict, b: &Verdict) -> std::cmp::Ordering {
    let class = |v: &Verdict| match v.code {
        "deadline_misses" => 1,
        "faster" => 2,
        "no_steady_calls" => 3,
        "steady" => 4,
        _ => 0,
    };
    let cost = |v: &Verdict| v.evidence["cost_ms"].as_f64().unwrap_or(0.0);
    class(a)
        .cmp(&class(b))
        .then_with(|| cost(b).total_cmp(&cost(a)))
}

/// What to look at when `f` moved. Exhaustive: a figure added to the table
/// needs its advice here.
pub(super) fn advice(f: Figure) -> &'static str {
    match f {
        Figure::Infer | Figure::Queue | Figure::Server => {
            "inference is the bottleneck: limit concurrency, queue with timeouts, then batch"
        }
        Figure::Uplink | Figure::Downlink | Figure::Roundtrip | Figure::Net => {
            "look at bandwidth, frame size and retransmits (compress or lower the frame rate; retries only hide jitter)"
        }
        // A gateway on the way: its own time, apart from the hops.
        Figure::Relay => {
            "a relay (gateway) between robot and policy server takes longer: look at its load, its queue and its own hops (the record's hops show which)"
        }
        // The server reports no timing: its wait and the network's are one.
        Figure::Ttfb => {
            "the wait for the first byte is server and network together (a black box: the server reports no timing); add server timing (docs/protocol.md) to split it into queue, infer and the hops"
        }
        Figure::Rx => {
            "the response's transfer moved: look at downlink bandwidth and the response's size"
        }
        Figure::Dispatch => {
            "look at the executor queue, the bus, a control period blocked by the last action (merge commands, drop stale actions)"
        }
        // The executor's own clock: it held the chunk before starting it.
        Figure::ExecWait => {
            "the executor waited before starting the chunk: look at its task queue, bus occupancy and a control cycle blocked by the previous action (merge commands, drop stale actions)"
        }
        // A gateway on the chunk's way: its own time, apart from the hops.
        Figure::ExecRelay => {
            "a gateway on the way to the executor holds the chunk longer before forwarding it: look at its load, its queue and its own hops"
        }
        Figure::ExecTx => {
            "the chunk's way to the executor moved: look at the network to the executor (bandwidth, chunk size, a gateway on the way) and the client's encoding"
        }
        // Inside the gap: the robot waits for the ack after the executor started.
        Figure::ExecAck => {
            "the ack from the executor came back later: look at the network back from the executor; the action had already started (dispatch does not include it)"
        }
        Figure::Capture => "look at the camera driver, frame buffering and exposure settings",
        Figure::Gap | Figure::Observer | Figure::E2e | Figure::Late => {
            "look at client scheduling, memory reclamation, logging, or the observer"
        }
        // Not analysed (see `figures::is_read`); should they be, a moved
        // offset is the clocks, not the call.
        Figure::Offset | Figure::SplitErr | Figure::ExecOffset | Figure::ExecErr => {
            "look at the clock offset between the machines (docs/clocks.md)"
        }
        // The host, not a stage: the remedies of docs/host.md.
        Figure::RunWait
        | Figure::ServerRunWait
        | Figure::CpuStall
        | Figure::ServerCpuStall
        | Figure::RxWait
        | Figure::ServerRxWait
        | Figure::CaptureRunWait
        | Figure::DispatchRunWait => {
            "pin or reserve cores for the loop (taskset, a cgroup cpuset, isolcpus), move the other load off them, or raise the loop's priority (SCHED_FIFO for the control thread)"
        }
        // The robot's own send: a core, or in Python the GIL.
        Figure::TxWait => {
            "pin or reserve cores for the loop (taskset, a cgroup cpuset, isolcpus) and move the other load off them; in a Python robot, keep other threads from holding the GIL across the send (heavy work in another process, or in code that releases the GIL)"
        }
        Figure::Gc | Figure::ServerGc => {
            "tune the garbage collector: preallocate buffers, keep cyclic garbage out of the loop, gc.freeze() after start-up and collect between calls, not during them"
        }
        Figure::PollWait => {
            "the chunk was ready before the robot asked for it: poll sooner, or lower the server's padding to its inference latency (docs/lerobot.md)"
        }
        Figure::Margin => {
            "chunks arrive too close to the action queue running dry: raise the refill threshold or cut infer (docs/lerobot.md)"
        }
        // The parts of inference: the seed's data loading, model, post-processing.
        Figure::Pre => {
            "pre-processing is the bottleneck: decode and resize frames on the robot or on the GPU, cache normalisation statistics, load data ahead of the call"
        }
        Figure::Model | Figure::Device => {
            "the model itself is the bottleneck: smaller inputs or fewer denoising steps, half precision, compile the model (jit, torch.compile), or a bigger device"
        }
        Figure::Post => {
            "post-processing is the bottleneck: keep results on the device until needed, vectorise the un-normalisation, and make sure the model's device work is not landing here (docs/stages.md, \"Asynchronous devices\")"
        }
        // Queue's parts: the server's own waits before it read the request.
        Figure::AcceptWait => {
            "every server worker was busy (a handler that blocks one, e.g. LeRobot's GetActions waiting for an observation): raise max_workers, or keep a handler from holding a worker while it waits"
        }
        Figure::LoopWait => {
            "work run on the server's event loop held it, usually infer itself (openpi's websocket server runs the policy on its loop): run infer off the loop (run_in_executor or a worker thread)"
        }
        // The server's own send, inside the downlink: its host, not the link.
        Figure::ServerTxWait => {
            "pin or reserve cores for the policy server (taskset, a cgroup cpuset), move the other load off them, or raise the server's priority; the link is not at fault"
        }
    }
}

/// Share of the steady calls a figure must spike on to be a verdict of its
/// own. Rarer spikes sit beyond the figure's p99, which the table shows as
/// its tail; from 1 % on they set the p99 themselves, so the table cannot
/// show them as spikes and the verdict must.
pub(super) const SPIKE_SHARE: f64 = 0.01;

/// Without a baseline: figures above their outlier threshold on at least
/// [`SPIKE_SHARE`] of the calls and [`MIN_SPIKES`] calls, when no other verdict already names them
/// (periodic spikes), and each spike costs its call at least the practical
/// floor.
fn spikes(r: &GroupReport, cx: &Context, periodic: &[Figure]) -> Vec<Verdict> {
    let o = &r.outliers;
    let flagged = spiking(r, periodic);
    let mut out = Vec::new();
    for f in dedupe(&flagged) {
        let (Some(s), Some(median)) = (o.by_stage.get(f.name()), r.stages.get(f.name())) else {
            continue;
        };
        // What a spike adds to its call (the analysis holds every figure in ms).
        let cost_ms = s.mean_ms - median.p50;
        if cost_ms < cx.floor_ms {
            continue;
        }
        let threshold = o.thresholds.get(f.name()).copied().unwrap_or(f64::NAN);
        if let Some(cause) = &s.host {
            out.push(host_spikes(r, f, s.rounds, cost_ms, median.p50, cause));
            continue;
        }
        out.push(Verdict {
            code: "spikes",
            kind: r.kind.clone(),
            stage: Some(f.name()),
            group: Some(f.side().as_str()),
            text: format!(
                "{f} spikes on {} of {} calls ({:.1}%): {} on average against a median of {} (threshold {}), not periodic; {}.",
                s.rounds,
                r.steady,
                100.0 * s.rounds as f64 / r.steady as f64,
                fmt_ms(s.mean_ms),
                fmt_ms(median.p50),
                fmt_ms(threshold),
                advice(f)
            ),
            evidence: json!({
                "cost_ms": cost_ms, "rounds": s.rounds, "calls": r.steady,
                "mean_ms": s.mean_ms, "median_ms": median.p50, "threshold_ms": threshold,
            }),
        });
    }
    out
}

/// The figures that spike on enough calls to be a verdict's, periodic ones
/// and host figures left out (a host figure overlaps the stages: it is
/// named as their cause, never as a cost of its own).
fn spiking(r: &GroupReport, periodic: &[Figure]) -> Vec<Figure> {
    r.outliers
        .by_stage
        .iter()
        .filter(|(_, s)| {
            s.rounds >= MIN_SPIKES as u64 && s.rounds as f64 >= SPIKE_SHARE * r.steady as f64
        })
        .filter_map(|(name, _)| Figure::from_name(name))
        .filter(|f| !periodic.contains(f) && !f.is_host())
        .collect()
}

/// Spikes of `f` that its calls' host figures explain: the host and the
/// cause named, with the host's remedies; the stage's own advice would
/// send the user after the wrong thing (the network, the model, the camera).
fn host_spikes(
    r: &GroupReport,
    f: Figure,
    rounds: u64,
    cost_ms: f64,
    median_ms: f64,
    cause: &super::report::HostCause,
) -> Verdict {
    let host = cause.host_figure().unwrap_or(Figure::RunWait);
    let not = match f {
        Figure::Uplink | Figure::Downlink | Figure::Net | Figure::Roundtrip => "not the network",
        Figure::Infer | Figure::Queue | Figure::Server | Figure::Model | Figure::Device => {
            "not the model"
        }
        Figure::Capture => "not the camera",
        Figure::Dispatch => "not the executor",
        _ => "not the stage itself",
    };
    let code = if matches!(host, Figure::Gc | Figure::ServerGc) {
        "host_gc"
    } else {
        "host_cpu"
    };
    Verdict {
        code,
        kind: r.kind.clone(),
        stage: Some(f.name()),
        group: Some(host.side().as_str()),
        text: format!(
            "{f} spikes on {rounds} of {} calls ({:.1}%, {} above its median of {} on average) coincide with {} ({} on those calls, {} on a typical one): {}, {not}; {}.",
            r.steady,
            100.0 * rounds as f64 / r.steady as f64,
            fmt_ms(cost_ms),
            fmt_ms(median_ms),
            cause.what(),
            fmt_ms(cause.spike_median_ms),
            fmt_ms(cause.median_ms),
            cause.diagnosis(),
            advice(host)
        ),
        evidence: json!({
            "cost_ms": cost_ms, "rounds": rounds, "calls": r.steady,
            "median_ms": median_ms, "host_figure": cause.figure,
            "host_spike_median_ms": cause.spike_median_ms, "host_median_ms": cause.median_ms,
        }),
    }
}

/// "2nd", "3rd", "4th", "11th", "22nd".
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Second modes large against the call (a tenth of its median or more);
/// smaller ones are a shape the tables show, not a problem. A sum whose
/// part is bimodal or spikes itself is left to that part; a mode whose
/// calls a host figure explains is named as that host's.
fn second_modes(r: &GroupReport, periodic: &[Figure]) -> Vec<Verdict> {
    let mut flagged = spiking(r, periodic);
    flagged.extend(r.modes.iter().filter_map(|m| Figure::from_name(m.stage)));
    r.modes
        .iter()
        .filter(|m| m.matters)
        .filter_map(|m| {
            let f = Figure::from_name(m.stage)?;
            if f.parts().iter().any(|p| flagged.contains(p)) {
                return None;
            }
            if let Some(cause) = &m.host {
                return Some(host_spikes(r, f, m.calls, m.excess_ms, m.median_ms, cause));
            }
            Some(Verdict {
                code: "second_mode",
                kind: r.kind.clone(),
                stage: Some(m.stage),
                group: Some(f.side().as_str()),
                text: format!(
                    "{f} is bimodal: {:.1}% of the calls ({} of {}) take {} longer than its median of {}, with no period; find what those calls have in common (inputs, a cache, a second code path, a shared resource); {}.",
                    100.0 * m.share,
                    m.calls,
                    r.steady,
                    fmt_ms(m.excess_ms),
                    fmt_ms(m.median_ms),
                    advice(f)
                ),
                evidence: json!({
                    "cost_ms": m.excess_ms, "calls": m.calls, "share": m.share,
                    "median_ms": m.median_ms, "excess_ms": m.excess_ms,
                }),
            })
        })
        .collect()
}

/// `unexplained_gap` when e2e jitters and the gap — time inside the call no
/// stage covers — explains it.
fn unexplained_gap(r: &GroupReport, has_baseline: bool) -> Option<Verdict> {
    let gp = r.gap.as_ref().filter(|gp| gp.unexplained)?;
    let moved = r
        .baseline
        .get(Figure::Gap.name())
        .map_or(String::new(), |b| {
            format!(
                " Against the baseline the gap went from median {} / p99 {} to {} / {}.",
                fmt_ms(b.p50.before),
                fmt_ms(b.p99.before),
                fmt_ms(b.p50.after),
                fmt_ms(b.p99.after)
            )
        });
    let who = if gp.observer_share >= 0.25 * gp.gap_share {
        "a large part of it is the observer's own cost"
    } else {
        "not the observer: look at client scheduling, memory reclamation, logging"
    };
    let steady = if has_baseline {
        "all stages are steady against the baseline"
    } else {
        "no stage explains it"
    };
    Some(Verdict {
        code: "unexplained_gap",
        kind: r.kind.clone(),
        stage: Some(Figure::Gap.name()),
        group: Some(Figure::Gap.side().as_str()),
        text: format!(
            "e2e jitters (σ {} around a median of {}) but {steady}: the gap — time inside the call no stage covers — explains {:.0}% of the e2e variance, the observer's own cost {:.1}%; {who}.{moved}",
            fmt_ms(gp.e2e_stddev_ms), fmt_ms(gp.e2e_median_ms),
            100.0 * gp.gap_share, 100.0 * gp.observer_share
        ),
        evidence: json!({
            "cost_ms": gp.e2e_stddev_ms * gp.gap_share,
            "e2e_stddev_ms": gp.e2e_stddev_ms, "gap_share": gp.gap_share,
            "observer_share": gp.observer_share, "shares": gp.shares,
        }),
    })
}

/// `deadline_misses` when at least [`SPIKE_SHARE`] of the calls missed:
/// rarer misses are on the rate line and in the tables, a verdict from the
/// rate on which spikes are one too. The sentence says why they missed
/// (the loop unpaced, the call longer than the period, or a few calls held
/// up) and what carries the time, largest first, with what to do.
fn deadline_verdict(r: &GroupReport) -> Option<Verdict> {
    let d = r.rate.deadline.as_ref()?;
    if !(d.misses > 0 && d.miss_rate >= SPIKE_SHARE) {
        return None;
    }
    let count = format!(
        "{} of {} calls ({:.2}%)",
        d.misses,
        d.calls,
        100.0 * d.miss_rate
    );
    let mut evidence = json!({"misses": d.misses, "calls": d.calls, "miss_rate": d.miss_rate});
    let text = match &d.cause {
        None => format!("{count} missed their tick's deadline."),
        Some(c) => {
            evidence["cause"] = json!(c.cause);
            evidence["period_ms"] = json!(c.period_ms);
            evidence["stages"] = json!(c.stages);
            deadline_text(r, c, &count)
        }
    };
    Some(Verdict {
        code: "deadline_misses",
        kind: r.kind.clone(),
        stage: Some(Figure::E2e.name()),
        group: Some(Figure::E2e.side().as_str()),
        text,
        evidence,
    })
}

/// "net 26.01 ms (59 %), infer 12.28 ms (28 %)": the stages that carry a
/// deadline's time, each with its share of `whole` when given, else as an
/// excess ("infer +20.14 ms").
fn carried(c: &DeadlineCause, whole: Option<f64>) -> String {
    c.stages
        .iter()
        .map(|s| {
            let name = match s.stage {
                LATE_START => "a late start (the call before overran)",
                "net" => "net (uplink + downlink)",
                other => other,
            };
            match whole {
                Some(w) if w > 0.0 => {
                    format!("{name} {} ({:.0} %)", fmt_ms(s.ms), 100.0 * s.ms / w)
                }
                _ => format!("{name} {}", signed_ms(s.ms)),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The deadline verdict's sentence for a known cause.
fn deadline_text(r: &GroupReport, c: &DeadlineCause, count: &str) -> String {
    let period = format!("{} period ({:.1} Hz)", fmt_ms(c.period_ms), c.target_hz);
    let top = c.stages.first().and_then(|s| Figure::from_name(s.stage));
    match c.cause {
        "unpaced" => {
            let idle = c.idle_p50_ms.map_or_else(|| "-".to_string(), fmt_ms);
            let how = if c
                .idle_p50_ms
                .is_some_and(|i| i < BACK_TO_BACK_MS.max(0.05 * c.period_ms))
            {
                format!("its calls run back to back ({idle} between one call's end and the next one's start, median)")
            } else {
                format!("it waits {idle} between calls (median), but not for its ticks")
            };
            format!(
                "the loop is unpaced: {how}, at {} against its target of {:.1} Hz, so a call often starts in a tick an earlier call already used and is held to that tick's deadline — {count} missed it although the median call ({}) fits the {period}; pace the loop: sleep until the next tick before each call (or set target_hz to the rate the loop is meant to run at).",
                r.rate
                    .effective_hz
                    .map_or_else(|| "-".to_string(), |hz| format!("{hz:.1} Hz")),
                c.target_hz,
                fmt_ms(c.e2e_p50_ms)
            )
        }
        "over_period" => {
            let over = (c.missed_e2e_p50_ms - c.period_ms).max(0.0);
            let what = match c.host_wait_ms.filter(|w| *w >= over) {
                // The hosts' CPU took more of the missed calls than they
                // run over: no stage's own remedy keeps the deadline on
                // this host, a core does.
                Some(w) => format!(
                    " — the hosts' CPU first: inside those calls their threads waited {} for a core (run-queue wait, robot and server; {} on a typical call), more than the {} they run over: {}",
                    fmt_ms(w),
                    c.host_wait_typical_ms.map_or_else(|| "-".to_string(), fmt_ms),
                    fmt_ms(over),
                    advice(Figure::RunWait)
                ),
                None => top.map_or(String::new(), |f| format!(" — {f}: {}", advice(f))),
            };
            format!(
                "{count} missed their tick's deadline: the typical call does not fit the {period} — e2e median {} ({} over on the calls that missed); its time goes to {}. To keep the deadline, cut the largest{what}; or run the loop at {:.1} Hz or less (the rate its median call allows).",
                fmt_ms(c.e2e_p50_ms),
                fmt_ms((c.missed_e2e_p50_ms - c.period_ms).max(0.0)),
                carried(c, Some(c.missed_e2e_p50_ms)),
                1000.0 / c.e2e_p50_ms
            )
        }
        _ => {
            let why = if c.stages.is_empty() {
                "no stage stands out on them: the calls are close to the period, and their ordinary jitter takes them over".to_string()
            } else {
                format!(
                    "on those calls, over each one's own median: {}",
                    carried(c, None)
                )
            };
            // The hosts' run-queue wait that grew on those calls as much as
            // their largest stage did is what held them up: the stages'
            // growth is the time their threads had no core.
            let host_grew = c
                .host_wait_ms
                .zip(c.host_wait_typical_ms)
                .map(|(m, t)| m - t)
                .filter(|g| c.stages.first().is_some_and(|s| *g >= s.ms));
            let todo = match (top, c.stages.first()) {
                _ if host_grew.is_some() => format!(
                    "; inside them the hosts' threads waited {} more for a core than on a typical call (run-queue wait, robot and server), as much as the largest stage grew: the hosts were short of CPU, not the stages; {}",
                    host_grew.map_or_else(|| "-".to_string(), fmt_ms),
                    advice(Figure::RunWait)
                ),
                (Some(f), _) => format!("; {}", advice(f)),
                (None, Some(s)) if s.stage == LATE_START => "; the misses follow a call that overran: look at the calls before them in the outlier rounds".to_string(),
                _ => format!(
                    "; make room in the period (e2e median {} of {}), or lower the rate",
                    fmt_ms(c.e2e_p50_ms),
                    fmt_ms(c.period_ms)
                ),
            };
            format!(
                "{count} missed their tick's deadline ({period}, e2e median {}): {why}{todo}.",
                fmt_ms(c.e2e_p50_ms)
            )
        }
    }
}

/// A `stall` per call that paused outside every stage for at least a
/// median call: an event, named with its call, never "jitter".
fn stall_verdicts(r: &GroupReport) -> Vec<Verdict> {
    let Some(gp) = &r.gap else {
        return Vec::new();
    };
    gp.stalls
        .iter()
        .map(|st| {
            let late = match st.late_ms {
                Some(l) if l > 0.0 => format!(", and missed its tick's deadline by {}", fmt_ms(l)),
                _ => String::new(),
            };
            let look = if let Some((f, v)) = st.host.first() {
                let cause = HostCause {
                    figure: f,
                    spike_median_ms: *v,
                    median_ms: 0.0,
                };
                format!(
                    "its {f} was {} ({}): {}",
                    fmt_ms(*v),
                    cause.what(),
                    cause.host_figure().map_or("", advice)
                )
            } else if st.host_measured {
                "the robot's host figures on that call are small: the robot's own code paused between its stages — a blocking call outside every stage (a log write, file or network I/O, a lock), or the process was stopped; look at what the robot did at that moment".to_string()
            } else {
                "look at what the robot did at that moment: a blocking call outside every stage (a log write, I/O, a lock), a garbage collection, page faults or swapping, another process on its core (the host figures, docs/host.md, tell which)".to_string()
            };
            Verdict {
                code: "stall",
                kind: r.kind.clone(),
                stage: Some(Figure::Gap.name()),
                group: Some(Figure::Gap.side().as_str()),
                text: format!(
                    "one call stalled: seq {} at {} spent {} outside every stage (its gap; the median call's is {}), e2e {} against a median of {}{late} — one event, not jitter; {look}.",
                    st.seq,
                    st.time,
                    fmt_ms(st.gap_ms),
                    fmt_ms(st.gap_ms - st.excess_ms),
                    fmt_ms(st.e2e_ms),
                    fmt_ms(gp.e2e_median_ms)
                ),
                evidence: json!({
                    "cost_ms": st.excess_ms, "seq": st.seq, "ts_unix_ms": st.ts_unix_ms,
                    "gap_ms": st.gap_ms, "excess_ms": st.excess_ms, "e2e_ms": st.e2e_ms,
                    "late_ms": st.late_ms, "host": st.host,
                }),
            }
        })
        .collect()
}

/// A `periodic` verdict per figure whose spikes recur with a period
/// (parts before sums), its period in calls and seconds.
fn periodic_verdicts(r: &GroupReport, periodic: &[Figure]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for m in dedupe(periodic) {
        let Some(p) = r.periodicity.iter().find(|p| p.stage == m.name()) else {
            continue;
        };
        let period = p.period_s.unwrap_or(p.acf_lag_s);
        // What a spike adds to its call, roughly: the stage's p99 over its median.
        let cost = r
            .stages
            .get(m.name())
            .map_or(0.0, |s| (s.p99 - s.p50).max(0.0));
        let every = match p.period_calls {
            Some(n) => format!("on every {} call ({period:.2} s)", ordinal(n)),
            None => format!("every {period:.2} s"),
        };
        // A period whose spike calls a host figure explains (a collector
        // that runs every n-th call) is that host's, named as such.
        let spiked = r.outliers.by_stage.get(m.name());
        let median = r.stages.get(m.name()).map(|s| s.p50);
        if let (Some(s), Some(median)) = (spiked, median) {
            if let Some(cause) = &s.host {
                let mut v = host_spikes(r, m, s.rounds, s.mean_ms - median, median, cause);
                v.text = v
                    .text
                    .replacen(" spikes on ", &format!(" spikes recur {every}: on "), 1);
                v.evidence["period_s"] = json!(period);
                v.evidence["period_calls"] = json!(p.period_calls);
                out.push(v);
                continue;
            }
        }
        out.push(Verdict {
            code: "periodic",
            kind: r.kind.clone(),
            stage: Some(m.name()),
            group: Some(m.side().as_str()),
            text: format!(
                "{m} spikes recur {every} ({} spikes; autocorrelation {:.2} at {:.2} s, {:.0}% of inter-spike intervals within ±20% of it): the signature of GC, timers, link renegotiation or work done every n-th call — find what runs {every}{}.",
                p.spikes, p.acf, p.acf_lag_s, 100.0 * p.isi_on_period,
                // On the executor's side the period is its own work (every
                // n-th chunk behind a longer action): its next steps.
                if matches!(m, Figure::ExecWait | Figure::ExecTx | Figure::Dispatch) {
                    format!("; {}", advice(m))
                } else {
                    String::new()
                }
            ),
            evidence: json!({
                "cost_ms": cost, "period_s": period, "period_calls": p.period_calls,
                "spikes": p.spikes, "acf": p.acf,
                "acf_threshold": p.acf_threshold, "isi_median_s": p.isi_median_s,
                "isi_on_period": p.isi_on_period,
            }),
        });
    }
    out
}

pub(super) fn verdicts(r: &GroupReport, cx: &Context, baseline_n: u64) -> Vec<Verdict> {
    let has_baseline = cx.has_baseline;
    let mut out = Vec::new();
    let kind = r.kind.clone();
    if r.steady == 0 {
        return vec![Verdict {
            code: "no_steady_calls",
            kind,
            stage: None,
            group: None,
            text: format!(
                "no steady-state calls: all {} were warm-up ({}) or failed ({}); nothing to measure.",
                r.calls, r.warmup_excluded, r.failed
            ),
            evidence: json!({"calls": r.calls, "warmup": r.warmup_excluded, "failed": r.failed}),
        }];
    }
    let figure = |name: &str| Figure::from_name(name);
    out.extend(moves(r, cx, advice));
    let periodic: Vec<Figure> = r
        .periodicity
        .iter()
        .filter(|p| p.significant)
        .filter_map(|p| figure(p.stage))
        .collect();
    out.extend(periodic_verdicts(r, &periodic));
    out.extend(second_modes(r, &periodic));
    // With a baseline the median and tail tests judge each stage (and
    // `e2e_moved` says when the sample is too small for them).
    if !has_baseline {
        out.extend(spikes(r, cx, &periodic));
    }
    // Causes the records name (a starved worker pool, a blocked loop,
    // device work after the model stage) replace the shape verdicts of
    // the figures they explain.
    let (named, replaced) = super::causes::cause_verdicts(r);
    out.retain(|v| !super::causes::superseded(v, &replaced));
    // A wait the records name is a stage's part that moved (its own shape
    // verdicts, now replaced, would have said so).
    let waited = named
        .iter()
        .any(|v| matches!(v.code, "worker_pool_starved" | "loop_blocked"));
    let stage_moved = waited
        || out.iter().any(|v| {
            matches!(v.code, "median_shift" | "tail_only")
                && !v
                    .stage
                    .and_then(figure)
                    .is_some_and(figures::is_gap_related)
        });
    out.extend(stall_verdicts(r));
    if !stage_moved {
        if let Some(v) = unexplained_gap(r, has_baseline) {
            // The gap's own shape verdicts say the same thing less well.
            out.retain(|v| {
                !(matches!(v.code, "median_shift" | "tail_only")
                    && v.stage
                        .and_then(figure)
                        .is_some_and(figures::is_gap_related))
            });
            out.push(v);
        }
    }
    let moved = out.iter().any(|v| {
        matches!(
            v.code,
            "median_shift" | "tail_only" | "network_moved" | "unexplained_gap"
        )
    });
    if has_baseline && !moved && !waited {
        out.extend(e2e_moved(r, cx, baseline_n));
    }
    let dry = super::async_queue::queue_ran_dry(r);
    let absorbed = r.action_queue.is_some() && dry.is_none() && !has_baseline;
    if absorbed {
        // Async inference whose action queue never ran dry: the chunks came
        // in time, the stages' jitter was absorbed by the queue (the design
        // exists for that); a stage verdict would send the user after a
        // cost the robot never paid. With a baseline, moves still count.
        out.clear();
    }
    // A queue that absorbed the jitter does not make a starved pool, a
    // blocked loop (observations a second old) or a misplaced device time
    // right: the causes the records name stay.
    out.extend(named);
    out.extend(dry);
    out.extend(deadline_verdict(r));
    if out.is_empty() {
        let text = steady_text(r, absorbed, has_baseline);
        out.push(Verdict {
            code: "steady",
            kind,
            stage: None,
            group: None,
            text,
            evidence: json!({}),
        });
    }
    out.sort_by(verdict_order);
    out
}

/// The `steady` verdict's sentence: an async run whose action queue
/// absorbed the jitter says so (`absorbed`); else what was tested.
fn steady_text(r: &GroupReport, absorbed: bool, has_baseline: bool) -> String {
    if let (true, Some(q)) = (absorbed, &r.action_queue) {
        let empty = if q.dry_chunks == 0 {
            "was never empty when a chunk came".to_string()
        } else {
            format!(
                "was empty before only {} of {} chunks",
                q.dry_chunks, q.chunks
            )
        };
        format!(
            "steady: the action queue {empty} (margin p50 {}): the chunks came in time and the queue absorbed the stages' jitter.",
            fmt_ms(q.margin_p50_ms)
        )
    } else if has_baseline {
        "steady: no stage moved against the baseline (median and tail tests), no periodic spikes, and the stages explain the e2e jitter.".to_string()
    } else {
        "steady: no periodic spikes and the stages explain the e2e jitter (give --baseline IDLE_FILES to test for median shifts and longer tails).".to_string()
    }
}
