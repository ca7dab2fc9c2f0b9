//! Streaming reader for `records-*.jsonl` files.
//!
//! Files are read line by line through a reused buffer, never whole, and each
//! record lands in compact columns (one `f32` per figure per call), so files
//! of several GB fit in memory as ~70 bytes per call. A hand-rolled parser
//! handles the flat objects the layer writes; anything unusual (escapes,
//! `null`, exponents it cannot do exactly) falls back to `serde_json`, which
//! also produces the message for a corrupt line.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::metric::{Metric, METRIC_COUNT};

/// Most distinct `kind` values kept apart; further kinds share one bucket.
const MAX_KINDS: usize = 256;
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

/// A call's `batch_size`, `cache` and `stale_dropped`, when its record has any.
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
    pub(crate) seq: Vec<u64>,
    pub(crate) ts: Vec<f64>,
    pub(crate) kind: Vec<u16>,
    pub(crate) flags: Vec<u8>,
    /// `columns[m.index()][call]`, NaN where the record lacks the field.
    pub(crate) columns: Vec<Vec<f32>>,
    pub(crate) kinds: Vec<String>,
    /// `(call index, digest)` for calls that carry an output digest.
    pub(crate) digests: Vec<(u32, Box<str>)>,
    /// What the mitigations did, for the calls whose records say (sparse:
    /// nothing for runs without batcher, cache or stale filter).
    pub(crate) mitigated: Vec<Mitigated>,
    /// Failure reasons and how often each occurred.
    pub errors: Vec<(String, u64)>,
    /// What the reader met on the way.
    pub notes: LoadNotes,
}

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

    fn empty() -> Dataset {
        Dataset {
            columns: vec![Vec::new(); METRIC_COUNT],
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
        let before = self.len();
        let mut reader = BufReader::with_capacity(1 << 20, reader);
        let mut buf: Vec<u8> = Vec::with_capacity(1024);
        let mut raw = RawRecord::default();
        let mut line_no: u64 = 0;
        loop {
            buf.clear();
            let n = reader
                .read_until(b'\n', &mut buf)
                .map_err(|source| LoadError::Io {
                    path: path.to_path_buf(),
                    source,
                })?;
            if n == 0 {
                break;
            }
            line_no += 1;
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
                Err(reason) => {
                    if !complete {
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
        if self.len() == before {
            self.notes.empty_files.push(path.to_path_buf());
        }
        Ok(())
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
        for (col, v) in self.columns.iter_mut().zip(raw.values.iter()) {
            col.push(*v as f32);
        }
        if opts.keep_digests && raw.has_digest {
            let i = u32::try_from(idx).unwrap_or(u32::MAX);
            self.digests.push((i, raw.digest.clone().into_boxed_str()));
        }
        if raw.batch > 0 || raw.cache_hit.is_some() || raw.stale > 0 {
            self.mitigated.push(Mitigated {
                call: u32::try_from(idx).unwrap_or(u32::MAX),
                batch: raw.batch,
                cache_hit: raw.cache_hit,
                stale: raw.stale,
            });
        }
    }

    fn intern_kind(&mut self, kind: &str) -> u16 {
        if let Some(&last) = self.kind.last() {
            if self.kinds.get(usize::from(last)).is_some_and(|k| k == kind) {
                return last;
            }
        }
        if let Some(i) = self.kinds.iter().position(|k| k == kind) {
            return i as u16;
        }
        if self.kinds.len() + 1 < MAX_KINDS {
            self.kinds.push(kind.to_string());
            return (self.kinds.len() - 1) as u16;
        }
        self.notes.pooled_kinds += 1;
        if let Some(i) = self.kinds.iter().position(|k| k == "other") {
            return i as u16;
        }
        self.kinds.push("other".to_string());
        (self.kinds.len() - 1) as u16
    }

    /// Number of calls read (warm-up and failed ones included).
    pub fn len(&self) -> usize {
        self.seq.len()
    }

    /// True when no call was read.
    pub fn is_empty(&self) -> bool {
        self.seq.is_empty()
    }

    /// The distinct `kind`s, in order of first appearance.
    pub fn kinds(&self) -> &[String] {
        &self.kinds
    }

    /// The value of `metric` for call `i`, when the record carries it.
    pub fn value(&self, metric: Metric, i: usize) -> Option<f64> {
        let v = *self.columns.get(metric.index())?.get(i)?;
        if v.is_nan() {
            None
        } else {
            Some(f64::from(v))
        }
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

/// One parsed record: only what the analysis uses.
#[derive(Debug)]
pub(crate) struct RawRecord {
    pub(crate) seq: u64,
    pub(crate) ts: f64,
    pub(crate) kind: String,
    pub(crate) values: [f64; METRIC_COUNT],
    pub(crate) warmup: bool,
    pub(crate) failed: bool,
    pub(crate) deadline_miss: Option<bool>,
    pub(crate) error: String,
    pub(crate) has_digest: bool,
    pub(crate) digest: String,
    /// `batch_size`, 0 when absent.
    pub(crate) batch: u32,
    /// `cache`: `Some(true)` for `"hit"`, `Some(false)` for `"miss"`.
    pub(crate) cache_hit: Option<bool>,
    /// `stale_dropped`, 0 when absent.
    pub(crate) stale: u32,
}

impl Default for RawRecord {
    fn default() -> Self {
        RawRecord {
            seq: 0,
            ts: 0.0,
            kind: String::new(),
            values: [f64::NAN; METRIC_COUNT],
            warmup: false,
            failed: false,
            deadline_miss: None,
            error: String::new(),
            has_digest: false,
            digest: String::new(),
            batch: 0,
            cache_hit: None,
            stale: 0,
        }
    }
}

impl RawRecord {
    fn reset(&mut self) {
        self.seq = 0;
        self.ts = 0.0;
        self.kind.clear();
        self.values = [f64::NAN; METRIC_COUNT];
        self.warmup = false;
        self.failed = false;
        self.deadline_miss = None;
        self.error.clear();
        self.has_digest = false;
        self.digest.clear();
        self.batch = 0;
        self.cache_hit = None;
        self.stale = 0;
    }
}

/// A positive count from a record field; anything else (not an integer,
/// out of range) is not a count and is ignored, as unknown fields are.
fn count_of(v: Option<u64>) -> u32 {
    v.and_then(|n| u32::try_from(n).ok()).unwrap_or(0)
}

/// `Some(true)` for `"hit"`, `Some(false)` for `"miss"`, else `None`.
fn cache_of(s: &[u8]) -> Option<bool> {
    match s {
        b"hit" => Some(true),
        b"miss" => Some(false),
        _ => None,
    }
}

/// Parses one line; `Err` carries a message naming what is wrong.
pub(crate) fn parse_record(line: &[u8], out: &mut RawRecord) -> Result<(), String> {
    out.reset();
    if fast::parse(line, out).is_some() {
        return Ok(());
    }
    out.reset();
    slow_parse(line, out)
}

/// The record as `serde_json` sees it (fallback path and error messages).
#[derive(Deserialize)]
struct SerdeRecord {
    seq: u64,
    ts_unix_ms: f64,
    kind: String,
    capture_ms: Option<f64>,
    uplink_ms: Option<f64>,
    queue_ms: Option<f64>,
    infer_ms: Option<f64>,
    downlink_ms: Option<f64>,
    dispatch_ms: Option<f64>,
    roundtrip_ms: Option<f64>,
    server_ms: Option<f64>,
    net_ms: Option<f64>,
    e2e_ms: f64,
    gap_ms: Option<f64>,
    observer_us: Option<f64>,
    late_ms: Option<f64>,
    deadline_miss: Option<bool>,
    warmup: Option<bool>,
    failed: Option<bool>,
    error: Option<String>,
    output_digest: Option<String>,
    // Read loosely: a value of another type is ignored, not a corrupt line.
    batch_size: Option<serde_json::Value>,
    cache: Option<serde_json::Value>,
    stale_dropped: Option<serde_json::Value>,
}

fn slow_parse(line: &[u8], out: &mut RawRecord) -> Result<(), String> {
    let r: SerdeRecord = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    out.seq = r.seq;
    out.ts = r.ts_unix_ms;
    out.kind = r.kind;
    let set = |m: Metric, v: Option<f64>, out: &mut RawRecord| {
        if let Some(v) = v {
            out.values[m.index()] = v;
        }
    };
    set(Metric::Capture, r.capture_ms, out);
    set(Metric::Uplink, r.uplink_ms, out);
    set(Metric::Queue, r.queue_ms, out);
    set(Metric::Infer, r.infer_ms, out);
    set(Metric::Downlink, r.downlink_ms, out);
    set(Metric::Dispatch, r.dispatch_ms, out);
    set(Metric::Roundtrip, r.roundtrip_ms, out);
    set(Metric::Server, r.server_ms, out);
    set(Metric::Net, r.net_ms, out);
    set(Metric::E2e, Some(r.e2e_ms), out);
    set(Metric::Gap, r.gap_ms, out);
    set(Metric::Observer, r.observer_us.map(|us| us / 1000.0), out);
    set(Metric::Late, r.late_ms, out);
    out.deadline_miss = r.deadline_miss;
    out.warmup = r.warmup == Some(true);
    out.failed = r.failed == Some(true);
    out.error = r.error.unwrap_or_default();
    if let Some(d) = r.output_digest {
        out.has_digest = true;
        out.digest = d;
    }
    out.batch = count_of(r.batch_size.as_ref().and_then(serde_json::Value::as_u64));
    out.cache_hit = r
        .cache
        .as_ref()
        .and_then(serde_json::Value::as_str)
        .and_then(|s| cache_of(s.as_bytes()));
    out.stale = count_of(r.stale_dropped.as_ref().and_then(serde_json::Value::as_u64));
    validate(out)
}

fn validate(out: &RawRecord) -> Result<(), String> {
    if !out.ts.is_finite() || out.ts < 0.0 {
        return Err(format!("ts_unix_ms is {} (must be ≥ 0)", out.ts));
    }
    if out.kind.is_empty() {
        return Err("kind is empty (must name the request kind, \"call\" by default)".into());
    }
    for m in Metric::ALL {
        let v = out.values[m.index()];
        if v.is_infinite() {
            return Err(format!("{m} is not finite"));
        }
    }
    Ok(())
}

/// Fast path for the flat objects the layer writes. Returns `None` to hand
/// the line to `serde_json` (which then either parses it or explains why not).
mod fast {
    use super::{cache_of, count_of, validate, RawRecord};
    use crate::metric::Metric;

    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];

    struct Cursor<'a> {
        b: &'a [u8],
        i: usize,
    }

    impl<'a> Cursor<'a> {
        #[inline]
        fn ws(&mut self) {
            while let Some(c) = self.b.get(self.i) {
                if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                    self.i += 1;
                } else {
                    break;
                }
            }
        }

        #[inline]
        fn peek(&self) -> Option<u8> {
            self.b.get(self.i).copied()
        }

        #[inline]
        fn eat(&mut self, c: u8) -> Option<()> {
            if self.peek()? == c {
                self.i += 1;
                Some(())
            } else {
                None
            }
        }

        /// A string without escapes; its bytes between the quotes.
        #[inline]
        fn plain_str(&mut self) -> Option<&'a [u8]> {
            self.eat(b'"')?;
            let start = self.i;
            let rest = self.b.get(start..)?;
            let len = string_stop(rest)?;
            if rest.get(len) != Some(&b'"') {
                return None;
            }
            self.i = start + len + 1;
            self.b.get(start..start + len)
        }

        fn literal(&mut self, lit: &[u8]) -> Option<()> {
            let end = self.i + lit.len();
            if self.b.get(self.i..end)? == lit {
                self.i = end;
                Some(())
            } else {
                None
            }
        }

        fn bool(&mut self) -> Option<bool> {
            match self.peek()? {
                b't' => self.literal(b"true").map(|_| true),
                b'f' => self.literal(b"false").map(|_| false),
                _ => None,
            }
        }

        fn u64(&mut self) -> Option<u64> {
            let start = self.i;
            let mut v: u64 = 0;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                self.i += 1;
            }
            let len = self.i - start;
            if len == 0 || (len > 1 && self.b.get(start) == Some(&b'0')) {
                return None;
            }
            Some(v)
        }

        /// A JSON number, exact: the fast path only when the decimal fits
        /// Clinger's exact case, else the standard library's parser.
        fn f64(&mut self) -> Option<f64> {
            let start = self.i;
            let neg = self.eat(b'-').is_some();
            let int_start = self.i;
            let mut mant: u64 = 0;
            let mut digits = 0u32;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                mant = mant.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
                digits += 1;
                self.i += 1;
            }
            let int_len = self.i - int_start;
            if int_len == 0 || (int_len > 1 && self.b.get(int_start) == Some(&b'0')) {
                return None;
            }
            let mut frac = 0usize;
            if self.eat(b'.').is_some() {
                while let Some(c @ b'0'..=b'9') = self.peek() {
                    mant = mant.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
                    digits += 1;
                    frac += 1;
                    self.i += 1;
                }
                if frac == 0 {
                    return None;
                }
            }
            let exp = matches!(self.peek(), Some(b'e' | b'E'));
            if !exp && digits <= 19 && mant <= (1u64 << 53) && frac < POW10.len() {
                let v = mant as f64 / POW10[frac];
                return Some(if neg { -v } else { v });
            }
            if exp {
                self.i += 1;
                if matches!(self.peek(), Some(b'+' | b'-')) {
                    self.i += 1;
                }
                let e_start = self.i;
                while let Some(b'0'..=b'9') = self.peek() {
                    self.i += 1;
                }
                if self.i == e_start {
                    return None;
                }
            }
            let s = std::str::from_utf8(self.b.get(start..self.i)?).ok()?;
            s.parse::<f64>().ok().filter(|v| v.is_finite())
        }

        /// Skips any JSON value (for fields this reader does not use).
        fn skip_value(&mut self) -> Option<()> {
            match self.peek()? {
                b'"' => self.skip_string(),
                b'{' | b'[' => {
                    let mut depth = 0usize;
                    loop {
                        match self.peek()? {
                            b'"' => self.skip_string()?,
                            b'{' | b'[' => {
                                depth += 1;
                                self.i += 1;
                            }
                            b'}' | b']' => {
                                depth -= 1;
                                self.i += 1;
                                if depth == 0 {
                                    return Some(());
                                }
                            }
                            _ => self.i += 1,
                        }
                    }
                }
                b't' => self.literal(b"true"),
                b'f' => self.literal(b"false"),
                b'n' => self.literal(b"null"),
                _ => self.f64().map(|_| ()),
            }
        }

        fn skip_string(&mut self) -> Option<()> {
            self.eat(b'"')?;
            loop {
                self.i += string_stop(self.b.get(self.i..)?)?;
                match self.peek()? {
                    b'"' => {
                        self.i += 1;
                        return Some(());
                    }
                    b'\\' => self.i += 2,
                    c if c < 0x20 => return None,
                    _ => self.i += 1,
                }
            }
        }
    }

    /// Index of the first `"`, `\` or control byte (which end or complicate
    /// a JSON string), eight bytes at a time.
    #[inline]
    pub(super) fn string_stop(b: &[u8]) -> Option<usize> {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let mut i = 0;
        while let Some(chunk) = b.get(i..i + 8) {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(chunk);
            let w = u64::from_le_bytes(bytes);
            let q = w ^ (ONES * u64::from(b'"'));
            let bs = w ^ (ONES * u64::from(b'\\'));
            let hit = (q.wrapping_sub(ONES) & !q)
                | (bs.wrapping_sub(ONES) & !bs)
                | (w.wrapping_sub(ONES * 0x20) & !w);
            let hit = hit & HIGH;
            if hit != 0 {
                return Some(i + (hit.trailing_zeros() / 8) as usize);
            }
            i += 8;
        }
        b.get(i..)?
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
            .map(|p| i + p)
    }

    fn metric_for_key(key: &[u8]) -> Option<Metric> {
        Some(match key {
            b"capture_ms" => Metric::Capture,
            b"uplink_ms" => Metric::Uplink,
            b"queue_ms" => Metric::Queue,
            b"infer_ms" => Metric::Infer,
            b"downlink_ms" => Metric::Downlink,
            b"dispatch_ms" => Metric::Dispatch,
            b"roundtrip_ms" => Metric::Roundtrip,
            b"server_ms" => Metric::Server,
            b"net_ms" => Metric::Net,
            b"e2e_ms" => Metric::E2e,
            b"gap_ms" => Metric::Gap,
            b"observer_us" => Metric::Observer,
            b"late_ms" => Metric::Late,
            _ => return None,
        })
    }

    pub(super) fn parse(line: &[u8], out: &mut RawRecord) -> Option<()> {
        let mut c = Cursor { b: line, i: 0 };
        let (mut has_seq, mut has_ts, mut has_kind, mut has_e2e) = (false, false, false, false);
        c.ws();
        c.eat(b'{')?;
        c.ws();
        if c.peek()? == b'}' {
            return None;
        }
        loop {
            c.ws();
            let key = c.plain_str()?;
            c.ws();
            c.eat(b':')?;
            c.ws();
            if let Some(m) = metric_for_key(key) {
                let v = c.f64()?;
                out.values[m.index()] = if m == Metric::Observer { v / 1000.0 } else { v };
                has_e2e |= m == Metric::E2e;
            } else {
                match key {
                    b"seq" => {
                        out.seq = c.u64()?;
                        has_seq = true;
                    }
                    b"ts_unix_ms" => {
                        out.ts = c.f64()?;
                        has_ts = true;
                    }
                    b"kind" => {
                        let s = std::str::from_utf8(c.plain_str()?).ok()?;
                        out.kind.clear();
                        out.kind.push_str(s);
                        has_kind = true;
                    }
                    b"warmup" => out.warmup = c.bool()?,
                    b"failed" => out.failed = c.bool()?,
                    b"deadline_miss" => out.deadline_miss = Some(c.bool()?),
                    b"error" => {
                        let s = std::str::from_utf8(c.plain_str()?).ok()?;
                        out.error.clear();
                        out.error.push_str(s);
                    }
                    b"output_digest" => {
                        let s = std::str::from_utf8(c.plain_str()?).ok()?;
                        out.digest.clear();
                        out.digest.push_str(s);
                        out.has_digest = true;
                    }
                    // Anything unusual in these goes to serde (read loosely there).
                    b"batch_size" => out.batch = count_of(Some(c.u64()?)),
                    b"stale_dropped" => out.stale = count_of(Some(c.u64()?)),
                    b"cache" => out.cache_hit = cache_of(c.plain_str()?),
                    _ => c.skip_value()?,
                }
            }
            c.ws();
            match c.peek()? {
                b',' => c.i += 1,
                b'}' => {
                    c.i += 1;
                    break;
                }
                _ => return None,
            }
        }
        c.ws();
        if c.i != line.len() || !(has_seq && has_ts && has_kind && has_e2e) {
            return None;
        }
        validate(out).ok()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<RawRecord, String> {
        let mut r = RawRecord::default();
        parse_record(s.as_bytes(), &mut r).map(|_| r)
    }

    #[test]
    fn fast_and_slow_paths_agree() {
        let line = r#"{"seq":7,"ts_unix_ms":1700000000123.456,"kind":"infer","infer_ms":12.345,"e2e_ms":20.5,"observer_us":3.25,"warmup":true,"extra":{"a":[1,2,{"b":"}"}]},"output_digest":"ab12"}"#;
        let mut fast_r = RawRecord::default();
        assert!(fast::parse(line.as_bytes(), &mut fast_r).is_some());
        let mut slow_r = RawRecord::default();
        slow_parse(line.as_bytes(), &mut slow_r).unwrap();
        assert_eq!(fast_r.seq, 7);
        assert_eq!(fast_r.ts, slow_r.ts);
        assert_eq!(fast_r.kind, "infer");
        assert_eq!(fast_r.values[Metric::Infer.index()], 12.345);
        assert_eq!(
            fast_r.values[Metric::Observer.index()],
            slow_r.values[Metric::Observer.index()]
        );
        assert!(fast_r.warmup && slow_r.warmup);
        assert_eq!(fast_r.digest, "ab12");
        assert!(fast_r.values[Metric::Capture.index()].is_nan());
    }

    #[test]
    fn mitigation_fields_are_tolerated_by_both_paths() {
        // What a batched / cached / stale-filtering run writes (issue 7).
        let line = r#"{"seq":3,"ts_unix_ms":1700000000000.5,"kind":"call","queue_ms":0.062,"infer_ms":30.041,"e2e_ms":31.2,"failed":true,"error":"stale action dropped","output_digest":"ab","batch_size":4,"cache":"miss","stale_dropped":1}"#;
        let mut fast_r = RawRecord::default();
        assert!(fast::parse(line.as_bytes(), &mut fast_r).is_some());
        let mut slow_r = RawRecord::default();
        slow_parse(line.as_bytes(), &mut slow_r).unwrap();
        for r in [&fast_r, &slow_r] {
            assert_eq!((r.seq, r.kind.as_str()), (3, "call"));
            assert_eq!(r.values[Metric::Infer.index()], 30.041);
            assert_eq!(r.values[Metric::Queue.index()], 0.062);
            assert!(r.failed && r.error == "stale action dropped");
            assert_eq!(r.digest, "ab");
            assert_eq!((r.batch, r.cache_hit, r.stale), (4, Some(false), 1));
        }
        // Odd values are ignored, not a corrupt line.
        let odd = line
            .replace(r#""batch_size":4"#, r#""batch_size":2.5"#)
            .replace(r#""cache":"miss""#, r#""cache":"warm""#);
        let r = parse(&odd).unwrap();
        assert_eq!((r.batch, r.cache_hit, r.stale), (0, None, 1));
        let ds = Dataset::load_reader(
            format!(
                "{line}\n{}\n",
                line.replace(r#""cache":"miss""#, r#""cache":"hit""#)
            )
            .as_bytes(),
            Path::new("mitigated.jsonl"),
            LoadOptions::default(),
        )
        .unwrap();
        assert_eq!(ds.len(), 2);
        assert_eq!(ds.notes.skipped, 0);
    }

    #[test]
    fn escapes_and_exponents_go_through_serde() {
        let r = parse(r#"{"seq":1,"ts_unix_ms":1.5e3,"kind":"k\u0041","e2e_ms":2E-1,"failed":true,"error":"a\"b"}"#).unwrap();
        assert_eq!(r.kind, "kA");
        assert_eq!(r.ts, 1500.0);
        assert_eq!(r.values[Metric::E2e.index()], 0.2);
        assert_eq!(r.error, "a\"b");
    }

    #[test]
    fn corrupt_lines_are_explained() {
        assert!(parse(r#"{"seq":1,"ts_unix_ms":1,"kind":"call"}"#)
            .unwrap_err()
            .contains("e2e_ms"));
        assert!(parse(r#"{"seq":1,"ts_unix_ms":1,"kind":"call","e2e_ms":01}"#).is_err());
        assert!(parse(r#"{"seq":1,"ts_unix_ms":1,"kind":"call","e2e_ms":1} x"#).is_err());
        assert!(parse(r#"{"seq":-1,"ts_unix_ms":1,"kind":"call","e2e_ms":1}"#).is_err());
        assert!(parse("not json").is_err());
    }

    #[test]
    fn string_stop_finds_the_first_special_byte() {
        for (s, want) in [
            ("abc\"", Some(3)),
            ("abcdefghijkl\"x", Some(12)),
            ("abcdefgh\\\"", Some(8)),
            ("abcdefghijklmnopq\u{1}\"", Some(17)),
            ("é漢字abc\"", Some(11)),
            ("abcdefghijklmnop", None),
        ] {
            assert_eq!(fast::string_stop(s.as_bytes()), want, "{s:?}");
        }
    }

    #[test]
    fn numbers_are_exact() {
        for s in [
            "0.1",
            "12.345",
            "1700000000123.456",
            "0.000001",
            "99999.999",
        ] {
            let line = format!(r#"{{"seq":1,"ts_unix_ms":1,"kind":"c","e2e_ms":{s}}}"#);
            let r = parse(&line).unwrap();
            assert_eq!(
                r.values[Metric::E2e.index()],
                s.parse::<f64>().unwrap(),
                "{s}"
            );
        }
    }
}
