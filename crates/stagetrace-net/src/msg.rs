//! Messages of the openpi / LingBot-VA WebSocket protocol: msgpack maps whose
//! numpy arrays travel as `{"__ndarray__": true, "data": <bin>, "dtype":
//! "<f4", "shape": [..]}` maps.
//!
//! openpi's `msgpack_numpy` writes the four array keys as msgpack *binary*
//! strings (Python `bytes`) and the other keys as text strings; [`NdArray`]
//! writes the same and reads either.

use std::fmt;

use rmpv::Value;

use crate::budget::count_elements;
pub use crate::budget::MAX_ELEMENTS;

/// Deepest nesting accepted when decoding a message from a peer.
pub const MAX_DEPTH: usize = 64;

/// Most dimensions accepted in an array's shape.
pub const MAX_DIMS: usize = 32;

/// A msgpack map: one request (observation) or one response (action).
///
/// Keys are strings in the openpi protocol; values are any msgpack value,
/// arrays as [`NdArray`] maps.
///
/// ```
/// use stagetrace_net::{MsgMap, NdArray};
///
/// let obs = MsgMap::new()
///     .with("prompt", "pick up the cup")
///     .with("state", NdArray::from_f32(&[0.1, 0.2, 0.3], &[3]));
/// let state = obs.array("state").unwrap();
/// assert_eq!(state.to_f32().unwrap(), vec![0.1, 0.2, 0.3]);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MsgMap {
    entries: Vec<(Value, Value)>,
}

impl MsgMap {
    /// An empty map.
    pub fn new() -> Self {
        MsgMap::default()
    }

    /// Set `key` (replacing an earlier value), builder style.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.insert(key, value);
        self
    }

    /// Set `key`, replacing an earlier value.
    pub fn insert(&mut self, key: &str, value: impl Into<Value>) {
        let value = value.into();
        match self.position(key) {
            Some(i) => {
                if let Some(slot) = self.entries.get_mut(i) {
                    slot.1 = value;
                }
            }
            None => self.entries.push((Value::from(key), value)),
        }
    }

    /// Remove `key` and return its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.position(key).map(|i| self.entries.remove(i).1)
    }

    /// The value under `key` (a text or binary key).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.position(key)
            .and_then(|i| self.entries.get(i))
            .map(|(_, v)| v)
    }

    /// The string under `key`.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// The array under `key`, when it is a well-formed `__ndarray__` map.
    pub fn array(&self, key: &str) -> Option<NdArray> {
        self.get(key).and_then(|v| NdArray::from_value(v).ok())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in wire order.
    pub fn entries(&self) -> &[(Value, Value)] {
        &self.entries
    }

    /// As a msgpack value.
    pub fn into_value(self) -> Value {
        Value::Map(self.entries)
    }

    /// From a msgpack value; `None` when it is not a map.
    pub fn from_value(v: Value) -> Option<Self> {
        match v {
            Value::Map(entries) => Some(MsgMap { entries }),
            _ => None,
        }
    }

    /// Encode as msgpack bytes.
    pub fn to_msgpack(&self) -> Vec<u8> {
        let mut w = MapWriter::with_capacity(self.encoded_len_hint());
        w.entries(&self.entries);
        w.finish().to_vec()
    }

    /// Decode msgpack bytes from a peer (bounded nesting, at most
    /// [`MAX_ELEMENTS`] values, no panics).
    pub fn from_msgpack(bytes: &[u8]) -> Result<Self, DecodeError> {
        // Counted before decoding: one-byte elements would otherwise decode
        // to 40 times their size in memory.
        count_elements(bytes, MAX_ELEMENTS).map_err(|_| DecodeError::TooManyElements)?;
        let mut rd = bytes;
        let v = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH)
            .map_err(|e| DecodeError::Msgpack(e.to_string()))?;
        if !rd.is_empty() {
            return Err(DecodeError::Trailing(rd.len()));
        }
        MsgMap::from_value(v).ok_or(DecodeError::NotAMap)
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.entries.iter().position(|(k, _)| key_is(k, key))
    }

    pub(crate) fn encoded_len_hint(&self) -> usize {
        self.entries
            .iter()
            .map(|(_, v)| match v {
                Value::Map(m) => m
                    .iter()
                    .map(|(_, v)| match v {
                        Value::Binary(b) => b.len() + 16,
                        _ => 16,
                    })
                    .sum(),
                Value::Binary(b) => b.len() + 16,
                Value::String(s) => s.as_bytes().len() + 16,
                _ => 16,
            })
            .sum::<usize>()
            + 16
    }
}

