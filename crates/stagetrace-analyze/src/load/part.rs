//! One file's calls read apart from the others, so files (a Parquet tree's
//! partitions, a run's record files) are read on every core and appended
//! in their order: the dataset is the one a sequential read gives, call
//! for call.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

use super::notes::MAX_KINDS;
use super::row::Row;
use super::{Dataset, LoadError, LoadNotes, LoadOptions, MAX_ERRORS, MAX_SKIPPED_SHOWN};

/// A JSON-lines file read a chunk of lines at a time (`stagetrace
/// summarize`, Python's `stagetrace.summarize`): memory holds one chunk's
/// calls whatever the file's size (a day's file at 30 Hz holds 2.6 M); a
/// bad line is still named by its place in the file.
#[derive(Debug)]
pub struct LineChunks<R: Read> {
    reader: BufReader<R>,
    path: PathBuf,
    opts: LoadOptions,
    /// Lines read so far.
    line_no: u64,
    done: bool,
}

impl<R: Read> LineChunks<R> {
    /// The chunks of `reader`'s lines; `path` names the file.
    pub fn new(reader: R, path: &Path, opts: LoadOptions) -> LineChunks<R> {
        LineChunks {
            reader: BufReader::with_capacity(1 << 20, reader),
            path: path.to_path_buf(),
            opts,
            line_no: 0,
            done: false,
        }
    }

    /// The next at most `lines` lines as a part; `None` once the file is
    /// read (an empty file gives one empty part).
    pub fn next_part(&mut self, lines: u64) -> Result<Option<FilePart>, LoadError> {
        if self.done {
            return Ok(None);
        }
        let first = self.line_no == 0;
        let mut ds = Dataset::empty();
        ds.files.push(self.path.clone());
        ds.file_starts.push(0);
        let mut errors = HashMap::new();
        self.done = ds.read_lines(
            &mut self.reader,
            &self.path,
            self.opts,
            &mut errors,
            &mut self.line_no,
            lines.max(1),
        )?;
        if first && self.done && ds.is_empty() {
            ds.notes.empty_files.push(self.path.clone());
        }
        Ok(Some(FilePart {
            ds,
            errors,
            opts: self.opts,
            rows: 0,
            whole_batches: 0,
        }))
    }
}

/// The calls of one file, read on a thread of its own and appended to the
/// dataset in the files' order ([`Dataset::load_parts`]).
#[derive(Debug)]
pub struct FilePart {
    pub(super) ds: Dataset,
    errors: HashMap<String, u64>,
    pub(super) opts: LoadOptions,
    /// Rows given, valid or not (a corrupt one's position in messages).
    pub(super) rows: u64,
    /// Batches pushed column by column ([`FilePart::push_columns`]).
    pub(super) whole_batches: u64,
}

impl FilePart {
    /// An empty part for the file `path` (its name in messages).
    pub fn new(path: &Path, opts: LoadOptions) -> FilePart {
        let mut ds = Dataset::empty();
        ds.files.push(path.to_path_buf());
        ds.file_starts.push(0);
        FilePart {
            ds,
            errors: HashMap::new(),
            opts,
            rows: 0,
            whole_batches: 0,
        }
    }

    /// Reads a JSON-lines file (or any reader of JSON lines) whole.
    pub fn read_lines<R: Read>(
        reader: R,
        path: &Path,
        opts: LoadOptions,
    ) -> Result<FilePart, LoadError> {
        let mut ds = Dataset::empty();
        let mut errors = HashMap::new();
        ds.read_from(reader, path, opts, &mut errors)?;
        Ok(FilePart {
            ds,
            errors,
            opts,
            rows: 0,
            whole_batches: 0,
        })
    }

    /// Adds one record given field by field. A record that is not whole
    /// ([`Row::finish`]) is a corrupt record, as a corrupt JSON line is:
    /// counted and skipped under `skip_bad`, else an error naming the file
    /// and the row (1-based).
    pub fn push(&mut self, row: &Row) -> Result<(), LoadError> {
        self.rows += 1;
        self.ds.notes.lines += 1;
        match row.finish() {
            Ok(()) => {
                self.ds.push(&row.raw, self.opts, &mut self.errors);
                Ok(())
            }
            Err(reason) if self.opts.skip_bad => {
                let notes = &mut self.ds.notes;
                notes.skipped += 1;
                if notes.skipped_examples.len() < MAX_SKIPPED_SHOWN {
                    let path = self.ds.files.first().map(|p| p.display().to_string());
                    let at = format!("{}:row {}", path.unwrap_or_default(), self.rows);
                    notes.skipped_examples.push(format!("{at}: {reason}"));
                }
                Ok(())
            }
            Err(reason) => Err(LoadError::Corrupt {
                path: self.ds.files.first().cloned().unwrap_or_default(),
                line: self.rows,
                reason,
            }),
        }
    }

