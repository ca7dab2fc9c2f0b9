//! Streaming reader for `records-*.jsonl` files.
//!
//! Files are read line by line through a reused buffer, never whole, and each
//! record lands in compact columns (one `f32` per figure per call), so files
//! of several GB fit in memory as ~70 bytes per call. Where each key of a
//! record goes comes from the schema's field table (`record.rs`). A
//! hand-rolled parser handles the flat objects the layer writes (`fast.rs`);
//! anything unusual (escapes, `null`, exponents it cannot do exactly) falls
//! back to `serde_json` (`slow.rs`), which also produces the message for a
//! corrupt line.

mod columns;
mod fast;
mod hop_columns;
mod notes;
mod part;
mod range;
mod record;
mod row;
mod slow;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use stagetrace_schema::{Figure, FIGURE_COUNT};

pub use columns::{Column, ColumnBatch, HopColumn, Valid};
pub use hop_columns::HopFig;
pub use notes::{LoadError, LoadNotes};
pub use part::{FilePart, LineChunks};
pub use row::{Cell, Row};

pub(crate) use hop_columns::RawHops;

use record::{layout, BadLine, RawRecord};

/// Most distinct failure reasons counted; further reasons count as "other".
const MAX_ERRORS: usize = 32;
/// Most skipped lines remembered with their position (all are counted).
const MAX_SKIPPED_SHOWN: usize = 20;

/// How to load records.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Skip corrupt lines (counting them) instead of stopping at the first.
    pub skip_bad: bool,
    /// Keep each record's `output_digest` (for `compare`).
    pub keep_digests: bool,
}

/// A call's `batch_size`, `cache`, `stale_dropped` and `dry_ticks`, when its
/// record has any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mitigated {
    /// Index of the call in the dataset.
    pub(crate) call: u32,
    /// `batch_size` (0: absent).
    pub(crate) batch: u32,
    /// `cache`: `Some(true)` hit, `Some(false)` miss.
    pub(crate) cache_hit: Option<bool>,
    /// `stale_dropped` (0: absent).
    pub(crate) stale: u32,
    /// `dry_ticks` (0: absent): control ticks without an action before the
    /// call's chunk came (async inference).
    pub(crate) dry: u32,
}

/// Flag bits per call.
pub(crate) const F_WARMUP: u8 = 1;
pub(crate) const F_FAILED: u8 = 2;
pub(crate) const F_DEADLINE_MISS: u8 = 4;
pub(crate) const F_HAS_DEADLINE: u8 = 8;

/// All calls of one or more record files, as columns.
#[derive(Debug, Default)]
pub struct Dataset {
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// Index of the first call of each file (`files[j]`'s calls are
    /// `file_starts[j]..file_starts[j + 1]`): a fleet report tells its
    /// robots apart by the files they wrote.
    pub(crate) file_starts: Vec<usize>,
    pub(crate) seq: Vec<u64>,
    pub(crate) ts: Vec<f64>,
    pub(crate) kind: Vec<u16>,
    pub(crate) flags: Vec<u8>,
    /// `columns[f.index()][call]` (ms), NaN where the record lacks the
    /// figure. A column is empty until a call has its figure (then as long
    /// as the dataset, NaN before): a figure no call has costs no memory,
    /// and readers use `get`, never an index.
    pub(crate) columns: Vec<Vec<f32>>,
    pub(crate) kinds: Vec<String>,
    /// `(call index, digest)` for calls that carry an output digest.
    pub(crate) digests: Vec<(u32, Box<str>)>,
    /// What the mitigations did, for the calls whose records say (sparse:
    /// nothing for runs without batcher, cache or stale filter).
    pub(crate) mitigated: Vec<Mitigated>,
    /// The `hops` of calls through gateways, per hop (empty without).
    pub(crate) hops: hop_columns::HopColumns,
    /// The robot's voluntary switches per call (NaN: absent); empty while
    /// no record has them.
    pub(crate) vol_switches: Vec<f32>,
    /// Failure reasons and how often each occurred.
    pub errors: Vec<(String, u64)>,
    /// What the reader met on the way.
    pub notes: LoadNotes,
}

