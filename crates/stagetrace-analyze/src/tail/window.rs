//! One summary window as a terminal table: its heading, counts, deadline
//! and observer lines, then each statistics table found in the line.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use stagetrace_schema::notes::{self, BLACK_BOX_NOTE};
use stagetrace_schema::{Figure, FIGURE_COUNT};

use crate::figures;
use crate::format::iso_time;
use crate::table::{Align, Table};

const STAT_FIELDS: [&str; 9] = [
    "count", "min", "p50", "p90", "p99", "p999", "p99.9", "max", "mean",
];

fn is_stats(v: &Value) -> bool {
    v.as_object().is_some_and(|o| {
        STAT_FIELDS
            .iter()
            .filter(|f| o.get(**f).is_some_and(Value::is_number))
            .count()
            >= 3
    })
}

/// Every statistics object in a summary line, as (table, row, object):
/// `stages.infer` → ("stages", "infer"), `kinds.call.stages.infer` →
/// ("kinds.call.stages", "infer").
pub fn stats_tables(line: &Value) -> Vec<(String, String, &serde_json::Map<String, Value>)> {
    let mut out = Vec::new();
    walk(line, String::new(), &mut out, 0);
    out
}

fn walk<'a>(v: &'a Value, path: String, out: &mut Vec<Found<'a>>, depth: usize) {
    let Some(obj) = v.as_object() else { return };
    if depth > 8 {
        return;
    }
    for (k, child) in obj {
        if is_stats(child) {
            if let Some(o) = child.as_object() {
                out.push((path.clone(), k.clone(), o));
            }
        } else if child.is_object() {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            walk(child, p, out, depth + 1);
        }
    }
}

fn num(o: &serde_json::Map<String, Value>, keys: &[&str]) -> String {
    keys.iter()
        .find_map(|k| o.get(*k).and_then(Value::as_f64))
        .map_or_else(
            || "-".to_string(),
            |v| {
                if keys[0] == "count" {
                    format!("{v:.0}")
                } else {
                    format!("{v:.3}")
                }
            },
        )
}

/// Row order for display: the tables' order (the stages in call order,
/// each one's parts under it, then the sums), then what the figure table
/// does not know, by name.
fn stage_rank(name: &str) -> usize {
    let mut order = figures::call_rows();
    order.extend(figures::host_rows());
    Figure::from_name(name)
        .and_then(|f| order.iter().position(|x| *x == f))
        .unwrap_or(FIGURE_COUNT)
}

/// With a single kind, its table repeats the window's own `stages` table
/// row for row: shown once.
fn drop_lone_kind_table(tables: &mut Vec<Found<'_>>) {
    let kind_tables: std::collections::BTreeSet<&str> = tables
        .iter()
        .map(|t| t.0.as_str())
        .filter(|t| t.starts_with("kinds."))
        .collect();
    let [lone] = kind_tables.into_iter().collect::<Vec<_>>()[..] else {
        return;
    };
    let lone = lone.to_owned();
    let rows = |name: &str| -> Vec<(String, &serde_json::Map<String, Value>)> {
        let mut r: Vec<_> = tables
            .iter()
            .filter(|t| t.0 == name)
            .map(|t| (t.1.clone(), t.2))
            .collect();
        r.sort_by(|a, b| a.0.cmp(&b.0));
        r
    };
    if rows(&lone) == rows("stages") {
        tables.retain(|t| t.0 != lone);
    }
}

/// One summary window as a terminal table.
pub fn window_table(line: &Value, source: Option<&Path>) -> String {
    window_table_of(line, source, &[])
}

/// One summary window as a terminal table, its rows limited to `only`
/// when not empty (`tail --stage`).
pub fn window_table_of(line: &Value, source: Option<&Path>, only: &[Figure]) -> String {
    let mut s = String::new();
    write_heading(&mut s, line, source);
    write_counts(&mut s, line);
    if let Some(d) = line.get("deadline").and_then(Value::as_object) {
        write_deadline(&mut s, d);
    }
    if let Some(o) = line
        .get(Figure::Observer.field())
        .and_then(Value::as_object)
    {
        let p = |k: &str| o.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
        let _ = writeln!(s, "observer p50 {:.1} µs, p99 {:.1} µs", p("p50"), p("p99"));
    }
    write_stats_tables(&mut s, line, only);
    s
}

