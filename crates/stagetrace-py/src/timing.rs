//! A response's `server_timing` map, as Python decoded it (a dict of str →
//! int / float / str), read through the core's neutral `MapValue` entries:
//! the keys, units and range checks stay the core's (`wire/timing_map.rs`).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use stagetrace::wire::{MapValue, TimingMap};
use stagetrace::ServerTiming;

/// The timing in `map`, `None` when it is not a dict or the core rejects it.
pub(crate) fn from_python(map: &Bound<'_, PyAny>) -> Option<ServerTiming> {
    let dict = map.downcast::<PyDict>().ok()?;
    // Owned first: MapValue borrows its strings.
    let mut keys: Vec<Option<String>> = Vec::with_capacity(dict.len());
    let mut values: Vec<Value> = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        keys.push(key(&k));
        values.push(value(&v));
    }
    let entries = keys.iter().zip(values.iter()).map(|(k, v)| {
        let mv = match v {
            Value::Unsigned(u) => MapValue::Unsigned(*u),
            Value::Negative(i) => MapValue::Negative(*i),
            Value::Float(f) => MapValue::Float(*f),
            Value::Str(s) => MapValue::Str(s),
            Value::Other => MapValue::Other,
        };
        (k.as_deref(), mv)
    });
    let entries: Vec<_> = entries.collect();
    TimingMap::from_entries(entries).ok().map(|m| m.timing)
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
