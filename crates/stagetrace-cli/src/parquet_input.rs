//! Parquet inputs (a file, a directory, a `robot=…/date=…` tree): the files
//! a path stands for under `--robot` / `--since` / `--until`, pruned by
//! partition and by row-group statistics, each file's columns decoded
//! straight into the analysis's dataset, on every core.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::UNIX_EPOCH;

use stagetrace_analyze::load::{Dataset, FilePart, LineChunks, LoadError, LoadOptions};
use stagetrace_analyze::summary::Summary;
use stagetrace_parquet::read::{self, PartError, ReadError, Selection};

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

/// One input file: Parquet (its columns decoded) or JSON lines (parsed).
pub(crate) enum Source {
    /// A Parquet file of the `given`-th input path.
    Parquet {
        given: usize,
        file: PathBuf,
    },
    Lines(PathBuf),
}

/// Threads to read files on: every core.
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Reads one file into its part of the dataset. A damaged Parquet file is
/// skipped whole (`Ok(None)`), with a warning that names it
/// (docs/records.md, "A damaged file"); a corrupt record stops the load,
/// as a corrupt JSON line does.
pub(crate) fn read(
    source: Source,
    sel: &Selection,
    opts: LoadOptions,
    damaged: &Damaged,
) -> Result<Option<FilePart>, LoadError> {
    match source {
        Source::Lines(path) => {
            let file = File::open(&path).map_err(|source| LoadError::Io {
                path: path.clone(),
                source,
            })?;
            FilePart::read_lines(file, &path, opts).map(Some)
        }
        Source::Parquet { given, file } => match read::load_part(&file, sel, opts) {
            Ok(part) => Ok(Some(part)),
            Err(PartError::Load(e)) => Err(e),
            Err(PartError::Damaged(e)) => {
                damaged.skipped(given, e);
                Ok(None)
            }
        },
    }
}

/// One file's summary (`stagetrace summarize`), its calls read a chunk of
/// row groups at a time and merged; for a damaged file, skipped whole (no
/// chunk of it counts) and said, a summary that names it. A file whose calls the
/// selection leaves out gives an empty summary. `summarise` makes one
/// chunk's summary (with its verdicts, or the table only).
pub(crate) fn summarize(
    source: Source,
    sel: &Selection,
    opts: LoadOptions,
    summarise: &(dyn Fn(&Dataset) -> Summary + Sync),
    damaged: &Damaged,
) -> Result<Option<Summary>, LoadError> {
    let of = |part: FilePart| match Dataset::of_part(part) {
        Ok(ds) => Ok(summarise(&ds)),
        Err(LoadError::Empty { .. }) => Ok(Summary::new()),
        Err(e) => Err(e),
    };
    let (given, file) = match source {
        Source::Parquet { given, file } => (given, file),
        Source::Lines(path) => {
            // A chunk of lines at a time, as a Parquet file's row groups.
            let file = File::open(&path).map_err(|source| LoadError::Io {
                path: path.clone(),
                source,
            })?;
            let mut chunks = LineChunks::new(file, &path, opts);
            let mut out = Summary::new();
            while let Some(part) = chunks.next_part(read::SUMMARY_CHUNK_CALLS)? {
                // Two summaries of this build always merge.
                let _ = out.merge(&of(part)?);
            }
            return Ok(Some(out));
        }
    };
    // A damaged file is skipped whole and said, and named in the summary
    // too, so its report (and a cluster's) says what it left out.
    let skip = |e: ReadError| {
        let named = Summary::damaged(&e.path.display().to_string(), &e.reason);
        damaged.skipped(given, e);
        Ok(Some(named))
    };
    let groups = match read::group_rows(&file) {
        Ok(groups) => groups,
        Err(e) => return skip(e),
    };
    let mut out = Summary::new();
    for chunk in read::group_chunks(&groups, read::SUMMARY_CHUNK_CALLS) {
        match read::load_part_groups(&file, sel, opts, chunk) {
            Ok(part) => {
                let one = of(part)?;
                // Two summaries of this build always merge.
                let _ = out.merge(&one);
            }
            Err(PartError::Load(e)) => return Err(e),
            Err(PartError::Damaged(e)) => return skip(e),
        }
    }
    Ok(Some(out))
}

/// The damaged Parquet files skipped, per input path.
pub(crate) struct Damaged {
    what: &'static str,
    files: Mutex<Vec<(usize, ReadError)>>,
}

impl Damaged {
    pub(crate) fn new(what: &'static str) -> Damaged {
        Damaged {
            what,
            files: Mutex::new(Vec::new()),
        }
    }

    fn skipped(&self, given: usize, e: ReadError) {
        eprintln!(
            "warning: {}: skipped a damaged Parquet file: {e}",
            self.what
        );
        if let Ok(mut files) = self.files.lock() {
            files.push((given, e));
        }
    }

    /// An error when every one of the `listed` files of the input path
    /// `p` (the `given`-th) is damaged: nothing to report of it.
    pub(crate) fn check_left(&self, given: usize, p: &Path, listed: usize) -> Result<(), String> {
        let files = self
            .files
            .lock()
            .map_err(|_| "a reader thread failed".to_string())?;
        let why: Vec<String> = files
            .iter()
            .filter(|(g, _)| *g == given)
            .map(|(_, e)| e.to_string())
            .collect();
        if listed > 0 && why.len() == listed {
            return Err(format!(
                "{}: {}: every Parquet file is damaged, nothing to report: {}",
                self.what,
                p.display(),
                why.join("; ")
            ));
        }
        Ok(())
    }

    /// Says which files the report leaves out, when any.
    pub(crate) fn report(&self) {
        let Ok(files) = self.files.lock() else { return };
        if files.is_empty() {
            return;
        }
        let paths: Vec<PathBuf> = files.iter().map(|(_, e)| e.path.clone()).collect();
        eprintln!(
            "warning: {}: this report leaves out {} damaged Parquet file(s) (their calls \
             are not in it): {}",
            self.what,
            paths.len(),
            names(&paths)
        );
    }
}

pub(crate) fn names(paths: &[PathBuf]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    v.join(", ")
}