impl From<MsgMap> for Value {
    fn from(m: MsgMap) -> Value {
        m.into_value()
    }
}

/// Room kept in front of an encoded map for its header (map32: 5 bytes).
pub(crate) const HEADER_ROOM: usize = 5;

/// A map being encoded whose entry count is decided at the end: entries are
/// written after [`HEADER_ROOM`] reserved bytes and the header is placed in
/// front of them by [`MapWriter::finish`], without copying the entries. This
/// lets the client add `traceparent` (known only once its transport span
/// exists) and the server add `server_timing` (stamped as late as possible)
/// after a large payload is already encoded.
#[derive(Debug)]
pub(crate) struct MapWriter {
    buf: Vec<u8>,
    count: usize,
}

impl MapWriter {
    pub(crate) fn with_capacity(cap: usize) -> Self {
        let mut buf = Vec::with_capacity(cap + HEADER_ROOM);
        buf.resize(HEADER_ROOM, 0);
        MapWriter { buf, count: 0 }
    }

    /// Append the entries of a map.
    pub(crate) fn entries(&mut self, entries: &[(Value, Value)]) {
        for (k, v) in entries {
            // Writing into a Vec cannot fail.
            let _ = rmpv::encode::write_value(&mut self.buf, k);
            let _ = rmpv::encode::write_value(&mut self.buf, v);
        }
        self.count += entries.len();
    }

    /// Append one entry with a string key.
    pub(crate) fn entry(&mut self, key: &str, value: &Value) {
        let _ = rmpv::encode::write_value(&mut self.buf, &Value::from(key));
        let _ = rmpv::encode::write_value(&mut self.buf, value);
        self.count += 1;
    }

    /// The encoded map.
    pub(crate) fn finish(self) -> bytes::Bytes {
        let len = u32::try_from(self.count).unwrap_or(u32::MAX);
        let mut header = [0u8; HEADER_ROOM];
        // msgpack map header: fixmap, map16 or map32 (big-endian length).
        let hlen = if len < 16 {
            header[0] = 0x80 | len as u8;
            1
        } else if let Ok(l) = u16::try_from(len) {
            header[0] = 0xde;
            header[1..3].copy_from_slice(&l.to_be_bytes());
            3
        } else {
            header[0] = 0xdf;
            header[1..5].copy_from_slice(&len.to_be_bytes());
            5
        };
        let mut buf = self.buf;
        let start = HEADER_ROOM - hlen;
        buf[start..HEADER_ROOM].copy_from_slice(&header[..hlen]);
        bytes::Bytes::from(buf).slice(start..)
    }
}

/// True when a map key (text or binary) equals `key`.
pub(crate) fn key_is(k: &Value, key: &str) -> bool {
    match k {
        Value::String(s) => s.as_bytes() == key.as_bytes(),
        Value::Binary(b) => b.as_slice() == key.as_bytes(),
        _ => false,
    }
}

/// Why bytes from a peer are not a message of the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Not valid msgpack, or nested deeper than [`MAX_DEPTH`].
    Msgpack(String),
    /// Bytes left after the first value.
    Trailing(usize),
    /// Valid msgpack, but not a map.
    NotAMap,
    /// An `__ndarray__` map that is malformed.
    Array(&'static str),
    /// More than [`MAX_ELEMENTS`] msgpack values in one message.
    TooManyElements,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Msgpack(e) => write!(
                f,
                "message is not valid msgpack ({e}); the peer must send one msgpack map per binary frame"
            ),
            DecodeError::Trailing(n) => write!(
                f,
                "message has {n} bytes after its msgpack map; the peer must send exactly one map per frame"
            ),
            DecodeError::NotAMap => f.write_str(
                "message is msgpack but not a map; the openpi protocol sends one map per frame",
            ),
            DecodeError::TooManyElements => write!(
                f,
                "message holds more than {MAX_ELEMENTS} msgpack values; send arrays as \
                 `__ndarray__` maps with one binary `data` value, not as lists of numbers"
            ),
            DecodeError::Array(why) => write!(
                f,
                "`__ndarray__` map {why}; arrays travel as {{__ndarray__: true, data: <bin>, dtype: \"<f4\", shape: [..]}}"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A numpy array as the openpi protocol carries it: raw bytes in C order,
/// a numpy type string (`"<f4"`, `"|u1"`, ...) and a shape.
#[derive(Clone, PartialEq, Eq)]
pub struct NdArray {
    /// numpy `dtype.str`: byte order (`<`, `>`, `|`), kind, item size.
    pub dtype: String,
    /// Dimensions, outermost first.
    pub shape: Vec<u64>,
    /// Element bytes, C order, `item size × Π shape` bytes.
    pub data: Vec<u8>,
}

impl fmt::Debug for NdArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NdArray")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("data_len", &self.data.len())
            .finish()
    }
}

