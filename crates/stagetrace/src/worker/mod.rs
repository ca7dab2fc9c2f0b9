//! The worker thread (`docs/architecture.md` §4): drains the queue from the
//! app threads, turns each call into a [`CallRecord`](crate::record::CallRecord)
//! ([`convert`]), adds it to the rolling and cumulative summaries and hands
//! it to every [`RecordSink`] — the JSONL files ([`files`]) among them.

pub(crate) mod convert;
mod exec_ack;
pub(crate) mod files;
mod held;
mod hop_spans;
mod run_id;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::advice::AdviceFor;
use crate::call_state::PackedTiming;
use crate::clock::{ClockMode, WallClock};
use crate::health::Health;
use crate::message::{Msg, RawCall};
use crate::sink::{Loss, RecordSink};
use crate::stamp::Calibration;
use crate::summary::{Accum, Counters, DeadlineTracker, Span, Summary, WindowSummary};

use convert::Converter;
use held::{Answer, Held, Ready};
pub(crate) use run_id::run_id;

/// How often the worker looks at the queue. It sleeps in between rather
/// than blocking in `recv`: a receiver blocked in `recv` makes every
/// app-thread `try_send` wake it, a futex syscall on the app thread (about
/// 5 µs in a VM, several times the layer's own cost per call when calls come
/// at control-loop rates and the worker is always asleep). Records reach the
/// outputs at most this much later, while calls keep coming.
const POLL: Duration = Duration::from_millis(10);
/// How often the fast clock's calibration against `Instant` is refined.
const REFINE_CALIBRATION: Duration = Duration::from_secs(1);

/// The longest sleep between looks once calls come slowly: each look that
/// finds fewer than a 64th of the queue's capacity doubles the sleep from
/// `POLL` up to this, and a look that finds more brings it back to `POLL`.
/// A 30 Hz loop then costs the worker 20 wake-ups a second rather than 100,
/// which on a machine running many robots was most of the worker's CPU
/// time (`stagetrace-otlp/benches/fleet_sim.rs`). Records reach the outputs
/// (and a shutdown the worker) at most this much later; a burst after a
/// quiet spell fills at most this long of its rate of the queue (at the
/// default 4096: over 80 000 calls a second before any is dropped).
const IDLE_POLL_MAX: Duration = Duration::from_millis(50);

/// The sleep after a look that found `found` calls, following a sleep of
/// `slept`, for a queue of `capacity`.
fn next_poll(slept: Duration, found: usize, capacity: usize) -> Duration {
    if found >= (capacity / 64).max(1) {
        POLL
    } else {
        (slept * 2).min(IDLE_POLL_MAX)
    }
}

/// Everything the worker needs, from the builder.
pub(crate) struct WorkerConfig {
    pub(crate) run: String,
    pub(crate) window: Duration,
    pub(crate) target_hz: Option<f64>,
    pub(crate) warmup_calls: u64,
    pub(crate) warmup_duration: Option<Duration>,
    pub(crate) clock_mode: ClockMode,
    pub(crate) queue_capacity: usize,
    /// Which API the warnings' fixes name.
    pub(crate) advice: AdviceFor,
    /// Every sink, the file sink (when there is one) first.
    pub(crate) sinks: Vec<Box<dyn RecordSink>>,
}

/// What the worker hands the flush guard when it is done.
pub(crate) struct Finished {
    /// The cumulative summary.
    pub(crate) summary: Summary,
    /// What was lost for good, one entry per part that lost any (the
    /// layer's queue, then each sink): the guard reports each once.
    pub(crate) losses: Vec<Loss>,
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
    queue_capacity: usize,
    advice: AdviceFor,
    wall: WallClock,
    /// When the fast clock's calibration was last refined.
    refined: Instant,
    cal: Calibration,
    converter: Converter,
    window: Accum,
    cumulative: Accum,
    index: u64,
    window_start_ms: f64,
    run_start_ms: f64,
    base: Counters,
    last: Counters,
    /// `None`: the sink panicked and is disabled.
    sinks: Vec<Option<Box<dyn RecordSink>>>,
    health: Arc<Health>,
    once: Once,
    /// Records waiting for their server's send wait (`held.rs`).
    held: Held,
}

impl Worker {
    pub(crate) fn new(cfg: WorkerConfig, health: Arc<Health>) -> Self {
        let mut wall = WallClock::new();
        let now_ms = wall.now_unix_ns() as f64 / 1e6;
        let deadline = cfg.target_hz.map(DeadlineTracker::new);
        let period_ns = deadline.as_ref().map(DeadlineTracker::period_ns);
        let base = health.counters();
        Worker {
            cfg_window: cfg.window,
            target_hz: cfg.target_hz,
            queue_capacity: cfg.queue_capacity,
            advice: cfg.advice,
            wall,
            refined: Instant::now(),
            cal: Calibration::unmeasured(),
            converter: Converter::new(
                cfg.clock_mode,
                deadline,
                cfg.warmup_calls,
                cfg.warmup_duration,
                Arc::clone(&health),
            ),
            window: Accum::new(period_ns),
            cumulative: Accum::new(period_ns),
            index: 0,
            window_start_ms: now_ms,
            run_start_ms: now_ms,
            base,
            last: base,
            sinks: cfg.sinks.into_iter().map(Some).collect(),
            health,
            once: Once::default(),
            held: Held::default(),
            run: cfg.run,
        }
    }

