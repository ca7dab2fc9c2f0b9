//! The sink: records buffered as columns on the layer's worker thread,
//! written a row group at a time, files closed by age, size and day.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use stagetrace::sink::Loss;
use stagetrace::{record::CallRecord, sink::RecordSink};

use crate::file::{OpenFile, WriteError};
use crate::layout::day_of;
use crate::options::ParquetOptions;
use crate::rows::RowBuffer;

/// Why a sink could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum SinkError {
    /// The output directory cannot be created.
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

impl std::fmt::Display for SinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkError::CreateDir { dir, source } => write!(
                f,
                "{}: cannot create the Parquet output directory ({source}); \
                 pass a directory this process may write",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for SinkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SinkError::CreateDir { source, .. } => Some(source),
        }
    }
}

/// What the sink did, cumulative (reported as `parquet.*` sink counters).
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    rows: u64,
    files: u64,
    dropped: u64,
    write_errors: u64,
}

/// A [`RecordSink`] writing records as Parquet into
/// `robot=<robot>/date=<YYYY-MM-DD>/part-<run>-<n>.parquet`.
///
/// Runs on the layer's worker thread, never on the app's: it buffers calls
/// as Arrow columns, writes a row group when `row_group_rows` are buffered,
/// and closes a file (footer, then the rename to its `.parquet` name) when
/// it is `max_file_age` old, `max_file_bytes` big, the day changes, or the
/// layer shuts down. A failed write never reaches the app: the rows of the
/// failed file are counted as `parquet.dropped`, the failure as
/// `parquet.write_errors` (both in every summary window), the first one is
/// printed, and the sink tries again a second later.
#[derive(Debug)]
pub struct ParquetSink {
    opts: ParquetOptions,
    run: String,
    buffer: RowBuffer,
    /// The UTC day of the buffered rows: a file holds one day.
    buffer_day: Option<i64>,
    /// When the first call of the file being filled arrived.
    started: Option<Instant>,
    open: Option<OpenFile>,
    /// Rows handed to a write or close that has not returned yet.
    in_flight: u64,
    next_part: u64,
    retry_at: Option<Instant>,
    warned: bool,
    /// The latest failed write, for the loss report at shutdown.
    last_error: Option<String>,
    counts: Counts,
}

impl ParquetSink {
    /// A sink writing under `dir` (created if missing) with the default
    /// settings; see [`builder`](Self::builder) for the others.
    pub fn new(dir: impl Into<PathBuf>) -> Result<ParquetSink, SinkError> {
        Self::builder(dir).build()
    }

    /// Settings for a sink writing under `dir`.
    pub fn builder(dir: impl Into<PathBuf>) -> ParquetOptions {
        ParquetOptions::new(dir.into())
    }

    pub(crate) fn with_options(opts: ParquetOptions) -> Result<ParquetSink, SinkError> {
        std::fs::create_dir_all(&opts.root).map_err(|source| SinkError::CreateDir {
            dir: opts.root.clone(),
            source,
        })?;
        let run = opts.run.clone().unwrap_or_else(run_id);
        Ok(ParquetSink {
            opts,
            run,
            buffer: RowBuffer::new(),
            buffer_day: None,
            started: None,
            open: None,
            in_flight: 0,
            next_part: 0,
            retry_at: None,
            warned: false,
            last_error: None,
            counts: Counts::default(),
        })
    }

    /// The directory the partitions go under.
    pub fn root(&self) -> &Path {
        &self.opts.root
    }

    /// Rows the sink will hold while it cannot write: beyond, calls are dropped.
    fn buffer_cap(&self) -> usize {
        self.opts.row_group_rows.saturating_mul(4)
    }

    fn backing_off(&self) -> bool {
        self.retry_at.is_some_and(|t| Instant::now() < t)
    }

    /// Writes the buffer as a row group, and closes the file when `close`.
    fn write_out(&mut self, close: bool) {
        if let Err(e) = self.try_write_out(close) {
            self.failed(&e);
        }
    }

