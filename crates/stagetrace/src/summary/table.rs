//! The human-readable table of a summary ([`WindowSummary::table`]).

use std::fmt::Write as _;

use stagetrace_schema::Figure;
use stagetrace_schema::{Side, BLACK_BOX_NOTE};

use super::window::{figures, WindowSummary};

/// The figures of the call's own timeline in the order the table shows
/// them: the stages in call order, each stage's parts right under it
/// (queue's waits, infer's pre / model — with its device time — / post),
/// then the sums, the gap and what is inside it. The host figures are
/// left to their own table ([`host_rows`]). As `stagetrace report` orders
/// its table (`stagetrace_analyze::figures::display_order`).
fn call_rows() -> Vec<Figure> {
    let shown = |f: &Figure| figures().any(|x| x == *f) && !f.is_host();
    // Parts the figure table lists past a later stage come under their sum.
    let stage_between = |sum: Figure, part: Figure| {
        Figure::STAGES
            .iter()
            .any(|s| sum.index() < s.index() && s.index() < part.index())
    };
    let mut pulled: Vec<Figure> = Vec::new();
    let mut todo: Vec<Figure> = figures()
        .flat_map(|f| f.parts().iter().map(move |p| (f, *p)))
        .filter(|(f, p)| stage_between(*f, *p))
        .map(|(_, p)| p)
        .collect();
    while let Some(p) = todo.pop() {
        if !pulled.contains(&p) {
            pulled.push(p);
            todo.extend_from_slice(p.parts());
        }
    }
    fn with_parts(f: Figure, pulled: &[Figure], out: &mut Vec<Figure>) {
        out.push(f);
        for &p in f.parts() {
            if pulled.contains(&p) && !out.contains(&p) {
                with_parts(p, pulled, out);
            }
        }
    }
    let mut out = Vec::new();
    for f in figures().filter(|f| !pulled.contains(f)) {
        with_parts(f, &pulled, &mut out);
    }
    out.retain(shown);
    out
}

/// The host figures in their table's order: the robot's, then the policy
/// server's (`server_…`).
fn host_rows() -> Vec<Figure> {
    let mut rows: Vec<Figure> = figures().filter(|f| f.is_host()).collect();
    rows.sort_by_key(|f| (f.side() == Side::Server, f.index()));
    rows
}

/// The host table's heading and the legend under it (as `stagetrace
/// report` prints them).
const HOST_HEADING: &str = "the hosts: what the robot's and the policy server's hosts did during the call (overlaps the stages above, never add it to them; docs/host.md):";
const HOST_LEGEND: &str = "run_wait = a thread ready but waiting for a core; cpu_stall = some task of the host waiting for a CPU; gc = a garbage collection; tx_wait / rx_wait = a send / a read held up on the host; capture_ / dispatch_run_wait = run_wait inside that stage; server_… = the same on the policy server";

/// Under a table of records with `roundtrip` and no server timing.
const NO_SERVER_TIMING_NOTE: &str = "no server timing: roundtrip is your transport span (send → response) as one block, not split into uplink, queue, infer and downlink — the policy server must send its timing in each response (the server_timing map or the stagetrace-timing header; docs/protocol.md; stagetrace-net, stagetrace-grpc and stagetrace.server do it)";

