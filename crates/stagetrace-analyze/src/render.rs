//! The terminal report.

use std::fmt::Write as _;

use crate::analysis::{iso_time, GroupReport, Report};
use crate::metric::Metric;

/// A duration in ms, with a precision that suits its size (`"36.20 ms"`, `"850 µs"`).
pub fn fmt_ms(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a >= 1000.0 {
        format!("{:.0} ms", v)
    } else if a >= 100.0 {
        format!("{:.1} ms", v)
    } else if a >= 1.0 {
        format!("{:.2} ms", v)
    } else if a >= 0.1 || a == 0.0 {
        format!("{:.3} ms", v)
    } else {
        format!("{:.1} µs", v * 1000.0)
    }
}

/// A table cell: fixed three decimals.
fn cell(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "-".into()
    }
}

/// Most outlier rounds printed in the terminal (the JSON has more).
const SHOWN_ROUNDS: usize = 15;

/// The report as the terminal shows it.
pub fn text(report: &Report) -> String {
    let mut s = String::new();
    let i = &report.inputs;
    let _ = writeln!(
        s,
        "stagetrace report — {} record(s) from {}",
        i.records,
        i.files.join(", ")
    );
    if let Some(b) = &report.baseline {
        let _ = writeln!(
            s,
            "baseline: {} record(s) from {}",
            b.records,
            b.files.join(", ")
        );
    }
    for w in i
        .warnings
        .iter()
        .chain(report.baseline.iter().flat_map(|b| b.warnings.iter()))
    {
        let _ = writeln!(s, "warning: {w}");
    }
    if !i.errors.is_empty() {
        let list: Vec<String> = i
            .errors
            .iter()
            .map(|e| format!("{} ×{}", e.error, e.count))
            .collect();
        let _ = writeln!(s, "failed calls: {}", list.join(", "));
    }
    for g in &report.groups {
        group(&mut s, g);
    }
    let _ = writeln!(s, "\nverdict:");
    for v in &report.verdicts {
        let kind = if report.groups.len() > 1 {
            format!("[{}] ", v.kind)
        } else {
            String::new()
        };
        let _ = writeln!(s, "  * {kind}{} ({})", v.text, v.code);
    }
    s
}