    fn try_write_out(&mut self, close: bool) -> Result<(), WriteError> {
        if !self.buffer.is_empty() {
            if self.open.is_none() {
                let n = self.next_part;
                self.next_part += 1;
                let o = &self.opts;
                let day = self.buffer_day.unwrap_or_default();
                let file =
                    OpenFile::create(&o.root, &o.robot, day, &self.run, n, o.row_group_rows)?;
                self.open = Some(file);
            }
            // Rows between the buffer and the file: lost with either if this fails.
            self.in_flight = self.buffer.len() as u64;
            let batch = self
                .buffer
                .take()
                .map_err(|e| WriteError::Parquet(self.opts.root.clone(), e.into()))?;
            if let Some(file) = self.open.as_mut() {
                file.write(&batch)?;
            }
            self.in_flight = 0;
            self.retry_at = None;
        }
        let full = self
            .open
            .as_ref()
            .is_some_and(|f| f.bytes() >= self.opts.max_file_bytes);
        if close || full {
            if let Some(file) = self.open.take() {
                let rows = file.rows;
                self.in_flight = rows;
                file.close()?;
                self.in_flight = 0;
                self.counts.rows += rows;
                self.counts.files += 1;
            }
            self.started = None;
        }
        Ok(())
    }

    /// A write failed: the open file and the buffer are lost, and counted.
    fn failed(&mut self, e: &WriteError) {
        let lost_in_file = self.open.as_ref().map_or(0, |f| f.rows);
        let lost = lost_in_file + self.buffer.len() as u64 + self.in_flight;
        self.in_flight = 0;
        if let Some(f) = self.open.take() {
            f.abandon();
        }
        // Emptying the builders cannot fail in a way that matters here.
        let _ = self.buffer.take();
        self.started = None;
        self.counts.dropped += lost;
        self.counts.write_errors += 1;
        self.retry_at = Some(Instant::now() + self.opts.retry_after);
        self.last_error = Some(e.to_string());
        if !self.warned {
            self.warned = true;
            eprintln!(
                "stagetrace: the Parquet sink cannot write ({e}); {lost} calls lost. \
                 It retries every second and counts what it loses as parquet.dropped: {}",
                self.opts.writable_dir()
            );
        }
    }

    fn due(&self) -> bool {
        let old = self
            .started
            .is_some_and(|t| t.elapsed() >= self.opts.max_file_age);
        old || self.buffer.len() >= self.opts.row_group_rows
    }
}

impl RecordSink for ParquetSink {
    fn on_record(&mut self, rec: &CallRecord) {
        let day = day_of(rec.ts_unix_ns);
        let other_day = self.buffer_day.is_some_and(|d| d != day)
            || self.open.as_ref().is_some_and(|f| f.day != day);
        if other_day && !self.backing_off() {
            self.write_out(true);
        }
        if self.buffer.len() >= self.buffer_cap() || (other_day && !self.buffer.is_empty()) {
            // Still failing: beyond the cap (or the day's buffer stuck), calls are lost.
            self.counts.dropped += 1;
            return;
        }
        self.buffer.push(rec);
        self.buffer_day = Some(day);
        self.started.get_or_insert_with(Instant::now);
        if self.buffer.len() >= self.opts.row_group_rows && !self.backing_off() {
            self.write_out(false);
        }
    }

    fn on_drained(&mut self) {
        if self.due() && !self.backing_off() {
            let old = self
                .started
                .is_some_and(|t| t.elapsed() >= self.opts.max_file_age);
            self.write_out(old);
        }
    }

    fn flush(&mut self) {
        self.write_out(true);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.counts;
        vec![
            ("parquet.rows", c.rows),
            ("parquet.files", c.files),
            ("parquet.dropped", c.dropped),
            ("parquet.write_errors", c.write_errors),
        ]
    }

    /// The calls lost to failed writes (after the shutdown flush: final),
    /// for the flush guard's warning.
    fn loss_report(&self) -> Option<Loss> {
        let c = self.counts;
        if c.dropped == 0 {
            return None;
        }
        let last = self
            .last_error
            .as_deref()
            .map_or(String::new(), |e| format!("; the last: {e}"));
        Some(Loss {
            lost: c.dropped,
            message: format!(
                "{} of {} calls were not written as Parquet under {} ({} failed writes{last}); \
                 counted as parquet.dropped. Fix: {}.",
                c.dropped,
                c.dropped + c.rows,
                self.opts.root.display(),
                c.write_errors,
                self.opts.writable_dir()
            ),
        })
    }
}

/// The run id in file names: UTC start time and process id, as the JSON-line
/// files have it (`20261204T131500Z-4242`).
fn run_id() -> String {
    let stamp: String = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    format!("{stamp}-{}", std::process::id())
}