    /// Counts a failed call's reason (past [`MAX_ERRORS`] reasons, new
    /// ones count as "other"), as the row path does.
    pub(super) fn count_error(&mut self, reason: &str) {
        let errors = &mut self.errors;
        if let Some(n) = errors.get_mut(reason) {
            *n += 1;
        } else if errors.len() < MAX_ERRORS {
            errors.insert(reason.to_string(), 1);
        } else {
            *errors.entry("other".to_string()).or_insert(0) += 1;
        }
    }

    /// Batches pushed column by column (the others went row by row).
    pub fn whole_batches(&self) -> u64 {
        self.whole_batches
    }

    /// Calls read so far.
    pub fn len(&self) -> usize {
        self.ds.len()
    }

    /// True while no call was read.
    pub fn is_empty(&self) -> bool {
        self.ds.is_empty()
    }
}

impl Dataset {
    /// Reads `jobs` (one file each) on up to `threads` threads and appends
    /// their parts in the jobs' order. A job returns `Ok(None)` for a file
    /// it skipped (and said so); its first error in the jobs' order stops
    /// the load. An input with no record at all is an error.
    pub fn load_parts<J, F>(jobs: Vec<J>, threads: usize, read: F) -> Result<Dataset, LoadError>
    where
        J: Send,
        F: Fn(J) -> Result<Option<FilePart>, LoadError> + Sync,
    {
        let mut ds = Dataset::empty();
        let mut errors = HashMap::new();
        let threads = threads.clamp(1, jobs.len().max(1));
        if threads == 1 {
            for job in jobs {
                if let Some(part) = read(job)? {
                    ds.append(part, &mut errors);
                }
            }
        } else {
            in_parallel(jobs, threads, &read, |part| ds.append(part, &mut errors))?;
        }
        ds.finish(errors);
        if ds.is_empty() {
            return Err(LoadError::Empty { paths: ds.files });
        }
        Ok(ds)
    }

    /// The dataset of one file's part (an error when it holds no call).
    pub fn of_part(part: FilePart) -> Result<Dataset, LoadError> {
        Dataset::load_parts(vec![part], 1, |p| Ok(Some(p)))
    }

    /// Adds a part's calls after this dataset's.
    fn append(&mut self, part: FilePart, errors: &mut HashMap<String, u64>) {
        let FilePart {
            ds: p, errors: e, ..
        } = part;
        let base = self.len();
        let added = p.len();
        if added == 0 && !p.files.is_empty() && p.notes.empty_files.is_empty() {
            self.notes.empty_files.extend(p.files.iter().cloned());
        }
        self.file_starts
            .extend(p.file_starts.iter().map(|s| base + s));
        self.files.extend(p.files);
        self.seq.extend(p.seq);
        self.ts.extend(p.ts);
        self.flags.extend(p.flags);
        let kinds: Vec<(u16, bool)> = p.kinds.iter().map(|k| self.kind_slot(k)).collect();
        for k in &p.kind {
            let (to, pooled) = kinds.get(usize::from(*k)).copied().unwrap_or((0, false));
            self.notes.pooled_kinds += u64::from(pooled);
            self.kind.push(to);
        }
        for (col, more) in self.columns.iter_mut().zip(p.columns) {
            // Empty: no call of its side has the figure.
            if !(col.is_empty() && more.is_empty()) {
                col.resize(base, f32::NAN);
                col.extend(more);
                col.resize(base + added, f32::NAN);
            }
        }
        let call = |i: u32| u32::try_from(base).unwrap_or(u32::MAX).saturating_add(i);
        self.digests
            .extend(p.digests.into_iter().map(|(i, d)| (call(i), d)));
        self.mitigated.extend(p.mitigated.into_iter().map(|mut m| {
            m.call = call(m.call);
            m
        }));
        self.hops.append(base, p.hops, added);
        if !p.vol_switches.is_empty() || !self.vol_switches.is_empty() {
            self.vol_switches.resize(base, f32::NAN);
            self.vol_switches.extend(p.vol_switches);
            self.vol_switches.resize(base + added, f32::NAN);
        }
        for (reason, n) in e {
            let key = if errors.len() < MAX_ERRORS || errors.contains_key(&reason) {
                reason
            } else {
                "other".to_string()
            };
            *errors.entry(key).or_insert(0) += n;
        }
        self.notes.absorb(p.notes);
    }

