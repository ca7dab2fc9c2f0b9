//! The hops of a group in the HTML report (calls through gateways): one row
//! per hop — each way, both ways, the gateway's own time at its end, the
//! hop's clock bound, as p50 / p99 — with the hop and figure a
//! `hop_slower` verdict names marked, so the slow hop stands out without
//! reading the text tables.

use std::fmt::Write as _;

use super::escape;
use crate::analysis::GroupReport;
use crate::load::HopFig;
use crate::render::robot_pair;

/// Writes the table of a group (nothing without gateways); `suffix` makes
/// its id unique.
pub(super) fn table(s: &mut String, g: &GroupReport, suffix: &str) {
    if g.hops.is_empty() {
        return;
    }
    let named: Vec<(u64, &str)> = g
        .verdicts
        .iter()
        .filter(|v| v.code == "hop_slower")
        .filter_map(|v| {
            Some((
                v.evidence.get("hop")?.as_u64()?,
                v.evidence.get("figure")?.as_str()?,
            ))
        })
        .collect();
    let _ = writeln!(
        s,
        "<h3>Hops (per hop, p50 / p99, ms; up / down split with the hop's own clock offset, ± err; marked: the hop and figure a verdict names)</h3>\n\
         <table id=\"hops{suffix}\" class=\"robots\">"
    );
    let _ = write!(s, "<tr><th>hop</th><th>calls</th>");
    for fig in HopFig::ALL {
        let _ = write!(s, "<th>{}</th>", escape(fig.name()));
    }
    let _ = writeln!(s, "</tr>");
    for h in &g.hops {
        let hop = h.hop as u64;
        let marked: Vec<&str> = named
            .iter()
            .filter(|(l, _)| *l == hop)
            .map(|(_, f)| *f)
            .collect();
        let class = if marked.is_empty() {
            ""
        } else {
            " class=\"differs\""
        };
        let calls = h
            .figures
            .get(HopFig::Net.field())
            .or_else(|| h.figures.values().next())
            .map_or(0, |st| st.n);
        let _ = write!(
            s,
            "<tr data-hop=\"{hop}\"{class}><td>{}</td><td>{calls}</td>",
            escape(&h.name())
        );
        for fig in HopFig::ALL {
            let cell = h
                .figures
                .get(fig.field())
                .map_or_else(|| "-".to_string(), |v| robot_pair(v.p50, v.p99));
            let class = if marked.contains(&fig.field()) {
                " class=\"differs\""
            } else {
                ""
            };
            let _ = write!(s, "<td{class}>{}</td>", escape(&cell));
        }
        let _ = writeln!(s, "</tr>");
    }
    let _ = writeln!(s, "</table>");
}
