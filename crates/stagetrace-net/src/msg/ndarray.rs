//! [`NdArray`], a numpy array as the openpi protocol carries it, and the
//! checks every `__ndarray__` map of a message passes.

use std::fmt;

use rmpv::Value;

use super::{key_is, kind_of, DecodeError, MAX_DIMS};
use crate::dtype;

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
    /// `None` for a type the protocol does not carry (see
    /// [`MsgMap::from_msgpack`](super::MsgMap::from_msgpack)); `"<U10"` is
    /// 40 bytes.
    pub fn item_size(&self) -> Option<usize> {
        dtype::item_size(&self.dtype)
            .ok()
            .and_then(|n| usize::try_from(n).ok())
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

    /// Read an `__ndarray__` map (text or binary keys). Checks what
    /// [`MsgMap::from_msgpack`](super::MsgMap::from_msgpack) checks: a known
    /// dtype, sane sizes, and data of exactly item size × Π shape bytes.
    pub fn from_value(v: &Value) -> Result<Self, DecodeError> {
        let Value::Map(entries) = v else {
            return Err(DecodeError::Array("is not a map".to_owned()));
        };
        if !is_array_map(entries) {
            return Err(DecodeError::Array("lacks `__ndarray__: true`".to_owned()));
        }
        let (dtype, shape, data) = array_parts(entries)?;
        Ok(NdArray {
            dtype: dtype.to_owned(),
            shape,
            data: data.to_vec(),
        })
    }
}

impl From<NdArray> for Value {
    fn from(a: NdArray) -> Value {
        a.into_value()
    }
}

/// Check every `__ndarray__` map inside `v` (see
/// [`MsgMap::from_msgpack`](super::MsgMap::from_msgpack)).
/// Depth is bounded by the decoder's [`MAX_DEPTH`](super::MAX_DEPTH).
pub(super) fn check_arrays(v: &Value) -> Result<(), DecodeError> {
    match v {
        Value::Map(entries) if is_array_map(entries) => array_parts(entries).map(|_| ()),
        Value::Map(entries) => entries.iter().try_for_each(|(_, v)| check_arrays(v)),
        Value::Array(items) => items.iter().try_for_each(check_arrays),
        _ => Ok(()),
    }
}

/// A map that says it is an array (`__ndarray__: true`), as openpi's
/// `msgpack_numpy` decides.
fn is_array_map(entries: &[(Value, Value)]) -> bool {
    entries
        .iter()
        .any(|(k, v)| key_is(k, "__ndarray__") && v.as_bool() == Some(true))
}

/// The checked parts of an `__ndarray__` map, borrowed: numpy type string,
/// shape, data.
fn array_parts(entries: &[(Value, Value)]) -> Result<(&str, Vec<u64>, &[u8]), DecodeError> {
    let get = |key: &str| entries.iter().find(|(k, _)| key_is(k, key)).map(|(_, v)| v);
    let bad = |why: &str| DecodeError::Array(why.to_owned());
    let data = match get("data") {
        Some(Value::Binary(b)) => b.as_slice(),
        _ => return Err(bad("has no binary `data`")),
    };
    let dtype = match get("dtype") {
        Some(Value::String(s)) => s.as_str(),
        Some(Value::Binary(b)) => std::str::from_utf8(b).ok(),
        _ => None,
    }
    .filter(|d| d.len() <= 16)
    .ok_or_else(|| bad("has no short string `dtype` (numpy's dtype.str, e.g. \"<f4\")"))?;
    let item = dtype::item_size(dtype)
        .map_err(|why| DecodeError::Array(format!("has dtype {dtype:?} that {why}")))?;
    let dims = match get("shape") {
        Some(Value::Array(dims)) if dims.len() <= MAX_DIMS => dims,
        Some(Value::Array(dims)) => {
            return Err(DecodeError::Array(format!(
                "has a `shape` of {} dimensions (at most {MAX_DIMS})",
                dims.len()
            )))
        }
        _ => return Err(bad("has no `shape` list")),
    };
    let shape = dims
        .iter()
        .map(|d| match d {
            Value::Integer(i) => match (i.as_u64(), i.as_i64()) {
                (Some(u), _) if u <= MAX_BYTES => Ok(u),
                (Some(u), _) => Err(DecodeError::Array(format!(
                    "has a size {u} in `shape`, more than any array can hold"
                ))),
                (None, Some(n)) => Err(DecodeError::Array(format!(
                    "has a negative size {n} in `shape`"
                ))),
                (None, None) => Err(bad("has a size in `shape` out of range")),
            },
            other => Err(DecodeError::Array(format!(
                "has a {} in `shape` where a size goes",
                kind_of(other)
            ))),
        })
        .collect::<Result<Vec<u64>, _>>()?;
    // numpy refuses an array whose non-zero sizes multiply past isize::MAX
    // bytes, even when another size is 0; so does the protocol.
    let bytes_if_nonempty = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(item, |acc, &d| acc.checked_mul(d))
        .filter(|&b| b <= MAX_BYTES);
    let Some(nonempty_bytes) = bytes_if_nonempty else {
        return Err(DecodeError::Array(format!(
            "has shape {shape:?} of {dtype}: more than 2^63 bytes, larger than any array"
        )));
    };
    let need = if shape.contains(&0) {
        0
    } else {
        nonempty_bytes
    };
    if need != data.len() as u64 {
        return Err(DecodeError::Array(format!(
            "has `data` of {} bytes, but shape {shape:?} of {dtype} needs {need}",
            data.len()
        )));
    }
    Ok((dtype, shape, data))
}

/// Largest array in bytes (and largest size in a shape): numpy's `isize::MAX`.
const MAX_BYTES: u64 = i64::MAX as u64;
