//! Rolling and cumulative summaries: per-stage and per-kind latency
//! distributions (HdrHistogram in µs, exact min / max / mean kept apart),
//! the observer's own cost, fault counters and deadline figures.
//!
//! One [`WindowSummary`] is one line of `summary.*.jsonl`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::record::{round_us, CallRecord, Figure, FIGURE_COUNT};

/// The figures a summary reports, in display order: the schema's call-time
/// figures (the six stages and those derived from them; see
/// [`Figure::is_call_time`]). Each is keyed by its short name (`"infer"`).
pub fn figures() -> impl Iterator<Item = Figure> {
    Figure::ALL.into_iter().filter(|f| f.is_call_time())
}

/// Most kinds a summary tracks separately; further kinds are pooled under
/// [`OTHER_KINDS`] so an app that sends a fresh kind per call cannot grow memory.
pub const MAX_KINDS: usize = 16;

/// The pooled kind name once [`MAX_KINDS`] is reached.
pub const OTHER_KINDS: &str = "(other)";

/// Significant digits of every histogram: values are exact to 0.1 %.
pub const SIGFIG: u8 = 3;

/// Largest value a histogram grows to (one hour in µs); larger values are
/// counted at this value (the exact max is kept apart), bounding memory.
const HIST_CAP: u64 = 3_600_000_000;

/// Record into an auto-resizing histogram, growing it up to [`HIST_CAP`].
fn record_capped(h: &mut Histogram<u64>, v: u64) {
    let v = v.min(HIST_CAP);
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

/// Distribution of one figure over a window, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageStats {
    /// Calls that had this figure.
    pub count: u64,
    /// Exact minimum.
    pub min: f64,
    /// Median (HdrHistogram, 3 significant digits).
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    /// Exact maximum.
    pub max: f64,
    /// Exact mean.
    pub mean: f64,
}

/// Per-kind figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KindSummary {
    /// Steady-state calls of this kind in the window.
    pub calls: u64,
    /// Figure name (see [`figures`]) → distribution.
    pub stages: BTreeMap<String, StageStats>,
}

/// Two quantiles of a secondary figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Deadline figures against the configured `target_hz`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeadlineSummary {
    /// The configured control rate.
    pub target_hz: f64,
    /// Calls that ended after their tick's deadline, plus ticks no call served.
    pub misses: u64,
    /// Ticks no call started in (the loop fell behind and skipped them); part of `misses`.
    pub skipped_ticks: u64,
    /// Completed calls per second.
    pub effective_hz: f64,
    /// Completion − deadline (scheduled tick + period), ms; negative = slack.
    pub late_ms: Quantiles,
    /// |Δ²t| of consecutive call completions, ms.
    pub jitter_ms: Quantiles,
}

/// One line of `summary.*.jsonl`: a rolling window, or the cumulative summary
/// written at shutdown (`window == "cumulative"`). Durations in ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowSummary {
    /// Run id (UTC start time and pid), shared with the `records-<run>` file name.
    pub run: String,
    /// `"rolling"` or `"cumulative"`.
    pub window: String,
    /// Rolling window number, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// Window start, ms since the Unix epoch.
    pub start_unix_ms: f64,
    /// Window end, ms since the Unix epoch.
    pub end_unix_ms: f64,
    /// Steady-state calls that completed (warm-up and failed calls excluded).
    pub calls: u64,
    /// Warm-up calls, kept out of every figure.
    pub warmup_calls: u64,
    /// Failed calls (`failed: true`), kept out of the stage figures.
    pub failed_calls: u64,
    /// Figure name (see [`figures`]) → distribution over steady-state calls.
    pub stages: BTreeMap<String, StageStats>,
    /// Kind → its own figures.
    pub kinds: BTreeMap<String, KindSummary>,
    /// The layer's own cost per call on the app thread, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observer_us: Option<Quantiles>,
    /// Calls dropped because the queue to the worker was full.
    pub queue_drops: u64,
    /// Lines that could not be written (unwritable directory, full disk).
    pub write_failures: u64,
    /// Rejected trace-context / server-timing headers (process-wide).
    pub rejected_headers: u64,
    /// Negative durations clamped to 0 (process-wide).
    pub clamped: u64,
    /// Stage spans that closed outside any call span, or named an unknown stage.
    pub ignored_spans: u64,
    /// Call spans that closed with no stage span inside.
    pub empty_calls: u64,
    /// Deadline figures, when a `target_hz` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DeadlineSummary>,
    /// Counters the record sinks report about themselves, cumulative
    /// (e.g. `otlp.dropped`, `otlp.failed`), from [`RecordSink::counters`](crate::RecordSink::counters).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sink_counters: BTreeMap<String, u64>,
}

