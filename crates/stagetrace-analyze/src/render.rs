//! The report as text: the terminal's tables ([`text`]) and the `--json`
//! document ([`json`]). Rows come in the figure table's display order.

mod hops;
mod robots;

pub(crate) use robots::pair as robot_pair;

use std::fmt::Write as _;

use stagetrace_schema::{Figure, BLACK_BOX_NOTE};

use crate::analysis::{GroupReport, Report, StageVsBaseline};
use crate::figures;
use crate::format::{fmt_ms, iso_time, signed_ms};
use crate::table::{Align, Table};

/// How a report is written out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The terminal's tables ([`text`]).
    Text,
    /// The `--json` document ([`json`]).
    Json,
}

impl Format {
    /// The report in this format.
    pub fn render(self, report: &Report) -> Result<String, serde_json::Error> {
        match self {
            Format::Text => Ok(text(report)),
            Format::Json => json(report),
        }
    }
}

/// The report as `--json` prints it: pretty JSON with stable field names
/// (`docs/report.md`), ending in a newline.
pub fn json(report: &Report) -> Result<String, serde_json::Error> {
    let mut s = serde_json::to_string_pretty(report)?;
    s.push('\n');
    Ok(s)
}

/// A figure against its baseline, as the columns of the baseline tables:
/// p50 before, after, ×p50 [CI], the same for p99, and the shape.
fn baseline_cells(b: &StageVsBaseline) -> Vec<String> {
    vec![
        cell(b.p50.before),
        cell(b.p50.after),
        format!("{:.2} [{:.2} {:.2}]", b.p50.ratio, b.p50.lo, b.p50.hi),
        cell(b.p99.before),
        cell(b.p99.after),
        format!("{:.2} [{:.2} {:.2}]", b.p99.ratio, b.p99.lo, b.p99.hi),
        b.shape.to_string(),
    ]
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
    let order: Vec<String> = report.robots.iter().map(|r| r.name.clone()).collect();
    for g in &report.groups {
        group(&mut s, g, &order);
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

fn group(s: &mut String, g: &GroupReport, robots: &[String]) {
    header(s, g);
    stage_table(s, g);
    infer_parts(s, g);
    robots::table(s, g, robots);
    hops::table(s, g);
    baseline_table(s, g);
    outliers(s, g);
    periodicity_and_shapes(s, g);
    variance(s, g);
}

/// The kind's line, its rate (per robot when robots are merged) and what
/// the mitigations did.
fn header(s: &mut String, g: &GroupReport) {
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
    let merged_robots = !g.robots.is_empty();
    if merged_robots {
        // Interleaved robots make neither a rate nor a jitter.
        rate.push("rate and completion jitter per robot (below)".to_string());
    } else if let Some(hz) = g.rate.effective_hz {
        rate.push(format!("{hz:.1} Hz effective"));
    }
    if let (false, Some(j)) = (merged_robots, &g.rate.jitter) {
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
    if let Some(q) = &g.action_queue {
        let dry = match q.dry_p50_ms {
            Some(late) if q.dry_chunks > 0 => format!(
                "; ran dry before {} ({} idle ticks, a median {} before the chunk came)",
                q.dry_chunks,
                q.dry_ticks,
                fmt_ms(late)
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "  action queue: {} chunks, margin p50 {}{dry}",
            q.chunks,
            fmt_ms(q.margin_p50_ms)
        );
    }
}

/// The columns of a figure table: n, min, p50, p90, p99, p99.9, max, mean.
const STAT_COLUMNS: [&str; 8] = ["n", "min", "p50", "p90", "p99", "p99.9", "max", "mean"];

/// A figure table's cells after the name.
fn stat_cells(st: &crate::stats::Distribution) -> Vec<String> {
    vec![
        st.n.to_string(),
        cell(st.min),
        cell(st.p50),
        cell(st.p90),
        cell(st.p99),
        cell(st.p999),
        cell(st.max),
        cell(st.mean),
    ]
}

/// A table whose first column is `first` and whose others are [`STAT_COLUMNS`].
fn stat_table(first: &str) -> Table {
    let mut cols = vec![(first, Align::Left)];
    cols.extend(STAT_COLUMNS.iter().map(|c| (*c, Align::Right)));
    Table::new(2, &cols)
}

/// A bound as a table writes it after ±: "1.35", "12.8", "0.050".
pub fn bound(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A figure's row name: a one-way stage carries the clock split's bound
/// (`uplink ± 1.35`), which it is only known within.
pub fn row_name(f: Figure, split_err_ms: Option<f64>) -> String {
    match split_err_ms {
        Some(e) if figures::is_one_way(f) && e.is_finite() => format!("{f} ± {}", bound(e)),
        _ => f.name().to_string(),
    }
}

/// The line under a table with uplink / downlink on an estimated clock:
/// each direction is only known within the split's bound, net exactly.
pub fn split_note(split_err_ms: f64, net_p50: Option<f64>) -> String {
    let net = net_p50.map_or(String::new(), |n| format!(" ({})", fmt_ms(n)));
    format!(
        "uplink / downlink: split ± {} (the median split_err_ms): the server's clock offset is estimated, so each direction is only known within that — net{net} is exact; to measure each direction, synchronise the clocks (PTP) and record with --clock trusted (docs/clocks.md)",
        bound(split_err_ms)
    )
}

/// The line under a table of records that carry `roundtrip` with no
/// server timing (and no first-byte stamps): what is missing and where
/// to get it.
pub const NO_SERVER_TIMING_NOTE: &str = "no server timing: roundtrip is your transport span (send → response) as one block, not split into uplink, queue, infer and downlink — the policy server must send its timing in each response (the server_timing map or the stagetrace-timing header; docs/protocol.md; stagetrace-net, stagetrace-grpc and stagetrace.server do it)";

/// Whether a table of these figures needs [`NO_SERVER_TIMING_NOTE`]: the
/// transport as a whole, nothing of the server, no black-box cut.
pub fn lacks_server_timing(has: impl Fn(Figure) -> bool) -> bool {
    has(Figure::Roundtrip) && !Figure::Roundtrip.parts().iter().any(|p| has(*p))
}

/// Per figure: n, min, p50, p90, p99, p99.9, max, mean — the call's own
/// figures (stages in call order, each one's parts under it, then the
/// sums), the notes on what they rest on, then the hosts' figures under
/// their own heading.
fn stage_table(s: &mut String, g: &GroupReport) {
    let _ = writeln!(s);
    let mut t = stat_table("stage (ms)");
    for m in figures::call_rows() {
        if let Some(st) = g.stages.get(m.name()) {
            let mut row = vec![row_name(m, g.split_err_ms)];
            row.extend(stat_cells(st));
            t.row(row);
        }
    }
    t.write(s);
    let has = |f: Figure| g.stages.contains_key(f.name());
    let one_way = Figure::Net.parts().iter().any(|f| has(*f));
    if let (true, Some(e)) = (one_way, g.split_err_ms) {
        let net = g.stages.get(Figure::Net.name()).map(|n| n.p50);
        let _ = writeln!(s, "    {}", split_note(e, net));
    }
    if has(Figure::Ttfb) {
        let _ = writeln!(s, "    {BLACK_BOX_NOTE}");
    }
    if lacks_server_timing(has) {
        let _ = writeln!(s, "    {NO_SERVER_TIMING_NOTE}");
    }
    let mut host = stat_table("host (ms)");
    for m in figures::host_rows() {
        if let Some(st) = g.stages.get(m.name()) {
            let mut row = vec![m.name().to_string()];
            row.extend(stat_cells(st));
            host.row(row);
        }
    }
    if !host.is_empty() {
        let _ = writeln!(s, "\n  {}:", figures::HOST_HEADING);
        host.write(s);
        let _ = writeln!(s, "    {}", figures::HOST_LEGEND);
    }
}

/// Inference's parts under the stage table: each part's share of infer at
/// p95 and p50, the bottleneck, the device's own time, the note.
fn infer_parts(s: &mut String, g: &GroupReport) {
    let Some(ip) = &g.infer_parts else {
        return;
    };
    let shares = |share: fn(&crate::analysis::PartShare) -> f64| -> String {
        ip.parts
            .iter()
            .map(|p| {
                let v = share(p);
                // Parts all 0 ms have no shares.
                if v.is_finite() {
                    format!("{} {:.0}%", p.part, 100.0 * v)
                } else {
                    format!("{} -", p.part)
                }
            })
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let p50 = if ip.bottleneck_p50 == ip.bottleneck_p95 {
        String::new()
    } else {
        format!(" (p50: {})", ip.bottleneck_p50)
    };
    let _ = writeln!(
        s,
        "\n  infer's parts ({} calls): {} at p95 (p50: {}); bottleneck at p95: {}{p50}",
        ip.calls,
        shares(|p| p.share_p95),
        shares(|p| p.share_p50),
        ip.bottleneck_p95
    );
    let each: Vec<String> = ip
        .parts
        .iter()
        .map(|p| format!("{} {} / {}", p.part, cell(p.p50_ms), cell(p.p95_ms)))
        .collect();
    let _ = writeln!(s, "    p50 / p95 (ms): {}", each.join(", "));
    if let Some(d) = &ip.device {
        let late = if d.late_calls > 0 {
            format!(
                "; ran past the model stage on {} call(s), by {} on average",
                d.late_calls,
                d.late_excess_ms.map_or_else(|| "-".to_string(), fmt_ms)
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "    device (the model's own time on the device, {} calls): p50 {} p95 {}{late}",
            d.calls,
            fmt_ms(d.p50_ms),
            fmt_ms(d.p95_ms)
        );
    }
    if let Some(note) = &ip.note {
        let _ = writeln!(s, "    note: {note}");
    }
}

/// The columns of a table against the baseline, after the name.
const BASELINE_COLUMNS: [(&str, Align); 7] = [
    ("base p50", Align::Right),
    ("p50", Align::Right),
    ("×p50 [CI]", Align::Right),
    ("base p99", Align::Right),
    ("p99", Align::Right),
    ("×p99 [CI]", Align::Right),
    ("shape", Align::Left),
];

/// A table against the baseline whose first columns are `first`.
fn baseline_table_of(first: &[(&str, Align)]) -> Table {
    let mut cols = first.to_vec();
    cols.extend(BASELINE_COLUMNS);
    Table::new(2, &cols)
}

/// Against the baseline: ratios with their intervals, and the shape.
fn baseline_table(s: &mut String, g: &GroupReport) {
    if !g.baseline.is_empty() {
        let _ = writeln!(
            s,
            "\n  against the baseline (ratio run/baseline, 95% bootstrap CI; shape by Mann–Whitney + Hodges–Lehmann and p99 exceedance):"
        );
        let mut t = baseline_table_of(&[("stage (ms)", Align::Left)]);
        for m in figures::call_rows() {
            if let Some(b) = g.baseline.get(m.name()) {
                let mut row = vec![row_name(m, g.split_err_ms)];
                row.extend(baseline_cells(b));
                t.row(row);
            }
        }
        t.write(s);
    }
}

/// The outlier rounds: the rule, a whole-run shift, the first rounds.
fn outliers(s: &mut String, g: &GroupReport) {
    let o = &g.outliers;
    if let Some(x) = o.whole_run_shift() {
        let each: Vec<String> = o
            .shifted
            .iter()
            .map(|(f, d)| format!("{f} {}", signed_ms(*d)))
            .collect();
        let _ = writeln!(
            s,
            "\n  the whole run shifted ({}): medians against the baseline {}; rounds are measured against the run's own median",
            signed_ms(x),
            each.join(", ")
        );
    }
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
        let who = r.robot.as_ref().map_or(String::new(), |n| format!(" {n}"));
        let _ = writeln!(
            s,
            "    seq {:<8}{who} {}  e2e {:>10}  {}",
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
}

/// Periodicity of each figure's spikes, and the second modes.
fn periodicity_and_shapes(s: &mut String, g: &GroupReport) {
    if !g.periodicity.is_empty() {
        let _ = writeln!(s, "\n  periodicity of spikes:");
        for p in &g.periodicity {
            match p.period_s {
                Some(period) => {
                    let calls = p
                        .period_calls
                        .map_or(String::new(), |n| format!(" = every {n} calls"));
                    let _ = writeln!(
                        s,
                        "    {:<10} {} spikes, period {:.2} s{calls} (autocorrelation {:.2}, threshold {:.2}; {:.0}% of intervals on period)",
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
    if !g.modes.is_empty() {
        let _ = writeln!(s, "\n  shapes (second modes, not spikes):");
        for m in &g.modes {
            let _ = writeln!(
                s,
                "    {:<10} bimodal: {:.1}% of the calls {} above its median of {}{}",
                m.stage,
                100.0 * m.share,
                fmt_ms(m.excess_ms),
                fmt_ms(m.median_ms),
                if m.matters {
                    " (a tenth of the call or more: see the verdict)"
                } else {
                    " (small against the call: a shape, not a fault)"
                }
            );
        }
    }
}

/// How the e2e variance splits over the stages and the gap.
fn variance(s: &mut String, g: &GroupReport) {
    if let Some(gp) = &g.gap {
        // A figure inside another one of the list is shown "of which" under
        // the tightest one holding it (queue and infer under server, pre,
        // model and post under infer, the observer under the gap).
        let present = || gp.shares.keys().filter_map(|k| Figure::from_name(k));
        let inner =
            |k: &str| -> Option<Figure> { figures::container(Figure::from_name(k)?, present()) };
        let mut top: Vec<(&str, f64)> = gp
            .shares
            .iter()
            .filter(|(k, _)| inner(k).is_none())
            .map(|(k, v)| (*k, *v))
            .collect();
        top.sort_by(|a, b| b.1.total_cmp(&a.1));
        fn item(
            k: &str,
            v: f64,
            shares: &std::collections::BTreeMap<&'static str, f64>,
            inner: &dyn Fn(&str) -> Option<Figure>,
        ) -> String {
            // Inside figures in the table's order.
            let mut subs: Vec<(Figure, f64)> = shares
                .iter()
                .filter(|(sk, _)| inner(sk).is_some_and(|c| c.name() == k))
                .filter_map(|(sk, sv)| Some((Figure::from_name(sk)?, *sv)))
                .collect();
            subs.sort_by_key(|(f, _)| *f);
            if subs.is_empty() {
                format!("{k} {:.1}%", 100.0 * v)
            } else {
                let subs: Vec<String> = subs
                    .iter()
                    .map(|(f, sv)| item(f.name(), *sv, shares, inner))
                    .collect();
                format!("{k} {:.1}% (of which {})", 100.0 * v, subs.join(", "))
            }
        }
        let list: Vec<String> = top
            .iter()
            .map(|(k, v)| item(k, *v, &gp.shares, &inner))
            .collect();
        let _ = writeln!(
            s,
            "\n  e2e variance (σ {}) explained by: {}",
            fmt_ms(gp.e2e_stddev_ms),
            list.join(", ")
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use crate::analysis::{analyze, AnalyzeOptions, ALL_KINDS};
    use crate::load::{Dataset, LoadOptions};

    #[test]
    fn mitigation_figures_per_kind_in_text_and_json() {
        // kind "a": batches of 4 and 2, a cache missing once then hitting
        // three times; kind "b": one stale drop of 2 chunks; a warm-up call
        // with a batch of 9 is left out.
        let lines = [
            r#"{"seq":0,"ts_unix_ms":1000,"kind":"a","e2e_ms":1,"warmup":true,"batch_size":9}"#,
            r#"{"seq":1,"ts_unix_ms":1010,"kind":"a","e2e_ms":1,"batch_size":4,"cache":"miss"}"#,
            r#"{"seq":2,"ts_unix_ms":1020,"kind":"a","e2e_ms":1,"batch_size":2,"cache":"hit"}"#,
            r#"{"seq":3,"ts_unix_ms":1030,"kind":"a","e2e_ms":1,"cache":"hit"}"#,
            r#"{"seq":4,"ts_unix_ms":1040,"kind":"a","e2e_ms":1,"cache":"hit"}"#,
            r#"{"seq":5,"ts_unix_ms":1050,"kind":"b","e2e_ms":1}"#,
            r#"{"seq":6,"ts_unix_ms":1060,"kind":"b","e2e_ms":1,"failed":true,"error":"stale action dropped","stale_dropped":2}"#,
        ]
        .join("\n");
        let ds =
            Dataset::load_reader(lines.as_bytes(), Path::new("m"), LoadOptions::default()).unwrap();
        let a = analyze(&ds, None, &AnalyzeOptions::default());
        let g = |k: &str| a.report.groups.iter().find(|g| g.kind == k).unwrap();
        let ma = g("a").mitigations.clone().unwrap();
        assert_eq!((ma.batched_calls, ma.mean_batch), (2, Some(3.0)));
        assert_eq!((ma.cache_hits, ma.cache_misses), (3, 1));
        assert_eq!(ma.cache_hit_rate, Some(0.75));
        assert_eq!((ma.stale_calls, ma.stale_dropped), (0, 0));
        let mb = g("b").mitigations.clone().unwrap();
        assert_eq!((mb.stale_calls, mb.stale_dropped), (1, 2));
        assert_eq!((mb.mean_batch, mb.cache_hit_rate), (None, None));
        let all = g(ALL_KINDS).mitigations.clone().unwrap();
        assert_eq!(
            (all.batched_calls, all.cache_hits, all.stale_dropped),
            (2, 3, 2)
        );
        let text = super::text(&a.report);
        assert!(
            text.contains(
                "mitigations: batched 2 call(s), mean batch 3.00; cache 3 hit / 1 miss (75.0% hit)"
            ),
            "{text}"
        );
        assert!(
            text.contains("mitigations: 2 stale action(s) dropped in 1 call(s)"),
            "{text}"
        );
        let json = serde_json::to_value(&a.report).unwrap();
        assert_eq!(json["groups"][0]["mitigations"]["cache_hit_rate"], 0.75);
        // Runs without mitigations carry no such entry.
        let plain = Dataset::load_reader(
            r#"{"seq":0,"ts_unix_ms":1,"kind":"c","e2e_ms":1}"#.as_bytes(),
            Path::new("p"),
            LoadOptions::default(),
        )
        .unwrap();
        let p = analyze(&plain, None, &AnalyzeOptions::default());
        assert!(p.report.groups[0].mitigations.is_none());
        let pj = serde_json::to_value(&p.report).unwrap();
        assert!(pj["groups"][0].get("mitigations").is_none());
        assert!(!super::text(&p.report).contains("mitigations:"));
    }
}
