//! Helpers shared by the CLI tests: run the binary, generate record files.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::json;

#[path = "../../../stagetrace-analyze/tests/support/gen.rs"]
pub(crate) mod gen;

/// Runs `stagetrace ARGS…`.
pub(crate) fn stagetrace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(args)
        .output()
        .unwrap()
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `stagetrace ARGS…`, which must fail as a usage error (status 2)
/// whose message contains `says`.
#[track_caller]
pub(crate) fn assert_usage_error(args: &[&str], says: &str) {
    let out = stagetrace(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(says), "{err}");
}

/// The default generated run, with `seed`.
pub(crate) fn seeded(seed: u64) -> gen::Scenario {
    gen::Scenario {
        seed,
        ..gen::Scenario::default()
    }
}

pub(crate) fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A stage's figures in a summary line, scaled from its p50.
fn window_stats(p50: f64) -> serde_json::Value {
    json!({"count": 500, "min": p50 * 0.8, "p50": p50, "p90": p50 * 1.1, "p99": p50 * 1.3,
           "p99.9": p50 * 1.5, "max": p50 * 2.0, "mean": p50 * 1.02})
}

/// One summary line in the layer's format (`stagetrace::summary::WindowSummary`).
pub(crate) fn window(run: &str, index: u64, infer_p50: f64) -> String {
    json!({
        "run": run, "window": "rolling", "index": index,
        "start_unix_ms": 1_764_000_000_000.0 + 10_000.0 * index as f64,
        "end_unix_ms": 1_764_000_010_000.0 + 10_000.0 * index as f64,
        "calls": 500, "warmup_calls": 0, "failed_calls": 0,
        "stages": {"capture": window_stats(2.0), "infer": window_stats(infer_p50), "e2e": window_stats(infer_p50 + 6.0)},
        "kinds": {"call": {"calls": 500, "stages": {"infer": window_stats(infer_p50)}}},
        "observer_us": {"p50": 2.5, "p99": 6.0},
        "queue_drops": 0, "write_failures": 0, "rejected_headers": 0, "clamped": 0,
        "ignored_spans": 0, "empty_calls": 0,
        "deadline": {"target_hz": 50.0, "misses": 3, "skipped_ticks": 0, "effective_hz": 49.8,
                     "late_ms": {"p50": 0.1, "p99": 2.0}, "jitter_ms": {"p50": 0.2, "p99": 1.5}}
    })
    .to_string()
        + "\n"
}

/// The first cells of the tables' headers the CLI prints (each table's
/// first column): how [`check_tables`] finds them.
const TABLE_HEADS: [&str; 7] = [
    "stage (ms)",
    "host (ms)",
    "hop (ms)",
    "stage",
    "hop",
    "field",
    "figure",
];

/// A line's cells and where each starts and ends (in characters): the
/// text between runs of two or more spaces.
pub(crate) fn cell_spans(line: &str) -> Vec<(usize, usize, String)> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == ' ' {
            i += 1;
            continue;
        }
        let start = i;
        // A cell goes on past single spaces, up to two spaces in a row.
        while i < chars.len() && !(chars[i] == ' ' && chars.get(i + 1) == Some(&' ')) {
            i += 1;
        }
        let cell: String = chars[start..i].iter().collect::<String>();
        let trimmed = cell.trim_end();
        let end = start + trimmed.chars().count();
        out.push((start, end, trimmed.to_string()));
    }
    out
}

fn indent(line: &str) -> usize {
    line.chars().take_while(|c| *c == ' ').count()
}

/// Checks every table in `text`: each row's cells sit under the header's
/// columns — a cell starts where its column's header starts (names, text)
/// or ends where it ends (numbers), in the header's order. A table is a
/// header line whose first cell is one of [`TABLE_HEADS`] and the lines
/// under it with the same indentation. Panics on the first misaligned
/// row, naming `what` printed it; returns the number of tables read.
#[track_caller]
pub(crate) fn check_tables(text: &str, what: &str) -> usize {
    match tables_misaligned(text) {
        Ok(n) => n,
        Err(e) => panic!("{what}: {e}\n{text}"),
    }
}

/// [`check_tables`] without the panic: the number of tables, or the first
/// misaligned row.
pub(crate) fn tables_misaligned(text: &str) -> Result<usize, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut tables = 0;
    let mut k = 0;
    while k < lines.len() {
        let header = cell_spans(lines[k]);
        let is_head = header
            .first()
            .is_some_and(|(_, _, c)| TABLE_HEADS.contains(&c.as_str()))
            && header.len() >= 2;
        if !is_head {
            k += 1;
            continue;
        }
        tables += 1;
        let depth = indent(lines[k]);
        let mut j = k + 1;
        while j < lines.len() && !lines[j].trim().is_empty() && indent(lines[j]) == depth {
            let row = cell_spans(lines[j]);
            let mut col = 0;
            for (start, end, c) in &row {
                let Some(at) =
                    (col..header.len()).find(|&h| header[h].0 == *start || header[h].1 == *end)
                else {
                    return Err(format!(
                        "cell {c:?} of row {:?} sits under no column of header {:?}",
                        lines[j], lines[k]
                    ));
                };
                col = at + 1;
            }
            if row.is_empty() {
                return Err(format!("empty row under {:?}", lines[k]));
            }
            j += 1;
        }
        if j == k + 1 {
            return Err(format!("a header with no rows: {:?}", lines[k]));
        }
        k = j;
    }
    Ok(tables)
}
