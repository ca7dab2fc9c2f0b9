//! Every page header's sizes checked before the Parquet decoders see them.
//!
//! The decoder reserves a page's `uncompressed_page_size` before it
//! decompresses (`Vec::with_capacity`): a damaged header that claims
//! 2 GiB makes it ask for 2 GiB, and an allocation the machine refuses
//! aborts the process — no `catch_unwind` can contain that. So each page's
//! claim is held against what its compressed bytes can hold, read off the
//! codec's own header: a zstd frame's content size, a snappy block's
//! length. A codec that states none may expand its page at most
//! [`MAX_RATIO`] times (and any page to [`SMALL_PAGE`]); no page may claim
//! more than [`MAX_PAGE`]. Writers cut pages at about 1 MiB (parquet-rs,
//! parquet-mr, DuckDB), so a legitimate file never meets these bounds.
//!
//! The header is Thrift's compact protocol; only the sizes are read, the
//! rest skipped field by field (nested at most [`MAX_DEPTH`] deep).

use parquet::basic::Compression;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::ChunkReader;

use super::Plan;

/// Most bytes one page may claim, whatever its codec says.
pub(crate) const MAX_PAGE: i64 = 256 << 20;
/// What any page may claim, whatever its compressed size.
const SMALL_PAGE: i64 = 1 << 20;
/// How many times its compressed size a page of a codec that states no
/// size may claim.
const MAX_RATIO: i64 = 64;
/// Deepest nesting of Thrift structs and lists skipped.
const MAX_DEPTH: usize = 16;
/// Bytes read for a page header first; a longer header (large statistics)
/// is read again whole, up to [`MAX_HEADER`].
const FIRST_READ: u64 = 4096;
const MAX_HEADER: u64 = 1 << 20;

/// What a page header says of its sizes.
#[derive(Debug, Default, PartialEq)]
struct Header {
    /// Bytes of the header itself.
    len: usize,
    uncompressed: i64,
    compressed: i64,
    /// Data page v2: the levels' bytes before the values, stored
    /// uncompressed; and whether the values are compressed.
    levels: i64,
    values_compressed: bool,
}

/// Checks every page header of the column chunks `plan` decodes; what is
/// wrong, naming the column, row group and byte offset.
pub(crate) fn check_pages<R: ChunkReader>(
    reader: &R,
    meta: &ParquetMetaData,
    plan: &Plan,
) -> Result<(), String> {
    for (g, rg) in meta.row_groups().iter().enumerate() {
        if plan.groups.as_ref().is_some_and(|gs| !gs.contains(&g)) {
            continue;
        }
        for (i, col) in rg.columns().iter().enumerate() {
            if plan.columns.as_ref().is_some_and(|m| !m.leaf_included(i)) {
                continue;
            }
            let start = col
                .dictionary_page_offset()
                .unwrap_or(col.data_page_offset());
            let (Ok(start), Ok(size)) =
                (u64::try_from(start), u64::try_from(col.compressed_size()))
            else {
                // `check_metadata` has said what is wrong.
                continue;
            };
            check_chunk(reader, col.compression(), start, start.saturating_add(size)).map_err(
                |e| {
                    format!(
                        "column {} of row group {g}: {e}",
                        col.column_path().string()
                    )
                },
            )?;
        }
    }
    Ok(())
}

