//! One Parquet file being written: under a hidden in-progress name, renamed
//! to its `part-….parquet` name once its footer is on disk.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;

use crate::layout::{in_progress_name, part_name, partition_dir};
use crate::schema::arrow_schema;

/// Why a write failed.
#[derive(Debug)]
pub(crate) enum WriteError {
    Io(PathBuf, io::Error),
    Parquet(PathBuf, ParquetError),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            WriteError::Parquet(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

/// A file with at least one row group written and no footer yet.
pub(crate) struct OpenFile {
    writer: ArrowWriter<File>,
    in_progress: PathBuf,
    finished: PathBuf,
    pub(crate) day: i64,
    /// Rows in row groups already handed to the writer.
    pub(crate) rows: u64,
}

impl std::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("path", &self.in_progress)
            .field("rows", &self.rows)
            .finish()
    }
}

fn properties(row_group_rows: usize) -> WriterProperties {
    WriterProperties::builder()
        // zstd's level 3 (its default): most of level 19's size at a tenth of the CPU.
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(row_group_rows))
        .build()
}

impl OpenFile {
    /// Opens the `n`-th file of `run` in the partition of `robot` and `day`.
    pub(crate) fn create(
        root: &Path,
        robot: &str,
        day: i64,
        run: &str,
        n: u64,
        row_group_rows: usize,
    ) -> Result<OpenFile, WriteError> {
        let dir = partition_dir(root, robot, day);
        fs::create_dir_all(&dir).map_err(|e| WriteError::Io(dir.clone(), e))?;
        let in_progress = dir.join(in_progress_name(run, n));
        let file =
            File::create(&in_progress).map_err(|e| WriteError::Io(in_progress.clone(), e))?;
        let writer = ArrowWriter::try_new(file, arrow_schema(), Some(properties(row_group_rows)))
            .map_err(|e| WriteError::Parquet(in_progress.clone(), e))?;
        Ok(OpenFile {
            writer,
            finished: dir.join(part_name(run, n)),
            in_progress,
            day,
            rows: 0,
        })
    }

    /// Writes `batch` as one row group (ended at once: what is written is
    /// on its way to the disk, not in the writer's memory).
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), WriteError> {
        let path = &self.in_progress;
        self.writer
            .write(batch)
            .and_then(|()| self.writer.flush())
            .map_err(|e| WriteError::Parquet(path.clone(), e))?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.writer.bytes_written() as u64
    }

    /// Writes the footer, syncs, and gives the file its finished name.
    pub(crate) fn close(self) -> Result<PathBuf, WriteError> {
        let OpenFile {
            writer,
            in_progress,
            finished,
            ..
        } = self;
        let file = writer
            .into_inner()
            .map_err(|e| WriteError::Parquet(in_progress.clone(), e))?;
        file.sync_all()
            .map_err(|e| WriteError::Io(in_progress.clone(), e))?;
        fs::rename(&in_progress, &finished).map_err(|e| WriteError::Io(finished.clone(), e))?;
        Ok(finished)
    }

    /// Gives up on the file after a failed write: its rows are lost.
    pub(crate) fn abandon(self) {
        let path = self.in_progress.clone();
        drop(self);
        // Best effort: on a full disk this frees the space it took.
        let _ = fs::remove_file(path);
    }
}

/// The bytes of one Parquet file holding `records`, written as the sink
/// writes its files (same schema, compression and properties), in row
/// groups of `row_group_rows`: for tests and fuzzing of the reader.
pub fn file_bytes(
    records: &[stagetrace::record::CallRecord],
    row_group_rows: usize,
) -> Result<Vec<u8>, ParquetError> {
    let mut writer =
        ArrowWriter::try_new(Vec::new(), arrow_schema(), Some(properties(row_group_rows)))?;
    for chunk in records.chunks(row_group_rows.max(1)) {
        let mut rows = crate::rows::RowBuffer::new();
        for r in chunk {
            rows.push(r);
        }
        let batch = rows
            .take()
            .map_err(|e| ParquetError::General(e.to_string()))?;
        writer.write(&batch)?;
        writer.flush()?;
    }
    writer.into_inner()
}
