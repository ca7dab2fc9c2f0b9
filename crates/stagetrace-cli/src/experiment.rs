//! `stagetrace experiment PLAN`: baseline, then one factor in steps while
//! resources are sampled; says which stage moved first.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use stagetrace_experiment::{default_out_dir, run as run_plan, text, Plan, RunOptions};

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
    if args.clean {
        return clean();
    }
    let Some(plan_path) = args.plan else {
        eprintln!("stagetrace experiment: no PLAN given (see docs/experiments.md)");
        return ExitCode::from(2);
    };
    let plan = match Plan::from_file(&plan_path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stagetrace experiment: {e}");
            return ExitCode::from(2);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    watch_signals(Arc::clone(&stop));
    let opts = RunOptions {
        out: args.out.unwrap_or_else(default_out_dir),
        progress: !args.quiet && !args.json,
        stop: Arc::clone(&stop),
    };
    let report = match run_plan(&plan, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stagetrace experiment: {e}");
            return if stop.load(Ordering::SeqCst) {
                ExitCode::from(130)
            } else {
                ExitCode::FAILURE
            };
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{}", text(&report));
    }
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
        return if stop.load(Ordering::SeqCst) {
            ExitCode::from(130)
        } else {
            ExitCode::FAILURE
        };
    }
    ExitCode::SUCCESS
}

/// `--clean`: delete the namespaces of stagetrace runs whose process is gone.
fn clean() -> ExitCode {
    let left = stagetrace_experiment::netns::stale_namespaces();
    if left.is_empty() {
        println!("stagetrace experiment --clean: nothing left behind by killed runs");
        return ExitCode::SUCCESS;
    }
    let gone = stagetrace_experiment::netns::remove_stale();
    for name in &gone {
        println!("deleted network namespace {name} (its veth end and qdiscs with it)");
    }
    let stuck: Vec<&String> = left.iter().filter(|n| !gone.contains(n)).collect();
    if stuck.is_empty() {
        ExitCode::SUCCESS
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
        ExitCode::FAILURE
    }
}

/// Ctrl-C or SIGTERM set `stop`; the run then restores everything and
/// reports the levels it completed.
fn watch_signals(stop: Arc<AtomicBool>) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("experiment-signals".into())
        .spawn(move || {
            rt.block_on(async move {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
                let terminated = async {
                    match term.as_mut() {
                        Some(t) => {
                            t.recv().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminated => {}
                }
                stop.store(true, Ordering::SeqCst);
            });
        });
}
