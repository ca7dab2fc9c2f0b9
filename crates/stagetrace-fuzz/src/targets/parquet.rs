//! The Parquet reader of `stagetrace report` (`stagetrace_parquet::read`):
//! a whole file, opened and read to its end as the JSON lines `report`
//! loads, mutated where Parquet keeps its structure.
//!
//! The mutator ([`mutate`]) knows the file's layout from its footer: the
//! magic bytes, the footer length, the footer itself (Thrift), the Arrow
//! schema a writer stores in it (base64 of an IPC message; mutated with
//! base64 characters so the damage reaches the IPC decoder, as a bit flip
//! in the decoded bytes would), and every column chunk's dictionary and data
//! pages (page headers: sizes, counts, encodings; page bodies; a page of one
//! column copied over another's). A quarter of the mutants are the generic
//! byte-level ones.
//!
//! Invariants: nothing panics out of the reader (a panic the reader itself
//! caught in the decoders is counted, in [`CONTAINED_PANICS`], not a
//! failure: that is its last line working); a refusal names the file; an
//! accepted file gives JSON lines each of which is an object whose keys are
//! the record's fields with values of their column's type, and which the
//! record loader reads without panicking.

use std::io::Read;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use bytes::Bytes;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_parquet::read::{self, Selection};
use stagetrace_schema::{FIELDS, HOP_KEYS};

use super::{ensure, Outcome, Target};
use crate::alloc::peak_during;
use crate::mutate::Mutator;

/// The name the reader is given for every input: errors must carry it.
const NAME: &str = "fuzz-input.parquet";

/// Panics the reader caught in the third-party decoders and returned as
/// errors (its `catch_unwind`, the last line): not failures, but counted so
/// a run says how often the last line was needed.
pub static CONTAINED_PANICS: AtomicU64 = AtomicU64::new(0);

/// The sample file of `stagetrace-parquet` and a small one of 3 calls in
/// row groups of 2.
pub fn seeds() -> Vec<Vec<u8>> {
    vec![
        stagetrace_parquet::sample::file(),
        #[allow(clippy::expect_used)]
        stagetrace_parquet::file_bytes(&stagetrace_parquet::sample::records(3), 2)
            .expect("in-memory write"),
    ]
}

/// Reads `input` as `report` does; the JSON text, or the reader's error.
pub fn read_file(input: &[u8]) -> Result<String, String> {
    let bytes = Bytes::copy_from_slice(input);
    let mut lines = read::open_reader(Path::new(NAME), bytes, &Selection::default())
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    lines.read_to_string(&mut text).map_err(|e| e.to_string())?;
    Ok(text)
}

/// Reads `input` as `report` does: its columns into a dataset; `None`
/// when it refuses the file, `Err` when the refusal names no file.
fn read_columns(input: &[u8], opts: LoadOptions) -> Result<Option<Dataset>, String> {
    let bytes = Bytes::copy_from_slice(input);
    let loaded = read::load_part_reader(Path::new(NAME), bytes, &Selection::default(), opts)
        .map_err(|e| match e {
            read::PartError::Damaged(e) => e.to_string(),
            read::PartError::Load(e) => e.to_string(),
        })
        .and_then(|part| {
            Dataset::load_parts(vec![part], 1, |p| Ok(Some(p))).map_err(|e| e.to_string())
        });
    match loaded {
        Ok(ds) => Ok(Some(ds)),
        Err(e) => {
            ensure(e.contains(NAME), || {
                format!("an error that names no file: {e}")
            })?;
            Ok(None)
        }
    }
}

/// A dataset's text without where each skipped record was (a line there,
/// a row here; the rest is the same).
fn comparable(ds: &Dataset) -> String {
    let examples = format!("skipped_examples: {:?}", ds.notes.skipped_examples);
    format!("{ds:?}").replace(&examples, "")
}