impl WindowSummary {
    /// The summary as one JSON line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

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
        let _ = write!(
            out,
            "calls {} (warm-up {} excluded, failed {})",
            self.calls, self.warmup_calls, self.failed_calls
        );
        if let Some(o) = self.observer_us {
            let _ = write!(out, "; observer {:.1} µs p50, {:.1} µs p99", o.p50, o.p99);
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "queue drops {}, write failures {}, rejected headers {}, clamped {}, ignored spans {}, empty calls {}",
            self.queue_drops,
            self.write_failures,
            self.rejected_headers,
            self.clamped,
            self.ignored_spans,
            self.empty_calls
        );
        if let Some(d) = self.deadline {
            let _ = writeln!(
                out,
                "deadline @ {} Hz: {} missed ({} skipped ticks), effective {:.2} Hz, late p50 {:.3} / p99 {:.3} ms, jitter p50 {:.3} / p99 {:.3} ms",
                d.target_hz,
                d.misses,
                d.skipped_ticks,
                d.effective_hz,
                d.late_ms.p50,
                d.late_ms.p99,
                d.jitter_ms.p50,
                d.jitter_ms.p99
            );
        }
        out
    }
}

/// The cumulative summary returned by [`FlushGuard::finish`](crate::FlushGuard::finish).
pub type Summary = WindowSummary;

/// One figure's distribution: a histogram in µs plus the exact count, min,
/// max and sum in integer ns; milliseconds only when the stats are read.
#[derive(Debug)]
struct Dist {
    hist: Histogram<u64>,
    count: u64,
    min_ns: i64,
    max_ns: i64,
    sum_ns: i128,
}

impl Dist {
    fn new() -> Option<Self> {
        Some(Dist {
            hist: Histogram::new(SIGFIG).ok()?,
            count: 0,
            min_ns: i64::MAX,
            max_ns: i64::MIN,
            sum_ns: 0,
        })
    }

    fn record(&mut self, ns: i64) {
        let ns = ns.max(0);
        record_capped(&mut self.hist, (ns as u64).saturating_add(500) / 1000);
        self.count += 1;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        self.sum_ns += i128::from(ns);
    }

    fn quantile_ms(&self, q: f64) -> f64 {
        let ns = i64::try_from(self.hist.value_at_quantile(q))
            .unwrap_or(i64::MAX / 1000)
            .saturating_mul(1000);
        // The histogram reports the top of a bucket; never beyond the exact extremes.
        ms_rounded(ns.clamp(self.min_ns, self.max_ns))
    }

    fn stats(&self) -> Option<StageStats> {
        if self.count == 0 {
            return None;
        }
        let mean_ns = (self.sum_ns / i128::from(self.count)) as i64;
        Some(StageStats {
            count: self.count,
            min: ms_rounded(self.min_ns),
            p50: self.quantile_ms(0.50),
            p90: self.quantile_ms(0.90),
            p99: self.quantile_ms(0.99),
            p99_9: self.quantile_ms(0.999),
            max: ms_rounded(self.max_ns),
            mean: ms_rounded(mean_ns),
        })
    }

    fn reset(&mut self) {
        self.hist.reset();
        self.count = 0;
        self.min_ns = i64::MAX;
        self.max_ns = i64::MIN;
        self.sum_ns = 0;
    }
}

/// ns as ms with µs resolution, rounded exactly as the record writes them,
/// so a summary's min and max equal the records' own values.
fn ms_rounded(ns: i64) -> f64 {
    Figure::E2e.to_unit(ns)
}

/// One [`Dist`] per summarised figure (indexed by [`Figure::index`]),
/// created on first use.
#[derive(Debug, Default)]
struct FigureSet {
    figs: [Option<Dist>; FIGURE_COUNT],
}

impl FigureSet {
    fn add(&mut self, rec: &CallRecord) {
        for f in figures() {
            let Some(ns) = rec.get(f) else { continue };
            let slot = &mut self.figs[f.index()];
            if slot.is_none() {
                *slot = Dist::new();
            }
            if let Some(d) = slot {
                d.record(ns);
            }
        }
    }

    fn stats(&self) -> BTreeMap<String, StageStats> {
        figures()
            .filter_map(|f| {
                let d = self.figs[f.index()].as_ref()?;
                Some((f.name().to_owned(), d.stats()?))
            })
            .collect()
    }

    fn reset(&mut self) {
        self.figs.iter_mut().flatten().for_each(Dist::reset);
    }
}

/// A plain histogram of non-negative values (µs or ns) for secondary figures.
#[derive(Debug)]
struct Plain(Option<Histogram<u64>>);

impl Plain {
    fn new() -> Self {
        Plain(Histogram::new(SIGFIG).ok())
    }

    fn record(&mut self, v: u64) {
        if let Some(h) = &mut self.0 {
            record_capped(h, v);
        }
    }

    fn quantiles(&self, scale: f64, offset: f64) -> Option<Quantiles> {
        let h = self.0.as_ref().filter(|h| !h.is_empty())?;
        Some(Quantiles {
            p50: round_us(h.value_at_quantile(0.50) as f64 / scale - offset),
            p99: round_us(h.value_at_quantile(0.99) as f64 / scale - offset),
        })
    }

    fn reset(&mut self) {
        if let Some(h) = &mut self.0 {
            h.reset();
        }
    }
}

