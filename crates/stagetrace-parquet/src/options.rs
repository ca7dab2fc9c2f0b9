//! What the sink writes where: the robot, the file sizes and ages.

use std::path::PathBuf;
use std::time::Duration;

use stagetrace::AdviceFor;

use crate::layout::partition_value;

/// Settings of a [`ParquetSink`](crate::ParquetSink), made by
/// [`ParquetSink::builder`](crate::ParquetSink::builder).
#[derive(Clone, Debug)]
pub struct ParquetOptions {
    pub(crate) root: PathBuf,
    pub(crate) robot: String,
    pub(crate) row_group_rows: usize,
    pub(crate) max_file_age: Duration,
    pub(crate) max_file_bytes: u64,
    pub(crate) retry_after: Duration,
    pub(crate) run: Option<String>,
    pub(crate) advice: AdviceFor,
}

/// Rows per row group (DuckDB and Spark read one row group per task).
const ROW_GROUP_ROWS: usize = 65_536;
/// A crash loses the open file: at most this much of the run.
const MAX_FILE_AGE: Duration = Duration::from_secs(300);
const MAX_FILE_BYTES: u64 = 128 * 1024 * 1024;
/// After a failed write, the sink waits this long before opening a file again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

impl ParquetOptions {
    pub(crate) fn new(root: PathBuf) -> ParquetOptions {
        ParquetOptions {
            root,
            robot: default_robot(),
            row_group_rows: ROW_GROUP_ROWS,
            max_file_age: MAX_FILE_AGE,
            max_file_bytes: MAX_FILE_BYTES,
            retry_after: RETRY_AFTER,
            run: None,
            advice: AdviceFor::Rust,
        }
    }

    /// The robot's name, the `robot=` partition (default: `STAGETRACE_ROBOT`,
    /// else the host name). Characters other than letters, digits, `.`, `-`
    /// and `_` become `_`.
    pub fn robot(mut self, robot: &str) -> ParquetOptions {
        self.robot = partition_value(robot);
        self
    }

    /// Rows per row group (default 65 536); a file's last row group may hold fewer.
    pub fn row_group_rows(mut self, rows: usize) -> ParquetOptions {
        self.row_group_rows = rows.max(1);
        self
    }

    /// Close a file this long after its first call (default 5 min): a
    /// crash loses at most the calls of the file still open.
    pub fn max_file_age(mut self, age: Duration) -> ParquetOptions {
        self.max_file_age = age;
        self
    }

    /// Close a file once it holds this many bytes (default 128 MiB).
    pub fn max_file_bytes(mut self, bytes: u64) -> ParquetOptions {
        self.max_file_bytes = bytes.max(1);
        self
    }

    /// The run id in the files' names (default: the UTC start time and the
    /// process id, `20261204T131500Z-4242`, as the JSON-line files have it);
    /// `stagetrace convert` keeps the converted run's.
    pub fn run(mut self, run: &str) -> ParquetOptions {
        self.run = Some(partition_value(run));
        self
    }

    /// Whose setting the sink's warnings name when they say where to write
    /// instead (default: the directory given to
    /// [`ParquetSink::builder`](crate::ParquetSink::builder)); a language
    /// binding names its own argument (`AdviceFor::Python`: `parquet_dir=`
    /// of `stagetrace.init`).
    pub fn advice_for(mut self, api: AdviceFor) -> ParquetOptions {
        self.advice = api;
        self
    }

    /// The fix a warning ends with: a directory that can be written.
    pub(crate) fn writable_dir(&self) -> &'static str {
        if self.advice == AdviceFor::Python {
            "free disk space or pass stagetrace.init(parquet_dir=...) a directory this process may write"
        } else {
            "free disk space or pass a directory this process may write"
        }
    }

    /// Start the sink (see [`ParquetSink::new`](crate::ParquetSink::new)).
    pub fn build(self) -> Result<crate::ParquetSink, crate::SinkError> {
        crate::ParquetSink::with_options(self)
    }
}

/// `STAGETRACE_ROBOT`, else the host name, else `unknown`.
fn default_robot() -> String {
    let name = std::env::var("STAGETRACE_ROBOT")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .or_else(|_| std::fs::read_to_string("/etc/hostname"))
                .ok()
        })
        .unwrap_or_default();
    partition_value(name.trim())
}
