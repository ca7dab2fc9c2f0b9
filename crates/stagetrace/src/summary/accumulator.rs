//! What one summary line aggregates ([`Accum`]): per-figure and per-kind
//! distributions, the observer's cost, deadline figures; plus the counters
//! reported with it.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::record::{round_us, CallRecord};
use stagetrace_schema::Figure;

use super::deadline::DeadlineObs;
use super::dist::{FigureSet, Plain};
use super::exec_clock::ExecClockAcc;
use super::window::{
    ClockSummary, DeadlineSummary, Drift, KindSummary, OffsetRange, WindowSummary,
};

/// Most kinds a summary tracks separately; further kinds are pooled under
/// [`OTHER_KINDS`] so an app that sends a fresh kind per call cannot grow memory.
pub const MAX_KINDS: usize = 16;

/// The pooled kind name once [`MAX_KINDS`] is reached.
pub const OTHER_KINDS: &str = "(other)";

/// Everything one summary line aggregates.
#[derive(Debug)]
pub(crate) struct Accum {
    calls: u64,
    warmup_calls: u64,
    failed_calls: u64,
    all: FigureSet,
    kinds: Vec<(String, u64, FigureSet)>,
    observer_ns: Plain,
    period_ns: Option<u64>,
    misses: u64,
    skipped: u64,
    completions: u64,
    /// Completion − tick, µs, so the histogram only sees non-negative values.
    since_tick_us: Plain,
    jitter_us: Plain,
    clock: ClockAcc,
    exec_clock: ExecClockAcc,
    first_start: Option<Instant>,
    last_end: Option<Instant>,
}

/// Counter values reported with a summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) queue_drops: u64,
    pub(crate) write_failures: u64,
    pub(crate) records_lost: u64,
    pub(crate) summary_write_failures: u64,
    pub(crate) rejected_headers: u64,
    pub(crate) clamped: u64,
    pub(crate) ignored_spans: u64,
    pub(crate) empty_calls: u64,
}

impl Counters {
    pub(crate) fn since(self, earlier: Counters) -> Counters {
        Counters {
            queue_drops: self.queue_drops.saturating_sub(earlier.queue_drops),
            write_failures: self.write_failures.saturating_sub(earlier.write_failures),
            records_lost: self.records_lost.saturating_sub(earlier.records_lost),
            summary_write_failures: self
                .summary_write_failures
                .saturating_sub(earlier.summary_write_failures),
            rejected_headers: self
                .rejected_headers
                .saturating_sub(earlier.rejected_headers),
            clamped: self.clamped.saturating_sub(earlier.clamped),
            ignored_spans: self.ignored_spans.saturating_sub(earlier.ignored_spans),
            empty_calls: self.empty_calls.saturating_sub(earlier.empty_calls),
        }
    }
}

/// Where a summary line sits in time and which run it belongs to.
#[derive(Clone, Debug)]
pub(crate) struct Span<'a> {
    pub(crate) run: &'a str,
    pub(crate) window: &'a str,
    pub(crate) index: Option<u64>,
    pub(crate) start_unix_ms: f64,
    pub(crate) end_unix_ms: f64,
    /// Seconds the effective rate is computed over; `None` = first start → last end.
    pub(crate) rate_secs: Option<f64>,
}

impl Accum {
    pub(crate) fn new(period_ns: Option<u64>) -> Self {
        Accum {
            calls: 0,
            warmup_calls: 0,
            failed_calls: 0,
            all: FigureSet::default(),
            kinds: Vec::new(),
            observer_ns: Plain::new(),
            period_ns,
            misses: 0,
            skipped: 0,
            completions: 0,
            since_tick_us: Plain::new(),
            jitter_us: Plain::new(),
            clock: ClockAcc::new(),
            exec_clock: ExecClockAcc::new(),
            first_start: None,
            last_end: None,
        }
    }

