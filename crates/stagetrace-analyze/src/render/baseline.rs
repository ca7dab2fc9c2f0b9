//! A kind against the baseline run: each figure's p50 and p99 before and
//! after, their ratio with its interval, and the shape of the change.

use std::fmt::Write as _;

use super::{cell, row_name};
use crate::analysis::{GroupReport, StageVsBaseline};
use crate::figures;
use crate::table::{Align, Table};

/// A figure against its baseline, as the columns of the baseline tables:
/// p50 before, after, ×p50 [CI], the same for p99, and the shape.
pub(super) fn baseline_cells(b: &StageVsBaseline) -> Vec<String> {
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
pub(super) fn baseline_table_of(first: &[(&str, Align)]) -> Table {
    let mut cols = first.to_vec();
    cols.extend(BASELINE_COLUMNS);
    Table::new(2, &cols)
}

/// Against the baseline: ratios with their intervals, and the shape.
pub(super) fn baseline_table(s: &mut String, g: &GroupReport) {
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
