//! The hops section of a group (calls through gateways): per hop, the
//! network each way and both ways, the gateway's own time at its end and
//! the hop's clock bound, then their change against the baseline.

use std::fmt::Write as _;

use crate::analysis::GroupReport;
use crate::load::HopFig;

use super::{baseline_cells, cell};

/// Writes the hops section of a group (nothing without gateways).
pub(super) fn table(s: &mut String, g: &GroupReport) {
    if g.hops.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n  hops (per hop of the records' hops: up / down = each way, split with that hop's own clock offset, ± err; net exact; relay = the gateway's own time at the hop's end):"
    );
    let _ = writeln!(
        s,
        "  {:<28} {:<6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}   (ms)",
        "hop", "figure", "n", "min", "p50", "p90", "p99", "max"
    );
    for h in &g.hops {
        let name = h.name();
        for (i, fig) in HopFig::ALL.into_iter().enumerate() {
            let Some(st) = h.figures.get(fig.field()) else {
                continue;
            };
            let label = if i == 0 { name.as_str() } else { "" };
            let _ = writeln!(
                s,
                "  {:<28} {:<6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
                label,
                fig.name(),
                st.n,
                cell(st.min),
                cell(st.p50),
                cell(st.p90),
                cell(st.p99),
                cell(st.max)
            );
        }
    }
    if g.hops.iter().all(|h| h.baseline.is_empty()) {
        return;
    }
    let _ = writeln!(s, "\n  hops against the baseline:");
    let _ = writeln!(
        s,
        "  {:<28} {:<6} {:>9} {:>9} {:>20} {:>9} {:>9} {:>20}  shape",
        "hop", "figure", "base p50", "p50", "×p50 [CI]", "base p99", "p99", "×p99 [CI]"
    );
    for h in &g.hops {
        let name = h.name();
        let mut first = true;
        for fig in HopFig::ALL {
            let Some(b) = h.baseline.get(fig.field()) else {
                continue;
            };
            let _ = writeln!(
                s,
                "  {:<28} {:<6} {}",
                if first { name.as_str() } else { "" },
                fig.name(),
                baseline_cells(b)
            );
            first = false;
        }
    }
}
