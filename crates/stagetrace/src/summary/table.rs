//! The human-readable table of a summary ([`WindowSummary::table`]).

use std::fmt::Write as _;

use crate::record::Figure;
use stagetrace_schema::BLACK_BOX_NOTE;

use super::window::{figures, WindowSummary};

impl WindowSummary {
    /// A human-readable per-stage table (ms), with the observer's cost,
    /// the fault counters and the deadline figures below it.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<10} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "stage (ms)", "count", "min", "p50", "p90", "p99", "p99.9", "max", "mean"
        );
        for name in figures().map(Figure::name) {
            if let Some(s) = self.stages.get(name) {
                let _ = writeln!(
                    out,
                    "{:<10} {:>7} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                    name, s.count, s.min, s.p50, s.p90, s.p99, s.p99_9, s.max, s.mean
                );
            }
        }
        if self.stages.contains_key(Figure::Ttfb.name()) {
            let _ = writeln!(out, "{BLACK_BOX_NOTE}");
        }
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
        self.clock_lines(&mut out);
        out
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