/// A bound as the table writes it after ±.
fn bound(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Rows of cells as lines: every column as wide as its longest cell, two
/// spaces between columns, the first left-aligned, the others right.
fn columns(rows: &[Vec<String>], out: &mut String) {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|j| {
            rows.iter()
                .filter_map(|r| r.get(j))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::new();
        for (j, w) in widths.iter().enumerate() {
            let c = r.get(j).map_or("", String::as_str);
            if j == 0 {
                let _ = write!(line, "{c:<w$}");
            } else {
                let _ = write!(line, "  {c:>w$}");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// A table's header row: `first`, then the statistics.
fn header(first: &str) -> Vec<String> {
    [
        first, "count", "min", "p50", "p90", "p99", "p99.9", "max", "mean",
    ]
    .iter()
    .map(|c| (*c).to_string())
    .collect()
}

impl WindowSummary {
    /// A human-readable per-stage table (ms): the stages in call order
    /// (each one's parts under it), then the sums, with the notes on what
    /// they rest on; the hosts' figures under their own heading; the
    /// observer's cost, the fault counters and the deadline figures below.
    pub fn table(&self) -> String {
        let mut out = String::new();
        self.stage_table(&mut out);
        self.host_table(&mut out);
        // A blank line: the lines below are no rows of the tables.
        let _ = writeln!(out);
        self.count_lines(&mut out);
        self.deadline_line(&mut out);
        self.clock_lines(&mut out);
        out
    }

    /// The bound of the window's uplink / downlink split (its calls' median
    /// `split_err_ms`), when they were split across two clocks.
    fn split_bound(&self) -> Option<f64> {
        self.clock.map(|c| c.split_err_ms.p50)
    }

    /// A figure's row, when the window has it: a one-way stage's name
    /// carries the split's bound.
    fn row(&self, f: Figure) -> Option<Vec<String>> {
        let s = self.stages.get(f.name())?;
        let name = match self.split_bound() {
            Some(e) if Figure::Net.parts().contains(&f) && e.is_finite() => {
                format!("{f} ± {}", bound(e))
            }
            _ => f.name().to_owned(),
        };
        let mut r = vec![name, s.count.to_string()];
        r.extend(
            [s.min, s.p50, s.p90, s.p99, s.p99_9, s.max, s.mean]
                .iter()
                .map(|v| format!("{v:.3}")),
        );
        Some(r)
    }

    /// The call's figures, and the notes on what they rest on: the split's
    /// bound, the black box a server without timing leaves.
    fn stage_table(&self, out: &mut String) {
        let mut calls = vec![header("stage (ms)")];
        calls.extend(call_rows().into_iter().filter_map(|f| self.row(f)));
        columns(&calls, out);
        let has = |f: Figure| self.stages.contains_key(f.name());
        let split = self.split_bound();
        if let (Some(e), true) = (split, Figure::Net.parts().iter().any(|f| has(*f))) {
            let net = self
                .stages
                .get(Figure::Net.name())
                .map_or(String::new(), |n| format!(" ({:.3} ms)", n.p50));
            let _ = writeln!(
                out,
                "  uplink / downlink: split ± {} ms (the median split_err_ms): the server's clock offset is estimated, so each direction is only known within that — net{net} is exact; to measure each direction, synchronise the clocks (PTP) and use trusted clocks (docs/clocks.md)",
                bound(e)
            );
        }
        if has(Figure::Ttfb) {
            let _ = writeln!(out, "  {BLACK_BOX_NOTE}");
        }
        if has(Figure::Roundtrip) && !Figure::Roundtrip.parts().iter().any(|p| has(*p)) {
            let _ = writeln!(out, "  {NO_SERVER_TIMING_NOTE}");
        }
    }

    /// The hosts' figures under their heading, with the legend (nothing
    /// when the window has none).
    fn host_table(&self, out: &mut String) {
        let hosts: Vec<Vec<String>> = host_rows()
            .into_iter()
            .filter_map(|f| self.row(f))
            .collect();
        if !hosts.is_empty() {
            let _ = writeln!(out, "\n{HOST_HEADING}");
            let mut t = vec![header("host (ms)")];
            t.extend(hosts);
            columns(&t, out);
            let _ = writeln!(out, "  {HOST_LEGEND}");
        }
    }

    /// The calls and the observer's cost, then the fault counters.
    fn count_lines(&self, out: &mut String) {
        let _ = write!(
            out,
            "calls {} (warm-up {} excluded, failed {})",
            self.calls, self.warmup_calls, self.failed_calls
        );
        if let Some(o) = self.observer_us {
            let _ = write!(out, "; observer {:.1} µs p50, {:.1} µs p99", o.p50, o.p99);
        }
        let _ = writeln!(out);
        // The sum alone would hide which file failed: lost records are calls
        // missing from the record file; a failed summary write loses a window.
        let write_failures = if self.write_failures == 0 {
            "0".to_owned()
        } else {
            format!(
                "{} (records lost {}, summary writes {})",
                self.write_failures, self.records_lost, self.summary_write_failures
            )
        };
        let _ = writeln!(
            out,
            "queue drops {}, write failures {write_failures}, rejected headers {}, clamped {}, ignored spans {}, empty calls {}",
            self.queue_drops,
            self.rejected_headers,
            self.clamped,
            self.ignored_spans,
            self.empty_calls
        );
    }

    /// The deadline figures, when a target rate is set.
    fn deadline_line(&self, out: &mut String) {
        if let Some(d) = self.deadline {
            let _ = writeln!(
                out,
                "deadline @ {} Hz: {} of {} calls missed (ended after their tick's deadline), {} ticks skipped (no call started in them), effective {:.2} Hz, late p50 {:.3} / p99 {:.3} ms, jitter p50 {:.3} / p99 {:.3} ms",
                d.target_hz,
                d.misses,
                self.calls,
                d.skipped_ticks,
                d.effective_hz,
                d.late_ms.p50,
                d.late_ms.p99,
                d.jitter_ms.p50,
                d.jitter_ms.p99
            );
        }
    }

    /// The clock lines under the table: the server's, the executor's and
    /// this host's wall clock.
    fn clock_lines(&self, out: &mut String) {
        if let Some(c) = self.clock {
            let _ = writeln!(
                out,
                "clock: offset {:+.3} ms (window {:+.3} … {:+.3}) over {} call(s), split ± {:.3} ms p50 / {:.3} ms p99",
                c.offset_ms.last,
                c.offset_ms.min,
                c.offset_ms.max,
                c.calls,
                c.split_err_ms.p50,
                c.split_err_ms.p99
            );
            if c.steps > 0 {
                let _ = writeln!(out, "clock: {} step(s) of the server's clock", c.steps);
            }
            if let Some(d) = c.drift_ppm {
                let _ = writeln!(out, "clock: drift {:+.1} ± {:.1} ppm", d.value, d.err);
            }
        }
        if let Some(c) = self.executor_clock {
            let _ = writeln!(
                out,
                "executor clock: offset {:+.3} ms (window {:+.3} … {:+.3}) over {} dispatch(es), start ± {:.3} ms p50 / {:.3} ms p99",
                c.exec_offset_ms.last,
                c.exec_offset_ms.min,
                c.exec_offset_ms.max,
                c.calls,
                c.exec_err_ms.p50,
                c.exec_err_ms.p99
            );
        }
        // Read noise is a few ppm; past this the wall clock is being slewed.
        if let Some(ppm) = self.wall_slew_ppm.filter(|p| p.abs() >= 50.0) {
            let _ = writeln!(
                out,
                "host clock: the wall clock runs {ppm:+.0} ppm against the monotonic clock (being slewed); each call is placed on the wall clock as read at that call"
            );
        }
    }
}
