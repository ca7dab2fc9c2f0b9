//! The worker thread: turns queued calls into [`CallRecord`]s (clock
//! stitching, warm-up, deadlines), feeds the summaries and sinks, and writes
//! `records-<run>.*.jsonl` and `summary.*.jsonl`.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use tracing_appender::rolling::{RollingFileAppender, Rotation};

use crate::clock::{Anchor, ClientTimes, ClockMode, Stitcher, ANCHOR_REFRESH};
use crate::health;
use crate::layer::{Msg, RawCall, Shared, StageAcc};
use crate::record::{CacheOutcome, CallRecord, Figure, SpanTime, Timeline};
use crate::sink::RecordSink;
use crate::stage::Stage;
use crate::stamp::Calibration;
use crate::summary::{Accum, Counters, DeadlineObs, DeadlineTracker, Span, Summary};
use crate::wire::ServerTiming;

/// Flush buffered record lines once this many bytes are pending.
const RECORD_BUF: usize = 64 * 1024;
/// Retry opening an unwritable output directory this often.
const REOPEN_EVERY: Duration = Duration::from_secs(5);
/// How often the worker looks at the queue. It sleeps in between rather
/// than blocking in `recv`: a receiver blocked in `recv` makes every
/// app-thread `try_send` wake it, a futex syscall on the app thread (about
/// 5 µs in a VM, several times the layer's own cost per call when calls come
/// at control-loop rates and the worker is always asleep). Records reach the
/// outputs at most this much later.
const POLL: Duration = Duration::from_millis(10);

/// Everything the worker needs, from the builder.
pub(crate) struct WorkerConfig {
    pub(crate) run: String,
    pub(crate) output_dir: Option<PathBuf>,
    pub(crate) rotation: Rotation,
    pub(crate) window: Duration,
    pub(crate) target_hz: Option<f64>,
    pub(crate) warmup_calls: u64,
    pub(crate) warmup_duration: Option<Duration>,
    pub(crate) clock_mode: ClockMode,
    pub(crate) queue_capacity: usize,
    pub(crate) sinks: Vec<Box<dyn RecordSink>>,
}

/// The output files, or why they are missing.
struct Files {
    dir: PathBuf,
    rotation: Rotation,
    records_prefix: String,
    records: Option<RollingFileAppender>,
    summary: Option<RollingFileAppender>,
    buf: Vec<u8>,
    buf_lines: u64,
    failures: u64,
    reported: bool,
    next_open: Instant,
}

impl Files {
    fn new(dir: PathBuf, rotation: Rotation, run: &str) -> Self {
        let mut files = Files {
            dir,
            rotation,
            records_prefix: format!("records-{run}"),
            records: None,
            summary: None,
            buf: Vec::with_capacity(RECORD_BUF + 4096),
            buf_lines: 0,
            failures: 0,
            reported: false,
            next_open: Instant::now(),
        };
        files.open();
        files
    }

    /// Opens whatever is not open yet; reports the first failure.
    fn open(&mut self) -> bool {
        if self.records.is_some() && self.summary.is_some() {
            return true;
        }
        let now = Instant::now();
        if now < self.next_open {
            return false;
        }
        self.next_open = now + REOPEN_EVERY;
        if let Err(e) = std::fs::create_dir_all(&self.dir) {
            self.report(&format!(
                "cannot create output directory {}: {e}",
                self.dir.display()
            ));
            return false;
        }
        let build = |prefix: &str| {
            RollingFileAppender::builder()
                .rotation(self.rotation.clone())
                .filename_prefix(prefix)
                .filename_suffix("jsonl")
                .build(&self.dir)
        };
        if self.records.is_none() {
            match build(&self.records_prefix) {
                Ok(a) => self.records = Some(a),
                Err(e) => {
                    self.report(&format!(
                        "cannot open {}/{}.*.jsonl: {e}",
                        self.dir.display(),
                        self.records_prefix
                    ));
                    return false;
                }
            }
        }
        if self.summary.is_none() {
            match build("summary") {
                Ok(a) => self.summary = Some(a),
                Err(e) => {
                    self.report(&format!(
                        "cannot open {}/summary.*.jsonl: {e}",
                        self.dir.display()
                    ));
                    return false;
                }
            }
        }
        true
    }

    fn report(&mut self, what: &str) {
        if !self.reported {
            self.reported = true;
            eprintln!(
                "stagetrace: {what}. Records and summaries are not being written (counted as \
                 write_failures; the app keeps running; stagetrace retries every {}s). Fix: make \
                 the directory writable, free disk space, or pass another .output_dir(...).",
                REOPEN_EVERY.as_secs()
            );
        }
    }

