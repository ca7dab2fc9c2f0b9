//! A group's conclusions in plain language, with machine-readable codes
//! and the numbers behind them.

use serde_json::json;
use stagetrace_schema::Figure;

use super::deadline_verdict::{deadline_verdict, stall_verdicts};
use super::host_verdict::{host_spikes, Spikes};
use super::moves::{e2e_moved, moves, Context};
use super::options::{MIN_SPIKES, SPIKE_SHARE};
use super::parts::{left_to_parts, recurring_on_their_own, spike_cost, spiked};
use super::report::{GroupReport, HostCause, Verdict};
use crate::figures;
use crate::format::fmt_ms;

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

/// Without a baseline: figures above their outlier threshold on at least
/// [`SPIKE_SHARE`] of the calls and [`MIN_SPIKES`] calls, when no other verdict already names them
/// (periodic spikes), and each spike costs its call at least the practical
/// floor.
fn spikes(r: &GroupReport, cx: &Context, periodic: &[Figure]) -> Vec<Verdict> {
    let o = &r.outliers;
    let flagged = spiking(r, periodic);
    let mut out = Vec::new();
    for f in spiked(&flagged, periodic, |f| spike_cost(r, f)) {
        let (Some(s), Some(median)) = (o.by_stage.get(f.name()), r.stages.get(f.name())) else {
            continue;
        };
        // What a spike adds to its call (the analysis holds every figure in ms).
        let cost_ms = s.mean_ms - median.p50;
        if cost_ms < cx.floor_ms {
            continue;
        }
        let threshold = o.thresholds.get(f.name()).copied().unwrap_or(f64::NAN);
        let sp = Spikes {
            kind: &r.kind,
            steady: r.steady,
            f,
            rounds: s.rounds,
            cost_ms,
            median_ms: median.p50,
        };
        let mut v = spike_verdict(&sp, s.mean_ms, (threshold, threshold), s.host.as_ref());
        v.from_spikes = true;
        out.push(v);
    }
    out
}

