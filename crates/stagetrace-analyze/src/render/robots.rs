//! The fleet report's per-robot column (`stagetrace report --per-robot`):
//! each stage's p50 / p99 on every robot, next to the merged table.

use std::fmt::Write as _;

use crate::analysis::{GroupReport, RobotStages};
use crate::figures;
use crate::table::{Align, Table};

/// Robots side by side in one block; more robots wrap into further blocks.
const PER_BLOCK: usize = 5;

/// A robot's `p50 / p99` cell (ms), as the text and HTML tables show it.
pub(crate) fn pair(p50: f64, p99: f64) -> String {
    // Three significant-ish figures: sub-millisecond stages keep theirs.
    let c = |v: f64| {
        if !v.is_finite() {
            "-".into()
        } else if v.abs() >= 100.0 {
            format!("{v:.1}")
        } else if v.abs() >= 1.0 {
            format!("{v:.2}")
        } else {
            format!("{v:.3}")
        }
    };
    format!("{} / {}", c(p50), c(p99))
}

/// Writes the per-robot column of a group (nothing without robots).
pub(super) fn table(s: &mut String, g: &GroupReport, order: &[String]) {
    if g.robots.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n  per robot (p50 / p99, ms; each robot against the others pooled in the verdict):"
    );
    let names: Vec<&String> = order.iter().filter(|n| g.robots.contains_key(*n)).collect();
    for block in names.chunks(PER_BLOCK) {
        let mut cols = vec![("stage", Align::Left)];
        cols.extend(block.iter().map(|n| (n.as_str(), Align::Right)));
        let mut t = Table::new(2, &cols);
        let each = |cell: &dyn Fn(&RobotStages) -> String| -> Vec<String> {
            block.iter().map(|n| cell(&g.robots[*n])).collect()
        };
        let row = |t: &mut Table, name: &str, cells: Vec<String>| {
            let mut r = vec![name.to_string()];
            r.extend(cells);
            t.row(r);
        };
        row(&mut t, "calls", each(&|r| r.steady.to_string()));
        // Each robot's own rate and completion jitter (p50 / p99, ms):
        // the merged robots' interleaved calls make neither.
        row(
            &mut t,
            "Hz",
            each(&|r| {
                r.rate
                    .effective_hz
                    .map_or_else(|| "-".to_string(), |h| format!("{h:.1}"))
            }),
        );
        row(
            &mut t,
            "jitter",
            each(&|r| {
                r.rate
                    .jitter
                    .as_ref()
                    .map_or_else(|| "-".to_string(), |j| pair(j.p50, j.p99))
            }),
        );
        // The stages first, the hosts' figures after them.
        for m in figures::call_rows().into_iter().chain(figures::host_rows()) {
            if !block
                .iter()
                .any(|n| g.robots[*n].stages.contains_key(m.name()))
            {
                continue;
            }
            let cells = each(&|r| {
                r.stages
                    .get(m.name())
                    .map_or_else(|| "-".to_string(), |st| pair(st.p50, st.p99))
            });
            row(&mut t, &super::row_name(m, g.split_err_ms), cells);
        }
        t.write(s);
    }
}
