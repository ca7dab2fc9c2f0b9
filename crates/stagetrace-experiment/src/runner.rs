//! The runner: warm-up, baseline, each level in turn; records and resource
//! samples tagged with their phase and level; progress; restore on every path.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::Value as Json;
use stagetrace::{CallRecord, Figure};
use stagetrace_analyze::stats;

use crate::html::Timeline;
use crate::inject::Injector;
use crate::pipeline::Pipeline;
use crate::plan::{Level, Plan};
use crate::sampler::{now_unix_ms, ResourceSample, Sampler, SamplerCost};
use crate::verdict::{
    self, LevelResult, Obs, PhaseSpan, ResourceSummary, Thresholds, Verdict, COMPONENTS,
};
use crate::ExperimentError;

/// How to run a plan.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Directory for the tagged records, resource samples and the report.
    pub out: PathBuf,
    /// Draw progress bars on stderr (hidden anyway when it is not a terminal).
    pub progress: bool,
    /// Set from outside (Ctrl-C) to stop the run early; everything is restored.
    pub stop: Arc<AtomicBool>,
}

/// What a run produced: everything `--json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentReport {
    /// The plan's name.
    pub name: String,
    /// The factor raised.
    pub factor: &'static str,
    /// Where the files are.
    pub out: String,
    /// True when the run was stopped early (Ctrl-C or a failure); the
    /// verdict covers the levels completed.
    pub interrupted: bool,
    /// Why it stopped early.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_because: Option<String>,
    /// Where the target listened: `proxy` (what the client connects to) and `server`.
    pub addresses: BTreeMap<&'static str, String>,
    /// Every phase on the timeline.
    pub phases: Vec<PhaseSpan>,
    /// Baseline distributions (ms) per figure: n, p50, p90, p99.
    pub baseline: BTreeMap<&'static str, [f64; 4]>,
    /// Baseline resources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_resources: Option<ResourceSummary>,
    /// The thresholds the verdict used.
    pub thresholds: Thresholds,
    /// Each level against the baseline.
    pub levels: Vec<LevelResult>,
    /// The answer.
    pub verdict: Verdict,
    /// The sampler's own cost.
    pub sampler: SamplerCost,
    /// What became of the GPU tracks (devices sampled through NVML, or why not).
    pub gpu: String,
    /// What was restored at the end.
    pub restored: Vec<String>,
    /// The data of the HTML plots (not in `--json`).
    #[serde(skip)]
    pub timeline: Timeline,
    /// Counters: calls completed and failed by the robot, records dropped,
    /// replayed requests (infer factor), burner threads pinned (cpu factor).
    pub counters: BTreeMap<&'static str, u64>,
}

