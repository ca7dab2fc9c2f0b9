//! The comparison as the terminal shows it: per kind the answer first,
//! then the rows (benchstat's `~` for noise), the hosts' rows under their
//! own heading, the hops, and the outputs line.

use std::fmt::Write as _;

use stagetrace_schema::{notes, Figure};

use super::outputs::outputs_text;
use super::{Comparison, GroupComparison, Row, COMPARE_ALPHA};
use crate::format::{fmt_ms, signed_ms};
use crate::table::{Align, Table};

/// The comparison as the terminal shows it: per kind the answer first,
/// then the rows that changed (every row with `all`; benchstat's `~` for
/// noise), the hosts' rows under their own heading, the hops, and
/// whether the policy's outputs stayed the same.
pub fn render(c: &Comparison, all: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "before: {} record(s) from {}\nafter:  {} record(s) from {}",
        c.before.records,
        c.before.files.join(", "),
        c.after.records,
        c.after.files.join(", ")
    );
    for w in c.before.warnings.iter().chain(c.after.warnings.iter()) {
        let _ = writeln!(s, "warning: {w}");
    }
    for g in &c.groups {
        group_text(&mut s, g, all);
    }
    if c.groups.is_empty() {
        let _ = writeln!(
            s,
            "\nno kind of call is present in both runs: nothing to compare"
        );
    }
    outputs_text(&mut s, &c.outputs);
    s
}

/// The comparison as the terminal shows it by default: the rows that changed.
pub fn text(c: &Comparison) -> String {
    render(c, false)
}

/// One kind: its answer, then its rows' tables.
fn group_text(s: &mut String, g: &GroupComparison, all: bool) {
    let _ = writeln!(
        s,
        "\nkind \"{}\" ({} calls before, {} after):",
        g.kind, g.before_n, g.after_n
    );
    for line in &g.summary {
        let _ = writeln!(s, "  {line}");
    }
    let floor = g
        .rows
        .first()
        .map_or_else(|| "—".to_string(), |r| fmt_ms(r.min_effect_ms));
    let total = g.rows.len() + g.hops.iter().map(|h| h.rows.len()).sum::<usize>();
    let listed = g.rows.iter().filter(|r| changed(r)).count()
        + g.hops
            .iter()
            .flat_map(|h| h.rows.iter())
            .filter(|r| changed(r))
            .count();
    if all || listed > 0 {
        let _ = writeln!(
            s,
            "\n  {} (p50 by Mann–Whitney, p90 / p99 by bootstrap; Holm-corrected over all {total} rows, α = {COMPARE_ALPHA}; a change under {floor} does not count):",
            if all { "every row" } else { "the rows that changed" }
        );
    }
    row_tables(s, g, all);
    direction_unknown_note(s, g);
    if !all {
        let unchanged = total - listed;
        if unchanged > 0 {
            let _ = writeln!(
                s,
                "{}  {unchanged} row(s) unchanged (noise, or under {floor}): --all lists them with `~`",
                if listed == 0 { "\n" } else { "" }
            );
        }
    }
}

/// The rows shown (every row with `all`): the call's figures, the hosts'
/// under their own heading, then the hops'.
fn row_tables(s: &mut String, g: &GroupComparison, all: bool) {
    let shown = |r: &&Row| all || changed(r);
    let is_host = |r: &Row| Figure::from_name(r.stage).is_some_and(Figure::is_host);
    let mut calls = rows_table("stage (ms)");
    let mut hosts = rows_table("host (ms)");
    for r in g.rows.iter().filter(shown) {
        let f = Figure::from_name(r.stage);
        let label = f.map_or_else(
            || r.stage.to_string(),
            |f| crate::render::row_name(f, g.split_err_ms),
        );
        let cells = row_cells(label, r, g.split_err_ms);
        if is_host(r) {
            hosts.row(cells);
        } else {
            calls.row(cells);
        }
    }
    let mut hops = rows_table("hop (ms)");
    for h in &g.hops {
        for r in h.rows.iter().filter(shown) {
            hops.row(row_cells(format!("hop {} {}", h.hop, r.stage), r, None));
        }
    }
    if !calls.is_empty() {
        calls.write(s);
    }
    if !hosts.is_empty() {
        let _ = writeln!(s, "\n  {}:", notes::HOST_HEADING);
        hosts.write(s);
        let _ = writeln!(s, "    {}", notes::HOST_LEGEND);
    }
    if !hops.is_empty() {
        let _ = writeln!(
            s,
            "\n  hops (per hop: up / down each way, net both ways, relay = the gateway's own time at its end):"
        );
        hops.write(s);
    }
}

/// Under the tables, when uplink / downlink moved within the clock split's
/// bound: why no direction is named.
fn direction_unknown_note(s: &mut String, g: &GroupComparison) {
    if g.rows.iter().any(|r| r.direction_unknown) {
        if let Some(e) = g.split_err_ms {
            let _ = writeln!(
                s,
                "    direction unknown: uplink / downlink moved by no more than the clock split's ± {} (each run's median split_err_ms, added): the move may be the other direction's — net is exact",
                notes::bound(e)
            );
        }
    }
}

/// Whether a row is shown without `--all`.
fn changed(r: &Row) -> bool {
    r.significant || r.direction_unknown
}

/// The columns of the rows' tables.
fn rows_table(first: &str) -> Table {
    Table::new(
        2,
        &[
            (first, Align::Left),
            ("stat", Align::Left),
            ("before", Align::Right),
            ("after", Align::Right),
            ("change [95% CI]", Align::Left),
            ("p", Align::Right),
        ],
    )
}

/// One row's cells: `~` (and no p) for noise, the change with its
/// interval and p when significant, the change and the bound it lies
/// within when its direction cannot be told.
fn row_cells(label: String, r: &Row, bound: Option<f64>) -> Vec<String> {
    let (delta, p) = if r.direction_unknown {
        (
            format!(
                "{} — within ± {}: direction unknown",
                signed_ms(r.delta_ms),
                bound.map_or_else(|| "-".to_string(), notes::bound)
            ),
            String::new(),
        )
    } else if !r.significant {
        ("~".to_string(), String::new())
    } else {
        let d = match r.ci_ms {
            Some([lo, hi]) => format!(
                "{} [{} {}]",
                signed_ms(r.delta_ms),
                signed_ms(lo),
                signed_ms(hi)
            ),
            // From 0 (a host's wait that never happened before) a ratio
            // means nothing: the change in ms.
            None if !r.delta_pct.is_finite() => format!("{} from 0", signed_ms(r.delta_ms)),
            None => format!(
                "{:+.1}% [{:+.1}% {:+.1}%]",
                r.delta_pct, r.ci_pct[0], r.ci_pct[1]
            ),
        };
        (d, fmt_p(r.p))
    };
    vec![
        label,
        r.stat.to_string(),
        cell(r.before),
        cell(r.after),
        delta,
        p,
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

/// A p-value as a row shows it: never `0.000`.
fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        "<0.001".to_string()
    } else {
        format!("{p:.3}")
    }
}
