//! Messages of the openpi / LingBot-VA WebSocket protocol: msgpack maps whose
//! numpy arrays travel as `{"__ndarray__": true, "data": <bin>, "dtype":
//! "<f4", "shape": [..]}` maps.
//!
//! openpi's `msgpack_numpy` writes the four array keys as msgpack *binary*
//! strings (Python `bytes`) and the other keys as text strings; [`NdArray`]
//! writes the same and reads either.

use std::fmt;

use rmpv::Value;

pub use crate::budget::MAX_ELEMENTS;
use crate::budget::{count_elements, Budget};

mod ndarray;

use self::ndarray::check_arrays;
pub use self::ndarray::NdArray;

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
/// use stagetrace_net::{msg::MsgMap, msg::NdArray};
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
    ///
    /// Every `__ndarray__` map inside (at any depth) must be possible: a
    /// numpy type the protocol carries, at most [`MAX_DIMS`] non-negative
    /// sizes, and exactly item size × Π shape bytes of `data`, as the Python
    /// server checks. A handler never sees an array it cannot read.
    pub fn from_msgpack(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.is_empty() {
            return Err(DecodeError::Empty);
        }
        // Counted before decoding: one-byte elements would otherwise decode
        // to 40 times their size in memory.
        count_elements(bytes, MAX_ELEMENTS).map_err(|b| match b {
            Budget::TooManyElements => DecodeError::TooManyElements,
            Budget::Reserved(at) => DecodeError::Reserved(at),
        })?;
        let mut rd = bytes;
        let v =
            rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH).map_err(|e| match e {
                rmpv::decode::Error::DepthLimitExceeded => DecodeError::TooDeep,
                rmpv::decode::Error::InvalidMarkerRead(io)
                | rmpv::decode::Error::InvalidDataRead(io)
                    if io.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    DecodeError::Truncated
                }
                e => DecodeError::Msgpack(e.to_string()),
            })?;
        // What the frame is comes first: trailing bytes after a value that
        // is not a map say nothing useful about it.
        let Value::Map(entries) = v else {
            return Err(DecodeError::NotAMap(kind_of(&v)));
        };
        if !rd.is_empty() {
            return Err(DecodeError::Trailing(rd.len()));
        }
        entries.iter().try_for_each(|(_, v)| check_arrays(v))?;
        Ok(MsgMap { entries })
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
    /// A frame with no bytes at all.
    Empty,
    /// The frame ends inside a msgpack value.
    Truncated,
    /// The byte 0xc1, which msgpack never uses, as a marker at this offset.
    Reserved(usize),
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Not valid msgpack for another reason.
    Msgpack(String),
    /// Valid msgpack, but not a map: the kind of value it is.
    NotAMap(&'static str),
    /// A map followed by this many more bytes.
    Trailing(usize),
    /// An `__ndarray__` map that is malformed or impossible: what is wrong.
    Array(String),
    /// More than [`MAX_ELEMENTS`] msgpack values in one message.
    TooManyElements,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ONE_MAP: &str = "the peer must send one msgpack map per binary frame";
        match self {
            DecodeError::Empty => write!(f, "message is empty; {ONE_MAP}"),
            DecodeError::Truncated => write!(
                f,
                "message ends inside a msgpack value (truncated frame); {ONE_MAP}"
            ),
            DecodeError::Reserved(at) => write!(
                f,
                "message is not msgpack: byte 0xc1 at offset {at} is a marker msgpack never uses; {ONE_MAP}"
            ),
            DecodeError::TooDeep => write!(
                f,
                "message nests deeper than {MAX_DEPTH} levels; {ONE_MAP} of plain values and arrays"
            ),
            DecodeError::Msgpack(e) => write!(f, "message is not valid msgpack ({e}); {ONE_MAP}"),
            DecodeError::NotAMap(kind) => write!(
                f,
                "message is a msgpack {kind}, not a map; the openpi protocol sends one map per frame"
            ),
            DecodeError::Trailing(n) => write!(
                f,
                "message has {n} bytes after its msgpack map; the peer must send exactly one map per frame"
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

/// The msgpack kind of a value, for an error message.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::Integer(_) => "integer",
        Value::F32(_) | Value::F64(_) => "float",
        Value::String(_) => "string",
        Value::Binary(_) => "binary",
        Value::Array(_) => "array",
        Value::Map(_) => "map",
        Value::Ext(..) => "extension value",
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