/// Run `plan` against its target.
pub fn run(plan: &Plan, opts: &RunOptions) -> Result<ExperimentReport, ExperimentError> {
    plan.validate()
        .map_err(|e| ExperimentError::Plan(e.to_string()))?;
    std::fs::create_dir_all(&opts.out).map_err(|e| ExperimentError::Io(opts.out.clone(), e))?;
    let rec_path = opts.out.join("records-experiment.jsonl");
    let res_path = opts.out.join("resources.jsonl");
    let mut rec_file = BufWriter::new(
        File::create(&rec_path).map_err(|e| ExperimentError::Io(rec_path.clone(), e))?,
    );
    let mut res_file = BufWriter::new(
        File::create(&res_path).map_err(|e| ExperimentError::Io(res_path.clone(), e))?,
    );

    // Namespaces left by a run that was killed outright (SIGKILL, a crash).
    let stale = crate::netns::remove_stale();
    let mut pipeline = Pipeline::start(&plan.target, &opts.out, plan.factor.kernel)?;
    let mut addresses = BTreeMap::new();
    if let Some(p) = pipeline.proxy.as_ref() {
        addresses.insert("proxy", p.local_addr().to_string());
    }
    addresses.insert("server", pipeline.server_addr.to_string());
    let sampler = Sampler::follow(Arc::clone(&pipeline.pid), plan.sampler.hz)
        .map_err(|e| ExperimentError::Start(format!("the resource sampler: {e}")))?;
    let mut injector = Injector::new(plan.factor.kind, plan.factor.direction);
    if !stale.is_empty() {
        injector.restored.push(format!(
            "namespaces of a dead run deleted: {}",
            stale.join(", ")
        ));
    }
    let mut st = State {
        phases: Vec::new(),
        obs: Vec::new(),
        samples: Vec::new(),
        write_errors: 0,
    };

    let outcome = drive(
        plan,
        opts,
        &pipeline,
        &sampler,
        &mut injector,
        &mut st,
        &mut rec_file,
        &mut res_file,
    );

    // Restore on every path, then stop the target.
    injector.restore(Some(&pipeline));
    let robot = pipeline.shutdown();
    injector.restored.append(&mut pipeline.undone);
    let gpu = sampler.gpu_note().to_owned();
    let (cost, rest) = sampler.stop();
    let end = now_unix_ms();
    if let Some(last) = st.phases.last_mut() {
        last.end_unix_ms = last.end_unix_ms.min(end);
    }
    // Late records and samples.
    for rec in pipeline.records.try_iter() {
        st.tag_record(&rec, &mut rec_file);
    }
    for s in rest {
        st.tag_sample(s, &mut res_file);
    }
    let _ = rec_file.flush();
    let _ = res_file.flush();

    let stopped_because = match outcome {
        Ok(()) => None,
        Err(Stop::Interrupted) => Some("interrupted (Ctrl-C)".to_owned()),
        Err(Stop::Failed(e)) => Some(e),
    };
    if st.phases.iter().all(|p| p.phase != "baseline") {
        if let Some(why) = stopped_because {
            return Err(ExperimentError::Stopped(why));
        }
    }

    st.count_calls();
    let (thresholds, baseline_resources, levels, verdict) = verdict::analyze(
        &st.phases,
        &st.obs,
        &st.samples,
        &plan.verdict,
        plan.factor.kind,
    );
    let baseline = baseline_table(&st);
    let timeline = timeline(&st);
    let mut counters = BTreeMap::new();
    counters.insert("calls_completed", robot.completed);
    counters.insert("calls_failed", robot.failed);
    counters.insert("records_dropped", pipeline.dropped.load(Ordering::Relaxed));
    counters.insert("replayed_requests", injector.replayed.0);
    counters.insert("replayed_failed", injector.replayed.1);
    counters.insert("burners_pinned", injector.pinned);
    if let Some(bytes) = injector.cross_bytes {
        counters.insert("cross_traffic_bytes", bytes);
    }
    counters.insert("write_errors", st.write_errors);
    let report = ExperimentReport {
        name: plan.title(),
        factor: plan.factor.kind.name(),
        out: opts.out.display().to_string(),
        interrupted: stopped_because.is_some(),
        stopped_because,
        addresses,
        phases: st.phases,
        baseline,
        baseline_resources,
        thresholds,
        levels,
        verdict,
        sampler: cost,
        gpu,
        restored: std::mem::take(&mut injector.restored),
        timeline,
        counters,
    };
    let html_path = opts.out.join("experiment.html");
    std::fs::write(&html_path, crate::html::page(&report))
        .map_err(|e| ExperimentError::Io(html_path, e))?;
    let json = serde_json::to_string_pretty(&report).unwrap_or_default();
    let path = opts.out.join("experiment.json");
    std::fs::write(&path, json).map_err(|e| ExperimentError::Io(path, e))?;
    Ok(report)
}

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

enum Stop {
    Interrupted,
    Failed(String),
}

struct State {
    phases: Vec<PhaseSpan>,
    obs: Vec<Obs>,
    samples: Vec<(usize, ResourceSample)>,
    write_errors: u64,
}

impl State {
    /// The phase a wall time falls in.
    fn phase_at(&self, ts: f64) -> Option<usize> {
        self.phases
            .iter()
            .rposition(|p| p.start_unix_ms <= ts)
            .filter(|&i| ts < self.phases[i].end_unix_ms)
    }

    fn tag_record(&mut self, rec: &CallRecord, out: &mut impl Write) {
        let ts_unix_ms = rec.ts_unix_ms();
        let Some(pi) = self.phase_at(ts_unix_ms) else {
            return;
        };
        let p = &self.phases[pi];
        // Settling after a change, or straddling the next change.
        let e2e_ms = rec.ms(Figure::E2e).unwrap_or(0.0);
        let settling = ts_unix_ms < p.settle_until_unix_ms || ts_unix_ms + e2e_ms > p.end_unix_ms;
        let failed = rec.failed == Some(true);
        let g = |v: Option<f64>| v.map_or(f32::NAN, |v| v as f32);
        let vals = [
            g(rec.ms(Figure::Capture)),
            g(rec.ms(Figure::Uplink)),
            g(rec.ms(Figure::Queue)),
            g(rec.ms(Figure::Infer)),
            g(rec.ms(Figure::Downlink)),
            g(rec.ms(Figure::Dispatch)),
            g(rec.ms(Figure::Gap)),
            g(rec.ms(Figure::Net)),
            e2e_ms as f32,
        ];
        self.obs.push(Obs {
            ts_ms: ts_unix_ms,
            phase: pi,
            settling,
            failed,
            vals,
        });
        let mut obj = serde_json::to_value(rec).unwrap_or(Json::Null);
        if let Json::Object(m) = &mut obj {
            m.insert("phase".into(), p.phase.clone().into());
            m.insert("level".into(), p.level.into());
            if settling {
                m.insert("settling".into(), true.into());
            }
        }
        if writeln!(out, "{obj}").is_err() {
            self.write_errors += 1;
        }
    }

    fn tag_sample(&mut self, s: ResourceSample, out: &mut impl Write) {
        let Some(pi) = self.phase_at(s.ts_unix_ms) else {
            return;
        };
        let p = &self.phases[pi];
        let mut obj = serde_json::to_value(&s).unwrap_or(Json::Null);
        if let Json::Object(m) = &mut obj {
            m.insert("phase".into(), p.phase.clone().into());
            m.insert("level".into(), p.level.into());
        }
        if writeln!(out, "{obj}").is_err() {
            self.write_errors += 1;
        }
        if s.ts_unix_ms >= p.settle_until_unix_ms {
            self.samples.push((pi, s));
        }
    }

