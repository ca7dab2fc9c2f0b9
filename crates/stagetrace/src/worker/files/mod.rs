//! The file sink: `records-<run>.*.jsonl` and `summary.*.jsonl` in the
//! output directory, an ordinary [`RecordSink`] that the builder registers
//! first when `.output_dir(...)` is set.
//!
//! An unwritable directory never stops the app: the problem is reported once
//! on stderr, every line that could not be written is counted on the layer's
//! counters (`records_lost` per record, `summary_write_failures` per summary
//! line), and opening is retried.
//!
//! A line is written whole or not at all: a write that fails part-way (a full
//! disk) leaves a torn line at the end of the file, which is cut off again
//! before anything else is written, so `stagetrace report` never meets it.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing_appender::rolling::{RollingFileAppender, Rotation};
use tracing_subscriber::fmt::MakeWriter;

use crate::advice::AdviceFor;
use crate::health::Health;
use crate::record::CallRecord;
use crate::sink::{Loss, RecordSink};
use crate::summary::WindowSummary;

/// Flush buffered record lines once this many bytes are pending.
const RECORD_BUF: usize = 64 * 1024;
/// Retry opening an unwritable output directory this often.
const REOPEN_EVERY: Duration = Duration::from_secs(5);

/// An output file the sink appends lines to.
///
/// A trait so that the unit tests can put a disk that fills up and frees
/// again, or an appender that rotates at every chance, behind the sink.
pub(crate) trait LineFile: Send {
    /// A writer into the current file. A rotation that is due happens here
    /// and never between two writes through the writer, so a batch written
    /// through one writer lands in one file, even when a write takes only
    /// part of it.
    fn writer(&mut self) -> Box<dyn Write + '_>;

    /// Removes the last `n` bytes of the file the last writer wrote to: the
    /// start of a line whose write failed, so the file ends at a line
    /// boundary again.
    fn unwrite(&mut self, n: u64) -> io::Result<()>;
}

/// A rolling appender of `<prefix>.*jsonl` in `dir`.
struct Appender {
    inner: RollingFileAppender,
    dir: PathBuf,
    prefix: String,
}

impl LineFile for Appender {
    /// The appender's `make_writer` looks at the clock once and holds its
    /// file for every write through the writer; its `write` looks at the
    /// clock on every call, so a batch that takes two writes (a short write)
    /// could start in one file and end in the next.
    fn writer(&mut self) -> Box<dyn Write + '_> {
        Box::new(self.inner.make_writer())
    }

    /// The appender does not hand out its file, so the current one is found
    /// by name: `<prefix>.jsonl` or `<prefix>.<date>.jsonl`, whose dates sort
    /// as text, the newest last. It rotates only when a writer is made, so
    /// that is still the file the last writer wrote to. The appender writes
    /// with `O_APPEND`, so its next line goes to the new end.
    fn unwrite(&mut self, n: u64) -> io::Result<()> {
        let path = current_file(&self.dir, &self.prefix)?;
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        let len = file.metadata()?.len();
        file.set_len(len.saturating_sub(n))
    }
}

/// The newest `<prefix>.*jsonl` file in `dir`.
fn current_file(dir: &Path, prefix: &str) -> io::Result<PathBuf> {
    let start = format!("{prefix}.");
    let mut newest: Option<String> = None;
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(&start)
            && name.ends_with("jsonl")
            && newest.as_deref().is_none_or(|n| name > n)
        {
            newest = Some(name.to_owned());
        }
    }
    newest
        .map(|n| dir.join(n))
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no {start}*jsonl")))
}

/// What became of one write of whole lines.
struct Written {
    /// Bytes of whole lines that are in the file.
    kept: usize,
    /// Why the rest is not.
    error: Option<io::Error>,
}

