//! The hops section of a group (calls through gateways): per hop, the
//! network each way and both ways, the gateway's own time at its end and
//! the hop's clock bound, then their change against the baseline.

use std::fmt::Write as _;

use crate::analysis::GroupReport;
use crate::load::HopFig;

use super::{baseline_cells, baseline_table_of, cell};
use crate::table::{Align, Table};

/// Writes the hops section of a group (nothing without gateways).
pub(super) fn table(s: &mut String, g: &GroupReport) {
    if g.hops.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n  hops (per hop of the records' hops: up / down = each way, split with that hop's own clock offset, ± err; net exact; relay = the gateway's own time at the hop's end):"
    );
    let mut t = Table::new(
        2,
        &[
            ("hop", Align::Left),
            ("figure", Align::Left),
            ("n", Align::Right),
            ("min", Align::Right),
            ("p50", Align::Right),
            ("p90", Align::Right),
            ("p99", Align::Right),
            ("max (ms)", Align::Right),
        ],
    );
    for h in &g.hops {
        let name = h.name();
        for (i, fig) in HopFig::ALL.into_iter().enumerate() {
            let Some(st) = h.figures.get(fig.field()) else {
                continue;
            };
            let label = if i == 0 { name.clone() } else { String::new() };
            t.row(vec![
                label,
                fig.name().to_string(),
                st.n.to_string(),
                cell(st.min),
                cell(st.p50),
                cell(st.p90),
                cell(st.p99),
                cell(st.max),
            ]);
        }
    }
    t.write(s);
    if g.hops.iter().all(|h| h.baseline.is_empty()) {
        return;
    }
    let _ = writeln!(s, "\n  hops against the baseline:");
    let mut t = baseline_table_of(&[("hop", Align::Left), ("figure", Align::Left)]);
    for h in &g.hops {
        let name = h.name();
        let mut first = true;
        for fig in HopFig::ALL {
            let Some(b) = h.baseline.get(fig.field()) else {
                continue;
            };
            let mut row = vec![
                if first { name.clone() } else { String::new() },
                fig.name().to_string(),
            ];
            row.extend(baseline_cells(b));
            t.row(row);
            first = false;
        }
    }
    t.write(s);
}
