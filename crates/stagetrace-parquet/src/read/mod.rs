//! Reading Parquet records back: which files a path stands for (a file, a
//! directory, a partitioned tree, pruned by robot and day), each streamed as
//! the JSON lines of the same calls, for `stagetrace report` and `compare`.
//!
//! A damaged file never panics the reader (`docs/records.md`, "A damaged
//! file"): the schema comes from the file's own Parquet schema, never from
//! the Arrow IPC blob a writer stores in its metadata (arrow-ipc asserts on
//! a damaged one); the footer's column chunks are checked against the
//! file's length before any page is read; and a panic left deep in the
//! third-party decoders is caught (`contain`) and returned as an error
//! naming the file.

mod columns;
mod contain;
mod json;
mod pages;
mod view;

use std::fs::{self, File};
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};

use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::reader::ChunkReader;

use crate::layout::{parse_date, IN_PROGRESS_SUFFIX, PART_EXTENSION};

pub use columns::{load_part, load_part_groups, load_part_reader, PartError};
pub use json::JsonLines;

/// Which calls to read: robots (any when empty) and a time range.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Robot names (`robot=` partition values); every robot when empty.
    pub robots: Vec<String>,
    /// Calls that started at or after this Unix time (ms).
    pub since_ms: Option<f64>,
    /// Calls that started before this Unix time (ms).
    pub until_ms: Option<f64>,
}

impl Selection {
    fn keeps_robot(&self, robot: Option<&str>) -> bool {
        match robot {
            Some(r) => self.robots.is_empty() || self.robots.iter().any(|x| x == r),
            // A file outside a robot partition is kept only without a robot filter.
            None => self.robots.is_empty(),
        }
    }

    fn keeps_day(&self, day: Option<i64>) -> bool {
        const DAY_MS: f64 = 86_400_000.0;
        let Some(day) = day else { return true };
        let start = day as f64 * DAY_MS;
        self.since_ms.is_none_or(|s| start + DAY_MS > s) && self.until_ms.is_none_or(|u| start < u)
    }

    pub(crate) fn keeps_time(&self, ts_ms: f64) -> bool {
        self.since_ms.is_none_or(|s| ts_ms >= s) && self.until_ms.is_none_or(|u| ts_ms < u)
    }
}

/// The files an input stands for.
#[derive(Debug, Default)]
pub struct Listing {
    /// Finished files the selection keeps, in path order.
    pub files: Vec<PathBuf>,
    /// Files a writer never finished (a crash, or a run still going): not read.
    pub unfinished: Vec<PathBuf>,
    /// Finished files left out by the robot or date partition.
    pub pruned: usize,
}

/// Why Parquet records could not be read.
#[derive(Debug)]
pub struct ReadError {
    /// The file or directory.
    pub path: PathBuf,
    /// What is wrong, and what to do.
    pub reason: String,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

impl std::error::Error for ReadError {}

/// Whether `path` holds Parquet records: a `.parquet` file, a file that
/// starts with Parquet's magic bytes, or a directory with a `.parquet`
/// file anywhere under it.
pub fn is_parquet(path: &Path) -> bool {
    if path.is_dir() {
        return walk(path).iter().any(|p| has_extension(p));
    }
    if has_extension(path) {
        return true;
    }
    // Regular files only: opening a FIFO to look would block.
    if !path.is_file() {
        return false;
    }
    let mut magic = [0u8; 4];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"PAR1")
}

/// The finished Parquet files under `path` that `sel` keeps.
pub fn list(path: &Path, sel: &Selection) -> Result<Listing, ReadError> {
    let mut out = Listing::default();
    if !path.is_dir() {
        fs::metadata(path).map_err(|e| ReadError {
            path: path.to_path_buf(),
            reason: format!("cannot read: {e}"),
        })?;
        out.files.push(path.to_path_buf());
        return Ok(out);
    }
    for file in walk(path) {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(IN_PROGRESS_SUFFIX) {
            out.unfinished.push(file);
        } else if has_extension(&file) {
            let rel = file.strip_prefix(path).unwrap_or(&file);
            let robot = partition(rel, "robot");
            let day = partition(rel, "date").and_then(|d| parse_date(&d));
            if sel.keeps_robot(robot.as_deref()) && sel.keeps_day(day) {
                out.files.push(file);
            } else {
                out.pruned += 1;
            }
        }
    }
    Ok(out)
}

