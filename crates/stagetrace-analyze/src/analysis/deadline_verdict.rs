//! The verdicts on deadlines and single events: `deadline_misses` with its
//! cause and what carries the time (read by `deadline.rs`), and `stall`, a
//! call that paused outside every stage, named as the event it was.

use serde_json::json;
use stagetrace_schema::Figure;

use super::deadline::{BACK_TO_BACK_MS, LATE_START};
use super::options::SPIKE_SHARE;
use super::report::{DeadlineCause, GroupReport, HostCause, Verdict};
use crate::format::{fmt_ms, signed_ms};

/// `deadline_misses` when at least [`SPIKE_SHARE`] of the calls missed:
/// rarer misses are on the rate line and in the tables, a verdict from the
/// rate on which spikes are one too. The sentence says why they missed
/// (the loop unpaced, the call longer than the period, or a few calls held
/// up) and what carries the time, largest first, with what to do.
pub(super) fn deadline_verdict(r: &GroupReport) -> Option<Verdict> {
    let d = r.rate.deadline.as_ref()?;
    if !(d.misses > 0 && d.miss_rate >= SPIKE_SHARE) {
        return None;
    }
    let mut evidence = json!({"misses": d.misses, "calls": d.calls, "miss_rate": d.miss_rate});
    if let Some(c) = &d.cause {
        evidence["cause"] = json!(c.cause);
        evidence["period_ms"] = json!(c.period_ms);
        evidence["stages"] = json!(c.stages);
    }
    let text = deadline_sentence(r, &miss_count(d.misses, d.calls));
    Some(Verdict {
        from_spikes: false,
        code: "deadline_misses",
        kind: r.kind.clone(),
        stage: Some(Figure::E2e.name()),
        group: Some(Figure::E2e.side().as_str()),
        text,
        evidence,
    })
}

/// How a deadline sentence names the calls that missed: "12 of 300 calls
/// (4.00%)". The merge path names its summed count with it too.
pub(super) fn miss_count(misses: u64, calls: u64) -> String {
    // The rate as the group's `miss_rate` holds it, then scaled: the
    // percent rounds alike wherever the count is named.
    let rate = misses as f64 / calls.max(1) as f64;
    format!("{misses} of {calls} calls ({:.2}%)", 100.0 * rate)
}

/// The `deadline_misses` sentence of group `r`, naming the calls that
/// missed as `count` (its cause and what carries the time are `r`'s).
pub(super) fn deadline_sentence(r: &GroupReport, count: &str) -> String {
    match r.rate.deadline.as_ref().and_then(|d| d.cause.as_ref()) {
        None => format!("{count} missed their tick's deadline."),
        Some(c) => deadline_text(r, c, count),
    }
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
        "unpaced" => unpaced_text(r, c, count, &period),
        "over_period" => over_period_text(c, count, &period, top),
        _ => held_up_text(c, count, &period, top),
    }
}

/// `unpaced`: the loop does not wait for its ticks.
fn unpaced_text(r: &GroupReport, c: &DeadlineCause, count: &str, period: &str) -> String {
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

/// `over_period`: the typical call does not fit the period.
fn over_period_text(c: &DeadlineCause, count: &str, period: &str, top: Option<Figure>) -> String {
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
                    Figure::RunWait.advice()
                ),
                None => top.map_or(String::new(), |f| format!(" — {f}: {}", f.advice())),
            };
    format!(
                "{count} missed their tick's deadline: the typical call does not fit the {period} — e2e median {} ({} over on the calls that missed); its time goes to {}. To keep the deadline, cut the largest{what}; or run the loop at {:.1} Hz or less (the rate its median call allows).",
                fmt_ms(c.e2e_p50_ms),
                fmt_ms((c.missed_e2e_p50_ms - c.period_ms).max(0.0)),
                carried(c, Some(c.missed_e2e_p50_ms)),
                1000.0 / c.e2e_p50_ms
            )
}

/// `held_up`: a few calls took longer than usual.
fn held_up_text(c: &DeadlineCause, count: &str, period: &str, top: Option<Figure>) -> String {
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
                    Figure::RunWait.advice()
                ),
                (Some(f), _) => format!("; {}", f.advice()),
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

/// A `stall` per call that paused outside every stage for at least a
/// median call: an event, named with its call, never "jitter".
pub(super) fn stall_verdicts(r: &GroupReport) -> Vec<Verdict> {
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
                    cause.host_figure().map_or("", Figure::advice)
                )
            } else if st.host_measured {
                "the robot's host figures on that call are small: the robot's own code paused between its stages — a blocking call outside every stage (a log write, file or network I/O, a lock), or the process was stopped; look at what the robot did at that moment".to_string()
            } else {
                "look at what the robot did at that moment: a blocking call outside every stage (a log write, I/O, a lock), a garbage collection, page faults or swapping, another process on its core (the host figures, docs/host.md, tell which)".to_string()
            };
            Verdict {
                from_spikes: false,
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