    /// The index of `kind` among this dataset's kinds, added when new;
    /// true when it is pooled as `other` (past [`MAX_KINDS`]).
    pub(super) fn kind_slot(&mut self, kind: &str) -> (u16, bool) {
        if let Some(i) = self.kinds.iter().position(|k| k == kind) {
            return (i as u16, false);
        }
        if self.kinds.len() + 1 < MAX_KINDS {
            self.kinds.push(kind.to_string());
            return ((self.kinds.len() - 1) as u16, false);
        }
        if let Some(i) = self.kinds.iter().position(|k| k == "other") {
            return (i as u16, true);
        }
        self.kinds.push("other".to_string());
        ((self.kinds.len() - 1) as u16, true)
    }
}

impl LoadNotes {
    fn absorb(&mut self, other: LoadNotes) {
        self.lines += other.lines;
        self.skipped += other.skipped;
        let room = MAX_SKIPPED_SHOWN.saturating_sub(self.skipped_examples.len());
        self.skipped_examples
            .extend(other.skipped_examples.into_iter().take(room));
        self.truncated.extend(other.truncated);
        self.empty_files.extend(other.empty_files);
        self.pooled_kinds += other.pooled_kinds;
    }
}

/// Runs `read` over `jobs` on `threads` threads and hands each part to
/// `take` in the jobs' order (a part done early waits for those before it).
fn in_parallel<J, F>(
    jobs: Vec<J>,
    threads: usize,
    read: &F,
    mut take: impl FnMut(FilePart),
) -> Result<(), LoadError>
where
    J: Send,
    F: Fn(J) -> Result<Option<FilePart>, LoadError> + Sync,
{
    let total = jobs.len();
    let jobs: Vec<Mutex<Option<J>>> = jobs.into_iter().map(|j| Mutex::new(Some(j))).collect();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel();
        for _ in 0..threads {
            let tx = tx.clone();
            let (jobs, next, stop) = (&jobs, &next, &stop);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(slot) = jobs.get(i) else { break };
                    let job = slot.lock().ok().and_then(|mut j| j.take());
                    let Some(job) = job else { continue };
                    if tx.send((i, read(job))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut waiting: BTreeMap<usize, Result<Option<FilePart>, LoadError>> = BTreeMap::new();
        let mut due = 0;
        for (i, result) in rx {
            waiting.insert(i, result);
            while let Some(result) = waiting.remove(&due) {
                due += 1;
                match result {
                    Ok(Some(part)) => take(part),
                    Ok(None) => {}
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
            if due == total {
                break;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Record `i` as one JSON line, with `extra` fields.
    pub(super) fn line(i: u64, extra: &str) -> String {
        let kind = if i % 4 == 0 { "reset" } else { "infer" };
        format!(
            "{{\"seq\":{i},\"ts_unix_ms\":{},\"kind\":\"{kind}\",\"infer_ms\":{},\"e2e_ms\":{}{extra}}}\n",
            1_700_000_000_000u64 + 20 * i,
            10.5 + (i % 7) as f64,
            15.25 + (i % 5) as f64
        )
    }

    /// Four files: plain calls; calls through a gateway with a new kind
    /// and failures; an empty file; mitigated calls with digests and the
    /// robot's voluntary switches.
    fn files() -> Vec<(PathBuf, String)> {
        let plain: String = (0..30).map(|i| line(i, "")).collect();
        let hops: String = (30..60)
            .map(|i| {
                let extra = if i % 3 == 0 {
                    ",\"failed\":true,\"error\":\"timeout\"".to_owned()
                } else {
                    format!(
                        ",\"hops\":[{{\"up_ms\":{}.5,\"down_ms\":2}},{{\"net_ms\":3}}]",
                        i % 4
                    )
                };
                line(i, &extra).replace("\"infer\"", "\"gateway\"")
            })
            .collect();
        let mitigated: String = (60..90)
            .map(|i| {
                line(
                    i,
                    &format!(
                        ",\"batch_size\":{},\"cache\":\"hit\",\"output_digest\":\"ab{i}\",\"voluntary_switches\":{}",
                        i % 3 + 1,
                        i % 5
                    ),
                )
            })
            .collect();
        vec![
            ("a.jsonl".into(), plain),
            ("b.jsonl".into(), hops),
            ("empty.jsonl".into(), String::new()),
            ("c.jsonl".into(), mitigated),
        ]
    }

    #[test]
    fn files_read_on_two_threads_load_what_one_sequential_read_loads() {
        let opts = LoadOptions {
            keep_digests: true,
            ..LoadOptions::default()
        };
        let files = files();
        let sequential = Dataset::load_sources(
            files
                .iter()
                .map(|(p, text)| Ok((p.clone(), text.as_bytes()))),
            opts,
        )
        .unwrap();
        let parallel = Dataset::load_parts(files.clone(), 2, |(p, text)| {
            FilePart::read_lines(text.as_bytes(), &p, opts).map(Some)
        })
        .unwrap();
        assert_eq!(parallel.len(), 90);
        assert_eq!(parallel.hop_count(), 2);
        assert_eq!(parallel.kinds(), ["reset", "infer", "gateway"]);
        assert_eq!(format!("{parallel:?}"), format!("{sequential:?}"));
    }

    #[test]
    fn the_first_error_in_file_order_stops_the_load() {
        let mut files = files();
        files[1].1.push_str("{not json\n");
        files[3].1.push_str("{\"seq\":1}\n");
        let err = Dataset::load_parts(files, 2, |(p, text)| {
            FilePart::read_lines(text.as_bytes(), &p, LoadOptions::default()).map(Some)
        })
        .unwrap_err();
        assert!(err.to_string().starts_with("b.jsonl:31:"), "{err}");
    }

    #[test]
    fn a_row_out_of_range_is_corrupt_as_its_json_line_is() {
        let mut part = FilePart::new(std::path::Path::new("p.parquet"), LoadOptions::default());
        let mut row = Row::new();
        let index = |name: &str| {
            stagetrace_schema::FIELDS
                .iter()
                .position(|f| f.name == name)
                .unwrap()
        };
        row.set(index("seq"), super::super::Cell::Count(7)).unwrap();
        row.set(index("ts_unix_ms"), super::super::Cell::Number(1.7e12))
            .unwrap();
        row.set(index("kind"), super::super::Cell::Text("call"))
            .unwrap();
        let refused = row.set(index("e2e_ms"), super::super::Cell::Number(1e300));
        let json = "{\"seq\":7,\"ts_unix_ms\":1700000000000,\"kind\":\"call\",\"e2e_ms\":1e300}";
        let want = match Dataset::load_reader(
            json.as_bytes(),
            std::path::Path::new("x"),
            LoadOptions::default(),
        ) {
            Err(LoadError::Corrupt { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        // serde adds where in the line; the rest is the same sentence.
        let want = want.split(" at line ").next().unwrap().to_owned();
        assert_eq!(refused.unwrap_err(), want);
        match part.push(&row) {
            Err(LoadError::Corrupt {
                line: 1, reason, ..
            }) => assert_eq!(reason, want),
            other => panic!("{other:?}"),
        }
        assert!(part.is_empty());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod chunk_tests {
    use std::path::Path;

    use super::*;
    use crate::summary::Summary;

    /// 100 lines: calls of two kinds, a failure every 9th, and one line
    /// that is not a record (line 57).
    fn text() -> String {
        (1..=100u64)
            .map(|n| {
                if n == 57 {
                    "{\"seq\": not a record\n".to_owned()
                } else if n % 9 == 0 {
                    super::tests::line(n, ",\"failed\":true,\"error\":\"timeout\"")
                } else {
                    super::tests::line(n, "")
                }
            })
            .collect()
    }

    #[test]
    fn a_file_read_in_chunks_of_lines_summarises_as_the_whole_and_names_lines_by_their_place() {
        let opts = LoadOptions {
            skip_bad: true,
            keep_digests: false,
        };
        let text = text();
        let path = Path::new("records-x.jsonl");
        let whole =
            Dataset::of_part(FilePart::read_lines(text.as_bytes(), path, opts).unwrap()).unwrap();
        let mut chunks = LineChunks::new(text.as_bytes(), path, opts);
        let mut merged = Summary::new();
        let mut parts = 0;
        let mut skipped = Vec::new();
        while let Some(part) = chunks.next_part(7).unwrap() {
            parts += 1;
            let ds = Dataset::of_part(part).unwrap();
            skipped.extend(ds.notes.skipped_examples.iter().cloned());
            merged.merge(&Summary::of(&ds)).unwrap();
        }
        // 100 lines in chunks of 7: 15 parts, the last of 2 lines.
        assert_eq!(parts, 15);
        assert_eq!(merged.to_bytes(), Summary::of(&whole).to_bytes());
        assert_eq!(skipped.len(), 1);
        assert!(
            skipped[0].starts_with("records-x.jsonl:57: "),
            "{skipped:?}"
        );
        // Without skip_bad the bad line stops the read, named by its place.
        let mut strict = LineChunks::new(text.as_bytes(), path, LoadOptions::default());
        let err = loop {
            match strict.next_part(7) {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the bad line was read"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(err.contains(":57"), "{err}");
        // An empty file: one empty part, noted.
        let mut empty = LineChunks::new(&b""[..], path, opts);
        let part = empty.next_part(7).unwrap().expect("one part");
        assert!(part.ds.notes.empty_files.len() == 1);
        assert!(empty.next_part(7).unwrap().is_none());
    }
}