/// Opens one file: its footer is read now, so a cut-short, damaged or
/// foreign file is refused here, by name. Pages are decoded as the result
/// is read; a page that cannot be decoded is an `InvalidData` error naming
/// the file ([`verify`] decodes them all up front).
pub fn open(path: &Path, sel: &Selection) -> Result<JsonLines, ReadError> {
    let file = File::open(path).map_err(|e| ReadError {
        path: path.to_path_buf(),
        reason: format!("cannot read: {e}"),
    })?;
    open_reader(path, file, sel)
}

/// [`open`] for a file already in memory (or any [`ChunkReader`]); `path`
/// names it in errors.
pub fn open_reader<R: ChunkReader + 'static>(
    path: &Path,
    reader: R,
    sel: &Selection,
) -> Result<JsonLines, ReadError> {
    let batches = batches(path, reader, |_| Plan::default())?;
    Ok(JsonLines::new(path.to_path_buf(), batches, sel.clone()))
}

/// What of a file is decoded: its row groups and leaf columns (`None`:
/// all), and the rows a batch holds.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) groups: Option<Vec<usize>>,
    pub(crate) columns: Option<ProjectionMask>,
    pub(crate) batch_rows: Option<usize>,
}

/// The file's batches, its footer read and checked now (`check_metadata`),
/// then the page headers of what `plan` decodes (`pages.rs`); a
/// cut-short, damaged or foreign file is refused here, by name.
pub(crate) fn batches<R: ChunkReader + 'static>(
    path: &Path,
    reader: R,
    plan: impl FnOnce(&ParquetMetaData) -> Plan + 'static,
) -> Result<ParquetRecordBatchReader, ReadError> {
    let refuse = |reason: String| ReadError {
        path: path.to_path_buf(),
        reason,
    };
    let not_readable = |e: String| {
        refuse(format!(
            "not a readable Parquet file ({e}): a file cut short by a crash has no footer; \
             delete or move it and read the others"
        ))
    };
    let len = reader.len();
    // The schema from the Parquet schema, not the stored Arrow IPC blob.
    let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
    let built = contain::contain(move || -> Result<_, (bool, String)> {
        let footer = |e: String| (false, e);
        let meta =
            ArrowReaderMetadata::load(&reader, options).map_err(|e| footer(e.to_string()))?;
        check_metadata(meta.metadata(), len).map_err(footer)?;
        let plan = plan(meta.metadata());
        // Before any page is decoded: a page header's lying size would
        // make the decoder reserve it (`pages.rs`).
        pages::check_pages(&reader, meta.metadata(), &plan).map_err(|e| (true, e))?;
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(reader, meta);
        if let Some(columns) = plan.columns {
            builder = builder.with_projection(columns);
        }
        if let Some(groups) = plan.groups {
            builder = builder.with_row_groups(groups);
        }
        if let Some(rows) = plan.batch_rows {
            builder = builder.with_batch_size(rows);
        }
        builder.build().map_err(|e| footer(e.to_string()))
    });
    match built {
        Ok(Ok(b)) => Ok(b),
        Ok(Err((false, e))) => Err(not_readable(e)),
        Ok(Err((true, e))) => Err(refuse(format!("damaged Parquet data ({e})"))),
        Err(panic) => Err(refuse(format!("damaged Parquet footer ({panic})"))),
    }
}

/// Decodes every page of the file at `path` and checks each column's type
/// against the record's, writing nothing: the number of rows, or what is
/// wrong. `stagetrace report` runs it on every file before reading any, so
/// a damaged file is skipped whole, never half-read.
pub fn verify(path: &Path) -> Result<u64, ReadError> {
    let mut lines = open(path, &Selection::default())?;
    lines.verify().map_err(|e| {
        // The reader's errors name the file first; the ReadError names it once.
        let text = e.to_string();
        let prefix = format!("{}: ", path.display());
        ReadError {
            path: path.to_path_buf(),
            reason: text.strip_prefix(&prefix).unwrap_or(&text).to_owned(),
        }
    })
}

/// How many calls the file at `path` holds, by its footer alone (no page
/// is read): what `stagetrace report` weighs against its memory budget
/// before loading. A cut-short or damaged footer is an error naming the
/// file, never a panic: the footer parser runs inside [`contain`], as the
/// rest of the reader does, since a damaged footer is untrusted bytes.
pub fn row_count(path: &Path) -> Result<u64, ReadError> {
    Ok(group_rows(path)?
        .iter()
        .fold(0u64, |sum, n| sum.saturating_add(*n)))
}

