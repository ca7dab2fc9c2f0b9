//! Rolling summary files (`summary.*.jsonl`) for `stagetrace tail`: find the
//! newest file in a run directory, follow it as windows arrive (rotation and
//! truncation included), and render a window as a table.
//!
//! The reader is tolerant: it shows every per-stage statistics object it
//! finds in a line (an object with `count`/`min`/`p50`/`p90`/`p99`/`p999` or
//! `p99.9`/`max`/`mean` numbers), wherever it sits, so new summary fields do
//! not break it.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

use stagetrace_schema::{Figure, BLACK_BOX_NOTE, FIGURE_COUNT};

use crate::figures;
use crate::format::iso_time;
use crate::table::{Align, Table};

/// Longest summary line kept (a longer one is skipped and counted).
const MAX_LINE: usize = 4 << 20;

/// The newest `summary*.jsonl` file in `dir` (by modification time, then name).
pub fn newest_summary(dir: &Path) -> io::Result<Option<PathBuf>> {
    let mut best: Option<(SystemTime, PathBuf)> = None;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with("summary") && name.ends_with(".jsonl")) {
            continue;
        }
        let meta = match entry.metadata() {
            Ok(m) if m.is_file() => m,
            _ => continue,
        };
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let path = entry.path();
        let newer = match &best {
            None => true,
            Some((t, p)) => (mtime, &path) > (*t, p),
        };
        if newer {
            best = Some((mtime, path));
        }
    }
    Ok(best.map(|(_, p)| p))
}

/// Follows the newest summary file of a directory.
#[derive(Debug)]
pub struct Follower {
    dir: PathBuf,
    current: Option<PathBuf>,
    offset: u64,
    partial: Vec<u8>,
    /// Lines that were not JSON objects (skipped).
    pub bad_lines: u64,
    /// Summary lines read so far (all files).
    pub windows_seen: u64,
}

impl Follower {
    /// A follower of `dir` (nothing read yet).
    pub fn new(dir: &Path) -> Follower {
        Follower {
            dir: dir.to_path_buf(),
            current: None,
            offset: 0,
            partial: Vec::new(),
            bad_lines: 0,
            windows_seen: 0,
        }
    }

    /// The file being followed.
    pub fn current(&self) -> Option<&Path> {
        self.current.as_deref()
    }

    /// Every complete summary line that arrived since the last poll, in
    /// the order written: `tail --json` prints each window once. Switches
    /// to a newer file when one appears (rotation), after the rest of the
    /// current one, and starts over when the file shrank (truncation).
    pub fn poll(&mut self) -> io::Result<Vec<Value>> {
        let mut windows = Vec::new();
        self.read_new(|w| windows.push(w))?;
        Ok(windows)
    }

    /// Like [`poll`](Self::poll), but keeps only the newest window (older
    /// ones are counted in `windows_seen`, not kept: memory stays bounded
    /// however long the file), for a view that shows the latest window.
    pub fn poll_newest(&mut self) -> io::Result<Option<Value>> {
        let mut newest = None;
        self.read_new(|w| newest = Some(w))?;
        Ok(newest)
    }

    fn read_new(&mut self, mut each: impl FnMut(Value)) -> io::Result<()> {
        let newest = newest_summary(&self.dir)?;
        if newest.is_some() && newest != self.current {
            // Windows written to the old file since the last look come first.
            if self.current.is_some() {
                self.read_current(&mut each)?;
            }
            self.current = newest;
            self.offset = 0;
            self.partial.clear();
        }
        self.read_current(&mut each)
    }

    /// Reads the complete lines of the current file past `offset`.
    fn read_current(&mut self, each: &mut impl FnMut(Value)) -> io::Result<()> {
        let Some(path) = self.current.clone() else {
            return Ok(());
        };
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.current = None;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut reader = BufReader::new(file.take(len - self.offset));
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf)?;
            if n == 0 {
                break;
            }
            self.offset += n as u64;
            if buf.last() != Some(&b'\n') {
                // The writer is mid-line: keep it for the next poll.
                if self.partial.len() + buf.len() <= MAX_LINE {
                    self.partial.extend_from_slice(&buf);
                } else {
                    self.partial.clear();
                    self.bad_lines += 1;
                }
                continue;
            }
            let line: Vec<u8> = if self.partial.is_empty() {
                std::mem::take(&mut buf)
            } else {
                let mut l = std::mem::take(&mut self.partial);
                l.extend_from_slice(&buf);
                l
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Value>(&line) {
                Ok(v @ Value::Object(_)) => {
                    self.windows_seen += 1;
                    each(v);
                }
                _ => self.bad_lines += 1,
            }
        }
        Ok(())
    }
}

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