    /// Add one call; `start`/`end` are its monotonic bounds.
    pub(crate) fn add(
        &mut self,
        rec: &CallRecord,
        start: Instant,
        end: Instant,
        deadline: Option<DeadlineObs>,
    ) {
        if rec.warmup == Some(true) {
            self.warmup_calls += 1;
            return;
        }
        self.completions += 1;
        self.first_start = Some(self.first_start.map_or(start, |s| s.min(start)));
        self.last_end = Some(self.last_end.map_or(end, |e| e.max(end)));
        // One definition of a deadline miss (docs/stages.md, "Deadlines"): a
        // steady call that ended after its tick's deadline — the calls
        // `report` counts from the records' `deadline_miss`. Skipped ticks
        // are no calls: counted apart, never added.
        let mut missed = false;
        if let (Some(d), Some(period)) = (deadline, self.period_ns) {
            self.skipped += d.skipped;
            missed = d.late_ns > 0;
            let since_tick_ns = d.late_ns.saturating_add(period as i64).max(0) as u64;
            self.since_tick_us.record((since_tick_ns + 500) / 1000);
            if let Some(j) = d.jitter_ns {
                self.jitter_us.record((j + 500) / 1000);
            }
        }
        if rec.failed == Some(true) {
            self.failed_calls += 1;
            return;
        }
        self.calls += 1;
        self.misses += u64::from(missed);
        self.all.add(rec);
        self.clock.add(rec);
        self.exec_clock.add(rec);
        if let Some(obs) = rec.get(Figure::Observer) {
            self.observer_ns.record(obs.max(0) as u64);
        }
        let idx = match self.kinds.iter().position(|(k, _, _)| *k == rec.kind) {
            Some(i) => i,
            None if self.kinds.len() < MAX_KINDS => {
                self.kinds.push((rec.kind.clone(), 0, FigureSet::default()));
                self.kinds.len() - 1
            }
            None => match self.kinds.iter().position(|(k, _, _)| k == OTHER_KINDS) {
                Some(i) => i,
                None => {
                    // Replace nothing: the pool becomes the last slot.
                    self.kinds
                        .push((OTHER_KINDS.to_owned(), 0, FigureSet::default()));
                    self.kinds.len() - 1
                }
            },
        };
        if let Some((_, n, set)) = self.kinds.get_mut(idx) {
            *n += 1;
            set.add(rec);
        }
    }

    pub(crate) fn summary(
        &self,
        at: &Span<'_>,
        counters: Counters,
        target_hz: Option<f64>,
    ) -> WindowSummary {
        let deadline = target_hz.zip(self.period_ns).map(|(hz, period)| {
            let secs = at
                .rate_secs
                .unwrap_or_else(|| match (self.first_start, self.last_end) {
                    (Some(s), Some(e)) => e.saturating_duration_since(s).as_secs_f64(),
                    _ => 0.0,
                });
            DeadlineSummary {
                target_hz: hz,
                misses: self.misses,
                skipped_ticks: self.skipped,
                effective_hz: if secs > 0.0 {
                    (self.completions as f64 / secs * 1000.0).round() / 1000.0
                } else {
                    0.0
                },
                late_ms: self
                    .since_tick_us
                    .quantiles(1000.0, period as f64 / 1e6)
                    .unwrap_or_default(),
                jitter_ms: self.jitter_us.quantiles(1000.0, 0.0).unwrap_or_default(),
            }
        });
        WindowSummary {
            run: at.run.to_owned(),
            window: at.window.to_owned(),
            index: at.index,
            start_unix_ms: round_us(at.start_unix_ms),
            end_unix_ms: round_us(at.end_unix_ms),
            calls: self.calls,
            warmup_calls: self.warmup_calls,
            failed_calls: self.failed_calls,
            stages: self.all.stats(),
            kinds: self
                .kinds
                .iter()
                .filter(|(_, n, _)| *n > 0)
                .map(|(k, n, set)| {
                    (
                        k.clone(),
                        KindSummary {
                            calls: *n,
                            stages: set.stats(),
                        },
                    )
                })
                .collect(),
            observer_us: self.observer_ns.quantiles(1000.0, 0.0),
            queue_drops: counters.queue_drops,
            write_failures: counters.write_failures,
            records_lost: counters.records_lost,
            summary_write_failures: counters.summary_write_failures,
            rejected_headers: counters.rejected_headers,
            clamped: counters.clamped,
            ignored_spans: counters.ignored_spans,
            empty_calls: counters.empty_calls,
            deadline,
            clock: self.clock.summary(),
            executor_clock: self.exec_clock.summary(),
            wall_slew_ppm: None,
            sink_counters: BTreeMap::new(),
        }
    }

