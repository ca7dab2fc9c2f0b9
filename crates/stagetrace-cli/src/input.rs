//! Where records come from: record files, run directories, or `-` for
//! standard input (`zcat run.jsonl.gz | stagetrace report -`), read as JSON
//! lines. `inputs` resolves a command's paths, Parquet included.

use std::fs;
use std::path::{Path, PathBuf};

/// The path that stands for standard input.
const STDIN_ARG: &str = "-";
/// How standard input is named in messages and in `inputs.files`.
pub(crate) const STDIN_NAME: &str = "<stdin>";

pub(crate) fn is_stdin(p: &Path) -> bool {
    p.as_os_str() == STDIN_ARG
}

/// A directory stands for the `records*.jsonl` files in it.
pub(crate) fn expand_dirs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = fs::read_dir(p)
                .map_err(|e| format!("{}: cannot list: {e}", p.display()))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|f| {
                    f.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("records") && n.ends_with(".jsonl"))
                })
                // Regular files only (through symlinks): a FIFO or a device
                // would block the read forever.
                .filter(|f| f.is_file())
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(format!(
                    "{}: no records*.jsonl files in this directory (point at a run's output directory or its record files)",
                    p.display()
                ));
            }
            out.extend(files);
        } else {
            refuse_summary_file(p)?;
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The layer's rolling summaries (`summary.*.jsonl`) are not records: said
/// plainly, with what to pass instead, rather than as a parse error.
fn refuse_summary_file(p: &Path) -> Result<(), String> {
    let is_summary = p
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("summary.") && n.ends_with(".jsonl"));
    if is_summary {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
        return Err(format!(
            "{} is a summary file (rolling windows), not records: pass the run's \
             records-*.jsonl files or its directory ({}); `stagetrace tail {}` shows summaries",
            p.display(),
            dir.map_or_else(|| ".".to_owned(), |d| d.display().to_string()),
            dir.map_or_else(|| ".".to_owned(), |d| d.display().to_string()),
        ));
    }
    Ok(())
}

/// What to say when an input pools several runs.
pub(crate) fn pooled_warning(what: &str, runs: &[String]) -> String {
    format!(
        "the {what} pools {} runs ({}): their calls are mixed in every figure and rate; \
         pass one run's records-<run>*.jsonl files to see it alone",
        runs.len(),
        runs.join(", ")
    )
}