fn group(s: &mut String, g: &GroupReport) {
    let _ = writeln!(
        s,
        "\nkind \"{}\": {} steady call(s) ({} warm-up excluded, {} failed), {} → {}",
        g.kind,
        g.steady,
        g.warmup_excluded,
        g.failed,
        iso_time(g.start_unix_ms),
        iso_time(g.end_unix_ms)
    );
    let mut rate = Vec::new();
    if let Some(hz) = g.rate.effective_hz {
        rate.push(format!("{hz:.1} Hz effective"));
    }
    if let Some(j) = &g.rate.jitter {
        rate.push(format!(
            "completion jitter |Δ²t| p50 {} p99 {}",
            fmt_ms(j.p50),
            fmt_ms(j.p99)
        ));
    }
    if let Some(d) = &g.rate.deadline {
        let mut t = format!(
            "deadline misses {} of {} ({:.2}%)",
            d.misses,
            d.calls,
            100.0 * d.miss_rate
        );
        if let Some(l) = &d.late {
            let _ = write!(t, ", late p99 {}", fmt_ms(l.p99));
        }
        rate.push(t);
    }
    if !rate.is_empty() {
        let _ = writeln!(s, "  {}", rate.join("; "));
    }
    if let Some(m) = &g.mitigations {
        let mut parts = Vec::new();
        if let Some(mean) = m.mean_batch {
            parts.push(format!(
                "batched {} call(s), mean batch {mean:.2}",
                m.batched_calls
            ));
        }
        if let Some(rate) = m.cache_hit_rate {
            parts.push(format!(
                "cache {} hit / {} miss ({:.1}% hit)",
                m.cache_hits,
                m.cache_misses,
                100.0 * rate
            ));
        }
        if m.stale_calls > 0 {
            parts.push(format!(
                "{} stale action(s) dropped in {} call(s)",
                m.stale_dropped, m.stale_calls
            ));
        }
        let _ = writeln!(s, "  mitigations: {}", parts.join("; "));
    }
    let _ = writeln!(
        s,
        "\n  {:<10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   (ms)",
        "stage", "n", "min", "p50", "p90", "p99", "p99.9", "max", "mean"
    );
    for m in Metric::ALL {
        if let Some(st) = g.stages.get(m.name()) {
            let _ = writeln!(
                s,
                "  {:<10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                m.name(),
                st.n,
                cell(st.min),
                cell(st.p50),
                cell(st.p90),
                cell(st.p99),
                cell(st.p999),
                cell(st.max),
                cell(st.mean)
            );
        }
    }
    if !g.baseline.is_empty() {
        let _ = writeln!(
            s,
            "\n  against the baseline (ratio run/baseline, 95% bootstrap CI; shape by Mann–Whitney + Hodges–Lehmann and p99 exceedance):"
        );
        let _ = writeln!(
            s,
            "  {:<10} {:>9} {:>9} {:>20} {:>9} {:>9} {:>20}  shape",
            "stage", "base p50", "p50", "×p50 [CI]", "base p99", "p99", "×p99 [CI]"
        );
        for m in Metric::ALL {
            if let Some(b) = g.baseline.get(m.name()) {
                let _ = writeln!(
                    s,
                    "  {:<10} {:>9} {:>9} {:>20} {:>9} {:>9} {:>20}  {}",
                    m.name(),
                    cell(b.p50.before),
                    cell(b.p50.after),
                    format!("{:.2} [{:.2} {:.2}]", b.p50.ratio, b.p50.lo, b.p50.hi),
                    cell(b.p99.before),
                    cell(b.p99.after),
                    format!("{:.2} [{:.2} {:.2}]", b.p99.ratio, b.p99.lo, b.p99.hi),
                    b.shape
                );
            }
        }
    }
    let o = &g.outliers;
    let _ = writeln!(
        s,
        "\n  outlier rounds: {} of {} ({})",
        o.count, g.steady, o.rule
    );
    for r in o.rounds.iter().take(SHOWN_ROUNDS) {
        let st: Vec<String> = r
            .stages
            .iter()
            .map(|x| {
                format!(
                    "{} {} (> {})",
                    x.stage,
                    fmt_ms(x.value_ms),
                    fmt_ms(x.threshold_ms)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "    seq {:<8} {}  e2e {:>10}  {}",
            r.seq,
            r.time,
            fmt_ms(r.e2e_ms),
            st.join(", ")
        );
    }
    if o.count as usize > SHOWN_ROUNDS.min(o.rounds.len()) {
        let _ = writeln!(
            s,
            "    … {} more (all in --json / --html)",
            o.count as usize - SHOWN_ROUNDS.min(o.rounds.len())
        );
    }
    if !g.periodicity.is_empty() {
        let _ = writeln!(s, "\n  periodicity of spikes:");
        for p in &g.periodicity {
            match p.period_s {
                Some(period) => {
                    let _ = writeln!(
                        s,
                        "    {:<10} {} spikes, period {:.2} s (autocorrelation {:.2} ≥ {:.2}, {:.0}% of intervals on period)",
                        p.stage, p.spikes, period, p.acf, p.acf_threshold, 100.0 * p.isi_on_period
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "    {:<10} {} spikes, no period (best autocorrelation {:.2} at {:.2} s, threshold {:.2}; {:.0}% of intervals on it)",
                        p.stage, p.spikes, p.acf, p.acf_lag_s, p.acf_threshold, 100.0 * p.isi_on_period
                    );
                }
            }
        }
    }
    if let Some(gp) = &g.gap {
        // Parts that sit inside another part are shown as "of which".
        let inner = |k: &str| -> Option<&'static str> {
            match k {
                "queue" | "infer" if gp.shares.contains_key("server") => Some("server"),
                "observer" => Some("gap"),
                _ => None,
            }
        };
        let mut parts: Vec<(&str, f64)> = gp
            .shares
            .iter()
            .filter(|(k, _)| inner(k).is_none())
            .map(|(k, v)| (*k, *v))
            .collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1));
        let list: Vec<String> = parts
            .iter()
            .map(|(k, v)| {
                let subs: Vec<String> = gp
                    .shares
                    .iter()
                    .filter(|(sk, _)| inner(sk) == Some(*k))
                    .map(|(sk, sv)| format!("{sk} {:.1}%", 100.0 * sv))
                    .collect();
                if subs.is_empty() {
                    format!("{k} {:.1}%", 100.0 * v)
                } else {
                    format!("{k} {:.1}% (of which {})", 100.0 * v, subs.join(", "))
                }
            })
            .collect();
        let _ = writeln!(
            s,
            "\n  e2e variance (σ {}) explained by: {}",
            fmt_ms(gp.e2e_stddev_ms),
            list.join(", ")
        );
    }
}