/// The pages of one column chunk, `start..end` of the file.
fn check_chunk<R: ChunkReader>(
    reader: &R,
    codec: Compression,
    start: u64,
    end: u64,
) -> Result<(), String> {
    let mut at = start;
    while at < end {
        let h = read_header(reader, at, end)?;
        let body_at = at + h.len as u64;
        let compressed = u64::try_from(h.compressed).unwrap_or(u64::MAX);
        let next = body_at.checked_add(compressed).filter(|n| *n <= end).ok_or_else(|| {
            format!(
                "the page at byte {at} claims {} compressed bytes, past its column chunk's end at {end}",
                h.compressed
            )
        })?;
        if h.uncompressed < 0 || h.levels < 0 || h.levels > h.compressed.min(h.uncompressed) {
            return Err(format!(
                "the page at byte {at} claims impossible sizes ({} bytes uncompressed, {} of levels)",
                h.uncompressed, h.levels
            ));
        }
        let values_at = body_at + h.levels as u64;
        let claimed = h.uncompressed - h.levels;
        let limit = if codec == Compression::UNCOMPRESSED || !h.values_compressed {
            // Not decompressed: the decoder reads the bytes as they are.
            i64::MAX
        } else {
            let head = reader
                .get_bytes(values_at, (next - values_at).min(16) as usize)
                .map_err(|e| format!("cannot read the page at byte {at}: {e}"))?;
            stated_size(codec, &head).unwrap_or_else(|| {
                (h.compressed - h.levels)
                    .saturating_mul(MAX_RATIO)
                    .max(SMALL_PAGE)
            })
        };
        if claimed > limit.min(MAX_PAGE) {
            return Err(format!(
                "the page at byte {at} claims {} bytes once decompressed, more than its {} \
                 compressed bytes can hold ({}): a damaged page header",
                h.uncompressed,
                h.compressed,
                limit.min(MAX_PAGE)
            ));
        }
        at = next;
    }
    Ok(())
}

/// The header of the page at `at`: read 4 KiB first, all of it (up to
/// 1 MiB, never past `end`) when longer.
fn read_header<R: ChunkReader>(reader: &R, at: u64, end: u64) -> Result<Header, String> {
    let mut want = FIRST_READ;
    loop {
        let len = want.min(end - at);
        let bytes = reader
            .get_bytes(at, len as usize)
            .map_err(|e| format!("cannot read the page at byte {at}: {e}"))?;
        match parse_header(&bytes) {
            Some(h) => return Ok(h),
            None if len == want && want < MAX_HEADER => want = MAX_HEADER,
            None => {
                return Err(format!(
                    "the page header at byte {at} is not a page header (damaged, or longer than its chunk)"
                ))
            }
        }
    }
}

/// The size a codec's own header states for what it holds: a zstd
/// frame's content size, a snappy block's length.
fn stated_size(codec: Compression, head: &[u8]) -> Option<i64> {
    match codec {
        Compression::ZSTD(_) => zstd_content_size(head),
        Compression::SNAPPY => {
            let mut c = Cursor { bytes: head, at: 0 };
            i64::try_from(c.varint()?).ok()
        }
        _ => None,
    }
}