/// Calls a Parquet file is read in at most, a few row groups at a time,
/// when summarised (`stagetrace summarize`, Python's
/// `stagetrace.summarize`: the same chunks, so the same partitions'
/// verdict evidence): memory holds one chunk per core, whatever the
/// file's size.
pub const SUMMARY_CHUNK_CALLS: u64 = 262_144;

/// Consecutive row groups of at most `calls` calls together (a bigger
/// group alone).
pub fn group_chunks(groups: &[u64], calls: u64) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut held) = (0, 0u64);
    for (g, rows) in groups.iter().enumerate() {
        if g > start && held + rows > calls {
            out.push(start..g);
            (start, held) = (g, 0);
        }
        held += rows;
    }
    if start < groups.len() || groups.is_empty() {
        out.push(start..groups.len());
    }
    out
}

/// The rows of each row group of the Parquet file at `path`, read off its
/// footer alone (a big file is read a few groups at a time: [`load_part_groups`]).
/// A cut-short or damaged footer is an error naming the file, never a panic.
pub fn group_rows(path: &Path) -> Result<Vec<u64>, ReadError> {
    let refuse = |reason: String| ReadError {
        path: path.to_path_buf(),
        reason,
    };
    let file = File::open(path).map_err(|e| refuse(format!("cannot read: {e}")))?;
    let counted = contain::contain(move || -> Result<Vec<u64>, String> {
        let meta = ParquetMetaDataReader::new()
            .parse_and_finish(&file)
            .map_err(|e| e.to_string())?;
        // Each group's count checked: a negative one is damage, not a count.
        meta.row_groups()
            .iter()
            .map(|rg| {
                u64::try_from(rg.num_rows())
                    .map_err(|_| format!("a row group has {} rows", rg.num_rows()))
            })
            .collect()
    });
    match counted {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(refuse(format!("not a readable Parquet footer ({e})"))),
        Err(panic) => Err(refuse(format!("damaged Parquet footer ({panic})"))),
    }
}

/// What the footer says that the decoders would assert on or read beyond
/// the file for: every column chunk's byte range lies within the file, and
/// no count is negative.
fn check_metadata(meta: &ParquetMetaData, file_len: u64) -> Result<(), String> {
    let file_len = i64::try_from(file_len).unwrap_or(i64::MAX);
    for (g, rg) in meta.row_groups().iter().enumerate() {
        if rg.num_rows() < 0 {
            return Err(format!("row group {g} has {} rows", rg.num_rows()));
        }
        for col in rg.columns() {
            let name = col.column_path().string();
            let start = col
                .dictionary_page_offset()
                .unwrap_or(col.data_page_offset());
            let size = col.compressed_size();
            let within = start >= 0
                && size >= 0
                && start.checked_add(size).is_some_and(|end| end <= file_len);
            if !within {
                return Err(format!(
                    "column {name} of row group {g} lies at bytes {start}..+{size}, outside the \
                     file's {file_len} bytes"
                ));
            }
            if col.num_values() < 0 {
                return Err(format!(
                    "column {name} of row group {g} has {} values",
                    col.num_values()
                ));
            }
        }
    }
    Ok(())
}

fn has_extension(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == PART_EXTENSION)
}

/// The value of `key=` among the directories of `rel`.
fn partition(rel: &Path, key: &str) -> Option<String> {
    rel.parent()?.components().find_map(|c| {
        let s = c.as_os_str().to_str()?;
        let (k, v) = s.split_once('=')?;
        (k == key).then(|| v.to_owned())
    })
}

/// Every regular file under `dir`, sorted by path (directories that cannot
/// be listed are skipped: an unreadable corner of a tree does not hide the rest).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::group_chunks as chunks;

    #[test]
    fn row_groups_are_read_in_chunks_of_at_most_the_calls_given() {
        assert_eq!(chunks(&[10, 10, 10, 10, 10], 25), vec![0..2, 2..4, 4..5]);
        // A group bigger than a chunk goes alone.
        assert_eq!(chunks(&[5, 40, 5], 25), vec![0..1, 1..2, 2..3]);
        assert_eq!(chunks(&[30], 25), vec![0..1]);
        // A file of no row group: one empty chunk, read as no call.
        assert_eq!(chunks(&[], 25), vec![0..0]);
    }
}
