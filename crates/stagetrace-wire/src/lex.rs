//! Byte-level pieces the header grammars share: HTTP optional whitespace,
//! lowercase hex, unsigned decimal digits.

/// Trim HTTP optional whitespace (space, tab) at both ends.
pub(super) fn trim_ows(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|&c| c != b' ' && c != b'\t')
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|&c| c != b' ' && c != b'\t')
        .map_or(start, |i| i + 1);
    b.get(start..end).unwrap_or(&[])
}

/// Value of one lowercase hex digit.
fn lc_hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Decode exactly `out.len()` bytes of lowercase hex from `src`.
pub(super) fn decode_lc_hex(src: &[u8], out: &mut [u8]) -> bool {
    if src.len() != out.len() * 2 {
        return false;
    }
    for (o, pair) in out.iter_mut().zip(src.chunks_exact(2)) {
        match (
            pair.first().and_then(|&c| lc_hex(c)),
            pair.get(1).and_then(|&c| lc_hex(c)),
        ) {
            (Some(hi), Some(lo)) => *o = (hi << 4) | lo,
            _ => return false,
        }
    }
    true
}

const HEX: &[u8; 16] = b"0123456789abcdef";

pub(super) fn encode_lc_hex(src: &[u8], out: &mut [u8]) {
    for (pair, &b) in out.chunks_exact_mut(2).zip(src) {
        if let [hi, lo] = pair {
            *hi = HEX[usize::from(b >> 4)];
            *lo = HEX[usize::from(b & 0x0f)];
        }
    }
}

/// Lowercase hex of any bytes (e.g. a trace id for the record's `trace_id`).
pub fn to_lc_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    s
}

/// Digits only, no sign, fits u64.
pub(super) fn parse_u64_digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &c in v {
        let d = u64::from(c.checked_sub(b'0').filter(|d| *d <= 9)?);
        n = n.checked_mul(10)?.checked_add(d)?;
    }
    Some(n)
}
