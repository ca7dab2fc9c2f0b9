//! A group's conclusions in plain language, with machine-readable codes
//! and the numbers behind them.

use serde_json::json;
use stagetrace_schema::Figure;

use super::report::{GroupReport, Verdict};
use crate::figures;
use crate::format::fmt_ms;

/// Order of verdicts: the most important first.
pub(super) fn verdict_rank(code: &str) -> u8 {
    match code {
        "median_shift" => 0,
        "tail_only" => 1,
        "periodic" => 2,
        "unexplained_gap" => 3,
        "deadline_misses" => 4,
        "faster" => 5,
        "no_steady_calls" => 6,
        _ => 7,
    }
}

/// What to look at when `f` moved. Exhaustive: a figure added to the table
/// needs its advice here.
fn advice(f: Figure) -> &'static str {
    match f {
        Figure::Infer | Figure::Queue | Figure::Server => {
            "inference is the bottleneck: limit concurrency, queue with timeouts, then batch"
        }
        Figure::Uplink | Figure::Downlink | Figure::Roundtrip | Figure::Net => {
            "look at bandwidth, frame size and retransmits (compress or lower the frame rate; retries only hide jitter)"
        }
        Figure::Dispatch => {
            "look at the executor queue, the bus, a control period blocked by the last action (merge commands, drop stale actions)"
        }
        Figure::Capture => "look at the camera driver, frame buffering and exposure settings",
        Figure::Gap | Figure::Observer | Figure::E2e | Figure::Late => {
            "look at client scheduling, memory reclamation, logging, or the observer"
        }
        // Not analysed (see `figures::is_read`); should they be, a moved
        // offset is the clocks, not the call.
        Figure::Offset | Figure::SplitErr => {
            "look at the clock offset between the machines (docs/clocks.md)"
        }
    }
}

/// Keeps a derived figure's verdict only when none of its parts carries the same code.
fn dedupe(flagged: &[Figure]) -> Vec<Figure> {
    flagged
        .iter()
        .copied()
        .filter(|m| !m.parts().iter().any(|p| flagged.contains(p)))
        .collect()
}

