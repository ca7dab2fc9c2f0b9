//! How large a message from a peer may grow when decoded.
//!
//! A msgpack element can be a single byte (`nil`, an empty array, an empty
//! map) while its decoded `rmpv::Value` takes 32 bytes plus its vector: a
//! 32 MiB message of empty arrays would decode to over a gigabyte. Before a
//! message is decoded, [`count_elements`] walks its markers without
//! allocating and stops at the budget, so the decoded size is bounded by
//! `MAX_ELEMENTS × size_of::<Value>()` plus the payload bytes themselves.

/// Most msgpack elements (every value, every map key) one message may hold:
/// about 32 MiB of decoded values at worst. openpi observations carry their
/// arrays as single `bin` values, so a real request holds a few hundred.
pub const MAX_ELEMENTS: usize = 1 << 20;

/// Why a message was refused before decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Budget {
    /// More than the budget of elements.
    TooManyElements,
    /// The marker 0xc1, which msgpack never uses, at this offset (rmpv
    /// would decode it as `nil`).
    Reserved(usize),
}

/// Counts the elements of the first msgpack value in `bytes`, refusing as
/// soon as the count passes `max` or a reserved marker comes. Malformed or truncated input ends the
/// walk early (the decoder that runs next reports it precisely); only the
/// element count is judged here.
pub(crate) fn count_elements(bytes: &[u8], max: usize) -> Result<usize, Budget> {
    let mut pos = 0usize;
    // Values still to read: the walk is flat, so nesting costs no stack.
    let mut pending: u64 = 1;
    let mut count = 0usize;
    while pending > 0 {
        let Some(&marker) = bytes.get(pos) else {
            break;
        };
        pos += 1;
        pending -= 1;
        count += 1;
        if count > max {
            return Err(Budget::TooManyElements);
        }
        if marker == 0xc1 {
            return Err(Budget::Reserved(pos - 1));
        }
        let Some((children, skip)) = shape(marker, &bytes[pos..]) else {
            break;
        };
        pending += children;
        pos = match pos.checked_add(skip) {
            Some(p) if p <= bytes.len() => p,
            _ => break,
        };
    }
    Ok(count)
}

/// For a marker: how many values follow inside it (map keys count) and how
/// many bytes of length and payload to skip. `None`: the reserved marker or
/// a truncated length.
fn shape(marker: u8, rest: &[u8]) -> Option<(u64, usize)> {
    let len = |n: usize| -> Option<u64> {
        let b = rest.get(..n)?;
        Some(b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    };
    let payload = |n: usize| -> Option<(u64, usize)> {
        let l = usize::try_from(len(n)?).ok()?;
        Some((0, n.checked_add(l)?))
    };
    Some(match marker {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
        0x80..=0x8f => (2 * u64::from(marker & 0x0f), 0),
        0x90..=0x9f => (u64::from(marker & 0x0f), 0),
        0xa0..=0xbf => (0, usize::from(marker & 0x1f)),
        0xc4 | 0xd9 => payload(1)?,
        0xc5 | 0xda => payload(2)?,
        0xc6 | 0xdb => payload(4)?,
        // ext: length, one type byte, data
        0xc7 => (0, payload(1)?.1 + 1),
        0xc8 => (0, payload(2)?.1 + 1),
        0xc9 => (0, payload(4)?.1 + 1),
        0xca => (0, 4),
        0xcb => (0, 8),
        0xcc | 0xd0 => (0, 1),
        0xcd | 0xd1 => (0, 2),
        0xce | 0xd2 => (0, 4),
        0xcf | 0xd3 => (0, 8),
        // fixext 1/2/4/8/16: one type byte and the data
        0xd4 => (0, 2),
        0xd5 => (0, 3),
        0xd6 => (0, 5),
        0xd7 => (0, 9),
        0xd8 => (0, 17),
        0xdc => (len(2)?, 2),
        0xdd => (len(4)?, 4),
        0xde => (2 * len(2)?, 2),
        0xdf => (2 * len(4)?, 4),
        0xc1 => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rmpv::Value;

    fn encode(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    /// Every element the decoder would build, counted on the decoded value.
    fn decoded_count(v: &Value) -> usize {
        1 + match v {
            Value::Array(a) => a.iter().map(decoded_count).sum(),
            Value::Map(m) => m
                .iter()
                .map(|(k, v)| decoded_count(k) + decoded_count(v))
                .sum(),
            _ => 0,
        }
    }

    #[test]
    fn counts_what_the_decoder_builds() {
        let big_str = "x".repeat(70_000);
        let v = Value::Map(vec![
            (Value::from("a"), Value::Array(vec![Value::Nil; 20])),
            (Value::from("bin"), Value::Binary(vec![7; 300])),
            (
                Value::from(big_str.as_str()),
                Value::from(-5_000_000_000i64),
            ),
            (Value::from(1.5f64), Value::from(1.5f32)),
            (
                Value::from("ext"),
                Value::Ext(3, vec![1, 2, 3, 4, 5, 6, 7, 8]),
            ),
            (
                Value::from("deep"),
                Value::Array(vec![Value::Map(vec![(Value::Nil, Value::from(true))]); 300]),
            ),
        ]);
        let bytes = encode(&v);
        assert_eq!(count_elements(&bytes, usize::MAX), Ok(decoded_count(&v)));
    }

    #[test]
    fn stops_at_the_budget() {
        // array32 of 1 000 empty arrays: 1 001 elements.
        let mut bytes = vec![0xdd, 0, 0, 0x03, 0xe8];
        bytes.extend(std::iter::repeat_n(0x90, 1000));
        assert_eq!(count_elements(&bytes, 1001), Ok(1001));
        assert_eq!(count_elements(&bytes, 1000), Err(Budget::TooManyElements));
    }

    #[test]
    fn a_lying_length_does_not_count_phantom_elements() {
        // array32 claiming 4 billion elements, holding three.
        let bytes = [0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0, 0xc0];
        assert_eq!(count_elements(&bytes, 10), Ok(4));
    }
}
