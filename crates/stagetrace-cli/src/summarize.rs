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

use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_analyze::summary::{Summary, SummaryReport};
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
    /// The table only: no partition analysed for verdicts (about half the
    /// CPU; what a quantile query in SQL computes).
    #[arg(long)]
    no_verdicts: bool,
    /// Idle-run record files each partition's stages are judged against
    /// (median and tail tests), as `report --baseline`; loaded whole, so
    /// a short run. Repeat the flag for several files.
    #[arg(long, value_name = "PATH")]
    baseline: Vec<PathBuf>,
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
    if args.no_verdicts && !args.baseline.is_empty() {
        return Err(
            "--baseline judges the verdicts, and --no-verdicts asks for none: give one".into(),
        );
    }
    let baseline = load_baseline(&args.baseline, &sel, opts)?;
    let how = Summarise {
        verdicts: !args.no_verdicts,
        baseline: baseline.as_ref(),
    };
    let merged = summary_of(&inputs, &sel, opts, &how)?;
    if let Some(out) = &args.out {
        std::fs::write(out, merged.to_bytes())
            .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    }
    print(&merged, args.json, None)
}

/// How each partition is summarised: with the evidence of its verdicts
/// (its exact analysis, against `baseline` when given), or its table only.
pub(crate) struct Summarise<'a> {
    pub(crate) verdicts: bool,
    pub(crate) baseline: Option<&'a Dataset>,
}

impl Summarise<'_> {
    pub(crate) fn of(&self, ds: &Dataset) -> Summary {
        if self.verdicts {
            Summary::of_analysed(ds, self.baseline)
        } else {
            Summary::of(ds)
        }
    }
}

/// The baseline's records, loaded whole (`None` when no path is given).
pub(crate) fn load_baseline(
    paths: &[PathBuf],
    sel: &Selection,
    opts: LoadOptions,
) -> Result<Option<Dataset>, String> {
    if paths.is_empty() {
        return Ok(None);
    }
    let inputs = Inputs::resolve("baseline", paths, sel)?;
    if inputs.reads_stdin() {
        return Err(
            "--baseline -: summarize reads files; save the baseline's records to a file".into(),
        );
    }
    inputs.load(opts).map(Some)
}

/// The merged summary of every file of `inputs` (not standard input: it
/// has no files), each read alone ([`merged`]); damaged Parquet files are
/// skipped by name, as `report` skips them; an error when no call is left.
/// `report` over its memory budget takes this path too.
pub(crate) fn summary_of(
    inputs: &Inputs,
    sel: &Selection,
    opts: LoadOptions,
    how: &Summarise<'_>,
) -> Result<Summary, String> {
    let damaged = parquet_input::Damaged::new(inputs.what());
    let merged = merged(inputs.sources(), sel, opts, how, &damaged)?;
    inputs.check_damaged(&damaged)?;
    damaged.report();
    if merged.calls() == 0 {
        return Err("no call in these inputs (for this selection)".into());
    }
    Ok(merged)
}

/// Why a report is the summary's: `report --memory-budget`'s note, printed
/// as one more field of the JSON.
#[derive(serde::Serialize)]
struct Noted<'a> {
    #[serde(flatten)]
    report: &'a SummaryReport,
    memory_budget: &'a serde_json::Value,
}

/// The summary's report on standard output: text, or JSON (with `note`
/// as its `memory_budget` field when given).
pub(crate) fn print(
    summary: &Summary,
    json: bool,
    note: Option<&serde_json::Value>,
) -> Result<(), String> {
    let report = summary.report();
    let text = if json {
        let encoded = match note {
            Some(n) => serde_json::to_string_pretty(&Noted {
                report: &report,
                memory_budget: n,
            }),
            None => serde_json::to_string_pretty(&report),
        };
        encoded.map_err(|e| e.to_string())? + "\n"
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
    how: &Summarise<'_>,
    damaged: &parquet_input::Damaged,
) -> Result<Summary, String> {
    let queue = Mutex::new(sources.into_iter());
    let merged = Mutex::new(Summary::new());
    let failed: Mutex<Option<String>> = Mutex::new(None);
    let work = || loop {
        let next = queue.lock().ok().and_then(|mut q| q.next());
        let Some(source) = next else { return };
        // Summarised before the lock: the threads merge, not wait.
        let result = match parquet_input::summarize(source, sel, opts, &|ds| how.of(ds), damaged) {
            Ok(Some(one)) => merged
                .lock()
                .map_err(|_| "a summarizing thread failed".to_string())
                .and_then(|mut m| m.merge(&one).map_err(|e| e.to_string())),
            // A damaged file, skipped and said.
            Ok(None) => Ok(()),
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