fn fmt_p(p: f64) -> String {
    if p < 1e-300 {
        "<1e-300".to_string()
    } else if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

pub(super) fn verdicts(r: &GroupReport, has_baseline: bool) -> Vec<Verdict> {
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
    for code in ["median_shift", "tail_only", "faster"] {
        let mut flagged: Vec<(f64, Figure)> = r
            .baseline
            .iter()
            .filter(|(_, s)| s.shape == code)
            .filter_map(|(n, s)| {
                let strength = if code == "tail_only" {
                    s.exceed_p
                } else {
                    s.mann_whitney.p
                };
                figure(n).map(|m| (strength, m))
            })
            .collect();
        // Strongest evidence first.
        flagged.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let flagged: Vec<Figure> = flagged.into_iter().map(|(_, m)| m).collect();
        for m in dedupe(&flagged) {
            let Some(s) = r.baseline.get(m.name()) else {
                continue;
            };
            let text = match code {
                "median_shift" => format!(
                    "{m} got slower as a whole: median {} → {} (×{:.2}, 95% CI {:.2}–{:.2}; Mann–Whitney p={}, shift {} [{}, {}]); p99 ×{:.2}. The whole stage is slower — {}.",
                    fmt_ms(s.p50.before), fmt_ms(s.p50.after), s.p50.ratio, s.p50.lo, s.p50.hi,
                    fmt_p(s.mann_whitney.p), fmt_ms(s.shift.estimate), fmt_ms(s.shift.lo), fmt_ms(s.shift.hi),
                    s.p99.ratio, advice(m)
                ),
                "tail_only" => format!(
                    "{m} has a longer tail with a flat median: p99 {} → {} (×{:.2}, 95% CI {:.2}–{:.2}), {:.1}% of calls above the baseline p99 (baseline {:.1}%, p={}), median ×{:.2} (shift {} within noise). A few requests are held up: queueing or contention — {}.",
                    fmt_ms(s.p99.before), fmt_ms(s.p99.after), s.p99.ratio, s.p99.lo, s.p99.hi,
                    100.0 * s.exceed, 100.0 * s.baseline_exceed, fmt_p(s.exceed_p), s.p50.ratio,
                    fmt_ms(s.shift.estimate), advice(m)
                ),
                _ => format!(
                    "{m} got faster: median {} → {} (×{:.2}, 95% CI {:.2}–{:.2}; Mann–Whitney p={}).",
                    fmt_ms(s.p50.before), fmt_ms(s.p50.after), s.p50.ratio, s.p50.lo, s.p50.hi,
                    fmt_p(s.mann_whitney.p)
                ),
            };
            out.push(Verdict {
                code,
                kind: kind.clone(),
                stage: Some(m.name()),
                group: Some(m.side().as_str()),
                text,
                evidence: json!({
                    "p50_before_ms": s.p50.before, "p50_after_ms": s.p50.after,
                    "p50_ratio": s.p50.ratio, "p50_ci": [s.p50.lo, s.p50.hi],
                    "p99_before_ms": s.p99.before, "p99_after_ms": s.p99.after,
                    "p99_ratio": s.p99.ratio, "p99_ci": [s.p99.lo, s.p99.hi],
                    "mann_whitney_p": s.mann_whitney.p, "shift_ms": s.shift.estimate,
                    "shift_ci_ms": [s.shift.lo, s.shift.hi],
                    "exceed": s.exceed, "baseline_exceed": s.baseline_exceed, "exceed_p": s.exceed_p,
                }),
            });
        }
    }
    let periodic: Vec<Figure> = r
        .periodicity
        .iter()
        .filter(|p| p.significant)
        .filter_map(|p| figure(p.stage))
        .collect();
    for m in dedupe(&periodic) {
        let Some(p) = r.periodicity.iter().find(|p| p.stage == m.name()) else {
            continue;
        };
        let period = p.period_s.unwrap_or(p.acf_lag_s);
        out.push(Verdict {
            code: "periodic",
            kind: kind.clone(),
            stage: Some(m.name()),
            group: Some(m.side().as_str()),
            text: format!(
                "{m} spikes recur every {period:.2} s ({} spikes; autocorrelation {:.2} at {:.2} s, {:.0}% of inter-spike intervals within ±20% of it): the signature of GC, timers or link renegotiation — find what runs every {period:.2} s.",
                p.spikes, p.acf, p.acf_lag_s, 100.0 * p.isi_on_period
            ),
            evidence: json!({
                "period_s": period, "spikes": p.spikes, "acf": p.acf,
                "acf_threshold": p.acf_threshold, "isi_median_s": p.isi_median_s,
                "isi_on_period": p.isi_on_period,
            }),
        });
    }
    let stage_moved = out.iter().any(|v| {
        matches!(v.code, "median_shift" | "tail_only")
            && !v
                .stage
                .and_then(figure)
                .is_some_and(figures::is_gap_related)
    });
    if let Some(gp) = &r.gap {
        if gp.unexplained && !stage_moved {
            // The gap's own shape verdicts say the same thing less well.
            out.retain(|v| {
                !(matches!(v.code, "median_shift" | "tail_only")
                    && v.stage
                        .and_then(figure)
                        .is_some_and(figures::is_gap_related))
            });
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
            out.push(Verdict {
                code: "unexplained_gap",
                kind: kind.clone(),
                stage: Some(Figure::Gap.name()),
                group: Some(Figure::Gap.side().as_str()),
                text: format!(
                    "e2e jitters (σ {} around a median of {}) but {steady}: the gap — time inside the call no stage covers — explains {:.0}% of the e2e variance, the observer's own cost {:.1}%; {who}.{moved}",
                    fmt_ms(gp.e2e_stddev_ms), fmt_ms(gp.e2e_median_ms),
                    100.0 * gp.gap_share, 100.0 * gp.observer_share
                ),
                evidence: json!({
                    "e2e_stddev_ms": gp.e2e_stddev_ms, "gap_share": gp.gap_share,
                    "observer_share": gp.observer_share, "shares": gp.shares,
                }),
            });
        }
    }
    if let Some(d) = &r.rate.deadline {
        if d.misses > 0 {
            out.push(Verdict {
                code: "deadline_misses",
                kind: kind.clone(),
                stage: Some(Figure::E2e.name()),
                group: Some(Figure::E2e.side().as_str()),
                text: format!(
                    "{} of {} calls ({:.2}%) missed their tick's deadline.",
                    d.misses,
                    d.calls,
                    100.0 * d.miss_rate
                ),
                evidence: json!({"misses": d.misses, "calls": d.calls, "miss_rate": d.miss_rate}),
            });
        }
    }
    if out.is_empty() {
        let text = if has_baseline {
            "steady: no stage moved against the baseline (median and tail tests), no periodic spikes, and the stages explain the e2e jitter.".to_string()
        } else {
            "steady: no periodic spikes and the stages explain the e2e jitter (give --baseline IDLE_FILES to test for median shifts and longer tails).".to_string()
        };
        out.push(Verdict {
            code: "steady",
            kind,
            stage: None,
            group: None,
            text,
            evidence: json!({}),
        });
    }
    out.sort_by_key(|v| verdict_rank(v.code));
    out
}