/// One figure's spikes as a verdict: laid at its host when a host figure
/// explains them (`cause`), else the stage's own. `thresholds`: the lowest
/// and highest outlier threshold the spikes were counted against (one
/// value for one run; the partitions' range for a merged summary).
pub(super) fn spike_verdict(
    sp: &Spikes<'_>,
    mean_ms: f64,
    thresholds: (f64, f64),
    cause: Option<&HostCause>,
) -> Verdict {
    if let Some(cause) = cause {
        return host_spikes(sp, cause);
    }
    let f = sp.f;
    let threshold = if thresholds.0 == thresholds.1 {
        fmt_ms(thresholds.1)
    } else {
        format!(
            "{}–{} across partitions",
            fmt_ms(thresholds.0),
            fmt_ms(thresholds.1)
        )
    };
    Verdict {
        from_spikes: false,
        code: "spikes",
        kind: sp.kind.to_owned(),
        stage: Some(f.name()),
        group: Some(f.side().as_str()),
        text: format!(
            "{f} spikes on {} of {} calls ({:.1}%): {} on average against a median of {} (threshold {threshold}), not periodic; {}.",
            sp.rounds,
            sp.steady,
            100.0 * sp.rounds as f64 / sp.steady as f64,
            fmt_ms(mean_ms),
            fmt_ms(sp.median_ms),
            f.advice()
        ),
        evidence: json!({
            "cost_ms": sp.cost_ms, "rounds": sp.rounds, "calls": sp.steady,
            "mean_ms": mean_ms, "median_ms": sp.median_ms, "threshold_ms": thresholds.1,
        }),
    }
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
                return Some(host_spikes(
                    &Spikes {
                        kind: &r.kind,
                        steady: r.steady,
                        f,
                        rounds: m.calls,
                        cost_ms: m.excess_ms,
                        median_ms: m.median_ms,
                    },
                    cause,
                ));
            }
            Some(Verdict {
                from_spikes: false,
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
                    f.advice()
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
        from_spikes: false,
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

/// A `periodic` verdict per figure whose spikes recur with a period
/// (parts before sums, unless a sum's spikes are mostly its own:
/// [`left_to_parts`]), its period in calls and seconds.
fn periodic_verdicts(r: &GroupReport, periodic: &[Figure]) -> Vec<Verdict> {
    let mut out = Vec::new();
    let cost = |f: Figure| spike_cost(r, f);
    for m in periodic
        .iter()
        .copied()
        .filter(|&m| !left_to_parts(m, periodic, &cost))
    {
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
                let mut v = host_spikes(
                    &Spikes {
                        kind: &r.kind,
                        steady: r.steady,
                        f: m,
                        rounds: s.rounds,
                        cost_ms: s.mean_ms - median,
                        median_ms: median,
                    },
                    cause,
                );
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
            from_spikes: false,
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
                    format!("; {}", m.advice())
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

/// A group's verdicts, in [`verdict_order`]: the figures' shapes and
/// moves, replaced where the records name the cause; stalls; the gap when
/// no stage explains the jitter; the deadline; or `steady`.
pub(super) fn verdicts(r: &GroupReport, cx: &Context, baseline_n: u64) -> Vec<Verdict> {
    let has_baseline = cx.has_baseline;
    if r.steady == 0 {
        return vec![no_steady_calls(r)];
    }
    let mut out = shape_verdicts(r, cx);
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
    out.extend(stall_verdicts(r));
    gap_or_e2e(&mut out, r, cx, baseline_n, waited);
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
        out.push(Verdict {
            from_spikes: false,
            code: "steady",
            kind: r.kind.clone(),
            stage: None,
            group: None,
            text: steady_text(r, absorbed, has_baseline),
            evidence: json!({}),
        });
    }
    out.sort_by(verdict_order);
    out
}

/// `no_steady_calls`: every call was warm-up or failed.
fn no_steady_calls(r: &GroupReport) -> Verdict {
    Verdict {
        from_spikes: false,
        code: "no_steady_calls",
        kind: r.kind.clone(),
        stage: None,
        group: None,
        text: format!(
            "no steady-state calls: all {} were warm-up ({}) or failed ({}); nothing to measure.",
            r.calls, r.warmup_excluded, r.failed
        ),
        evidence: json!({"calls": r.calls, "warmup": r.warmup_excluded, "failed": r.failed}),
    }
}

/// What the figures' shapes say: moves against the baseline, periodic
/// figures, second modes, and (without a baseline) spikes.
fn shape_verdicts(r: &GroupReport, cx: &Context) -> Vec<Verdict> {
    let mut out = moves(r, cx);
    let periodic: Vec<Figure> = r
        .periodicity
        .iter()
        .filter(|p| p.significant)
        .filter_map(|p| Figure::from_name(p.stage))
        .collect();
    // With a baseline the median and tail tests judge each stage (and
    // `e2e_moved` says when the sample is too small for them).
    let spiked = if cx.has_baseline {
        Vec::new()
    } else {
        spikes(r, cx, &periodic)
    };
    let recurring = recurring_on_their_own(r, &periodic, &spiked);
    out.extend(periodic_verdicts(r, &recurring));
    out.extend(second_modes(r, &periodic));
    out.extend(spiked);
    out
}

/// The verdicts on the call as a whole, when no stage's does: the gap
/// (`unexplained_gap`) when no stage moved, and with a baseline
/// `e2e_moved` when nothing else moved. `waited`: a server's wait the
/// records name (a stage's part that moved).
fn gap_or_e2e(
    out: &mut Vec<Verdict>,
    r: &GroupReport,
    cx: &Context,
    baseline_n: u64,
    waited: bool,
) {
    let gap_related = |v: &Verdict| {
        v.stage
            .and_then(Figure::from_name)
            .is_some_and(figures::is_gap_related)
    };
    let stage_moved = waited
        || out
            .iter()
            .any(|v| matches!(v.code, "median_shift" | "tail_only") && !gap_related(v));
    // The gap's spikes laid at a host (its log writing, its scheduling)
    // are explained: "no stage explains it" would send the user hunting.
    let gap_host = out.iter().any(|v| {
        (v.code.starts_with("host_") || v.code == "blocked_wait")
            && v.stage == Some(Figure::Gap.name())
    });
    if !stage_moved && !gap_host {
        if let Some(v) = unexplained_gap(r, cx.has_baseline) {
            // The gap's own shape verdicts say the same thing less well.
            out.retain(|v| !(matches!(v.code, "median_shift" | "tail_only") && gap_related(v)));
            out.push(v);
        }
    }
    let moved = out.iter().any(|v| {
        matches!(
            v.code,
            "median_shift" | "tail_only" | "network_moved" | "unexplained_gap"
        )
    });
    if cx.has_baseline && !moved && !waited {
        out.extend(e2e_moved(r, cx, baseline_n));
    }
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
