//! The report as text: the terminal's tables ([`text`]) and the `--json`
//! document ([`json`]). Rows come in the figure table's display order.
//!
//! One file per part of a kind's report, in the order printed: `header`
//! (the kind's line, its rate, the mitigations), `stages` (the figure
//! table and inference's parts), `robots`, `hop_table`, `baseline`, `outliers`,
//! `periodicity` (spikes and second modes) and `variance`. This file holds
//! what they share: cells, row names and the notes under a table (the
//! words every table prints, the core's summary too, are
//! `stagetrace_schema::notes`).

mod baseline;
mod header;
mod hop_table;
mod outliers;
mod periodicity;
mod robots;
mod stages;
mod variance;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

pub(crate) use robots::pair as robot_pair;

// `hops` lays its table out as the baseline's.
use baseline::{baseline_cells, baseline_table_of};

use std::fmt::Write as _;

use stagetrace_schema::{notes, Figure};

use crate::analysis::{GroupReport, Report};
use crate::figures;
use crate::format::fmt_ms;

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

/// A table cell: fixed three decimals.
fn cell(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "-".into()
    }
}

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

/// One kind's part of the report, in the order printed.
fn group(s: &mut String, g: &GroupReport, robots: &[String]) {
    header::header(s, g);
    stages::stage_table(s, g);
    stages::infer_parts(s, g);
    robots::table(s, g, robots);
    hop_table::table(s, g);
    baseline::baseline_table(s, g);
    outliers::outliers(s, g);
    periodicity::periodicity_and_shapes(s, g);
    variance::variance(s, g);
}

/// A figure's row name: a one-way stage carries the clock split's bound
/// (`uplink ± 1.35`), which it is only known within.
pub fn row_name(f: Figure, split_err_ms: Option<f64>) -> String {
    match split_err_ms {
        Some(e) if figures::is_one_way(f) && e.is_finite() => format!("{f} ± {}", notes::bound(e)),
        _ => f.name().to_string(),
    }
}

/// The line under a table with uplink / downlink on an estimated clock:
/// each direction is only known within the split's bound, net exactly.
pub fn split_note(split_err_ms: f64, net_p50: Option<f64>) -> String {
    let net = net_p50.map_or(String::new(), |n| format!(" ({})", fmt_ms(n)));
    format!(
        "uplink / downlink: split ± {} (the median split_err_ms): the server's clock offset is estimated, so each direction is only known within that — net{net} is exact; to measure each direction, synchronise the clocks (PTP) and record with --clock trusted (docs/clocks.md)",
        notes::bound(split_err_ms)
    )
}

/// Whether a table of these figures needs [`notes::NO_SERVER_TIMING_NOTE`]: the
/// transport as a whole, nothing of the server, no black-box cut.
pub fn lacks_server_timing(has: impl Fn(Figure) -> bool) -> bool {
    has(Figure::Roundtrip) && !Figure::Roundtrip.parts().iter().any(|p| has(*p))
}