/// The table's first two lines: the file it came from, then the run, the
/// window and its time span.
fn write_heading(s: &mut String, line: &Value, source: Option<&Path>) {
    let get = |k: &str| line.get(k);
    let text = |k: &str| get(k).and_then(Value::as_str).unwrap_or("");
    let mut head = String::from("stagetrace tail");
    if let Some(p) = source {
        let _ = write!(head, " — {}", p.display());
    }
    let _ = writeln!(s, "{head}");
    let mut w = Vec::new();
    if !text("run").is_empty() {
        w.push(format!("run {}", text("run")));
    }
    if !text("window").is_empty() {
        let idx = get("index")
            .and_then(Value::as_u64)
            .map(|i| format!(" #{i}"))
            .unwrap_or_default();
        w.push(format!("{} window{idx}", text("window")));
    }
    if let (Some(a), Some(b)) = (
        get("start_unix_ms").and_then(Value::as_f64),
        get("end_unix_ms").and_then(Value::as_f64),
    ) {
        w.push(format!(
            "{} → {} ({:.1} s)",
            iso_time(a),
            iso_time(b),
            (b - a) / 1000.0
        ));
    }
    let _ = writeln!(s, "{}", w.join(", "));
}

/// The window's counts on one line: calls always, the others when not 0.
fn write_counts(s: &mut String, line: &Value) {
    let mut counts = Vec::new();
    for (k, label) in [
        ("calls", "calls"),
        ("warmup_calls", "warm-up"),
        ("failed_calls", "failed"),
        ("queue_drops", "queue drops"),
        ("write_failures", "write failures"),
        ("records_lost", "records lost"),
        ("summary_write_failures", "summary writes failed"),
        ("rejected_headers", "rejected headers"),
        ("clamped", "clamped"),
    ] {
        if let Some(v) = line.get(k).and_then(Value::as_u64) {
            if k == "calls" || v > 0 {
                counts.push(format!("{label} {v}"));
            }
        }
    }
    if !counts.is_empty() {
        let _ = writeln!(s, "{}", counts.join(", "));
    }
}

/// The window's `deadline` object on one line: target and effective rate,
/// misses, lateness and jitter.
fn write_deadline(s: &mut String, d: &serde_json::Map<String, Value>) {
    let f = |k: &str| d.get(k).and_then(Value::as_f64);
    let mut t = Vec::new();
    if let Some(hz) = f("target_hz") {
        t.push(format!("target {hz:.1} Hz"));
    }
    if let Some(hz) = f("effective_hz") {
        t.push(format!("effective {hz:.1} Hz"));
    }
    if let Some(m) = f("misses") {
        t.push(format!("deadline misses {m:.0}"));
    }
    if let Some(l) = d
        .get(Figure::Late.field())
        .and_then(|l| l.get("p99"))
        .and_then(Value::as_f64)
    {
        t.push(format!("late p99 {l:.3} ms"));
    }
    if let Some(j) = d
        .get("jitter_ms")
        .and_then(|l| l.get("p99"))
        .and_then(Value::as_f64)
    {
        t.push(format!("jitter p99 {j:.3} ms"));
    }
    let _ = writeln!(s, "{}", t.join(", "));
}

/// The bound of the window's uplink / downlink split: the median
/// `split_err_ms` of its calls (`clock.split_err_ms.p50`), when it has one.
fn split_bound(line: &Value) -> Option<f64> {
    line.get("clock")?.get("split_err_ms")?.get("p50")?.as_f64()
}

/// A statistics object found in a summary line: (the place it sits, its
/// row's name, the object), as [`stats_tables`] gives them.
type Found<'a> = (String, String, &'a serde_json::Map<String, Value>);

/// Every statistics table of the window, one per place in the line
/// (`stages`, each kind's): the call's figures (stages in call order, each
/// one's parts under it, then the sums, the notes on what they rest on),
/// then the hosts' under their own heading; or a note that there is none
/// yet.
fn write_stats_tables(s: &mut String, line: &Value, only: &[Figure]) {
    let mut tables = stats_tables(line);
    drop_lone_kind_table(&mut tables);
    if !only.is_empty() {
        tables.retain(|t| Figure::from_name(&t.1).is_some_and(|f| only.contains(&f)));
    }
    tables.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| stage_rank(&a.1).cmp(&stage_rank(&b.1)))
            .then_with(|| a.1.cmp(&b.1))
    });
    let split = split_bound(line);
    let mut names: Vec<&str> = tables.iter().map(|t| t.0.as_str()).collect();
    names.dedup();
    for name in names {
        let rows: Vec<_> = tables.iter().filter(|t| t.0 == name).collect();
        let _ = writeln!(s, "\n{}:", table_title(name));
        write_place(s, &rows, split, only);
    }
    if tables.is_empty() {
        let _ = writeln!(s, "\n(no per-stage figures in this window yet)");
    }
}