fn walk<'a>(
    v: &'a Value,
    path: String,
    out: &mut Vec<(String, String, &'a serde_json::Map<String, Value>)>,
    depth: usize,
) {
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
fn drop_lone_kind_table(tables: &mut Vec<(String, String, &serde_json::Map<String, Value>)>) {
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
        let title = match name {
            "" => "figures".to_string(),
            "stages" => "all calls".to_string(),
            n => match n
                .strip_prefix("kinds.")
                .and_then(|k| k.strip_suffix(".stages"))
            {
                Some(kind) => format!("kind \"{kind}\""),
                None => n.to_string(),
            },
        };
        let _ = writeln!(s, "\n{title}:");
        let is_host = |row: &str| Figure::from_name(row).is_some_and(Figure::is_host);
        let table = |first: &str, host: bool| {
            let mut cols = vec![(first, Align::Left)];
            cols.extend(
                ["n", "min", "p50", "p90", "p99", "p99.9", "max", "mean"]
                    .iter()
                    .map(|c| (*c, Align::Right)),
            );
            let mut t = Table::new(2, &cols);
            for (_, row, o) in rows.iter().filter(|r| is_host(&r.1) == host) {
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
        };
        let calls = table("stage (ms)", false);
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
            let _ = writeln!(s, "    {}", crate::render::NO_SERVER_TIMING_NOTE);
        }
        let hosts = table("host (ms)", true);
        if !hosts.is_empty() {
            let _ = writeln!(s, "\n  {}:", figures::HOST_HEADING);
            hosts.write(s);
            let _ = writeln!(s, "    {}", figures::HOST_LEGEND);
        }
    }
    if tables.is_empty() {
        let _ = writeln!(s, "\n(no per-stage figures in this window yet)");
    }
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

    fn line(index: u64) -> String {
        format!(
            "{{\"run\":\"r\",\"window\":\"rolling\",\"index\":{index},\"stages\":{{\"infer\":{{\"count\":1,\"min\":1,\"p50\":1,\"max\":1}}}}}}\n"
        )
    }

    fn indices(windows: &[Value]) -> Vec<u64> {
        windows
            .iter()
            .map(|w| w["index"].as_u64().unwrap())
            .collect()
    }

    #[test]
    fn every_window_between_two_polls_comes_back_in_order() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summary.a.jsonl");
        std::fs::write(&path, line(0)).unwrap();
        let mut f = Follower::new(dir.path());
        assert_eq!(indices(&f.poll().unwrap()), [0]);
        assert!(f.poll().unwrap().is_empty());
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let three = line(1) + &line(2) + &line(3);
        // The third window is still being written at the first look.
        let (head, tail) = three.split_at(three.len() - 10);
        file.write_all(head.as_bytes()).unwrap();
        assert_eq!(indices(&f.poll().unwrap()), [1, 2]);
        file.write_all(tail.as_bytes()).unwrap();
        file.write_all(line(4).as_bytes()).unwrap();
        assert_eq!(indices(&f.poll().unwrap()), [3, 4]);
        assert_eq!(f.windows_seen, 5);
        // Rotation: what the old file got since the last look comes first.
        file.write_all(line(5).as_bytes()).unwrap();
        drop(file);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(dir.path().join("summary.b.jsonl"), line(6)).unwrap();
        assert_eq!(indices(&f.poll().unwrap()), [5, 6]);
        assert!(f.current().unwrap().ends_with("summary.b.jsonl"));
    }

    #[test]
    fn three_windows_appended_between_two_polls_all_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summary.jsonl");
        std::fs::write(&path, line(0)).unwrap();
        let mut f = Follower::new(dir.path());
        assert_eq!(indices(&f.poll().unwrap()), [0]);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&(line(1) + &line(2) + &line(3)));
        std::fs::write(&path, text).unwrap();
        assert_eq!(indices(&f.poll().unwrap()), [1, 2, 3]);
        // The newest-only view still counts what it passed over.
        std::fs::write(
            &path,
            line(0) + &line(1) + &line(2) + &line(3) + &line(4) + &line(5),
        )
        .unwrap();
        assert_eq!(f.poll_newest().unwrap().unwrap()["index"], 5);
        assert_eq!(f.windows_seen, 6);
    }
}