    fn push_record(&mut self, line: &str) {
        self.buf.extend_from_slice(line.as_bytes());
        self.buf.push(b'\n');
        self.buf_lines += 1;
        if self.buf.len() >= RECORD_BUF {
            self.flush_records();
        }
    }

    /// Writes whole lines only, in one write per batch, so a rotation never
    /// splits a line.
    fn flush_records(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        self.open();
        let lines = self.buf_lines;
        let result = match &mut self.records {
            Some(w) => w.write_all(&self.buf).map_err(Some),
            None => Err(None),
        };
        self.buf.clear();
        self.buf_lines = 0;
        if let Err(e) = result {
            self.failures += lines;
            if let Some(e) = e {
                self.records = None;
                let msg = format!("cannot write records to {}: {e}", self.dir.display());
                self.report(&msg);
            }
        }
    }

    fn write_summary(&mut self, line: &str) {
        self.open();
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let result = match &mut self.summary {
            Some(w) => w.write_all(&bytes).and_then(|()| w.flush()).map_err(Some),
            None => Err(None),
        };
        if let Err(e) = result {
            self.failures += 1;
            if let Some(e) = e {
                self.summary = None;
                let msg = format!("cannot write summary to {}: {e}", self.dir.display());
                self.report(&msg);
            }
        }
    }
}

/// One message printed the first time a counter moves.
#[derive(Debug, Default)]
struct Once {
    drops: bool,
    ignored: bool,
    unknown: bool,
    empty: bool,
    context: bool,
}

pub(crate) struct Worker {
    cfg_window: Duration,
    run: String,
    target_hz: Option<f64>,
    warmup_calls: u64,
    warmup_duration: Option<Duration>,
    queue_capacity: usize,
    anchor: Anchor,
    cal: Calibration,
    stitcher: Stitcher,
    deadline: Option<DeadlineTracker>,
    first_start: Option<Instant>,
    window: Accum,
    cumulative: Accum,
    index: u64,
    window_start_ms: f64,
    run_start_ms: f64,
    base: Counters,
    last: Counters,
    empty_calls: u64,
    files: Option<Files>,
    sinks: Vec<Option<Box<dyn RecordSink>>>,
    shared: Arc<Shared>,
    once: Once,
}

impl Worker {
    pub(crate) fn new(cfg: WorkerConfig, shared: Arc<Shared>) -> Self {
        let anchor = Anchor::now();
        let now_ms = anchor.wall_unix_ns() as f64 / 1e6;
        let period = cfg.target_hz.map(DeadlineTracker::new);
        let period_ns = period.as_ref().map(DeadlineTracker::period_ns);
        let mut w = Worker {
            cfg_window: cfg.window,
            target_hz: cfg.target_hz,
            warmup_calls: cfg.warmup_calls,
            warmup_duration: cfg.warmup_duration,
            queue_capacity: cfg.queue_capacity,
            anchor,
            cal: Calibration::unmeasured(),
            stitcher: Stitcher::new(cfg.clock_mode),
            deadline: period,
            first_start: None,
            window: Accum::new(period_ns),
            cumulative: Accum::new(period_ns),
            index: 0,
            window_start_ms: now_ms,
            run_start_ms: now_ms,
            base: Counters::default(),
            last: Counters::default(),
            empty_calls: 0,
            files: cfg
                .output_dir
                .map(|dir| Files::new(dir, cfg.rotation, &cfg.run)),
            sinks: cfg.sinks.into_iter().map(Some).collect(),
            shared,
            once: Once::default(),
            run: cfg.run,
        };
        w.base = w.counters();
        w.last = w.base;
        w
    }

    fn counters(&self) -> Counters {
        Counters {
            queue_drops: self.shared.queue_drops.load(Ordering::Relaxed),
            write_failures: self.files.as_ref().map_or(0, |f| f.failures),
            rejected_headers: health::rejected_headers(),
            clamped: health::clamped(),
            ignored_spans: self.shared.ignored_spans.load(Ordering::Relaxed)
                + self.shared.unknown_stage.load(Ordering::Relaxed),
            empty_calls: self.empty_calls,
        }
    }

