//! The figure table of a kind (the call's figures, the notes on what they
//! rest on, the hosts' under their own heading) and inference's parts.

use std::fmt::Write as _;

use stagetrace_schema::notes::BLACK_BOX_NOTE;
use stagetrace_schema::notes::{HOST_HEADING, HOST_LEGEND, NO_SERVER_TIMING_NOTE};
use stagetrace_schema::Figure;

use super::{cell, lacks_server_timing, row_name, split_note};
use crate::analysis::GroupReport;
use crate::figures;
use crate::format::fmt_ms;
use crate::table::{Align, Table};

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

/// Per figure: n, min, p50, p90, p99, p99.9, max, mean — the call's own
/// figures (stages in call order, each one's parts under it, then the
/// sums), the notes on what they rest on, then the hosts' figures under
/// their own heading.
pub(super) fn stage_table(s: &mut String, g: &GroupReport) {
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
        let _ = writeln!(s, "\n  {}:", HOST_HEADING);
        host.write(s);
        let _ = writeln!(s, "    {}", HOST_LEGEND);
    }
}

/// Inference's parts under the stage table: each part's share of infer at
/// p95 and p50, the bottleneck, the device's own time, the note.
pub(super) fn infer_parts(s: &mut String, g: &GroupReport) {
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