    fn counted(&self, pi: usize) -> usize {
        self.obs
            .iter()
            .filter(|o| o.phase == pi && !o.settling && !o.failed)
            .count()
    }

    fn count_calls(&mut self) {
        for pi in 0..self.phases.len() {
            let total = self.obs.iter().filter(|o| o.phase == pi).count();
            let counted = self.counted(pi);
            self.phases[pi].calls = counted as u64;
            self.phases[pi].excluded_calls = (total - counted) as u64;
        }
    }
}

fn baseline_table(st: &State) -> BTreeMap<&'static str, [f64; 4]> {
    let mut t = BTreeMap::new();
    let Some(bi) = st.phases.iter().position(|p| p.phase == "baseline") else {
        return t;
    };
    for (c, name) in COMPONENTS.iter().enumerate() {
        let mut v: Vec<f32> = st
            .obs
            .iter()
            .filter(|o| o.phase == bi && !o.settling && !o.failed && o.vals[c].is_finite())
            .map(|o| o.vals[c])
            .collect();
        if v.is_empty() {
            continue;
        }
        v.sort_unstable_by(f32::total_cmp);
        t.insert(
            *name,
            [
                v.len() as f64,
                stats::quantile(&v, 0.5),
                stats::quantile(&v, 0.9),
                stats::quantile(&v, 0.99),
            ],
        );
    }
    t
}

/// Windowed p90 per drawn stage (0.5 s windows) and the resource tracks.
fn timeline(st: &State) -> Timeline {
    let t0 = st
        .phases
        .iter()
        .find(|p| p.phase == "baseline")
        .or(st.phases.first())
        .map_or(0.0, |p| p.start_unix_ms);
    let mut windows: BTreeMap<i64, Vec<&Obs>> = BTreeMap::new();
    for o in st.obs.iter().filter(|o| !o.failed && o.ts_ms >= t0) {
        windows
            .entry(((o.ts_ms - t0) / 500.0).floor() as i64)
            .or_default()
            .push(o);
    }
    let windows = windows
        .into_iter()
        .map(|(w, obs)| {
            let mut vals = [f64::NAN; 7];
            for (k, v) in vals.iter_mut().enumerate() {
                let mut col: Vec<f32> = obs
                    .iter()
                    .map(|o| o.vals[k])
                    .filter(|v| v.is_finite())
                    .collect();
                col.sort_unstable_by(f32::total_cmp);
                *v = stats::quantile(&col, 0.9);
            }
            (w as f64 * 0.5, vals)
        })
        .collect();
    let nan = f64::NAN;
    let resources = st
        .samples
        .iter()
        .filter(|(_, s)| s.ts_unix_ms >= t0)
        .map(|(_, s)| {
            (
                (s.ts_unix_ms - t0) / 1e3,
                [
                    s.cpu_total_pct.unwrap_or(nan),
                    s.psi_cpu_some_pct.unwrap_or(nan),
                    s.run_delay_ms_per_s.map_or(nan, |v| v / 10.0),
                    s.target_cpu_pct.unwrap_or(nan),
                    s.gpus
                        .iter()
                        .filter_map(|g| g.util_gpu_pct)
                        .reduce(f64::max)
                        .unwrap_or(nan),
                ],
            )
        })
        .collect();
    Timeline {
        t0_unix_ms: t0,
        windows,
        resources,
    }
}

/// The live line: p50/p99 of each stage in the current phase.
fn live_message(st: &State, pi: usize) -> String {
    let mut parts = Vec::new();
    for (c, name) in COMPONENTS.iter().enumerate() {
        if *name == "net" {
            continue;
        }
        let mut v: Vec<f32> = st
            .obs
            .iter()
            .rev()
            .take_while(|o| o.phase == pi)
            .filter(|o| !o.settling && !o.failed && o.vals[c].is_finite())
            .map(|o| o.vals[c])
            .collect();
        if v.is_empty() {
            continue;
        }
        v.sort_unstable_by(f32::total_cmp);
        parts.push(format!(
            "{name} {:.1}/{:.1}",
            stats::quantile(&v, 0.5),
            stats::quantile(&v, 0.99)
        ));
    }
    if parts.is_empty() {
        "waiting for calls".into()
    } else {
        format!("p50/p99 ms: {}", parts.join("  "))
    }
}

#[allow(clippy::too_many_arguments)]
fn drive(
    plan: &Plan,
    opts: &RunOptions,
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
        let bar = if opts.progress {
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
            if opts.stop.load(Ordering::SeqCst) {
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

/// The default output directory: `runs/experiment-<unix seconds>`.
pub fn default_out_dir() -> PathBuf {
    let secs = (now_unix_ms() / 1e3) as u64;
    Path::new("runs").join(format!("experiment-{secs}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_template_parses() {
        assert!(ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
    }
}
