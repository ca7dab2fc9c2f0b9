//! The runner: warm-up, baseline, each level in turn; records and resource
//! samples tagged with their phase and level; progress; restore on every path.

mod schedule;
mod tables;
mod tag;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use stagetrace_sim::RobotStats;

use crate::error::ExperimentError;
use crate::inject::Injector;
use crate::pipeline::Pipeline;
use crate::plan::Plan;
use crate::report::ExperimentReport;
use crate::sampler::{now_unix_ms, Sampler, SamplerCost};
use crate::verdict::{self, ExperimentVerdict, LevelResult, ResourceSummary, Thresholds};

use schedule::Stop;
use tag::State;

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

/// Run `plan` against its target.
pub fn run(plan: &Plan, opts: &RunOptions) -> Result<ExperimentReport, ExperimentError> {
    plan.validate()
        .map_err(|e| ExperimentError::Plan(e.to_string()))?;
    let (mut rec_file, mut res_file) = create_outputs(&opts.out)?;
    let (mut pipeline, sampler, mut injector) = start_target(plan, &opts.out)?;
    let addresses = addresses_of(&pipeline);
    let mut st = State::new();

    let outcome = schedule::drive(
        plan,
        opts.progress,
        &opts.stop,
        &pipeline,
        &sampler,
        &mut injector,
        &mut st,
        &mut rec_file,
        &mut res_file,
    );

    let (robot, gpu, cost) = wind_down(
        &mut pipeline,
        sampler,
        &mut injector,
        &mut st,
        &mut rec_file,
        &mut res_file,
    );
    let stopped_because = stopped_because(outcome, &st)?;

    st.count_calls();
    let (thresholds, baseline_resources, levels, verdict) = judge(plan, &st);
    let baseline = tables::baseline_table(&st);
    let timeline = tables::timeline(&st);
    let counters = counters_of(&robot, &pipeline, &injector, &st);
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
    write_report(&opts.out, &report)?;
    Ok(report)
}

/// Start the target, the resource sampler following it and the injector;
/// namespaces a run killed outright (SIGKILL, a crash) left are deleted
/// first and said so among what was restored.
fn start_target(plan: &Plan, out: &Path) -> Result<(Pipeline, Sampler, Injector), ExperimentError> {
    let stale = crate::netns::remove_stale();
    let pipeline = Pipeline::start(&plan.target, out, plan.factor.kernel)?;
    let sampler = start_sampler(plan, &pipeline)?;
    let mut injector = Injector::new(plan.factor.kind, plan.factor.direction);
    if !stale.is_empty() {
        injector.restored.push(format!(
            "namespaces of a dead run deleted: {}",
            stale.join(", ")
        ));
    }
    Ok((pipeline, sampler, injector))
}

/// Why the run stopped early, `None` when it ran to the end; a run stopped
/// before its baseline has nothing to compare and is an error.
fn stopped_because(
    outcome: Result<(), Stop>,
    st: &State,
) -> Result<Option<String>, ExperimentError> {
    let why = match outcome {
        Ok(()) => None,
        Err(Stop::Interrupted) => Some("interrupted (Ctrl-C)".to_owned()),
        Err(Stop::Failed(e)) => Some(e),
    };
    if st.phases.iter().all(|p| p.phase != "baseline") {
        if let Some(why) = why {
            return Err(ExperimentError::Stopped(why));
        }
    }
    Ok(why)
}

/// The verdict on the tagged calls and samples: the thresholds, the
/// baseline's resources, each level against the baseline, and the verdict
/// — with LeRobot's action queue judged like a stage.
fn judge(
    plan: &Plan,
    st: &State,
) -> (
    Thresholds,
    Option<ResourceSummary>,
    Vec<LevelResult>,
    ExperimentVerdict,
) {
    let (thresholds, baseline_resources, mut levels, mut verdict) =
        verdict::analyze(&st.phases, &st.obs, &st.samples, &plan.verdict);
    // LeRobot's async pair: its action queue moves like a stage.
    verdict::attach_action_queue(
        (&st.phases, &st.obs),
        plan.target.hz,
        (&thresholds, baseline_resources.as_ref()),
        &mut levels,
        &mut verdict,
    );
    (thresholds, baseline_resources, levels, verdict)
}

