//! A response's `server_timing` map, as Python decoded it (a dict of str →
//! int / float / str, a relay's level nesting the next under `downstream`),
//! read through the core's neutral `MapValue` entries: the keys, units,
//! range checks and relay rules stay the core's (`wire/timing_map.rs`,
//! `wire/hops.rs`).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use stagetrace_wire::{EncodedMap, MapValue, TimingChain, DOWNSTREAM_KEY, MAX_HOPS};

/// The whole `server_timing` in `map`: the policy server's timing and the
/// relays the response came through (a relay's level nests the next one's
/// under `downstream`, `docs/protocol.md` "Relays"), read by the core's
/// [`TimingChain::read`]; `None` when it is not a dict or the core rejects it.
pub(crate) fn chain_from_python(map: &Bound<'_, PyAny>) -> Option<TimingChain> {
    let mut levels: Vec<Level> = Vec::new();
    let mut cur = map.downcast::<PyDict>().ok()?.clone();
    // At most one level more than the core reads: deeper input is rejected
    // there, and is not walked here.
    for _ in 0..=MAX_HOPS + 1 {
        let mut level = Level {
            entries: Vec::with_capacity(cur.len()),
        };
        let mut next = None;
        for (k, v) in cur.iter() {
            let k = key(&k);
            if k.as_deref() == Some(DOWNSTREAM_KEY) {
                next = v.downcast::<PyDict>().ok().cloned();
            }
            level.entries.push((k, value(&v)));
        }
        levels.push(level);
        match next {
            Some(d) => cur = d,
            None => break,
        }
    }
    TimingChain::read(&LevelRef {
        levels: &levels,
        at: 0,
    })
    .ok()
}

/// One level of a Python `server_timing` map, owned (the core reads
/// borrowed entries).
struct Level {
    entries: Vec<(Option<String>, Value)>,
}

/// Level `at` of a chain, as the core's [`EncodedMap`]; its `downstream` is
/// level `at + 1`.
struct LevelRef<'a> {
    levels: &'a [Level],
    at: usize,
}

impl EncodedMap for LevelRef<'_> {
    fn entries(&self) -> Option<impl ExactSizeIterator<Item = (Option<&str>, MapValue<'_>)>> {
        let level = self.levels.get(self.at)?;
        Some(
            level
                .entries
                .iter()
                .map(|(k, v)| (k.as_deref(), v.as_map_value())),
        )
    }

    fn get(&self, key: &str) -> Option<Self> {
        // A `downstream` that was no dict (or lies past the levels walked)
        // is a level with no entries: the core rejects it, as it does a
        // msgpack `downstream` that is no map.
        let level = self.levels.get(self.at)?;
        (key == DOWNSTREAM_KEY
            && level
                .entries
                .iter()
                .any(|(k, _)| k.as_deref() == Some(DOWNSTREAM_KEY)))
        .then_some(LevelRef {
            levels: self.levels,
            at: self.at + 1,
        })
    }
}

impl Value {
    fn as_map_value(&self) -> MapValue<'_> {
        match self {
            Value::Unsigned(u) => MapValue::Unsigned(*u),
            Value::Negative(i) => MapValue::Negative(*i),
            Value::Float(f) => MapValue::Float(*f),
            Value::Str(s) => MapValue::Str(s),
            Value::Other => MapValue::Other,
        }
    }
}

enum Value {
    Unsigned(u64),
    Negative(i64),
    Float(f64),
    Str(String),
    Other,
}

/// A key as msgpack gives it: `str`, or `bytes` holding UTF-8.
fn key(k: &Bound<'_, PyAny>) -> Option<String> {
    if let Ok(s) = k.downcast::<PyString>() {
        return s.to_cow().ok().map(|c| c.into_owned());
    }
    k.extract::<Vec<u8>>()
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
}

fn value(v: &Bound<'_, PyAny>) -> Value {
    // bool is an int in Python; it is no timing value.
    if v.is_instance_of::<PyBool>() {
        return Value::Other;
    }
    if v.is_instance_of::<PyInt>() {
        if let Ok(u) = v.extract::<u64>() {
            return Value::Unsigned(u);
        }
        return v.extract::<i64>().map_or(Value::Other, Value::Negative);
    }
    if v.is_instance_of::<PyFloat>() {
        return v.extract::<f64>().map_or(Value::Other, Value::Float);
    }
    if let Ok(s) = v.downcast::<PyString>() {
        return s
            .to_cow()
            .map_or(Value::Other, |s| Value::Str(s.into_owned()));
    }
    Value::Other
}
