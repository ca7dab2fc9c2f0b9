//! The `stagetrace` command: demo, report, compare, convert, tail, summarize, experiment.
//!
//! Every subcommand follows the same conventions: the exit codes of
//! [`exit`], `-` for records on standard input ([`input`]), a closed stdout
//! pipe ends the output quietly ([`stdout`]), Ctrl-C ends a long-running
//! command with status 130 ([`interrupt`]).

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod budget;
mod compare;
mod convert;
mod demo;
mod exit;
mod experiment;
mod input;
mod inputs;
mod interrupt;
mod parquet_input;
mod report;
mod robots;
mod stage_names;
mod stdout;
mod summarize;
mod tail;

/// Where does your control loop's latency go?
#[derive(Debug, Parser)]
#[command(name = "stagetrace", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A real robot client and policy server over loopback, traced stage by stage.
    // Boxed: its knobs make it far larger than the other commands' arguments.
    Demo(Box<stagetrace_demo::DemoArgs>),
    /// Tables, baseline comparison, outliers, shape, periodicity and a verdict from record files.
    Report(report::ReportArgs),
    /// Per-stage change between two runs, with confidence (`~` when it is noise).
    Compare(compare::CompareArgs),
    /// JSON-line runs into a Parquet tree by robot and day (for DuckDB, pandas, polars, Spark).
    Convert(convert::ConvertArgs),
    /// A live table from the rolling summary files of a run directory.
    Tail(tail::TailArgs),
    /// Per-stage p50/p90/p99/max of a fleet's records in bounded memory: one file at a time, merged.
    Summarize(summarize::SummarizeArgs),
    /// Baseline, then one factor in steps while resources are sampled: which stage moves first.
    Experiment(experiment::ExperimentArgs),
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Demo(mut args) => {
            // The demo refuses knobs its scenario would ignore: it needs to
            // know which ones were typed, not only their values.
            if let Some(("demo", m)) = matches.subcommand() {
                args.note_typed(m);
            }
            demo::run(*args)
        }
        Command::Report(args) => report::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Tail(args) => tail::run(args),
        Command::Summarize(args) => summarize::run(args),
        Command::Experiment(args) => experiment::run(args),
    }
}
