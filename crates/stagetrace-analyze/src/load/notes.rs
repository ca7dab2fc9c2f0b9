//! What the reader met on the way, and why it could not load.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Most distinct `kind` values kept apart; further kinds share one bucket.
pub(crate) const MAX_KINDS: usize = 256;

/// What the reader skipped or tolerated.
#[derive(Clone, Debug, Default)]
pub struct LoadNotes {
    /// Lines read (including blank and skipped ones).
    pub lines: u64,
    /// Corrupt lines skipped under `--skip-bad`.
    pub skipped: u64,
    /// The first skipped lines: `file:line: reason`.
    pub skipped_examples: Vec<String>,
    /// Files whose last line was cut short (a crash mid-write), tolerated.
    pub truncated: Vec<PathBuf>,
    /// Files that held no records at all.
    pub empty_files: Vec<PathBuf>,
    /// Records with a `kind` beyond the first 256 distinct kinds (pooled as `other`).
    pub pooled_kinds: u64,
}

impl LoadNotes {
    /// Human-readable warnings (one per line), empty when all went well.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        for f in &self.truncated {
            w.push(format!(
                "{}: last line is cut short (crash mid-write?); ignored it",
                f.display()
            ));
        }
        if self.skipped > 0 {
            w.push(format!(
                "skipped {} corrupt line(s) (--skip-bad); first: {}",
                self.skipped,
                self.skipped_examples.join("; ")
            ));
        }
        for f in &self.empty_files {
            w.push(format!("{}: no records in this file", f.display()));
        }
        if self.pooled_kinds > 0 {
            w.push(format!(
                "{} record(s) beyond {MAX_KINDS} distinct kinds pooled as kind \"other\"",
                self.pooled_kinds
            ));
        }
        w
    }
}

/// Why records could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// The file could not be opened or read.
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A line is not a valid record (and `--skip-bad` was not given).
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// No record in any of the inputs.
    Empty {
        /// The files read.
        paths: Vec<PathBuf>,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io { path, source } => write!(
                f,
                "{}: cannot read: {source} (check the path and permissions)",
                path.display()
            ),
            LoadError::Corrupt { path, line, reason } => write!(
                f,
                "{}:{line}: not a stagetrace record: {reason} \
                 (fix or delete that line, or pass --skip-bad to skip and count corrupt lines)",
                path.display()
            ),
            LoadError::Empty { paths } => {
                let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                write!(
                    f,
                    "no records in {} (empty input: point at the records-*.jsonl files a run wrote)",
                    names.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
