//! Parquet inputs (a file, a directory, a `robot=…/date=…` tree): the files
//! a path stands for under `--robot` / `--since` / `--until`, pruned by
//! partition, each read as the JSON lines of its calls so the tables and
//! verdicts are those of the same calls in JSON lines.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use stagetrace_analyze::load::LoadError;
use stagetrace_parquet::read::{self, Selection};

/// Which calls of a Parquet tree to read.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct SelectArgs {
    /// Only this robot's calls: a Parquet tree's `robot=ROBOT` partition
    /// (repeatable); the other robots' files are not opened.
    #[arg(long, value_name = "ROBOT")]
    robot: Vec<String>,
    /// Only calls that started at or after TIME (UTC): `2026-12-03` (that
    /// day's start) or `2026-12-03T10:00:00Z`. Parquet inputs; days before
    /// it are not opened.
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Only calls that started before TIME (as --since).
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
}

impl SelectArgs {
    /// The selection, or what is wrong with a time.
    pub(crate) fn selection(&self) -> Result<Selection, String> {
        Ok(Selection {
            robots: self
                .robot
                .iter()
                .map(|r| stagetrace_parquet::partition_value(r))
                .collect(),
            since_ms: self
                .since
                .as_deref()
                .map(|t| unix_ms("--since", t))
                .transpose()?,
            until_ms: self
                .until
                .as_deref()
                .map(|t| unix_ms("--until", t))
                .transpose()?,
        })
    }
}

fn unix_ms(flag: &str, text: &str) -> Result<f64, String> {
    if let Some(day) = stagetrace_parquet::parse_date(text) {
        return Ok(day as f64 * 86_400_000.0);
    }
    humantime::parse_rfc3339_weak(text)
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64() * 1000.0)
        .ok_or_else(|| {
            format!(
                "{flag} {text}: not a time; give a UTC day (2026-12-03) or 2026-12-03T10:00:00Z"
            )
        })
}

/// Whether calls are selected (`--robot`, `--since`, `--until`): only a
/// Parquet tree can be read so.
pub(crate) fn is_selective(sel: &Selection) -> bool {
    !sel.robots.is_empty() || sel.since_ms.is_some() || sel.until_ms.is_some()
}

/// One input file: Parquet (decoded) or JSON lines (as it is).
pub(crate) enum Source {
    Parquet(PathBuf),
    Lines(PathBuf),
}

/// The Parquet files `listed` for the path `p`, every page decoded now: a
/// damaged file is skipped whole, by name, and the report covers the rest
/// (docs/records.md, "A damaged file"); an error when every one is damaged.
pub(crate) fn verified(what: &str, p: &Path, listed: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::with_capacity(listed.len());
    let mut damaged = Vec::new();
    for f in listed {
        match read::verify(f) {
            Ok(_) => out.push(f.clone()),
            Err(e) => {
                eprintln!("warning: {what}: skipped a damaged Parquet file: {e}");
                damaged.push(e);
            }
        }
    }
    if out.is_empty() && !damaged.is_empty() {
        let why: Vec<String> = damaged.iter().map(ToString::to_string).collect();
        return Err(format!(
            "{what}: {}: every Parquet file is damaged, nothing to report: {}",
            p.display(),
            why.join("; ")
        ));
    }
    if !damaged.is_empty() {
        let paths: Vec<PathBuf> = damaged.into_iter().map(|e| e.path).collect();
        eprintln!(
            "warning: {what}: this report leaves out {} damaged Parquet file(s) (their calls \
             are not in it): {}",
            paths.len(),
            names(&paths)
        );
    }
    Ok(out)
}

pub(crate) fn names(paths: &[PathBuf]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    v.join(", ")
}

/// A file opened as the JSON lines of its calls.
pub(crate) fn open(source: Source, sel: &Selection) -> Result<(PathBuf, Box<dyn Read>), LoadError> {
    let io = |path: &Path, source: std::io::Error| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    match source {
        Source::Lines(path) => {
            let file = File::open(&path).map_err(|e| io(&path, e))?;
            Ok((path, Box::new(file)))
        }
        Source::Parquet(path) => {
            let lines = read::open(&path, sel).map_err(|e| {
                io(
                    &path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.reason),
                )
            })?;
            Ok((path, Box::new(lines)))
        }
    }
}
