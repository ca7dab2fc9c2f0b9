//! The fleet report's per-robot column (`stagetrace report --per-robot`):
//! each stage's p50 / p99 on every robot, next to the merged table.

use std::fmt::Write as _;

use crate::analysis::GroupReport;
use crate::figures;

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
        let widths: Vec<usize> = block
            .iter()
            .map(|n| {
                let cells = g.robots[*n]
                    .stages
                    .values()
                    .map(|st| pair(st.p50, st.p99).chars().count());
                cells.chain([n.chars().count()]).max().unwrap_or(0)
            })
            .collect();
        let _ = write!(s, "  {:<10}", "stage");
        for (n, w) in block.iter().zip(&widths) {
            let _ = write!(s, "  {n:>w$}");
        }
        let _ = writeln!(s);
        let _ = write!(s, "  {:<10}", "calls");
        for (n, w) in block.iter().zip(&widths) {
            let _ = write!(s, "  {:>w$}", g.robots[*n].steady);
        }
        let _ = writeln!(s);
        // Each robot's own rate and completion jitter (p50 / p99, ms):
        // the merged robots' interleaved calls make neither.
        let _ = write!(s, "  {:<10}", "Hz");
        for (n, w) in block.iter().zip(&widths) {
            let hz = g.robots[*n]
                .rate
                .effective_hz
                .map_or_else(|| "-".to_string(), |h| format!("{h:.1}"));
            let _ = write!(s, "  {hz:>w$}");
        }
        let _ = writeln!(s);
        let _ = write!(s, "  {:<10}", "jitter");
        for (n, w) in block.iter().zip(&widths) {
            let j = g.robots[*n]
                .rate
                .jitter
                .as_ref()
                .map_or_else(|| "-".to_string(), |j| pair(j.p50, j.p99));
            let _ = write!(s, "  {j:>w$}");
        }
        let _ = writeln!(s);
        for m in figures::display_order() {
            if !block
                .iter()
                .any(|n| g.robots[*n].stages.contains_key(m.name()))
            {
                continue;
            }
            let _ = write!(s, "  {:<10}", m.name());
            for (n, w) in block.iter().zip(&widths) {
                let cell = g.robots[*n]
                    .stages
                    .get(m.name())
                    .map_or_else(|| "-".to_string(), |st| pair(st.p50, st.p99));
                let _ = write!(s, "  {cell:>w$}");
            }
            let _ = writeln!(s);
        }
    }
}