fn check_line(line: &str) -> Result<(), String> {
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("a line that is not JSON ({e}): {line}"))?;
    let obj = v
        .as_object()
        .ok_or_else(|| format!("a line that is not an object: {line}"))?;
    for (key, value) in obj {
        let info = FIELDS
            .iter()
            .find(|f| f.name == key)
            .ok_or_else(|| format!("key {key:?} is no record field: {line}"))?;
        let ok = match value {
            serde_json::Value::Number(n) => n.as_f64().is_some_and(f64::is_finite),
            serde_json::Value::String(_) | serde_json::Value::Bool(_) => true,
            serde_json::Value::Array(hops) => hops.iter().all(|h| {
                h.as_object().is_some_and(|m| {
                    m.iter()
                        .all(|(k, x)| HOP_KEYS.contains(&k.as_str()) && x.is_number())
                })
            }),
            _ => false,
        };
        ensure(ok, || {
            format!(
                "{}: value {value} is not a column's value: {line}",
                info.name
            )
        })?;
    }
    Ok(())
}

fn check(input: &[u8]) -> Result<Outcome, String> {
    let (r, peak) = peak_during(|| read_file(input));
    let text = match r {
        Err(e) => {
            ensure(e.contains(NAME), || {
                format!("an error that names no file: {e}")
            })?;
            if e.contains("panicked") {
                CONTAINED_PANICS.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(Outcome {
                accepted: false,
                peak_bytes: peak,
            });
        }
        Ok(text) => text,
    };
    for line in text.lines() {
        check_line(line)?;
    }
    // The loader takes it from here: it may refuse values out of its
    // range, by line, but must not panic (the driver catches and fails).
    let opts = LoadOptions {
        skip_bad: true,
        keep_digests: true,
    };
    let from_lines = Dataset::load_reader(text.as_bytes(), Path::new(NAME), opts);
    // `report`'s own path, the columns straight into the dataset: where
    // both accept the file, the same dataset, call for call.
    let (columnar, _) = peak_during(|| read_columns(input, opts));
    if let (Ok(want), Some(got)) = (from_lines, columnar?) {
        ensure(comparable(&got) == comparable(&want), || {
            format!("the columns load another dataset than their JSON lines: {got:?} != {want:?}")
        })?;
    }
    Ok(Outcome {
        accepted: true,
        peak_bytes: peak,
    })
}

/// Where a file keeps its structure, read off its footer.
#[derive(Debug, Default)]
struct Layout {
    /// The footer's Thrift bytes.
    footer: (usize, usize),
    /// The base64 of the stored Arrow schema, inside the footer.
    arrow_schema: Option<(usize, usize)>,
    /// Each column chunk's byte range (dictionary page first, when there
    /// is one) and where its data pages start.
    chunks: Vec<(usize, usize, usize)>,
}

fn layout(file: &[u8]) -> Option<Layout> {
    let n = file.len();
    if n < 12 {
        return None;
    }
    let footer_len = u32::from_le_bytes(file[n - 8..n - 4].try_into().ok()?) as usize;
    let footer_start = n.checked_sub(8 + footer_len)?;
    let bytes = Bytes::copy_from_slice(file);
    // The mutator reads kept (accepted) mutants too: the metadata reader
    // inside `catch_unwind`, like everything else of parquet's.
    let meta: ParquetMetaData = panic::catch_unwind(AssertUnwindSafe(|| {
        ParquetMetaDataReader::new().parse_and_finish(&bytes).ok()
    }))
    .ok()??;
    let arrow_schema = meta
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == "ARROW:schema"))
        .and_then(|k| k.value.as_deref())
        .and_then(|v| {
            let at = find(&file[footer_start..n - 8], v.as_bytes())?;
            Some((footer_start + at, footer_start + at + v.len()))
        });
    let mut chunks = Vec::new();
    for rg in meta.row_groups() {
        for c in rg.columns() {
            let data = usize::try_from(c.data_page_offset()).ok()?;
            let start = c
                .dictionary_page_offset()
                .and_then(|d| usize::try_from(d).ok())
                .unwrap_or(data);
            let end = start.checked_add(usize::try_from(c.compressed_size()).ok()?)?;
            if end <= footer_start && start <= data && data < end {
                chunks.push((start, data, end));
            }
        }
    }
    Some(Layout {
        footer: (footer_start, n - 8),
        arrow_schema,
        chunks,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Values that sit on the edges of Thrift's and the decoders' decisions:
/// zero, one, the varint continuation bit, the sign of zigzag, all ones,
/// the Thrift compact type nibbles, the encodings' numbers.
const EDGE: &[u8] = &[
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0c, 0x15, 0x16, 0x19, 0x1c, 0x26,
    0x3f, 0x40, 0x7f, 0x80, 0x81, 0xfe, 0xff,
];

const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn edge(m: &mut Mutator) -> u8 {
    EDGE[m.below(EDGE.len())]
}

/// One structure-aware change of `out` (whose layout is `l`, so its
/// length too); false when it changed the length, after which `l` no
/// longer describes it.
fn one(m: &mut Mutator, l: &Layout, out: &mut Vec<u8>) -> bool {
    if l.footer.1 + 8 != out.len() {
        return false;
    }
    match m.below(12) {
        0 | 1 => arrow_schema_char(m, l, out),
        2 | 3 => footer_byte(m, l, out),
        4 => footer_length(m, out),
        5..=7 => page_header_byte(m, l, out),
        8 => page_body_byte(m, l, out),
        9 => page_over_another(m, l, out),
        10 => return !cut_short(m, l, out),
        _ => page_header_pair(m, l, out),
    }
    true
}

/// A column chunk of the file, at random: (start, data page, end).
fn pick_chunk(m: &mut Mutator, l: &Layout) -> Option<(usize, usize, usize)> {
    l.chunks.get(m.below(l.chunks.len())).copied()
}

/// The stored Arrow schema: a base64 character for another, so the blob
/// still decodes and the IPC decoder gets damaged bytes.
fn arrow_schema_char(m: &mut Mutator, l: &Layout, out: &mut [u8]) {
    if let Some((a, b)) = l.arrow_schema.filter(|(a, b)| b > a) {
        let i = a + m.below(b - a);
        out[i] = BASE64[m.below(BASE64.len())];
    }
}

/// The footer's Thrift: a byte set to an edge value or flipped.
fn footer_byte(m: &mut Mutator, l: &Layout, out: &mut [u8]) {
    let (a, b) = l.footer;
    if b > a {
        let i = a + m.below(b - a);
        if m.below(2) == 0 {
            out[i] = edge(m);
        } else {
            out[i] ^= 1 << m.below(8);
        }
    }
}

/// The footer length: one of its bytes set to an edge value.
fn footer_length(m: &mut Mutator, out: &mut [u8]) {
    let i = out.len() - 8 + m.below(4);
    out[i] = edge(m);
}

/// A page header: the first bytes of a dictionary or data page (type,
/// sizes, CRC, value count, encoding, definition levels), one flipped or
/// set to an edge value.
fn page_header_byte(m: &mut Mutator, l: &Layout, out: &mut [u8]) {
    if let Some((start, data, _)) = pick_chunk(m, l) {
        let at = if m.below(2) == 0 { start } else { data };
        let i = at + m.below(24);
        if i < out.len() {
            out[i] = if m.below(3) == 0 {
                out[i] ^ (1 << m.below(8))
            } else {
                edge(m)
            };
        }
    }
}

/// A page body byte (levels, dictionary indices, values) set at random.
fn page_body_byte(m: &mut Mutator, l: &Layout, out: &mut [u8]) {
    if let Some((start, _, end)) = pick_chunk(m, l) {
        let i = start + m.below(end - start);
        out[i] = m.below(256) as u8;
    }
}

/// One column's page written over another's: a dictionary of the wrong
/// type, a data page of the wrong width.
fn page_over_another(m: &mut Mutator, l: &Layout, out: &mut [u8]) {
    let n = out.len();
    if let (Some((a0, a1, a2)), Some((b0, b1, _))) = (pick_chunk(m, l), pick_chunk(m, l)) {
        let (from, to) = if m.below(2) == 0 { (a0, b0) } else { (a1, b1) };
        let len = (1 + m.below(64)).min(a2 - from);
        if to + len <= n && from + len <= n {
            let copy = out[from..from + len].to_vec();
            out[to..to + len].copy_from_slice(&copy);
        }
    }
}

/// Cuts the file short inside a column chunk, keeping the footer's tail
/// (the reader then finds a footer that lies); true when it did (the
/// length changed).
fn cut_short(m: &mut Mutator, l: &Layout, out: &mut Vec<u8>) -> bool {
    let Some((start, _, end)) = pick_chunk(m, l) else {
        return false;
    };
    let cut = start + m.below(end - start);
    let tail = out[l.footer.0..].to_vec();
    out.truncate(cut);
    out.extend_from_slice(&tail);
    true
}

/// Two adjacent bytes of a page header zeroed or saturated (a varint
/// length made huge or empty).
fn page_header_pair(m: &mut Mutator, l: &Layout, out: &mut [u8]) {
    let n = out.len();
    if let Some((start, data, _)) = pick_chunk(m, l) {
        let at = if m.below(2) == 0 { start } else { data };
        let i = at + m.below(20);
        let v = if m.below(2) == 0 { 0x00 } else { 0xff };
        for b in out.iter_mut().take((i + 2).min(n)).skip(i) {
            *b = v;
        }
    }
}

/// The structure-aware mutator (see the module's comment).
pub fn mutate(m: &mut Mutator, base: &[u8], other: &[u8], out: &mut Vec<u8>) {
    static SEED_LAYOUT: OnceLock<Vec<(Vec<u8>, Layout)>> = OnceLock::new();
    if m.below(4) == 0 {
        m.mutate(base, other, out);
        return;
    }
    out.clear();
    out.extend_from_slice(base);
    let seeds = SEED_LAYOUT.get_or_init(|| {
        seeds()
            .into_iter()
            .filter_map(|s| layout(&s).map(|l| (s, l)))
            .collect()
    });
    let own;
    let l = match seeds.iter().find(|(s, _)| s.as_slice() == base) {
        Some((_, l)) => l,
        None => match layout(base) {
            Some(l) => {
                own = l;
                &own
            }
            None => {
                m.mutate(base, other, out);
                return;
            }
        },
    };
    let rounds = 1 + m.below(3).saturating_sub(1);
    for _ in 0..rounds {
        if !one(m, l, out) {
            break;
        }
    }
}

/// Decoding one file holds its pages (decompressed), one batch of arrays
/// and the JSON text of its rows. The 50 KB sample file peaks at about
/// 0.5 MB (measured: 478 KB for a 64 KB mutant), about 10 bytes per input
/// byte. A damaged page header can claim any size; the bound,
/// `256n + 8 MiB`, leaves room for the decoders' fixed buffers (zstd's
/// context, the batch builders) and fails a mutant that makes the reader
/// allocate what a lying length claims rather than what the file holds.
fn bound(len: usize) -> usize {
    256 * len + (8 << 20)
}

/// The Parquet reader (`stagetrace_parquet::read`, one whole file).
pub(super) const PARQUET: Target = Target {
    name: "parquet",
    max_len: 64 * 1024,
    seeds,
    dict: &[
        b"PAR1",
        b"\x00\x00\x00\x00",
        b"\xff\xff\xff\x7f",
        b"\x15\x00",
        b"\x19\x1c",
    ],
    check,
    mem_bound: bound,
    // Most structural damage is refused, as it should be; what is
    // accepted is mostly damage to values inside pages.
    min_accept_share: 0.05,
    mutate: Some(mutate),
    test_inputs: 1_500,
};