/// Writes `buf` (whole lines) to `w`. When the write fails part-way, the
/// torn line it leaves is cut off again; when even that fails, `cut` keeps its
/// length, and nothing more is written until it is cut.
fn write_lines(w: &mut dyn LineFile, cut: &mut u64, buf: &[u8]) -> Written {
    if *cut > 0 {
        if let Err(e) = w.unwrite(*cut) {
            return Written {
                kept: 0,
                error: Some(e),
            };
        }
        *cut = 0;
    }
    let mut file = w.writer();
    let mut done = 0;
    let mut error = None;
    while done < buf.len() {
        match file.write(&buf[done..]) {
            Ok(0) => {
                error = Some(io::Error::from(io::ErrorKind::WriteZero));
                break;
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    if error.is_none() {
        error = file.flush().err();
    }
    drop(file);
    if error.is_none() {
        return Written { kept: done, error };
    }
    let kept = buf[..done]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let torn = (done - kept) as u64;
    if torn > 0 {
        if let Err(e) = w.unwrite(torn) {
            *cut = torn;
            error = Some(e);
        }
    }
    Written { kept, error }
}

/// Writes every record and summary window to the output directory (the
/// output files, or why they are missing).
pub(crate) struct FileSink {
    dir: PathBuf,
    rotation: Rotation,
    records_prefix: String,
    records: Option<Box<dyn LineFile>>,
    summary: Option<Box<dyn LineFile>>,
    /// Bytes of a torn line still at the end of the records / summary file.
    records_cut: u64,
    summary_cut: u64,
    buf: Vec<u8>,
    buf_lines: u64,
    /// The layer's counters: lines that could not be written count there.
    health: Arc<Health>,
    reported: bool,
    /// The latest failure, for the loss report at shutdown.
    last_error: Option<String>,
    /// Records handed to the sink, for "N of M" in that report.
    records_seen: u64,
    next_open: Instant,
    /// Whose words the fix names: `.output_dir(...)` or Python's `output_dir`.
    advice: AdviceFor,
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
    pub(crate) fn new(
        dir: PathBuf,
        rotation: Rotation,
        run: &str,
        health: Arc<Health>,
        advice: AdviceFor,
    ) -> Self {
        let mut files = Self::unopened(dir, rotation, run, health);
        files.advice = advice;
        files.open();
        files
    }

    /// The sink before it has tried to open its files.
    fn unopened(dir: PathBuf, rotation: Rotation, run: &str, health: Arc<Health>) -> Self {
        FileSink {
            dir,
            rotation,
            records_prefix: format!("records-{run}"),
            records: None,
            summary: None,
            records_cut: 0,
            summary_cut: 0,
            buf: Vec::with_capacity(RECORD_BUF + 4096),
            buf_lines: 0,
            health,
            reported: false,
            last_error: None,
            records_seen: 0,
            next_open: Instant::now(),
            advice: AdviceFor::Rust,
        }
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
        let build =
            |prefix: &str| -> Result<Box<dyn LineFile>, tracing_appender::rolling::InitError> {
                let inner = RollingFileAppender::builder()
                    .rotation(self.rotation.clone())
                    .filename_prefix(prefix)
                    .filename_suffix("jsonl")
                    .build(&self.dir)?;
                Ok(Box::new(Appender {
                    inner,
                    dir: self.dir.clone(),
                    prefix: prefix.to_owned(),
                }))
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
        self.last_error = Some(what.to_owned());
        if !self.reported {
            self.reported = true;
            eprintln!(
                "stagetrace: {what}. Records and summaries are not being written (counted as \
                 records_lost and summary_write_failures; the app keeps running; stagetrace retries every {}s). Fix: make \
                 the directory writable, free disk space, or {}.",
                REOPEN_EVERY.as_secs(),
                self.advice.output_dir()
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

    /// Writes whole lines only, a batch through one writer (one file), so a
    /// rotation never splits a line; a record that is not written whole is
    /// counted lost.
    fn flush_records(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        self.open();
        let lines = self.buf_lines;
        let result = match &mut self.records {
            Some(w) => write_lines(w.as_mut(), &mut self.records_cut, &self.buf),
            None => Written {
                kept: 0,
                error: None,
            },
        };
        let written = self.buf[..result.kept]
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64;
        self.buf.clear();
        self.buf_lines = 0;
        Health::add(&self.health.records_lost, lines - written);
        if let Some(e) = result.error {
            // The appender stays open: the file ends at a line boundary (or
            // `records_cut` remembers the torn line), and the next batch
            // retries the write as soon as there is space again.
            let msg = format!("cannot write records to {}: {e}", self.dir.display());
            self.report(&msg);
        }
    }

    fn write_summary(&mut self, line: &str) {
        self.open();
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let result = match &mut self.summary {
            Some(w) => write_lines(w.as_mut(), &mut self.summary_cut, &bytes),
            None => Written {
                kept: 0,
                error: None,
            },
        };
        if result.kept < bytes.len() {
            Health::bump(&self.health.summary_write_failures);
        }
        if let Some(e) = result.error {
            let msg = format!("cannot write summary to {}: {e}", self.dir.display());
            self.report(&msg);
        }
    }
}

impl RecordSink for FileSink {
    fn on_record(&mut self, rec: &CallRecord) {
        self.records_seen += 1;
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

    /// Record lines never written (and summary lines, which lose no call
    /// but a window's figures), with the latest error and the fix.
    fn loss_report(&self) -> Option<Loss> {
        let records = Health::get(&self.health.records_lost);
        let summaries = Health::get(&self.health.summary_write_failures);
        if records == 0 && summaries == 0 {
            return None;
        }
        let why = self
            .last_error
            .as_deref()
            .map_or(String::new(), |e| format!(" ({e})"));
        Some(Loss {
            lost: records,
            message: format!(
                "{records} of {} call records and {summaries} summary lines were not written to \
                 {}{why}; counted as records_lost and summary_write_failures. Fix: make the \
                 directory writable, free disk space, or {}.",
                self.records_seen,
                self.dir.display(),
                self.advice.output_dir()
            ),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