    /// The worker loop: runs until a shutdown message or every sender is gone.
    pub(crate) fn run(mut self, rx: Receiver<Msg>, done: Sender<Finished>) {
        // Calls queue up meanwhile; nothing is converted before this.
        self.cal = Calibration::measure();
        let mut next_window = Instant::now() + self.cfg_window;
        let mut poll = POLL;
        loop {
            let mut shutdown = false;
            let mut calls = 0usize;
            loop {
                match rx.try_recv() {
                    Ok(Msg::Call(raw)) => {
                        self.on_call(&raw);
                        calls += 1;
                    }
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
            self.release_held(false);
            if calls > 0 {
                self.drained();
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
            poll = next_poll(poll, calls, self.queue_capacity);
            std::thread::sleep(poll.min(next_window.saturating_duration_since(Instant::now())));
        }
        let finished = self.finish();
        let _ = done.send(finished);
    }

    fn refine_calibration(&mut self) {
        if self.refined.elapsed() >= REFINE_CALIBRATION {
            self.refined = Instant::now();
            self.cal.refine();
        }
    }

    fn on_call(&mut self, raw: &RawCall) {
        self.refine_calibration();
        let (start, end) = (self.cal.instant(raw.state.start), self.cal.instant(raw.end));
        // The call's own anchor: its start on the wall clock as read now.
        let anchor = self.wall.anchor_at(start);
        let (rec, obs) = self.converter.convert(raw, self.cal, &anchor);
        let drift = self.converter.drift();
        self.window.note_drift(drift);
        self.cumulative.note_drift(drift);
        let transport = raw.state.transport.as_ref();
        let timing = transport
            .and_then(|t| t.timing.as_ref())
            .map(PackedTiming::unpack);
        let answer = Answer {
            peer: transport.map(|t| t.stamps.peer.as_str()),
            answered: timing.is_some_and(|t| t.has_times()),
            prev_tx_wait_ns: timing.and_then(|t| t.prev_tx_wait_ns),
        };
        let ready = Ready {
            rec,
            start,
            end,
            obs,
        };
        for r in self.held.admit(ready, answer, Instant::now()) {
            self.publish(r);
        }
    }

    /// A complete record into the summaries and every sink.
    fn publish(&mut self, r: Ready) {
        self.window.add(&r.rec, r.start, r.end, r.obs);
        self.cumulative.add(&r.rec, r.start, r.end, r.obs);
        each_sink(&mut self.sinks, true, |sink| sink.on_record(&r.rec));
    }

    /// Held records whose next answer did not come in time, and (`all`)
    /// every held one.
    fn release_held(&mut self, all: bool) {
        let out = if all {
            self.held.release_all()
        } else {
            self.held.expired(Instant::now())
        };
        let released = !out.is_empty();
        for r in out {
            self.publish(r);
        }
        if released && !all {
            self.drained();
        }
    }

    /// Every queued call is handed over: sinks write out what they buffer.
    fn drained(&mut self) {
        each_sink(&mut self.sinks, true, |sink| sink.on_drained());
    }

    fn report_once(&mut self) {
        let c = self.health.counters();
        if c.queue_drops > 0 && !self.once.drops {
            self.once.drops = true;
            eprintln!(
                "stagetrace: calls are being dropped because the queue to the worker thread is full \
                 (capacity {}); they are counted as queue_drops. Fix: {} or make record sinks faster.",
                self.queue_capacity,
                self.advice.raise_queue()
            );
        }
        // A service's own spans (a relay forwarding inside its handler)
        // continue another process's call: counted, not the app's to fix.
        let orphans = Health::get(&self.health.ignored_spans)
            .saturating_sub(Health::get(&self.health.service_spans));
        if orphans > 0 && !self.once.ignored {
            self.once.ignored = true;
            eprintln!(
                "stagetrace: stage spans closed outside any call span; they are ignored and counted \
                 as ignored_spans. Fix: {}.",
                self.advice.open_call()
            );
        }
        if Health::get(&self.health.unknown_stage) > 0 && !self.once.unknown {
            self.once.unknown = true;
            eprintln!(
                "stagetrace: a span has a `stage` field naming no stage; it is ignored and counted as \
                 ignored_spans. Fix: use stage = \"capture\", \"transport\", \"queue\", \"infer\" or \"dispatch\"."
            );
        }
        if Health::get(&self.health.context_misses) > 0 && !self.once.context {
            self.once.context = true;
            eprintln!(
                "stagetrace: .share_trace_context(...) is set but the other layer had no trace \
                 context for a call or transport span; those calls got trace ids of their own and \
                 are exported as separate traces. Fix: register that layer before StageLayer \
                 (`registry().with(otel_layer).with(stage_layer)`) and let its filter enable the \
                 call and stage spans."
            );
        }
        if c.empty_calls > 0 && !self.once.empty {
            self.once.empty = true;
            eprintln!(
                "stagetrace: a call closed with no stage inside (counted as empty_calls). Fix: {}.",
                self.advice.name_stages()
            );
        }
    }

    fn emit(&mut self, summary: &mut WindowSummary) {
        for sink in self.sinks.iter().flatten() {
            if let Ok(counters) = catch_unwind(AssertUnwindSafe(|| sink.counters())) {
                for (name, value) in counters {
                    *summary.sink_counters.entry(name.to_owned()).or_default() += value;
                }
            }
        }
        each_sink(&mut self.sinks, true, |sink| sink.on_window(summary));
    }

    fn roll_window(&mut self) {
        // Before the counters are read, so lines a sink failed to write
        // count in this window.
        self.drained();
        self.refined = Instant::now();
        self.cal.refine();
        self.report_once();
        let now_ms = self.wall.now_unix_ns() as f64 / 1e6;
        let counters = self.health.counters();
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
        summary.wall_slew_ppm = self.wall.measured_ppm();
        self.last = counters;
        self.emit(&mut summary);
        self.window.reset();
        self.index += 1;
        self.window_start_ms = now_ms;
    }

    fn finish(mut self) -> Finished {
        self.release_held(true);
        // Sinks flush first (each within its own bound: the OTLP exporter's
        // is its shutdown deadline), so that the counters the last window
        // and the cumulative line report include what the flush delivered,
        // failed or gave up on; written before it, they missed all of that.
        each_sink(&mut self.sinks, false, |sink| sink.flush());
        // The last (partial) window, then the cumulative line.
        self.roll_window();
        let now_ms = self.wall.now_unix_ns() as f64 / 1e6;
        let counters = self.health.counters();
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
        summary.wall_slew_ppm = self.wall.measured_ppm();
        self.emit(&mut summary);
        // Again, for what the two summaries added to a sink's buffers.
        each_sink(&mut self.sinks, false, |sink| sink.flush());
        let losses = self.losses();
        Finished { summary, losses }
    }

    /// What was lost for good, read after the last flush so that it is
    /// final: the calls the app threads' queue dropped, then each sink's own
    /// report (the file sink's unwritten lines among them).
    fn losses(&self) -> Vec<Loss> {
        let mut losses = Vec::new();
        let drops = self.health.counters().since(self.base).queue_drops;
        if drops > 0 {
            losses.push(Loss {
                lost: drops,
                message: format!(
                    "{drops} calls were dropped because the queue to the worker thread was full \
                     (capacity {}): they are in no record, summary or sink (counted as \
                     queue_drops). Fix: {} or make record sinks faster.",
                    self.queue_capacity,
                    self.advice.raise_queue()
                ),
            });
        }
        for sink in self.sinks.iter().flatten() {
            if let Ok(Some(loss)) = catch_unwind(AssertUnwindSafe(|| sink.loss_report())) {
                losses.push(loss);
            }
        }
        losses
    }
}

/// Calls `f` on every sink still enabled. A sink that panics is disabled
/// (and, with `announce`, reported once); the others keep running.
fn each_sink(
    sinks: &mut [Option<Box<dyn RecordSink>>],
    announce: bool,
    mut f: impl FnMut(&mut dyn RecordSink),
) {
    for slot in sinks {
        if let Some(sink) = slot {
            if catch_unwind(AssertUnwindSafe(|| f(sink.as_mut()))).is_err() {
                if announce {
                    eprintln!("stagetrace: a record sink panicked; it is disabled, the other outputs keep running");
                }
                *slot = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{next_poll, IDLE_POLL_MAX, POLL};

    /// A 30 Hz loop (a call or none per look) backs the worker off to a look
    /// every 50 ms; a look that finds a 64th of the queue brings back 10 ms.
    #[test]
    fn the_worker_backs_off_while_calls_come_slowly() {
        let ms = Duration::from_millis;
        let mut slept = POLL;
        let mut sleeps = Vec::new();
        for found in [1, 0, 1, 2, 1] {
            slept = next_poll(slept, found, 4096);
            sleeps.push(slept);
        }
        assert_eq!(sleeps, [ms(20), ms(40), ms(50), ms(50), ms(50)]);
        assert_eq!(IDLE_POLL_MAX, ms(50));
        assert_eq!(next_poll(ms(50), 64, 4096), POLL);
        assert_eq!(next_poll(ms(50), 63, 4096), ms(50));
        // A small queue: every call found counts as busy.
        assert_eq!(next_poll(ms(40), 1, 16), POLL);
        assert_eq!(next_poll(ms(40), 0, 16), ms(50));
    }
}
