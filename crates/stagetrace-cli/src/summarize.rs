//! `stagetrace summarize`: a fleet's records in bounded memory. Each input
//! file (one Parquet partition file, one JSON-line file) is read alone,
//! summarised (`stagetrace_analyze::summary`) and merged into the running
//! summary, so memory holds one file's calls at a time, never the fleet's
//! (`docs/records.md`, "A fleet's month"). The merged summary is exact
//! whatever the order, which is what lets a cluster engine (Dask, in the
//! Python package) run the same per-file step and merge to the same report.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;

use stagetrace_analyze::load::{Dataset, LoadError, LoadOptions};
use stagetrace_analyze::summary::Summary;
use stagetrace_parquet::read::Selection;

use crate::inputs::Inputs;
use crate::parquet_input::{self, Source};
use crate::{exit, stdout};

/// Arguments of `stagetrace summarize`.
#[derive(Debug, clap::Args)]
pub(crate) struct SummarizeArgs {
    /// Record files (`records-*.jsonl`), run directories, Parquet files or
    /// trees (`robot=…/date=…/*.parquet`); each file is read alone.
    #[arg(required = true, value_name = "PATHS")]
    paths: Vec<PathBuf>,
    /// Print the summary's report as JSON (what Python's
    /// `Summary.report()` returns for the same files).
    #[arg(long)]
    json: bool,
    /// Also write the merged summary's bytes to FILE (Python's
    /// `stagetrace.PartitionSummary.from_bytes` reads them).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Skip corrupt lines (counted) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    #[command(flatten)]
    select: parquet_input::SelectArgs,
}

pub(crate) fn run(args: SummarizeArgs) -> ExitCode {
    match summarize(&args) {
        Ok(()) => exit::code(exit::OK),
        Err(e) => {
            eprintln!("stagetrace summarize: {e}");
            exit::code(exit::USAGE)
        }
    }
}

fn summarize(args: &SummarizeArgs) -> Result<(), String> {
    const WHAT: &str = "summarize";
    let sel = args.select.selection()?;
    let inputs = Inputs::resolve(WHAT, &args.paths, &sel)?;
    if inputs.reads_stdin() {
        return Err(
            "`-` (standard input): summarize reads files one at a time; save the records to a file"
                .into(),
        );
    }
    let opts = LoadOptions {
        skip_bad: args.skip_bad,
        ..LoadOptions::default()
    };
    let damaged = parquet_input::Damaged::new(WHAT);
    let merged = merged(inputs.sources(), &sel, opts, &damaged)?;
    inputs.check_damaged(&damaged)?;
    damaged.report();
    if merged.calls() == 0 {
        return Err("no call in these inputs (for this selection)".into());
    }
    if let Some(out) = &args.out {
        std::fs::write(out, merged.to_bytes())
            .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    }
    let report = merged.report();
    let text = if args.json {
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n"
    } else {
        report.text()
    };
    stdout::print(&text).map(|_| ())
}

/// Every file summarised alone, on every core, and merged: memory holds
/// the calls of one file per core. The merge is exact in any order, so
/// the threads' order does not show.
fn merged(
    sources: Vec<Source>,
    sel: &Selection,
    opts: LoadOptions,
    damaged: &parquet_input::Damaged,
) -> Result<Summary, String> {
    let queue = Mutex::new(sources.into_iter());
    let merged = Mutex::new(Summary::new());
    let failed: Mutex<Option<String>> = Mutex::new(None);
    let work = || loop {
        let next = queue.lock().ok().and_then(|mut q| q.next());
        let Some(source) = next else { return };
        let summary = parquet_input::read(source, sel, opts, damaged)
            .and_then(|part| part.map(Dataset::of_part).transpose());
        let result = match summary {
            Ok(Some(ds)) => merged
                .lock()
                .map_err(|_| "a summarizing thread failed".to_string())
                .and_then(|mut m| m.merge(&Summary::of(&ds)).map_err(|e| e.to_string())),
            // A file whose calls the selection left out, or an empty one.
            Ok(None) | Err(LoadError::Empty { .. }) => Ok(()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = result {
            if let Ok(mut f) = failed.lock() {
                f.get_or_insert(e);
            }
            return;
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..parquet_input::threads() {
            scope.spawn(work);
        }
        work();
    });
    if let Some(e) = failed.into_inner().ok().flatten() {
        return Err(e);
    }
    merged
        .into_inner()
        .map_err(|_| "a summarizing thread failed".to_string())
}