/// The Frame_Content_Size of a zstd frame header (RFC 8878 §3.1.1.1),
/// when the frame states it.
fn zstd_content_size(head: &[u8]) -> Option<i64> {
    if head.get(..4)? != [0x28, 0xb5, 0x2f, 0xfd] {
        return None;
    }
    let descriptor = *head.get(4)?;
    let single_segment = descriptor & 0x20 != 0;
    let fcs_len = match descriptor >> 6 {
        0 if single_segment => 1,
        0 => return None,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let dict_len = [0, 1, 2, 4][usize::from(descriptor & 3)];
    let at = 5 + usize::from(!single_segment) + dict_len;
    let field = head.get(at..at + fcs_len)?;
    let mut v = 0u64;
    for (i, b) in field.iter().enumerate() {
        v |= u64::from(*b) << (8 * i);
    }
    if fcs_len == 2 {
        v += 256;
    }
    i64::try_from(v).ok()
}

/// Reads a compact-protocol `PageHeader`: fields 2 (uncompressed size),
/// 3 (compressed size) and 8 (data page v2: levels' lengths in 5 and 6,
/// `is_compressed` in 7); `None` when the bytes are not one.
fn parse_header(bytes: &[u8]) -> Option<Header> {
    let mut c = Cursor { bytes, at: 0 };
    let mut h = Header {
        values_compressed: true,
        ..Header::default()
    };
    let (mut got_uncompressed, mut got_compressed) = (false, false);
    // As the decoder reads them: an i32 field by its id, a zigzag varint
    // whatever type its header says, cut to 32 bits.
    c.fields(0, |c, id, ty| {
        match (id, ty) {
            (2, _) => {
                h.uncompressed = c.i32()?;
                got_uncompressed = true;
            }
            (3, _) => {
                h.compressed = c.i32()?;
                got_compressed = true;
            }
            (8, 12) => c.fields(1, |c, id, ty| {
                match (id, ty) {
                    (5 | 6, _) => h.levels = h.levels.checked_add(c.i32()?)?,
                    (7, 1) => h.values_compressed = true,
                    (7, 2) => h.values_compressed = false,
                    _ => c.skip(ty, 2)?,
                }
                Some(())
            })?,
            _ => c.skip(ty, 1)?,
        }
        Some(())
    })?;
    h.len = c.at;
    (got_uncompressed && got_compressed).then_some(h)
}

/// Thrift compact protocol, read only as far as the sizes need.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// A zigzag i32/i64.
    fn int(&mut self) -> Option<i64> {
        let v = self.varint()?;
        Some((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// An i32 field as the decoder reads it (a zigzag varint cut to 32
    /// bits).
    fn i32(&mut self) -> Option<i64> {
        Some(i64::from(self.int()? as i32))
    }

    fn advance(&mut self, n: u64) -> Option<()> {
        let n = usize::try_from(n).ok()?;
        self.at = self.at.checked_add(n).filter(|e| *e <= self.bytes.len())?;
        Some(())
    }

    /// Each field of a struct to `each(cursor, id, type)`, to its stop.
    fn fields(
        &mut self,
        depth: usize,
        mut each: impl FnMut(&mut Self, i64, u8) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut last = 0i64;
        loop {
            let b = self.byte()?;
            let ty = b & 0x0f;
            if ty == 0 {
                return Some(());
            }
            let id = match b >> 4 {
                0 => self.int()?,
                delta => last + i64::from(delta),
            };
            last = id;
            each(self, id, ty)?;
        }
    }

    /// Skips a value of compact type `ty`.
    fn skip(&mut self, ty: u8, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match ty {
            1 | 2 => Some(()),
            3 => self.advance(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.advance(8),
            8 => {
                let n = self.varint()?;
                self.advance(n)
            }
            9 | 10 => {
                let b = self.byte()?;
                let n = match b >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                let elem = b & 0x0f;
                for _ in 0..n {
                    if elem == 1 || elem == 2 {
                        self.advance(1)?;
                    } else {
                        self.skip(elem, depth + 1)?;
                    }
                }
                Some(())
            }
            11 => {
                let n = self.varint()?;
                if n == 0 {
                    return Some(());
                }
                let kv = self.byte()?;
                for _ in 0..n {
                    self.skip(kv >> 4, depth + 1)?;
                    self.skip(kv & 0x0f, depth + 1)?;
                }
                Some(())
            }
            12 => self.fields(depth + 1, |c, _, ty| c.skip(ty, depth + 1)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zstd_frame_states_its_content_size() {
        // Single segment, 1-byte size: 0x20 → 32 bytes.
        assert_eq!(
            zstd_content_size(&[0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x20]),
            Some(32)
        );
        // 2-byte size field: value + 256.
        assert_eq!(
            zstd_content_size(&[0x28, 0xb5, 0x2f, 0xfd, 0x60, 0x00, 0x01]),
            Some(512)
        );
        // No size stated (streaming frame), or no zstd frame at all.
        assert_eq!(
            zstd_content_size(&[0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58]),
            None
        );
        assert_eq!(zstd_content_size(b"PAR1"), None);
    }

    #[test]
    fn a_page_header_gives_its_sizes_and_skips_the_rest() {
        // type=0 (i32 0), uncompressed=100, compressed=40, then a data page
        // header struct (field 5: num_values=3, encoding=0), stop.
        let bytes = [
            0x15, 0x00, 0x15, 0xc8, 0x01, 0x15, 0x50, 0x2c, 0x15, 0x06, 0x15, 0x00, 0x00, 0x00,
        ];
        let h = parse_header(&bytes).expect("a header");
        assert_eq!(
            (h.uncompressed, h.compressed, h.levels, h.len),
            (100, 40, 0, 14)
        );
        assert!(h.values_compressed);
        // Cut short: not a header.
        assert_eq!(parse_header(&bytes[..6]), None);
    }
}
