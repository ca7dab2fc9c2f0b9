//! A summary's report as a table for people (`stagetrace summarize`).

use std::fmt::Write as _;

use super::report::{SummaryGroup, SummaryReport};
use crate::format::{fmt_ms, iso_time};
use crate::table::{Align, Table};

impl SummaryReport {
    /// The report as text: what was read, then per kind one row per
    /// figure (n, p50, p90, p99 within the stated precision, exact max),
    /// then the slowest calls.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let time = |t: Option<f64>| t.map_or_else(|| "-".to_owned(), iso_time);
        let _ = writeln!(
            s,
            "{} calls ({} warm-up, {} failed) from {} robot(s), {} → {}",
            self.calls,
            self.warmup,
            self.failed,
            self.robots.len(),
            time(self.first_ts_unix_ms),
            time(self.last_ts_unix_ms),
        );
        let _ = writeln!(
            s,
            "quantiles: {} (within {:.3} % of the exact values; max is exact)",
            self.quantiles,
            self.relative_error * 100.0
        );
        verdicts_text(self, &mut s);
        for g in &self.groups {
            group_text(g, &mut s);
        }
        slowest_text(self, &mut s);
        if !self.damaged_files.is_empty() {
            let _ = writeln!(
                s,
                "\nleft out, damaged ({} file(s); their calls are not in this report):",
                self.damaged_files.len() as u64 + self.damaged_others
            );
            for d in &self.damaged_files {
                let _ = writeln!(s, "  {}: {}", d.file, d.reason);
            }
            if self.damaged_others > 0 {
                let _ = writeln!(s, "  and {} more", self.damaged_others);
            }
        }
        if !self.errors.is_empty() {
            let _ = writeln!(s, "\nfailures:");
            for e in &self.errors {
                let _ = writeln!(s, "  {:>6}  {}", e.count, e.error);
            }
        }
        s
    }
}

/// The verdicts through the merge path, largest cost first; `steady`
/// for a kind analysed with none; nothing when no partition was analysed.
fn verdicts_text(r: &SummaryReport, s: &mut String) {
    let analysed: Vec<&SummaryGroup> = r
        .groups
        .iter()
        .filter(|g| g.verdict_calls.is_some())
        .collect();
    if analysed.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nverdicts (each partition analysed exactly, the evidence merged):"
    );
    for v in &r.verdicts {
        if v.code == "steady" {
            let _ = writeln!(s, "  * [{}] {}", v.kind, v.text);
        } else {
            let _ = writeln!(s, "  * [{}] {} ({})", v.kind, v.text, v.code);
        }
    }
    for g in analysed {
        let calls = g.verdict_calls.unwrap_or(0);
        if calls < g.steady {
            let _ = writeln!(
                s,
                "  [{}] the verdicts cover {calls} of its {} steady calls: the rest come from summaries made without verdicts",
                g.kind, g.steady
            );
        }
    }
}

/// One kind's table: a row per figure.
fn group_text(g: &SummaryGroup, s: &mut String) {
    let _ = writeln!(
        s,
        "\nkind {}: {} steady calls{}",
        g.kind,
        g.steady,
        if g.deadline_calls > 0 {
            format!(
                ", {} of {} missed their deadline",
                g.deadline_misses, g.deadline_calls
            )
        } else {
            String::new()
        }
    );
    let mut t = Table::new(
        2,
        &[
            ("stage", Align::Left),
            ("n", Align::Right),
            ("p50", Align::Right),
            ("p90", Align::Right),
            ("p99", Align::Right),
            ("max", Align::Right),
        ],
    );
    for st in &g.stages {
        t.row(vec![
            st.stage.clone(),
            st.n.to_string(),
            fmt_ms(st.p50),
            fmt_ms(st.p90),
            fmt_ms(st.p99),
            fmt_ms(st.max),
        ]);
    }
    t.write(s);
}

/// The slowest calls, slowest first.
fn slowest_text(r: &SummaryReport, s: &mut String) {
    if r.slowest.is_empty() {
        return;
    }
    let _ = writeln!(s, "\nslowest calls:");
    let mut t = Table::new(
        2,
        &[
            ("e2e", Align::Right),
            ("robot", Align::Left),
            ("kind", Align::Left),
            ("seq", Align::Right),
            ("start", Align::Left),
        ],
    );
    for c in &r.slowest {
        t.row(vec![
            fmt_ms(c.e2e_ms),
            c.robot.clone(),
            c.kind.clone(),
            c.seq.to_string(),
            iso_time(c.ts_unix_ms),
        ]);
    }
    t.write(s);
}
