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

/// Why the schedule ended early.
pub(crate) enum Stop {
    /// Ctrl-C.
    Interrupted,
    /// The client stopped or a level could not be applied.
    Failed(String),
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
    let hz = plan.target.hz;
    let levels = plan.levels();
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
    for (i, l) in levels.iter().enumerate() {
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
    let phases_total = schedule.len();
    let style = ProgressStyle::with_template(BAR_TEMPLATE)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");

    for (n, step) in schedule.into_iter().enumerate() {
        let Step {
            phase,
            level,
            label,
            lvl,
            settle_s,
            hold_s,
            calls,
        } = step;
        if let Some(l) = &lvl {
            injector
                .apply(pipeline, l)
                .map_err(|e| Stop::Failed(e.to_string()))?;
        }
        let start = now_unix_ms();
        if let Some(prev) = st.phases.last_mut() {
            prev.end_unix_ms = start;
        }
        st.phases.push(PhaseSpan {
            phase: phase.clone(),
            level,
            label: label.clone(),
            start_unix_ms: start,
            settle_until_unix_ms: start + settle_s * 1e3,
            end_unix_ms: f64::INFINITY,
            calls: 0,
            excluded_calls: 0,
        });
        let pi = st.phases.len() - 1;
        let began = Instant::now();
        // By calls: a generous limit so a stuck target cannot hang the run.
        let (len, limit) = match (hold_s, calls) {
            (Some(s), _) => (Duration::from_secs_f64(s), Duration::from_secs_f64(s)),
            (None, Some(c)) => {
                let nominal = Duration::from_secs_f64(c as f64 / hz + settle_s);
                (nominal, nominal * 3 + Duration::from_secs(10))
            }
            (None, None) => (Duration::ZERO, Duration::ZERO),
        };
        let bar = if progress {
            let b = ProgressBar::with_draw_target(
                Some(calls.unwrap_or(len.as_millis() as u64)),
                ProgressDrawTarget::stderr(),
            );
            b.set_style(style.clone());
            b.set_prefix(format!("{}/{phases_total} {label}", n + 1));
            b
        } else {
            ProgressBar::hidden()
        };
        loop {
            std::thread::sleep(Duration::from_millis(100));
            for rec in pipeline.records.try_iter() {
                st.tag_record(&rec, rec_file);
            }
            for s in sampler.drain() {
                st.tag_sample(s, res_file);
            }
            let elapsed = began.elapsed();
            let done_calls = st.counted(pi) as u64;
            match calls.filter(|_| hold_s.is_none()) {
                Some(_) => bar.set_position(done_calls),
                None => bar.set_position(elapsed.as_millis() as u64),
            }
            bar.set_message(live_message(st, pi));
            if stop.load(Ordering::SeqCst) {
                bar.abandon_with_message("interrupted");
                return Err(Stop::Interrupted);
            }
            if let Some(why) = pipeline.client_stopped() {
                bar.abandon_with_message("the client stopped");
                return Err(Stop::Failed(why));
            }
            let finished = match (hold_s, calls) {
                (Some(_), _) => elapsed >= len,
                (None, Some(c)) => done_calls >= c || elapsed >= limit,
                (None, None) => true,
            };
            if finished {
                break;
            }
        }
        bar.finish_with_message(live_message(st, pi));
    }
    if let Some(last) = st.phases.last_mut() {
        last.end_unix_ms = now_unix_ms();
    }
    // Let the calls in flight at the end arrive.
    std::thread::sleep(Duration::from_millis(300));
    for rec in pipeline.records.try_iter() {
        st.tag_record(&rec, rec_file);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_template_parses() {
        assert!(ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
    }
}
