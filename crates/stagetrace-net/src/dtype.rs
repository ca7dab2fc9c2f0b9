//! numpy type strings as the openpi protocol carries them (`dtype.str`:
//! `"<f4"`, `"|u1"`, `"<U10"`, `"<M8[ns]"`): which ones a peer may send and
//! how many bytes one element takes. The same types the Python server
//! accepts (`stagetrace.server`): no objects, no void records, no complex.

/// The item size of the numpy type string `dtype`, or why it is refused.
///
/// The byte-order character (`<`, `>`, `|`, `=`) is optional, as numpy's
/// own parser allows; `U` counts characters (4 bytes each); `M` / `m` may
/// carry a unit (`[ns]`, `[10ms]`).
pub(crate) fn item_size(dtype: &str) -> Result<u64, &'static str> {
    let body = dtype.strip_prefix(['<', '>', '|', '=']).unwrap_or(dtype);
    let mut chars = body.chars();
    let kind = chars.next().ok_or("is empty")?;
    let rest = chars.as_str();
    let (digits, unit) = match rest.find('[') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 10 {
        return Err("has no item size after its kind (numpy writes e.g. \"<f4\")");
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| "has an item size out of range")?;
    if unit.is_some() && !matches!(kind, 'M' | 'm') {
        return Err("has a unit, which only datetime types (M, m) carry");
    }
    let size = match kind {
        'b' if n == 1 => 1,
        'i' | 'u' if matches!(n, 1 | 2 | 4 | 8) => n,
        'f' if matches!(n, 2 | 4 | 8 | 16) => n,
        'M' | 'm' if n == 8 => {
            if let Some(u) = unit {
                time_unit(u)?;
            }
            8
        }
        // Bytes and text: numpy caps an item at i32::MAX bytes.
        'S' if (1..=i32::MAX as u64).contains(&n) => n,
        'U' if (1..=i32::MAX as u64 / 4).contains(&n) => 4 * n,
        'b' | 'i' | 'u' | 'f' | 'M' | 'm' | 'S' | 'U' => {
            return Err("has an item size numpy does not have for its kind")
        }
        'c' => return Err("is complex, which the protocol does not carry"),
        'O' | 'V' => return Err("is an object or void type, which the protocol does not carry"),
        _ => return Err("is not a numpy type (kinds: b i u f S U M m)"),
    };
    Ok(size)
}

/// A datetime unit: `[ns]`, `[10ms]`, ... (numpy's units, optional count).
fn time_unit(u: &str) -> Result<(), &'static str> {
    const BAD: &str = "has a datetime unit numpy does not know";
    let inner = u
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or(BAD)?;
    let name = inner.trim_start_matches(|c: char| c.is_ascii_digit());
    let known = [
        "Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as",
    ];
    if known.contains(&name) && inner.len() - name.len() <= 9 {
        Ok(())
    } else {
        Err(BAD)
    }
}

#[cfg(test)]
mod tests {
    use super::item_size;

    #[test]
    fn numpy_type_strings_and_their_sizes() {
        for (s, n) in [
            ("<f4", 4),
            ("f4", 4),
            (">f8", 8),
            ("<f2", 2),
            ("|u1", 1),
            ("|b1", 1),
            ("<i8", 8),
            ("=u2", 2),
            ("|S10", 10),
            ("<U10", 40),
            ("<M8[ns]", 8),
            ("<m8[10ms]", 8),
            ("<M8", 8),
        ] {
            assert_eq!(item_size(s), Ok(n), "{s}");
        }
        for s in [
            "",
            "<",
            "<x4",
            "<f3",
            "<i3",
            "|b2",
            "<c8",
            "|O",
            "|V8",
            "|S0",
            "<U0",
            "<f4[ns]",
            "<M8[xs]",
            "<M4",
            "<f",
            "<f04x",
            "<f99999999999",
            "<f-4",
            "<U2147483647",
        ] {
            assert!(item_size(s).is_err(), "{s:?} accepted");
        }
    }
}
