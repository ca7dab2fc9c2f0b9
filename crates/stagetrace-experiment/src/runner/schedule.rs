//! The schedule: warm-up, baseline, each level in turn, with a progress bar
//! per phase and the live percentiles beneath it.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::tables::live_message;
use super::tag::State;
use crate::inject::Injector;
use crate::pipeline::Pipeline;
use crate::plan::{Level, Plan};
use crate::sampler::{now_unix_ms, Sampler};
use crate::verdict::PhaseSpan;

/// A bar per phase with its ETA; the live p50/p99 of each stage beneath.
const BAR_TEMPLATE: &str = "{prefix:<28} [{bar:30}] {percent:>3}% ETA {eta:>4}\n  {wide_msg}";

/// One phase of the schedule.
struct Step {
    phase: String,
    level: usize,
    label: String,
    lvl: Option<Level>,
    settle_s: f64,
    hold_s: Option<f64>,
    calls: Option<u64>,
}

impl Step {
    /// How long the phase lasts and the most it may last. By calls: a
    /// generous limit so a stuck target cannot hang the run.
    fn bounds(&self, hz: f64) -> (Duration, Duration) {
        match (self.hold_s, self.calls) {
            (Some(s), _) => (Duration::from_secs_f64(s), Duration::from_secs_f64(s)),
            (None, Some(c)) => {
                let nominal = Duration::from_secs_f64(c as f64 / hz + self.settle_s);
                (nominal, nominal * 3 + Duration::from_secs(10))
            }
            (None, None) => (Duration::ZERO, Duration::ZERO),
        }
    }

    /// Whether the phase is over after `elapsed` with `done_calls` counted.
    fn finished(&self, elapsed: Duration, done_calls: u64, len: Duration, limit: Duration) -> bool {
        match (self.hold_s, self.calls) {
            (Some(_), _) => elapsed >= len,
            (None, Some(c)) => done_calls >= c || elapsed >= limit,
            (None, None) => true,
        }
    }
}

/// Why the schedule ended early.
pub(crate) enum Stop {
    /// Ctrl-C.
    Interrupted,
    /// The client stopped or a level could not be applied.
    Failed(String),
}

/// Where arriving records and samples come from and where their tagged
/// lines go.
struct Feed<'a, R, S> {
    pipeline: &'a Pipeline,
    sampler: &'a Sampler,
    st: &'a mut State,
    rec_file: &'a mut R,
    res_file: &'a mut S,
}

impl<R: Write, S: Write> Feed<'_, R, S> {
    /// Tag the records that arrived.
    fn tag_records(&mut self) {
        for rec in self.pipeline.records.try_iter() {
            self.st.tag_record(&rec, &mut *self.rec_file);
        }
    }

    /// Tag the records and resource samples that arrived.
    fn tag_arrivals(&mut self) {
        self.tag_records();
        for s in self.sampler.drain() {
            self.st.tag_sample(s, &mut *self.res_file);
        }
    }
}

/// Runs the schedule: warm-up, baseline, each level in turn, tagging what
/// arrives meanwhile. `progress` draws the bars; `stop` ends it early.
#[allow(clippy::too_many_arguments)]
pub(crate) fn drive(
    plan: &Plan,
    progress: bool,
    stop: &AtomicBool,
    pipeline: &Pipeline,
    sampler: &Sampler,
    injector: &mut Injector,
    st: &mut State,
    rec_file: &mut impl Write,
    res_file: &mut impl Write,
) -> Result<(), Stop> {
    let schedule = schedule_of(plan);
    let phases_total = schedule.len();
    let style = ProgressStyle::with_template(BAR_TEMPLATE)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let mut feed = Feed {
        pipeline,
        sampler,
        st,
        rec_file,
        res_file,
    };
    for (n, step) in schedule.into_iter().enumerate() {
        if let Some(l) = &step.lvl {
            injector
                .apply(pipeline, l)
                .map_err(|e| Stop::Failed(e.to_string()))?;
        }
        let pi = open_phase(feed.st, &step);
        let began = Instant::now();
        let (len, limit) = step.bounds(plan.target.call_hz());
        let bar = if progress {
            let b = ProgressBar::with_draw_target(
                Some(step.calls.unwrap_or(len.as_millis() as u64)),
                ProgressDrawTarget::stderr(),
            );
            b.set_style(style.clone());
            b.set_prefix(format!("{}/{phases_total} {}", n + 1, step.label));
            b
        } else {
            ProgressBar::hidden()
        };
        hold_phase(&step, pi, began, (len, limit), &bar, stop, &mut feed)?;
        bar.finish_with_message(live_message(feed.st, pi));
    }
    if let Some(last) = feed.st.phases.last_mut() {
        last.end_unix_ms = now_unix_ms();
    }
    // Let the calls in flight at the end arrive.
    std::thread::sleep(Duration::from_millis(300));
    feed.tag_records();
    Ok(())
}

