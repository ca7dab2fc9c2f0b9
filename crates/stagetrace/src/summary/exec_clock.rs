//! The executor's clock figures of a window: what the dispatch split rests
//! on (`exec_offset_ms`, `exec_err_ms` of the records), kept apart from the
//! policy server's (each machine has its own clock).

use serde::{Deserialize, Serialize};

use crate::record::CallRecord;
use stagetrace_schema::Figure;

use super::dist::Plain;
use super::window::{OffsetRange, Quantiles};

/// The executor clock figures of a window's calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorClockSummary {
    /// Steady-state calls whose dispatch was placed with an executor offset.
    pub calls: u64,
    /// Executor − client offset used, ms: range over the window and latest.
    pub exec_offset_ms: OffsetRange,
    /// ± bound on the executor's start on the client's clock, ms.
    pub exec_err_ms: Quantiles,
}

#[derive(Debug)]
pub(super) struct ExecClockAcc {
    calls: u64,
    min_ns: i64,
    max_ns: i64,
    last_ns: i64,
    err_us: Plain,
}

impl ExecClockAcc {
    pub(super) fn new() -> Self {
        ExecClockAcc {
            calls: 0,
            min_ns: i64::MAX,
            max_ns: i64::MIN,
            last_ns: 0,
            err_us: Plain::new(),
        }
    }

    pub(super) fn add(&mut self, rec: &CallRecord) {
        let Some(offset) = rec.get(Figure::ExecOffset) else {
            return;
        };
        self.calls += 1;
        self.min_ns = self.min_ns.min(offset);
        self.max_ns = self.max_ns.max(offset);
        self.last_ns = offset;
        if let Some(err) = rec.get(Figure::ExecErr) {
            self.err_us
                .record((err.max(0) as u64).saturating_add(500) / 1000);
        }
    }

    /// Empty for the next window, keeping the histogram's allocation.
    pub(super) fn reset(&mut self) {
        self.calls = 0;
        self.min_ns = i64::MAX;
        self.max_ns = i64::MIN;
        self.last_ns = 0;
        self.err_us.reset();
    }

    pub(super) fn summary(&self) -> Option<ExecutorClockSummary> {
        if self.calls == 0 {
            return None;
        }
        let ms = |ns: i64| Figure::ExecOffset.to_unit(ns);
        Some(ExecutorClockSummary {
            calls: self.calls,
            exec_offset_ms: OffsetRange {
                min: ms(self.min_ns),
                max: ms(self.max_ns),
                last: ms(self.last_ns),
            },
            exec_err_ms: self.err_us.quantiles(1000.0, 0.0).unwrap_or_default(),
        })
    }
}
