//! `stagetrace summarize`: a fleet's records in bounded memory. Each input
//! file (one Parquet partition file, one JSON-line file) is read alone,
//! summarised (`stagetrace_analyze::summary`) and merged into the running
//! summary, so memory holds one file's calls at a time, never the fleet's
//! (`docs/records.md`, "A fleet's month"). The merged summary is exact
//! whatever the order, which is what lets a cluster engine (Dask, in the
//! Python package) run the same per-file step and merge to the same report.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use stagetrace_analyze::load::{Dataset, LoadError, LoadOptions};
use stagetrace_analyze::summary::Summary;
use stagetrace_parquet::read::{self, Selection};

use crate::parquet_input::{self, Source};
use crate::{exit, input, stdout};

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
    let sel = args.select.selection()?;
    let files = listed(&args.paths, &sel)?;
    let opts = LoadOptions {
        skip_bad: args.skip_bad,
        ..LoadOptions::default()
    };
    let mut merged = Summary::new();
    let mut damaged = Vec::new();
    for source in files {
        if let Source::Parquet(f) = &source {
            // A damaged file is skipped whole, by name, as `report` skips it.
            if let Err(e) = read::verify(f) {
                eprintln!("warning: skipped a damaged Parquet file: {e}");
                damaged.push(e.path);
                continue;
            }
        }
        let ds =
            match Dataset::load_sources(std::iter::once(parquet_input::open(source, &sel)), opts) {
                Ok(ds) => ds,
                // A file whose calls the selection left out, or an empty one.
                Err(LoadError::Empty { .. }) => continue,
                Err(e) => return Err(e.to_string()),
            };
        merged.merge(&Summary::of(&ds)).map_err(|e| e.to_string())?;
    }
    if !damaged.is_empty() {
        eprintln!(
            "warning: this summary leaves out {} damaged Parquet file(s) (their calls are not in it): {}",
            damaged.len(),
            parquet_input::names(&damaged)
        );
    }
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

/// Every file the paths stand for, in order: a Parquet path's files under
/// the selection, a JSON-line path's record files (a run directory's, in
/// name order).
fn listed(paths: &[PathBuf], sel: &Selection) -> Result<Vec<Source>, String> {
    let selective = parquet_input::is_selective(sel);
    let mut out = Vec::new();
    for p in paths {
        if input::is_stdin(p) {
            return Err(
                "`-` (standard input): summarize reads files one at a time; save the records to a file"
                    .into(),
            );
        }
        if read::is_parquet(p) {
            let listing = read::list(p, sel).map_err(|e| e.to_string())?;
            if !listing.unfinished.is_empty() {
                eprintln!(
                    "warning: {} unfinished Parquet file(s) not read (a writer still running, or \
                     killed before it closed them): {}",
                    listing.unfinished.len(),
                    parquet_input::names(&listing.unfinished)
                );
            }
            if listing.files.is_empty() {
                return Err(no_files(p, listing.pruned));
            }
            out.extend(listing.files.into_iter().map(Source::Parquet));
        } else if selective {
            return Err(format!(
                "{}: --robot/--since/--until select partitions of a Parquet tree, and this is \
                 JSON lines: convert it first (stagetrace convert {} --to DIR)",
                p.display(),
                p.display()
            ));
        } else {
            out.extend(
                input::expand_dirs(std::slice::from_ref(p))?
                    .into_iter()
                    .map(Source::Lines),
            );
        }
    }
    Ok(out)
}

fn no_files(p: &Path, pruned: usize) -> String {
    format!(
        "{}: no Parquet file for this selection ({pruned} in other partitions)",
        p.display()
    )
}