/// The phases of `plan` in order: warm-up (when asked for), baseline, each
/// level.
fn schedule_of(plan: &Plan) -> Vec<Step> {
    let step = |phase: &str, level, label: String, lvl, settle_s, hold_s, calls| Step {
        phase: phase.to_owned(),
        level,
        label,
        lvl,
        settle_s,
        hold_s,
        calls,
    };
    let mut schedule = Vec::new();
    if plan.target.warmup_s > 0.0 {
        let w = Some(plan.target.warmup_s);
        schedule.push(step("warmup", 0, "warm-up".into(), None, 0.0, w, None));
    }
    let b = &plan.baseline;
    schedule.push(step(
        "baseline",
        0,
        "baseline".into(),
        None,
        0.0,
        b.hold_s,
        b.calls,
    ));
    for (i, l) in plan.levels().iter().enumerate() {
        let f = &plan.factor;
        let label = l.label(f.kind, f.direction);
        schedule.push(step(
            "level",
            i + 1,
            label,
            Some(l.clone()),
            f.settle_s,
            f.hold_s,
            f.calls,
        ));
    }
    schedule
}

/// Close the previous phase and open `step`'s from now; returns its index.
fn open_phase(st: &mut State, step: &Step) -> usize {
    let start = now_unix_ms();
    if let Some(prev) = st.phases.last_mut() {
        prev.end_unix_ms = start;
    }
    st.phases.push(PhaseSpan {
        phase: step.phase.clone(),
        level: step.level,
        label: step.label.clone(),
        start_unix_ms: start,
        settle_until_unix_ms: start + step.settle_s * 1e3,
        end_unix_ms: f64::INFINITY,
        calls: 0,
        excluded_calls: 0,
    });
    st.phases.len() - 1
}

/// Hold phase `pi` (begun at `began`) until it is over: tag what arrives
/// every 100 ms and move the bar; Ctrl-C or a stopped client ends it early.
fn hold_phase(
    step: &Step,
    pi: usize,
    began: Instant,
    (len, limit): (Duration, Duration),
    bar: &ProgressBar,
    stop: &AtomicBool,
    feed: &mut Feed<'_, impl Write, impl Write>,
) -> Result<(), Stop> {
    loop {
        std::thread::sleep(Duration::from_millis(100));
        feed.tag_arrivals();
        let elapsed = began.elapsed();
        let done_calls = feed.st.counted(pi) as u64;
        match step.calls.filter(|_| step.hold_s.is_none()) {
            Some(_) => bar.set_position(done_calls),
            None => bar.set_position(elapsed.as_millis() as u64),
        }
        bar.set_message(live_message(feed.st, pi));
        if stop.load(Ordering::SeqCst) {
            bar.abandon_with_message("interrupted");
            return Err(Stop::Interrupted);
        }
        if let Some(why) = feed.pipeline.client_stopped() {
            bar.abandon_with_message("the client stopped");
            return Err(Stop::Failed(why));
        }
        if step.finished(elapsed, done_calls, len, limit) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_template_parses() {
        assert!(ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
    }
}