impl NdArray {
    /// A little-endian `float32` array (`"<f4"`).
    pub fn from_f32(values: &[f32], shape: &[u64]) -> Self {
        let mut data = Vec::with_capacity(values.len() * 4);
        for v in values {
            data.extend_from_slice(&v.to_le_bytes());
        }
        NdArray {
            dtype: "<f4".to_owned(),
            shape: shape.to_vec(),
            data,
        }
    }

    /// A `uint8` array (`"|u1"`), e.g. an image `[h, w, 3]`.
    pub fn from_u8(values: Vec<u8>, shape: &[u64]) -> Self {
        NdArray {
            dtype: "|u1".to_owned(),
            shape: shape.to_vec(),
            data: values,
        }
    }

    /// Item size in bytes, from the dtype string.
    pub fn item_size(&self) -> Option<usize> {
        self.dtype.get(2..).and_then(|s| s.parse().ok())
    }

    /// Number of elements (`Π shape`), `None` on overflow.
    pub fn elements(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }

    /// The elements as `f32`, when the dtype is `<f4` (or `=f4`/`f4` on a
    /// little-endian host) and the data length matches the shape.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        if !matches!(self.dtype.as_str(), "<f4" | "=f4" | "f4") {
            return None;
        }
        if self.elements()? != (self.data.len() / 4) as u64 || self.data.len() % 4 != 0 {
            return None;
        }
        Some(
            self.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }

    /// As the protocol's `__ndarray__` map (binary keys, as openpi writes them).
    pub fn to_value(&self) -> Value {
        self.clone().into_value()
    }

    /// As the protocol's `__ndarray__` map, without copying the data.
    pub fn into_value(self) -> Value {
        Value::Map(vec![
            (Value::Binary(b"__ndarray__".to_vec()), Value::Boolean(true)),
            (Value::Binary(b"data".to_vec()), Value::Binary(self.data)),
            (Value::Binary(b"dtype".to_vec()), Value::from(self.dtype)),
            (
                Value::Binary(b"shape".to_vec()),
                Value::Array(self.shape.into_iter().map(Value::from).collect()),
            ),
        ])
    }

    /// Read an `__ndarray__` map (text or binary keys). Checks that the data
    /// length matches dtype × shape.
    pub fn from_value(v: &Value) -> Result<Self, DecodeError> {
        let Value::Map(entries) = v else {
            return Err(DecodeError::Array("is not a map"));
        };
        let get = |key: &str| entries.iter().find(|(k, _)| key_is(k, key)).map(|(_, v)| v);
        if get("__ndarray__").and_then(Value::as_bool) != Some(true) {
            return Err(DecodeError::Array("lacks `__ndarray__: true`"));
        }
        let data = match get("data") {
            Some(Value::Binary(b)) => b.clone(),
            _ => return Err(DecodeError::Array("has no binary `data`")),
        };
        let dtype = match get("dtype") {
            Some(Value::String(s)) => s.as_str().map(str::to_owned),
            Some(Value::Binary(b)) => std::str::from_utf8(b).ok().map(str::to_owned),
            _ => None,
        }
        .filter(|d| d.len() <= 16)
        .ok_or(DecodeError::Array("has no string `dtype`"))?;
        let shape = match get("shape") {
            Some(Value::Array(dims)) if dims.len() <= MAX_DIMS => dims
                .iter()
                .map(Value::as_u64)
                .collect::<Option<Vec<u64>>>()
                .ok_or(DecodeError::Array(
                    "has a `shape` that is not non-negative integers",
                ))?,
            _ => return Err(DecodeError::Array("has no `shape` list")),
        };
        let arr = NdArray { dtype, shape, data };
        let expected = arr
            .item_size()
            .and_then(|s| arr.elements()?.checked_mul(s as u64));
        if expected != Some(arr.data.len() as u64) {
            return Err(DecodeError::Array(
                "has `data` whose length is not dtype × shape",
            ));
        }
        Ok(arr)
    }
}

