//! The file sink: `records-<run>.*.jsonl` and `summary.*.jsonl` in the
//! output directory, an ordinary [`RecordSink`] that the builder registers
//! first when `.output_dir(...)` is set.
//!
//! An unwritable directory never stops the app: the problem is reported once
//! on stderr, every line that could not be written is counted as
//! `write_failures` on the layer's counters, and opening is retried.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing_appender::rolling::{RollingFileAppender, Rotation};

use crate::health::Health;
use crate::record::CallRecord;
use crate::sink::RecordSink;
use crate::summary::WindowSummary;

/// Flush buffered record lines once this many bytes are pending.
const RECORD_BUF: usize = 64 * 1024;
/// Retry opening an unwritable output directory this often.
const REOPEN_EVERY: Duration = Duration::from_secs(5);

/// Writes every record and summary window to the output directory (the
/// output files, or why they are missing).
pub(crate) struct FileSink {
    dir: PathBuf,
    rotation: Rotation,
    records_prefix: String,
    records: Option<RollingFileAppender>,
    summary: Option<RollingFileAppender>,
    buf: Vec<u8>,
    buf_lines: u64,
    /// The layer's counters: lines that could not be written count there.
    health: Arc<Health>,
    reported: bool,
    next_open: Instant,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("dir", &self.dir)
            .field("records_prefix", &self.records_prefix)
            .field("buffered_lines", &self.buf_lines)
            .finish_non_exhaustive()
    }
}

impl FileSink {
    /// Opens (or, failing that, reports and later retries) the files of run
    /// `run` in `dir`.
    pub(crate) fn new(dir: PathBuf, rotation: Rotation, run: &str, health: Arc<Health>) -> Self {
        let mut files = FileSink {
            dir,
            rotation,
            records_prefix: format!("records-{run}"),
            records: None,
            summary: None,
            buf: Vec::with_capacity(RECORD_BUF + 4096),
            buf_lines: 0,
            health,
            reported: false,
            next_open: Instant::now(),
        };
        files.open();
        files
    }

    /// Opens whatever is not open yet; reports the first failure.
    fn open(&mut self) -> bool {
        if self.records.is_some() && self.summary.is_some() {
            return true;
        }
        let now = Instant::now();
        if now < self.next_open {
            return false;
        }
        self.next_open = now + REOPEN_EVERY;
        if let Err(e) = std::fs::create_dir_all(&self.dir) {
            self.report(&format!(
                "cannot create output directory {}: {e}",
                self.dir.display()
            ));
            return false;
        }
        let build = |prefix: &str| {
            RollingFileAppender::builder()
                .rotation(self.rotation.clone())
                .filename_prefix(prefix)
                .filename_suffix("jsonl")
                .build(&self.dir)
        };
        if self.records.is_none() {
            match build(&self.records_prefix) {
                Ok(a) => self.records = Some(a),
                Err(e) => {
                    self.report(&format!(
                        "cannot open {}/{}.*.jsonl: {e}",
                        self.dir.display(),
                        self.records_prefix
                    ));
                    return false;
                }
            }
        }
        if self.summary.is_none() {
            match build("summary") {
                Ok(a) => self.summary = Some(a),
                Err(e) => {
                    self.report(&format!(
                        "cannot open {}/summary.*.jsonl: {e}",
                        self.dir.display()
                    ));
                    return false;
                }
            }
        }
        true
    }

    fn report(&mut self, what: &str) {
        if !self.reported {
            self.reported = true;
            eprintln!(
                "stagetrace: {what}. Records and summaries are not being written (counted as \
                 write_failures; the app keeps running; stagetrace retries every {}s). Fix: make \
                 the directory writable, free disk space, or pass another .output_dir(...).",
                REOPEN_EVERY.as_secs()
            );
        }
    }

    fn push_record(&mut self, line: &str) {
        self.buf.extend_from_slice(line.as_bytes());
        self.buf.push(b'\n');
        self.buf_lines += 1;
        if self.buf.len() >= RECORD_BUF {
            self.flush_records();
        }
    }

    /// Writes whole lines only, in one write per batch, so a rotation never
    /// splits a line.
    fn flush_records(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        self.open();
        let lines = self.buf_lines;
        let result = match &mut self.records {
            Some(w) => w.write_all(&self.buf).map_err(Some),
            None => Err(None),
        };
        self.buf.clear();
        self.buf_lines = 0;
        if let Err(e) = result {
            Health::add(&self.health.write_failures, lines);
            if let Some(e) = e {
                self.records = None;
                let msg = format!("cannot write records to {}: {e}", self.dir.display());
                self.report(&msg);
            }
        }
    }

    fn write_summary(&mut self, line: &str) {
        self.open();
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let result = match &mut self.summary {
            Some(w) => w.write_all(&bytes).and_then(|()| w.flush()).map_err(Some),
            None => Err(None),
        };
        if let Err(e) = result {
            Health::bump(&self.health.write_failures);
            if let Some(e) = e {
                self.summary = None;
                let msg = format!("cannot write summary to {}: {e}", self.dir.display());
                self.report(&msg);
            }
        }
    }
}

impl RecordSink for FileSink {
    fn on_record(&mut self, rec: &CallRecord) {
        self.push_record(&rec.to_json_line());
    }

    /// Record lines are written in batches: after each batch the worker
    /// takes off the queue, and before every summary line.
    fn on_drained(&mut self) {
        self.flush_records();
    }

    fn on_window(&mut self, summary: &WindowSummary) {
        self.flush_records();
        self.write_summary(&summary.to_json_line());
    }

    fn flush(&mut self) {
        self.flush_records();
    }
}