impl Dataset {
    /// Reads record files (`records-*.jsonl`) into columns.
    ///
    /// Stops at the first corrupt line unless `opts.skip_bad`; tolerates a
    /// cut-short last line; an input with no record at all is an error.
    pub fn load<P: AsRef<Path>>(paths: &[P], opts: LoadOptions) -> Result<Dataset, LoadError> {
        let mut ds = Dataset::empty();
        let mut errors: HashMap<String, u64> = HashMap::new();
        for p in paths {
            let path = p.as_ref();
            let file = File::open(path).map_err(|source| LoadError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            ds.read_from(file, path, opts, &mut errors)?;
        }
        ds.finish(errors);
        if ds.is_empty() {
            return Err(LoadError::Empty { paths: ds.files });
        }
        Ok(ds)
    }

    /// Reads records from any reader (named `name` in messages).
    pub fn load_reader<R: Read>(
        reader: R,
        name: &Path,
        opts: LoadOptions,
    ) -> Result<Dataset, LoadError> {
        let mut ds = Dataset::empty();
        let mut errors = HashMap::new();
        ds.read_from(reader, name, opts, &mut errors)?;
        ds.finish(errors);
        if ds.is_empty() {
            return Err(LoadError::Empty { paths: ds.files });
        }
        Ok(ds)
    }

    /// Reads records from named sources, in order, as [`load`](Self::load)
    /// reads files: each source is one file of the dataset (its name in
    /// messages and in [`files`](Self::files)). For records that reach the
    /// reader as JSON lines from elsewhere (a Parquet file, decoded).
    pub fn load_sources<R: Read>(
        sources: impl IntoIterator<Item = Result<(PathBuf, R), LoadError>>,
        opts: LoadOptions,
    ) -> Result<Dataset, LoadError> {
        let mut ds = Dataset::empty();
        let mut errors = HashMap::new();
        for source in sources {
            let (name, reader) = source?;
            ds.read_from(reader, &name, opts, &mut errors)?;
        }
        ds.finish(errors);
        if ds.is_empty() {
            return Err(LoadError::Empty { paths: ds.files });
        }
        Ok(ds)
    }

    fn empty() -> Dataset {
        Dataset {
            columns: vec![Vec::new(); FIGURE_COUNT],
            ..Dataset::default()
        }
    }

    fn finish(&mut self, errors: HashMap<String, u64>) {
        let mut e: Vec<(String, u64)> = errors.into_iter().collect();
        e.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        self.errors = e;
    }

    fn read_from<R: Read>(
        &mut self,
        reader: R,
        path: &Path,
        opts: LoadOptions,
        errors: &mut HashMap<String, u64>,
    ) -> Result<(), LoadError> {
        self.files.push(path.to_path_buf());
        self.file_starts.push(self.len());
        let before = self.len();
        let mut reader = BufReader::with_capacity(1 << 20, reader);
        let mut line_no = 0;
        self.read_lines(&mut reader, path, opts, errors, &mut line_no, u64::MAX)?;
        if self.len() == before {
            self.notes.empty_files.push(path.to_path_buf());
        }
        Ok(())
    }

    /// Reads at most `max` lines of `path` from `reader` (`line_no`: the
    /// lines read before, so a line is named by its place in the file);
    /// true at the end of the file.
    fn read_lines<R: BufRead>(
        &mut self,
        reader: &mut R,
        path: &Path,
        opts: LoadOptions,
        errors: &mut HashMap<String, u64>,
        line_no: &mut u64,
        max: u64,
    ) -> Result<bool, LoadError> {
        let mut buf: Vec<u8> = Vec::with_capacity(1024);
        let mut raw = RawRecord::default();
        let mut read = 0u64;
        while read < max {
            buf.clear();
            let n = reader
                .read_until(b'\n', &mut buf)
                .map_err(|source| LoadError::Io {
                    path: path.to_path_buf(),
                    source,
                })?;
            if n == 0 {
                return Ok(true);
            }
            read += 1;
            *line_no += 1;
            let line_no = *line_no;
            self.notes.lines += 1;
            let complete = buf.last() == Some(&b'\n');
            let mut line: &[u8] = &buf;
            while let Some((last, rest)) = line.split_last() {
                if last.is_ascii_whitespace() {
                    line = rest;
                } else {
                    break;
                }
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match parse_record(line, &mut raw) {
                Ok(()) => self.push(&raw, opts, errors),
                Err(BadLine {
                    reason,
                    broken_json,
                }) => {
                    if !complete && broken_json {
                        // A final line without its newline: the writer died mid-line.
                        self.notes.truncated.push(path.to_path_buf());
                    } else if opts.skip_bad {
                        self.notes.skipped += 1;
                        if self.notes.skipped_examples.len() < MAX_SKIPPED_SHOWN {
                            self.notes
                                .skipped_examples
                                .push(format!("{}:{line_no}: {reason}", path.display()));
                        }
                    } else {
                        return Err(LoadError::Corrupt {
                            path: path.to_path_buf(),
                            line: line_no,
                            reason,
                        });
                    }
                }
            }
        }
        // At the end exactly when nothing follows.
        Ok(reader.fill_buf().map(<[u8]>::is_empty).unwrap_or(false))
    }

    fn push(&mut self, raw: &RawRecord, opts: LoadOptions, errors: &mut HashMap<String, u64>) {
        let idx = self.len();
        self.seq.push(raw.seq);
        self.ts.push(raw.ts);
        let kind = self.intern_kind(&raw.kind);
        self.kind.push(kind);
        let mut flags = 0;
        if raw.warmup {
            flags |= F_WARMUP;
        }
        if raw.failed {
            flags |= F_FAILED;
            let reason = if errors.len() < MAX_ERRORS || errors.contains_key(&raw.error) {
                raw.error.clone()
            } else {
                "other".to_string()
            };
            *errors.entry(reason).or_insert(0) += 1;
        }
        if let Some(miss) = raw.deadline_miss {
            flags |= F_HAS_DEADLINE;
            if miss {
                flags |= F_DEADLINE_MISS;
            }
        }
        self.flags.push(flags);
        let reads = &layout().reads;
        for ((col, v), read) in self.columns.iter_mut().zip(raw.values).zip(reads) {
            if *read && !(v.is_nan() && col.is_empty()) {
                // The first call with this figure: the calls before lack it.
                col.resize(idx, f32::NAN);
                col.push(v as f32);
            }
        }
        if opts.keep_digests && raw.has_digest {
            let i = u32::try_from(idx).unwrap_or(u32::MAX);
            self.digests.push((i, raw.digest.clone().into_boxed_str()));
        }
        if raw.hops.hops > 0 || self.hops.hops() > 0 {
            self.hops.push(idx, &raw.hops);
        }
        if raw.vol_switches.is_some() || !self.vol_switches.is_empty() {
            // Calls before the first record with them: absent.
            self.vol_switches.resize(idx, f32::NAN);
            self.vol_switches
                .push(raw.vol_switches.map_or(f32::NAN, |n| n as f32));
        }
        if raw.batch > 0 || raw.cache_hit.is_some() || raw.stale > 0 || raw.dry > 0 {
            self.mitigated.push(Mitigated {
                call: u32::try_from(idx).unwrap_or(u32::MAX),
                batch: raw.batch,
                cache_hit: raw.cache_hit,
                stale: raw.stale,
                dry: raw.dry,
            });
        }
    }

    pub(super) fn intern_kind(&mut self, kind: &str) -> u16 {
        if let Some(&last) = self.kind.last() {
            if self.kinds.get(usize::from(last)).is_some_and(|k| k == kind) {
                return last;
            }
        }
        let (i, pooled) = self.kind_slot(kind);
        self.notes.pooled_kinds += u64::from(pooled);
        i
    }

    /// Number of calls read (warm-up and failed ones included).
    pub fn len(&self) -> usize {
        self.seq.len()
    }

    /// The calls (indices) read from `files[file]`; empty past the last file.
    pub fn file_calls(&self, file: usize) -> std::ops::Range<usize> {
        let start = self.file_starts.get(file).copied().unwrap_or(self.len());
        let end = self
            .file_starts
            .get(file + 1)
            .copied()
            .unwrap_or(self.len());
        start..end
    }

    /// True when no call was read.
    pub fn is_empty(&self) -> bool {
        self.seq.is_empty()
    }

    /// The distinct `kind`s, in order of first appearance.
    pub fn kinds(&self) -> &[String] {
        &self.kinds
    }

    /// The value of `figure` for call `i` in ms, when the record carries it
    /// (every figure of the table; the analysis tables those of
    /// [`crate::figures::read`]).
    pub fn value(&self, figure: Figure, i: usize) -> Option<f64> {
        let v = *self.columns.get(figure.index())?.get(i)?;
        if v.is_nan() {
            None
        } else {
            Some(f64::from(v))
        }
    }

    /// Hops of the widest `hops` array read (0: no call went through a gateway).
    pub fn hop_count(&self) -> usize {
        self.hops.hops()
    }

    /// `fig` of `hop` (0: robot → first gateway) for call `i` in ms, when
    /// the record's `hops` carries it.
    pub fn hop_value(&self, hop: usize, fig: HopFig, i: usize) -> Option<f64> {
        let v = *self.hops.column(hop, fig).get(i)?;
        (!v.is_nan()).then_some(f64::from(v))
    }

    /// `seq` of call `i`.
    pub fn seq(&self, i: usize) -> u64 {
        self.seq.get(i).copied().unwrap_or(0)
    }

    /// `ts_unix_ms` of call `i`.
    pub fn ts_unix_ms(&self, i: usize) -> f64 {
        self.ts.get(i).copied().unwrap_or(0.0)
    }

    /// The `kind` of call `i`.
    pub fn kind_of(&self, i: usize) -> &str {
        self.kind
            .get(i)
            .and_then(|k| self.kinds.get(usize::from(*k)))
            .map_or("call", String::as_str)
    }

    /// True for warm-up calls.
    pub fn is_warmup(&self, i: usize) -> bool {
        self.flags.get(i).is_some_and(|f| f & F_WARMUP != 0)
    }

    /// True for failed calls.
    pub fn is_failed(&self, i: usize) -> bool {
        self.flags.get(i).is_some_and(|f| f & F_FAILED != 0)
    }

    /// `(call index, output digest)` for calls that carry one
    /// (only when loaded with `keep_digests`).
    pub fn digests(&self) -> impl Iterator<Item = (usize, &str)> + '_ {
        self.digests.iter().map(|(i, d)| (*i as usize, &**d))
    }
}

/// Parses one line; `Err` carries a message naming what is wrong.
pub(crate) fn parse_record(line: &[u8], out: &mut RawRecord) -> Result<(), BadLine> {
    out.reset();
    if fast::parse(line, out).is_some() {
        return Ok(());
    }
    out.reset();
    slow::parse(line, out)
}
