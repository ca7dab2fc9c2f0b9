//! `stagetrace experiment PLAN`: baseline, then one factor in steps while
//! resources are sampled; says which stage moved first.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use stagetrace_experiment::{default_out_dir, plan::Plan, run as run_plan, text, RunOptions};

use crate::{exit, interrupt, stdout};

/// Arguments of `stagetrace experiment`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExperimentArgs {
    /// The plan file (TOML; see docs/experiments.md).
    #[arg(value_name = "PLAN", required_unless_present = "clean")]
    plan: Option<PathBuf>,
    /// Run nothing: remove what runs that were killed (SIGKILL, power loss)
    /// left behind — the network namespaces, veth pair and qdiscs of the
    /// kernel bottleneck — and say what was removed. Needs root.
    #[arg(long, conflicts_with_all = ["plan", "out", "json"])]
    clean: bool,
    /// Directory for tagged records, resource samples and experiment.json
    /// (default: runs/experiment-<unix time>).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

pub(crate) fn run(args: ExperimentArgs) -> ExitCode {
    let result = if args.clean {
        clean()
    } else {
        experiment(args)
    };
    match result {
        Ok(code) => exit::code(code),
        Err(e) => {
            eprintln!("stagetrace experiment: {e}");
            exit::code(exit::USAGE)
        }
    }
}

fn experiment(args: ExperimentArgs) -> Result<u8, String> {
    let Some(plan_path) = args.plan else {
        return Err("no PLAN given (see docs/experiments.md)".to_owned());
    };
    let plan = Plan::from_file(&plan_path).map_err(|e| e.to_string())?;
    // Ctrl-C or SIGTERM set `stop`; the run then restores everything and
    // reports the levels it completed.
    let stop = interrupt::watch();
    let opts = RunOptions {
        out: args.out.unwrap_or_else(default_out_dir),
        progress: !args.quiet && !args.json,
        stop: Arc::clone(&stop),
    };
    let interrupted = || stop.load(Ordering::SeqCst);
    let report = match run_plan(&plan, &opts) {
        Ok(r) => r,
        Err(e) if interrupted() => {
            eprintln!("stagetrace experiment: {e}");
            return Ok(exit::INTERRUPTED);
        }
        Err(e) => return Err(e.to_string()),
    };
    let shown = if args.json {
        let s = serde_json::to_string_pretty(&report)
            .map_err(|e| format!("cannot encode the report as JSON: {e}"))?;
        s + "\n"
    } else {
        text(&report)
    };
    // A reader that stopped early (`| head`) does not change how the run went.
    stdout::print(&shown)?;
    if report.interrupted {
        eprintln!(
            "stagetrace experiment: {}; restored: {}",
            report.stopped_because.as_deref().unwrap_or("stopped early"),
            if report.restored.is_empty() {
                "nothing to restore".to_owned()
            } else {
                report.restored.join(", ")
            }
        );
        // Stopped by a signal, or the target failed part-way.
        return Ok(if interrupted() {
            exit::INTERRUPTED
        } else {
            exit::USAGE
        });
    }
    Ok(exit::OK)
}

/// `--clean`: delete the namespaces of stagetrace runs whose process is gone.
fn clean() -> Result<u8, String> {
    let left = stagetrace_experiment::netns::stale_namespaces();
    if left.is_empty() {
        stdout::print("stagetrace experiment --clean: nothing left behind by killed runs\n")?;
        return Ok(exit::OK);
    }
    let gone = stagetrace_experiment::netns::remove_stale();
    let said: String = gone
        .iter()
        .map(|name| format!("deleted network namespace {name} (its veth end and qdiscs with it)\n"))
        .collect();
    // The deletions are done whether or not anyone reads about them.
    stdout::print(&said)?;
    let stuck: Vec<&String> = left.iter().filter(|n| !gone.contains(n)).collect();
    if stuck.is_empty() {
        Ok(exit::OK)
    } else {
        eprintln!(
            "stagetrace experiment --clean: could not delete {} (deleting a namespace needs root: \
             run it with sudo, or `sudo ip netns del NAME`)",
            stuck
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(exit::USAGE)
    }
}