    /// The worker loop: runs until a shutdown message or every sender is gone.
    pub(crate) fn run(mut self, rx: Receiver<Msg>, done: Sender<Summary>) {
        // Calls queue up meanwhile; nothing is converted before this.
        self.cal = Calibration::measure();
        let mut next_window = Instant::now() + self.cfg_window;
        loop {
            let mut shutdown = false;
            loop {
                match rx.try_recv() {
                    Ok(Msg::Call(raw)) => self.on_call(&raw),
                    Ok(Msg::Shutdown) | Err(TryRecvError::Disconnected) => {
                        shutdown = true;
                        break;
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
            if shutdown {
                while let Ok(msg) = rx.try_recv() {
                    if let Msg::Call(raw) = msg {
                        self.on_call(&raw);
                    }
                }
                break;
            }
            if let Some(f) = &mut self.files {
                f.flush_records();
            }
            let now = Instant::now();
            if now >= next_window {
                self.roll_window();
                next_window += self.cfg_window;
                if next_window <= now {
                    // The worker was starved for more than a window: realign.
                    next_window = now + self.cfg_window;
                }
            }
            std::thread::sleep(POLL.min(next_window.saturating_duration_since(Instant::now())));
        }
        let summary = self.finish();
        let _ = done.send(summary);
    }

    fn refresh_anchor(&mut self) {
        if self.anchor.refresh_if_older(ANCHOR_REFRESH) {
            self.cal.refine();
        }
    }

    fn on_call(&mut self, raw: &RawCall) {
        self.refresh_anchor();
        let (rec, deadline_obs) = self.build_record(raw);
        if let Some(f) = &mut self.files {
            f.push_record(&rec.to_json_line());
        }
        let (start, end) = (self.cal.instant(raw.state.start), self.cal.instant(raw.end));
        self.window.add(&rec, start, end, deadline_obs);
        self.cumulative.add(&rec, start, end, deadline_obs);
        for slot in &mut self.sinks {
            if let Some(sink) = slot {
                if catch_unwind(AssertUnwindSafe(|| sink.on_record(&rec))).is_err() {
                    eprintln!("stagetrace: a record sink panicked; it is disabled, the other outputs keep running");
                    *slot = None;
                }
            }
        }
    }

    /// One queued call → its public record (plus its deadline observation).
    fn build_record(&mut self, raw: &RawCall) -> (CallRecord, Option<DeadlineObs>) {
        let s = &raw.state;
        let cal = self.cal;
        // Figures are integer ns from the stamp to the record (durations fit
        // i64 for 292 years).
        let ns = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let start = cal.instant(s.start);
        let end = cal.instant(raw.end);
        let e2e_ns = cal.ns(raw.end.ticks_since(s.start));
        let call_start_unix_ns = self.anchor.to_unix_ns(start);
        let mut rec = CallRecord {
            seq: s.seq.unwrap_or(s.ordinal),
            ts_unix_ns: call_start_unix_ns,
            kind: if s.kind.is_empty() {
                "call".to_owned()
            } else {
                s.kind.as_str().to_owned()
            },
            trace_id: Some(format!("{:032x}", s.trace_id)),
            ..CallRecord::default()
        };
        rec.set(Figure::E2e, ns(e2e_ns));
        let acc = |stage: Stage| -> StageAcc { s.stages[stage.index()] };
        let total = |stage: Stage| {
            let a = acc(stage);
            (a.count > 0).then(|| ns(cal.ns(a.sum_ticks)))
        };
        let placed = |stage: Stage| {
            let a = acc(stage);
            (a.count > 0).then(|| SpanTime {
                start_ns: cal.ns(a.first_start_ticks),
                dur_ns: cal.ns(a.sum_ticks),
            })
        };
        let mut tl = Timeline {
            call_start_unix_ns,
            call_dur_ns: e2e_ns,
            capture: placed(Stage::Capture),
            dispatch: placed(Stage::Dispatch),
            call_span_id: Some(s.span_id.to_be_bytes()),
            shared_context: s.shared_context,
            ..Timeline::default()
        };
        rec.figures.set(Figure::Capture, total(Stage::Capture));
        rec.figures.set(Figure::Dispatch, total(Stage::Dispatch));

        if let Some(t) = s.transport {
            let t_start = cal.ns(t.start.ticks_since(s.start));
            let t_dur = cal.ns(t.end.ticks_since(t.start));
            tl.transport = Some(SpanTime {
                start_ns: t_start,
                dur_ns: t_dur,
            });
            tl.transport_span_id = Some(t.span_id.to_be_bytes());
            rec.set(Figure::Roundtrip, ns(t_dur));
            if let Some(timing) = t.timing {
                rec.batch_size = timing.batch_size;
                rec.cache = timing.cache_hit.map(CacheOutcome::from_hit);
            }
            if let Some(timing) = t.timing.filter(ServerTiming::has_times) {
                let client = ClientTimes {
                    send_unix_ns: self.anchor.to_unix_ns(cal.instant(t.start)),
                    recv_unix_ns: self.anchor.to_unix_ns(cal.instant(t.end)),
                };
                let st = self.stitcher.stitch(t.peer.as_str(), client, &timing);
                if st.clamped {
                    health::count_clamped();
                }
                let f = &mut rec.figures;
                f.set(
                    Figure::Roundtrip,
                    st.roundtrip_ns.or(f.get(Figure::Roundtrip)),
                );
                f.set(Figure::Server, st.server_ns);
                f.set(Figure::Net, st.net_ns);
                f.set(Figure::Uplink, st.uplink_ns);
                f.set(Figure::Downlink, st.downlink_ns);
                f.set(Figure::Queue, st.queue_ns);
                f.set(Figure::Infer, st.infer_ns);
                f.set(Figure::Offset, st.offset_ns);
                f.set(Figure::SplitErr, st.split_err_ns);
                rec.clock = st.basis;
                let ns = |v: i64| v.max(0) as u64;
                let t_end = t_start.saturating_add(t_dur);
                let mut cursor = t_start;
                if let Some(up) = st.uplink_ns {
                    tl.uplink = Some(SpanTime {
                        start_ns: t_start,
                        dur_ns: ns(up),
                    });
                    cursor = t_start.saturating_add(ns(up));
                }
                if let Some(q) = st.queue_ns {
                    tl.queue = Some(SpanTime {
                        start_ns: cursor,
                        dur_ns: ns(q),
                    });
                    cursor = cursor.saturating_add(ns(q));
                }
                if let Some(i) = st.infer_ns {
                    tl.infer = Some(SpanTime {
                        start_ns: cursor,
                        dur_ns: ns(i),
                    });
                }
                if let Some(down) = st.downlink_ns {
                    tl.downlink = Some(SpanTime {
                        start_ns: t_end.saturating_sub(ns(down)),
                        dur_ns: ns(down),
                    });
                }
            }
            let all = acc(Stage::Transport);
            if all.count > 1 {
                // Retries: the roundtrip is every attempt; the split is the stitched one.
                rec.set(Figure::Roundtrip, ns(cal.ns(all.sum_ticks)));
            }
        }
        if rec.get(Figure::Queue).is_none() {
            rec.figures.set(Figure::Queue, total(Stage::Queue));
            tl.queue = placed(Stage::Queue);
        }
        if rec.get(Figure::Infer).is_none() {
            rec.figures.set(Figure::Infer, total(Stage::Infer));
            tl.infer = placed(Stage::Infer);
        }

        let stage_spans: u32 = s.stages.iter().map(|a| a.count).sum();
        if stage_spans == 0 {
            self.empty_calls += 1;
        }
        let covered_ns = cal.ns(s.covered_ticks);
        if covered_ns > e2e_ns {
            // Overlapping top-level stage spans (concurrent tasks) cover more than the call.
            health::count_clamped();
            rec.set(Figure::Gap, 0);
        } else {
            rec.set(Figure::Gap, ns(e2e_ns - covered_ns));
        }
        rec.set(Figure::Observer, ns(cal.ns(s.observer_ticks)));
        if let Some(reason) = s.failed {
            rec.failed = Some(true);
            rec.error = Some(reason.to_owned());
        } else if raw.panicking {
            rec.failed = Some(true);
            rec.error = Some("panic".to_owned());
        }
        rec.output_digest = s.digest.map(|d| format!("{d:016x}"));
        rec.stale_dropped = (s.stale_dropped > 0).then_some(s.stale_dropped);

        let first = *self.first_start.get_or_insert(start);
        let warm_by_time = self.warmup_duration.is_some_and(|d| start < first + d);
        if s.ordinal < self.warmup_calls || warm_by_time {
            rec.warmup = Some(true);
        }
        let obs = self.deadline.as_mut().map(|d| d.observe(start, end));
        if let Some(o) = obs {
            rec.set(Figure::Late, o.late_ns);
            rec.deadline_miss = Some(o.late_ns > 0);
        }
        rec.timeline = tl;
        (rec, obs)
    }

    fn report_once(&mut self) {
        let c = self.counters();
        if c.queue_drops > 0 && !self.once.drops {
            self.once.drops = true;
            eprintln!(
                "stagetrace: calls are being dropped because the queue to the worker thread is full \
                 (capacity {}); they are counted as queue_drops. Fix: raise .queue_capacity(...) or \
                 make record sinks faster.",
                self.queue_capacity
            );
        }
        if self.shared.ignored_spans.load(Ordering::Relaxed) > 0 && !self.once.ignored {
            self.once.ignored = true;
            eprintln!(
                "stagetrace: stage spans closed outside any call span; they are ignored and counted \
                 as ignored_spans. Fix: open a `call` span around each control cycle (or set \
                 .call_span_name(...)); a server task in the same process is expected to show here."
            );
        }
        if self.shared.unknown_stage.load(Ordering::Relaxed) > 0 && !self.once.unknown {
            self.once.unknown = true;
            eprintln!(
                "stagetrace: a span has a `stage` field naming no stage; it is ignored and counted as \
                 ignored_spans. Fix: use stage = \"capture\", \"transport\", \"queue\", \"infer\" or \"dispatch\"."
            );
        }
        if self.shared.context_misses.load(Ordering::Relaxed) > 0 && !self.once.context {
            self.once.context = true;
            eprintln!(
                "stagetrace: .share_trace_context(...) is set but the other layer had no trace \
                 context for a call or transport span; those calls got trace ids of their own and \
                 are exported as separate traces. Fix: register that layer before StageLayer \
                 (`registry().with(otel_layer).with(stage_layer)`) and let its filter enable the \
                 call and stage spans."
            );
        }
        if self.empty_calls > 0 && !self.once.empty {
            self.once.empty = true;
            eprintln!(
                "stagetrace: a call span closed with no stage span inside (counted as empty_calls). \
                 Fix: name the stage spans capture / transport / infer / dispatch, add a `stage` \
                 field, or map your names with .map_span(...)."
            );
        }
    }

    fn emit(&mut self, summary: &mut crate::summary::WindowSummary) {
        for sink in self.sinks.iter().flatten() {
            if let Ok(counters) = catch_unwind(AssertUnwindSafe(|| sink.counters())) {
                for (name, value) in counters {
                    *summary.sink_counters.entry(name.to_owned()).or_default() += value;
                }
            }
        }
        if let Some(f) = &mut self.files {
            f.write_summary(&summary.to_json_line());
        }
        for slot in &mut self.sinks {
            if let Some(sink) = slot {
                if catch_unwind(AssertUnwindSafe(|| sink.on_window(summary))).is_err() {
                    eprintln!("stagetrace: a record sink panicked; it is disabled, the other outputs keep running");
                    *slot = None;
                }
            }
        }
    }

    fn roll_window(&mut self) {
        if let Some(f) = &mut self.files {
            f.flush_records();
        }
        self.refresh_anchor();
        self.cal.refine();
        self.report_once();
        let now_ms = self.anchor.to_unix_ns(Instant::now()) as f64 / 1e6;
        let counters = self.counters();
        let span = Span {
            run: &self.run,
            window: "rolling",
            index: Some(self.index),
            start_unix_ms: self.window_start_ms,
            end_unix_ms: now_ms,
            rate_secs: Some(((now_ms - self.window_start_ms) / 1e3).max(1e-3)),
        };
        let mut summary = self
            .window
            .summary(&span, counters.since(self.last), self.target_hz);
        self.last = counters;
        self.emit(&mut summary);
        self.window.reset();
        self.index += 1;
        self.window_start_ms = now_ms;
    }

    fn finish(mut self) -> Summary {
        // The last (partial) window, then the cumulative line.
        self.roll_window();
        let now_ms = self.anchor.to_unix_ns(Instant::now()) as f64 / 1e6;
        let counters = self.counters();
        let span = Span {
            run: &self.run,
            window: "cumulative",
            index: None,
            start_unix_ms: self.run_start_ms,
            end_unix_ms: now_ms,
            rate_secs: None,
        };
        let mut summary = self
            .cumulative
            .summary(&span, counters.since(self.base), self.target_hz);
        self.emit(&mut summary);
        for slot in &mut self.sinks {
            if let Some(sink) = slot {
                if catch_unwind(AssertUnwindSafe(|| sink.flush())).is_err() {
                    *slot = None;
                }
            }
        }
        summary
    }
}

/// The run id: UTC start time (`YYYYMMDDTHHMMSSZ`) and the process id.
pub(crate) fn run_id() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z-{}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        std::process::id()
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_424), (2025, 12, 2));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