/// A place's title: `all calls` for the window's `stages`, `kind "call"`
/// for a kind's.
fn table_title(name: &str) -> String {
    match name {
        "" => "figures".to_string(),
        "stages" => "all calls".to_string(),
        n => match n
            .strip_prefix("kinds.")
            .and_then(|k| k.strip_suffix(".stages"))
        {
            Some(kind) => format!("kind \"{kind}\""),
            None => n.to_string(),
        },
    }
}

/// One place's tables: the call's figures with the notes under them, then
/// the hosts' under their own heading.
fn write_place(s: &mut String, rows: &[&Found<'_>], split: Option<f64>, only: &[Figure]) {
    let calls = stats_table(rows, "stage (ms)", false, split);
    if !calls.is_empty() {
        calls.write(s);
    }
    let has = |f: Figure| rows.iter().any(|r| Figure::from_name(&r.1) == Some(f));
    if let (Some(e), true) = (split, Figure::Net.parts().iter().any(|f| has(*f))) {
        let net = rows
            .iter()
            .find(|r| Figure::from_name(&r.1) == Some(Figure::Net))
            .and_then(|r| r.2.get("p50"))
            .and_then(Value::as_f64);
        let _ = writeln!(s, "    {}", crate::render::split_note(e, net));
    }
    if has(Figure::Ttfb) {
        let _ = writeln!(s, "    {BLACK_BOX_NOTE}");
    }
    if only.is_empty() && crate::render::lacks_server_timing(has) {
        let _ = writeln!(s, "    {}", notes::NO_SERVER_TIMING_NOTE);
    }
    let hosts = stats_table(rows, "host (ms)", true, split);
    if !hosts.is_empty() {
        let _ = writeln!(s, "\n  {}:", notes::HOST_HEADING);
        hosts.write(s);
        let _ = writeln!(s, "    {}", notes::HOST_LEGEND);
    }
}

/// The rows of the hosts' figures (`host`) or of the others as a table
/// whose first column is `first`; a one-way stage's name carries the split's
/// bound.
fn stats_table(rows: &[&Found<'_>], first: &str, host: bool, split: Option<f64>) -> Table {
    let is_host = |row: &str| Figure::from_name(row).is_some_and(Figure::is_host);
    let mut cols = vec![(first, Align::Left)];
    cols.extend(
        ["n", "min", "p50", "p90", "p99", "p99.9", "max", "mean"]
            .iter()
            .map(|c| (*c, Align::Right)),
    );
    let mut t = Table::new(2, &cols);
    for (_, row, o) in rows.iter().copied().filter(|r| is_host(&r.1) == host) {
        let label = Figure::from_name(row)
            .map_or_else(|| row.clone(), |f| crate::render::row_name(f, split));
        t.row(vec![
            label,
            num(o, &["count", "n"]),
            num(o, &["min"]),
            num(o, &["p50"]),
            num(o, &["p90"]),
            num(o, &["p99"]),
            num(o, &["p999", "p99.9"]),
            num(o, &["max"]),
            num(o, &["mean"]),
        ]);
    }
    t
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn finds_stats_anywhere() {
        let v: Value = serde_json::from_str(
            r#"{"run":"r","window":"rolling","index":3,"calls":10,
            "stages":{"infer":{"count":10,"min":1,"p50":2,"p90":3,"p99":4,"p99.9":5,"max":6,"mean":2.5},
                      "e2e":{"count":10,"min":1,"p50":2,"p90":3,"p99":4,"p99.9":5,"max":7,"mean":2.5}},
            "kinds":{"call":{"calls":10,"stages":{"infer":{"count":10,"min":1,"p50":2,"p90":3,"p99":4,"p99.9":5,"max":6,"mean":2.5}}}},
            "observer_us":{"p50":1.5,"p99":3.0}}"#,
        )
        .unwrap();
        let t = stats_tables(&v);
        assert_eq!(t.len(), 3);
        let table = window_table(&v, None);
        assert!(table.contains("rolling window #3"), "{table}");
        assert!(table.contains("kind \"call\":"), "{table}");
        let infer = table
            .lines()
            .position(|l| l.trim_start().starts_with("infer"))
            .unwrap();
        let e2e = table
            .lines()
            .position(|l| l.trim_start().starts_with("e2e"))
            .unwrap();
        assert!(infer < e2e, "{table}");
        assert!(table.contains("7.000"));
        assert!(table.contains("observer p50 1.5 µs"));
    }

    #[test]
    fn tail_says_which_file_failed_to_write() {
        let v: Value = serde_json::from_str(
            r#"{"run":"r","window":"rolling","index":1,"calls":10,
            "write_failures":5,"records_lost":3,"summary_write_failures":2}"#,
        )
        .unwrap();
        let table = window_table(&v, None);
        assert!(
            table.contains("calls 10, write failures 5, records lost 3, summary writes failed 2"),
            "{table}"
        );
    }
}