/// Create `out` and the tagged records and resource files in it.
fn create_outputs(out: &Path) -> Result<(BufWriter<File>, BufWriter<File>), ExperimentError> {
    std::fs::create_dir_all(out).map_err(|e| ExperimentError::Io(out.to_path_buf(), e))?;
    let rec_path = out.join("records-experiment.jsonl");
    let res_path = out.join("resources.jsonl");
    let rec_file = BufWriter::new(
        File::create(&rec_path).map_err(|e| ExperimentError::Io(rec_path.clone(), e))?,
    );
    let res_file = BufWriter::new(
        File::create(&res_path).map_err(|e| ExperimentError::Io(res_path.clone(), e))?,
    );
    Ok((rec_file, res_file))
}

/// Where the target listens: the proxy (when there is one) and the server.
fn addresses_of(pipeline: &Pipeline) -> BTreeMap<&'static str, String> {
    let mut addresses = BTreeMap::new();
    if let Some(p) = pipeline.proxy.as_ref() {
        addresses.insert("proxy", p.local_addr().to_string());
    }
    addresses.insert("server", pipeline.server_addr.to_string());
    addresses
}

/// The resource sampler, following the target's process and the kernel
/// bottleneck's namespaces (when there are any).
fn start_sampler(plan: &Plan, pipeline: &Pipeline) -> Result<Sampler, ExperimentError> {
    let netns = pipeline
        .kernel
        .as_ref()
        .and_then(|k| k.lock().ok().map(|k| k.watch()))
        .unwrap_or_default();
    Sampler::follow_in(Arc::clone(&pipeline.pid), plan.sampler.hz, netns)
        .map_err(|e| ExperimentError::Start(format!("the resource sampler: {e}")))
}

/// Restore what the injector changed, stop the target and the sampler, and
/// tag what arrived late. Returns the robot's counts, the GPU note and the
/// sampler's cost.
fn wind_down(
    pipeline: &mut Pipeline,
    sampler: Sampler,
    injector: &mut Injector,
    st: &mut State,
    rec_file: &mut impl Write,
    res_file: &mut impl Write,
) -> (RobotStats, String, SamplerCost) {
    // Restore on every path, then stop the target.
    injector.restore(Some(&*pipeline));
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
        st.tag_record(&rec, rec_file);
    }
    for s in rest {
        st.tag_sample(s, res_file);
    }
    let _ = rec_file.flush();
    let _ = res_file.flush();
    (robot, gpu, cost)
}

/// The report's counters: calls, dropped records, replays, pinned burners,
/// cross traffic and write errors.
fn counters_of(
    robot: &RobotStats,
    pipeline: &Pipeline,
    injector: &Injector,
    st: &State,
) -> BTreeMap<&'static str, u64> {
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
    // The LeRobot robot's own account: what the action queue's figures are
    // held against (ticks run, ticks without an action, chunks, the
    // observations the server replaced or skipped).
    if let Some(r) = &pipeline.lerobot {
        counters.insert("ticks", r.ticks);
        counters.insert("dry_ticks", r.dry_ticks);
        counters.insert("observations", r.observations);
        counters.insert("chunks", r.chunks);
        counters.insert("replaced", r.replaced);
        counters.insert("skipped", r.skipped);
        counters.insert("cancelled", r.cancelled);
        counters.insert("poll_errors", r.poll_errors);
    }
    counters
}

/// Write the report beside the data: `experiment.html` and `experiment.json`.
fn write_report(out: &Path, report: &ExperimentReport) -> Result<(), ExperimentError> {
    let html_path = out.join("experiment.html");
    std::fs::write(&html_path, crate::html::page(report))
        .map_err(|e| ExperimentError::Io(html_path, e))?;
    let json = serde_json::to_string_pretty(report).unwrap_or_default();
    let path = out.join("experiment.json");
    std::fs::write(&path, json).map_err(|e| ExperimentError::Io(path, e))
}

/// The default output directory: `runs/experiment-<unix seconds>`.
pub fn default_out_dir() -> PathBuf {
    stagetrace_sim::default_out_dir("experiment")
}