/// What the deadline tracker says about one call.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct DeadlineObs {
    /// Completion − deadline, ns (negative = slack).
    pub(crate) late_ns: i64,
    /// Ticks skipped before this call's tick.
    pub(crate) skipped: u64,
    /// |Δ²t| of completions, ns, from the third call on.
    pub(crate) jitter_ns: Option<u64>,
}

/// Assigns each call its scheduled tick without coordinated omission.
///
/// Ticks are `origin + k·period`, `origin` = the first call's start. A call
/// belongs to the later of (the tick after the previous call's) and (the last
/// tick at or before its start): a loop running behind is measured from the
/// tick it should have served, and ticks it skipped count as misses.
#[derive(Debug)]
pub(crate) struct DeadlineTracker {
    period_ns: u64,
    origin: Option<Instant>,
    last_tick: Option<u64>,
    ends: [Option<Instant>; 2],
}

impl DeadlineTracker {
    pub(crate) fn new(target_hz: f64) -> Self {
        DeadlineTracker {
            period_ns: (1e9 / target_hz).round().max(1.0) as u64,
            origin: None,
            last_tick: None,
            ends: [None, None],
        }
    }

    pub(crate) fn period_ns(&self) -> u64 {
        self.period_ns
    }

    pub(crate) fn observe(&mut self, start: Instant, end: Instant) -> DeadlineObs {
        let origin = *self.origin.get_or_insert(start);
        let floor = (start.saturating_duration_since(origin).as_nanos()
            / u128::from(self.period_ns))
        .min(u128::from(u64::MAX)) as u64;
        let (tick, skipped) = match self.last_tick {
            Some(last) if floor > last + 1 => (floor, floor - last - 1),
            Some(last) => (last + 1, 0),
            None => (floor, 0),
        };
        self.last_tick = Some(tick);
        let deadline_ns = (u128::from(tick) + 1) * u128::from(self.period_ns);
        let end_ns = if end >= origin {
            end.duration_since(origin).as_nanos() as i128
        } else {
            -(origin.duration_since(end).as_nanos() as i128)
        };
        let late_ns =
            (end_ns - deadline_ns as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        let jitter_ns = match self.ends {
            [Some(e0), Some(e1)] => {
                let d1 = signed_ns(e0, e1);
                let d2 = signed_ns(e1, end);
                Some((d2 - d1).unsigned_abs().min(u128::from(u64::MAX)) as u64)
            }
            _ => None,
        };
        self.ends = [self.ends[1], Some(end)];
        DeadlineObs {
            late_ns,
            skipped,
            jitter_ns,
        }
    }
}

fn signed_ns(a: Instant, b: Instant) -> i128 {
    if b >= a {
        b.duration_since(a).as_nanos() as i128
    } else {
        -(a.duration_since(b).as_nanos() as i128)
    }
}

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
    first_start: Option<Instant>,
    last_end: Option<Instant>,
}

/// Counter values reported with a summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) queue_drops: u64,
    pub(crate) write_failures: u64,
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
        if let (Some(d), Some(period)) = (deadline, self.period_ns) {
            self.skipped += d.skipped;
            self.misses += d.skipped + u64::from(d.late_ns > 0);
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
        self.all.add(rec);
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
            rejected_headers: counters.rejected_headers,
            clamped: counters.clamped,
            ignored_spans: counters.ignored_spans,
            empty_calls: counters.empty_calls,
            deadline,
            sink_counters: BTreeMap::new(),
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
        self.first_start = None;
        self.last_end = None;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn figure_percentiles_within_precision_and_exact_extremes() {
        let mut f = Dist::new().unwrap();
        for i in 1..=1000 {
            f.record(i * 100_000); // 0.1 ms steps
        }
        let s = f.stats().unwrap();
        assert_eq!(s.count, 1000);
        assert_eq!(s.min, 0.1);
        assert_eq!(s.max, 100.0);
        assert!((s.p50 - 50.0).abs() <= 50.0 * 0.001 + 0.001, "{}", s.p50);
        assert!((s.p99 - 99.0).abs() <= 99.0 * 0.001 + 0.001, "{}", s.p99);
        assert!((s.mean - 50.05).abs() < 1e-9);
    }

    #[test]
    fn deadline_tracker_counts_skipped_ticks_and_lateness() {
        let t0 = Instant::now();
        let mut d = DeadlineTracker::new(100.0); // 10 ms ticks
        let ms = |x: u64| t0 + Duration::from_millis(x);
        // tick 0: ends at 4 ms → 6 ms early
        let a = d.observe(ms(0), ms(4));
        assert_eq!(a.late_ns, -6_000_000);
        // tick 1: starts late at 13, ends at 25 → 5 ms late
        let b = d.observe(ms(13), ms(25));
        assert_eq!((b.late_ns, b.skipped), (5_000_000, 0));
        // the loop fell behind: starts at 41 (tick 4): ticks 2 and 3 were skipped
        let c = d.observe(ms(41), ms(44));
        assert_eq!((c.late_ns, c.skipped), (-6_000_000, 2));
        // jitter = |(44-25) - (25-4)| = 2 ms
        assert_eq!(c.jitter_ns, Some(2_000_000));
    }
}