impl From<NdArray> for Value {
    fn from(a: NdArray) -> Value {
        a.into_value()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn array_round_trip_and_checks() {
        let a = NdArray::from_f32(&[1.0, 2.5, -3.0, 4.0], &[2, 2]);
        let back = NdArray::from_value(&a.to_value()).unwrap();
        assert_eq!(back, a);
        assert_eq!(back.to_f32().unwrap(), vec![1.0, 2.5, -3.0, 4.0]);
        let mut bad = a.clone();
        bad.shape = vec![3, 2];
        assert!(NdArray::from_value(&bad.to_value()).is_err());
        bad.shape = vec![u64::MAX, u64::MAX];
        assert!(NdArray::from_value(&bad.to_value()).is_err());
    }

    #[test]
    fn map_round_trip_with_text_keys() {
        let m = MsgMap::new()
            .with("prompt", "hi")
            .with("img", NdArray::from_u8(vec![1, 2, 3, 4, 5, 6], &[1, 2, 3]))
            .with("prompt", "replaced");
        let bytes = m.to_msgpack();
        let back = MsgMap::from_msgpack(&bytes).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.get_str("prompt"), Some("replaced"));
        assert_eq!(back.array("img").unwrap().shape, vec![1, 2, 3]);
    }

    #[test]
    fn hostile_bytes_are_errors() {
        assert!(MsgMap::from_msgpack(&[0xc1]).is_err());
        assert!(MsgMap::from_msgpack(&[0x01]).is_err());
        // A map claiming 2^32-1 entries with nothing after it.
        assert!(MsgMap::from_msgpack(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
        // Deep nesting.
        let deep = vec![0x91u8; 10_000];
        assert!(MsgMap::from_msgpack(&deep).is_err());
        assert!(MsgMap::from_msgpack(&[0x80, 0x00]).is_err());
    }

    #[test]
    fn map_writer_headers_for_every_size() {
        for n in [0usize, 1, 15, 16, 17, 65535, 65536] {
            let mut w = MapWriter::with_capacity(16);
            let entries: Vec<(Value, Value)> = (0..n)
                .map(|i| (Value::from(i.to_string()), Value::from(i)))
                .collect();
            w.entries(&entries);
            w.entry("last", &Value::Nil);
            let back = MsgMap::from_msgpack(&w.finish()).unwrap();
            assert_eq!(back.len(), n + 1);
            assert_eq!(back.get("last"), Some(&Value::Nil));
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Nil),
                any::<bool>().prop_map(Value::Boolean),
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                any::<f64>()
                    .prop_filter("NaN != NaN", |f| !f.is_nan())
                    .prop_map(Value::F64),
                ".{0,24}".prop_map(Value::from),
                proptest::collection::vec(any::<u8>(), 0..64).prop_map(Value::Binary),
            ];
            leaf.prop_recursive(3, 32, 6, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    proptest::collection::vec((".{0,8}".prop_map(Value::from), inner), 0..6)
                        .prop_map(Value::Map),
                ]
            })
        }

        proptest! {
            #[test]
            fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                let _ = MsgMap::from_msgpack(&bytes);
            }

            #[test]
            fn maps_round_trip(entries in proptest::collection::vec((".{0,16}", value()), 0..20)) {
                let mut m = MsgMap::new();
                for (k, v) in entries {
                    m.insert(&k, v);
                }
                prop_assert_eq!(MsgMap::from_msgpack(&m.to_msgpack()).unwrap(), m);
            }

            #[test]
            fn corrupted_messages_never_panic(
                seed in proptest::collection::vec(any::<f32>(), 0..32),
                flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            ) {
                let n = seed.len() as u64;
                let mut bytes = MsgMap::new()
                    .with("state", NdArray::from_f32(&seed, &[n]))
                    .with("prompt", "go")
                    .to_msgpack();
                for (at, b) in flips {
                    let i = at.index(bytes.len());
                    bytes[i] = b;
                }
                if let Ok(m) = MsgMap::from_msgpack(&bytes) {
                    let _ = m.array("state").map(|a| a.to_f32());
                }
            }

            #[test]
            fn arrays_round_trip(data in proptest::collection::vec(any::<u8>(), 0..256), dims in 1usize..4) {
                let len = data.len() as u64;
                let mut shape = vec![1u64; dims];
                shape[0] = len;
                let a = NdArray::from_u8(data, &shape);
                prop_assert_eq!(NdArray::from_value(&a.to_value()).unwrap(), a);
            }
        }
    }
}