    /// The latest drift estimate of the server's clock, when there is one.
    pub(crate) fn note_drift(&mut self, drift: Option<(f64, f64)>) {
        if let Some(d) = drift {
            self.clock.drift = Some(d);
        }
    }

    /// Empty the accumulator for the next window, keeping allocated histograms.
    pub(crate) fn reset(&mut self) {
        self.calls = 0;
        self.warmup_calls = 0;
        self.failed_calls = 0;
        self.all.reset();
        for (_, n, set) in &mut self.kinds {
            *n = 0;
            set.reset();
        }
        self.observer_ns.reset();
        self.misses = 0;
        self.skipped = 0;
        self.completions = 0;
        self.since_tick_us.reset();
        self.jitter_us.reset();
        self.clock.reset();
        self.exec_clock.reset();
        self.first_start = None;
        self.last_end = None;
    }
}

/// The clock figures of a window: the offset's range and last value (signed,
/// so not a histogram) and the split error's distribution.
#[derive(Debug)]
struct ClockAcc {
    calls: u64,
    offset_min_ns: i64,
    offset_max_ns: i64,
    offset_last_ns: i64,
    split_err_us: Plain,
    steps: u64,
    drift: Option<(f64, f64)>,
}

impl ClockAcc {
    fn new() -> Self {
        ClockAcc {
            calls: 0,
            offset_min_ns: i64::MAX,
            offset_max_ns: i64::MIN,
            offset_last_ns: 0,
            split_err_us: Plain::new(),
            steps: 0,
            drift: None,
        }
    }

    fn add(&mut self, rec: &CallRecord) {
        if rec.clock_step == Some(true) {
            self.steps += 1;
            // The step reset the estimator's drift history.
            self.drift = None;
        }
        let Some(offset) = rec.get(Figure::Offset) else {
            return;
        };
        self.calls += 1;
        self.offset_min_ns = self.offset_min_ns.min(offset);
        self.offset_max_ns = self.offset_max_ns.max(offset);
        self.offset_last_ns = offset;
        if let Some(err) = rec.get(Figure::SplitErr) {
            self.split_err_us
                .record((err.max(0) as u64).saturating_add(500) / 1000);
        }
    }

    /// Empty for the next window, keeping the histogram's allocation.
    fn reset(&mut self) {
        self.calls = 0;
        self.offset_min_ns = i64::MAX;
        self.offset_max_ns = i64::MIN;
        self.offset_last_ns = 0;
        self.split_err_us.reset();
        self.steps = 0;
        // The drift is a property of the clocks: it carries into the next window.
    }

    fn summary(&self) -> Option<ClockSummary> {
        if self.calls == 0 {
            return None;
        }
        let ms = |ns: i64| Figure::Offset.to_unit(ns);
        Some(ClockSummary {
            calls: self.calls,
            offset_ms: OffsetRange {
                min: ms(self.offset_min_ns),
                max: ms(self.offset_max_ns),
                last: ms(self.offset_last_ns),
            },
            split_err_ms: self.split_err_us.quantiles(1000.0, 0.0).unwrap_or_default(),
            steps: self.steps,
            drift_ppm: self.drift.map(|(value, err)| Drift {
                value: (value * 1000.0).round() / 1000.0,
                err: (err * 1000.0).round() / 1000.0,
            }),
        })
    }
}
