//! The `server_timing` map of the openpi / LingBot-VA protocol: its keys,
//! units and checks ([`TimingMap`]), the neutral [`MapValue`] any
//! self-describing encoding converts to and from, and the JSON form.
//!
//! The msgpack form is `stagetrace-net`'s (`TimingMsgpackExt`): it maps
//! msgpack values to [`MapValue`] and back, so both encodings read and
//! write the same keys with the same checks.

use super::error::{check_len, syntax, value_err, Codec, WireError};
use super::host_fields::{host_map_field, HOST_FIELDS};
use super::timing::{map_field, ServerTiming, MAX_DURATION_NS, TIME_FIELDS};

/// Most entries in a `server_timing` map.
pub const MAX_TIMING_MAP_ENTRIES: usize = 64;

/// The `server_timing` map of an openpi / LingBot-VA response: our
/// [`ServerTiming`] plus openpi's `prev_total_ms` (the server's previous
/// loop iteration, kept for openpi clients).
///
/// Keys: `infer_ms` and `prev_total_ms` (float ms, openpi's),
/// `recv_unix_ns`, `total_ns`, `queue_ns`, `infer_ns`, `pre_ns`, `post_ns`,
/// `transfer_ns`
/// (integer ns), `batch_size` (positive integer), `cache` (`"hit"` or
/// `"miss"`) and the host figures `run_wait_ns`, `cpu_stall_ns`, `gc_ns`
/// (integer ns), `involuntary_switches`, `minor_faults`, `major_faults`,
/// `gc_collections`, `voluntary_switches` (counts). When both `infer_ns` and `infer_ms` are present
/// `infer_ns` wins; a map with only `infer_ms` gives a degraded
/// [`ServerTiming`] (`infer_ns` only). Unknown keys are ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TimingMap {
    /// The timing fields.
    pub timing: ServerTiming,
    /// openpi's `prev_total_ms`, when present.
    pub prev_total_ms: Option<f64>,
}

impl From<ServerTiming> for TimingMap {
    fn from(timing: ServerTiming) -> Self {
        TimingMap {
            timing,
            prev_total_ms: None,
        }
    }
}

/// One value of a `server_timing` map as a self-describing encoding (msgpack,
/// JSON) carries it: what [`TimingMap::entries`] yields and
/// [`TimingMap::from_entries`] reads. An encoding converts its own values to
/// and from this; the keys, units and range checks stay in [`TimingMap`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MapValue<'a> {
    /// A non-negative integer.
    Unsigned(u64),
    /// A negative integer.
    Negative(i64),
    /// A floating-point number.
    Float(f64),
    /// A UTF-8 string.
    Str(&'a str),
    /// Anything else: nil, a boolean, bytes, an array, a map, a string that
    /// is not UTF-8, an integer the encoding cannot represent as either.
    Other,
}

fn cache_str(hit: bool) -> &'static str {
    if hit {
        "hit"
    } else {
        "miss"
    }
}

impl TimingMap {
    /// The map's entries in encoding order: `infer_ms` (openpi's, when the
    /// inference time is known), `prev_total_ms`, the `*_ns` fields,
    /// `batch_size`, `cache`; known fields only. Floats are ms, integers ns.
    pub fn entries(&self) -> impl Iterator<Item = (&'static str, MapValue<'static>)> {
        let t = self.timing;
        let infer_ms = t
            .infer_ns
            .map(|ns| ("infer_ms", MapValue::Float(ns as f64 / 1e6)));
        let prev_total_ms = self
            .prev_total_ms
            .map(|ms| ("prev_total_ms", MapValue::Float(ms)));
        let fields = TIME_FIELDS
            .iter()
            .filter_map(move |f| f.get(&t).map(|v| (f.map_key, MapValue::Unsigned(v))));
        let batch = t
            .batch_size
            .map(|b| ("batch_size", MapValue::Unsigned(u64::from(b))));
        let cache = t
            .cache_hit
            .map(|hit| ("cache", MapValue::Str(cache_str(hit))));
        let pickup = t
            .recv_at_pickup
            .then_some(("recv_at_pickup", MapValue::Unsigned(1)));
        let host = HOST_FIELDS
            .iter()
            .filter_map(move |f| f.get(&t.host).map(|v| (f.map_key, MapValue::Unsigned(v))));
        infer_ms
            .into_iter()
            .chain(prev_total_ms)
            .chain(fields)
            .chain(batch)
            .chain(cache)
            .chain(pickup)
            .chain(host)
    }

    /// Read a map from its entries, as an encoding found them: the key when
    /// it is a string (other keys are skipped, but count towards
    /// [`MAX_TIMING_MAP_ENTRIES`]) and the value. Unknown keys are ignored.
    pub fn from_entries<'a, I>(entries: I) -> Result<Self, WireError>
    where
        I: IntoIterator<Item = (Option<&'a str>, MapValue<'a>)>,
        I::IntoIter: ExactSizeIterator,
    {
        const C: Codec = Codec::TimingMap;
        let entries = entries.into_iter();
        check_len(C, entries.len(), MAX_TIMING_MAP_ENTRIES)?;
        let mut out = TimingMap::default();
        let mut infer_ms: Option<u64> = None;
        for (key, value) in entries {
            let Some(key) = key else { continue };
            if key == "infer_ms" || key == "prev_total_ms" {
                let (ms, ns) = ms_entry(key, value)?;
                if key == "infer_ms" {
                    infer_ms = Some(ns);
                } else {
                    out.prev_total_ms = Some(ms);
                }
                continue;
            }
            if key == "batch_size" {
                const B: &str = "batch_size";
                let n = match value {
                    MapValue::Unsigned(u) => u,
                    // Python servers may send an integral float.
                    MapValue::Float(f)
                        if f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f <= 1e9 =>
                    {
                        f as u64
                    }
                    MapValue::Negative(_) => return Err(value_err(C, B, "is negative")),
                    _ => return Err(value_err(C, B, "is not a positive integer")),
                };
                // Beyond u32: out of range, rejected by `check` below.
                out.timing.batch_size = Some(u32::try_from(n).unwrap_or(u32::MAX));
                continue;
            }
            if key == "recv_at_pickup" {
                // 1 or 0, as an integer or an integral float (Python).
                out.timing.recv_at_pickup = match value {
                    MapValue::Unsigned(1) => true,
                    MapValue::Unsigned(0) => false,
                    MapValue::Float(1.0) => true,
                    MapValue::Float(0.0) => false,
                    _ => return Err(value_err(C, "recv_at_pickup", "is not 0 or 1")),
                };
                continue;
            }
            if key == "cache" {
                out.timing.cache_hit = match value {
                    MapValue::Str("hit") => Some(true),
                    MapValue::Str("miss") => Some(false),
                    _ => return Err(value_err(C, "cache", "is not \"hit\" or \"miss\"")),
                };
                continue;
            }
            if let Some(f) = host_map_field(key) {
                // An unsigned integer, or an integral float as Python
                // servers may send; else the map is rejected, key named.
                let n = match value {
                    MapValue::Unsigned(u) => u,
                    MapValue::Float(x)
                        if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= f.max() as f64 =>
                    {
                        x as u64
                    }
                    MapValue::Negative(_) => return Err(value_err(C, f.map_key, "is negative")),
                    _ => return Err(value_err(C, f.map_key, "is not a non-negative integer")),
                };
                f.put(&mut out.timing.host, n)
                    .map_err(|why| value_err(C, f.map_key, why))?;
                continue;
            }
            let Some(f) = map_field(key) else {
                continue;
            };
            let (name, max) = (f.map_key, f.max);
            let n = match value {
                MapValue::Unsigned(u) => u,
                // Python servers may send floats (e.g. `time.time() * 1e9`).
                MapValue::Float(f) if f.is_finite() && f >= 0.0 && f <= max as f64 => {
                    f.round() as u64
                }
                MapValue::Float(_) => {
                    return Err(value_err(C, name, "is negative, NaN or too large"))
                }
                MapValue::Negative(_) => return Err(value_err(C, name, "is negative")),
                MapValue::Str(_) | MapValue::Other => {
                    return Err(value_err(C, name, "is not a number"))
                }
            };
            *f.slot(&mut out.timing) = Some(n);
        }
        if out.timing.infer_ns.is_none() {
            out.timing.infer_ns = infer_ms;
        }
        out.timing.check(C)?;
        Ok(out)
    }

    /// As a JSON object (the same keys as msgpack).
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (key, value) in self.entries() {
            let v = match value {
                MapValue::Unsigned(u) => serde_json::Value::from(u),
                MapValue::Negative(i) => serde_json::Value::from(i),
                // JSON has no NaN or infinity: such a float is left out.
                MapValue::Float(f) if f.is_finite() => serde_json::Value::from(f),
                MapValue::Float(_) | MapValue::Other => continue,
                MapValue::Str(s) => serde_json::Value::from(s),
            };
            m.insert(key.into(), v);
        }
        serde_json::Value::Object(m)
    }

    /// Read a JSON `server_timing` object.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, WireError> {
        let serde_json::Value::Object(m) = v else {
            return Err(syntax(Codec::TimingMap, "is not an object"));
        };
        Self::from_entries(m.iter().map(|(k, v)| (Some(k.as_str()), json_value(v))))
    }
}

/// A JSON value as the timing map reads it: the one reading of JSON numbers
/// and strings for the map and for the relay chain's levels.
pub(crate) fn json_value(v: &serde_json::Value) -> MapValue<'_> {
    match v {
        serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => MapValue::Unsigned(u),
            (None, Some(i), _) => MapValue::Negative(i),
            (None, None, Some(f)) => MapValue::Float(f),
            _ => MapValue::Other,
        },
        serde_json::Value::String(s) => MapValue::Str(s),
        _ => MapValue::Other,
    }
}

impl ServerTiming {
    /// The `server_timing` object for a JSON response, with openpi's
    /// `infer_ms` when the inference time is known.
    pub fn to_json(&self) -> serde_json::Value {
        TimingMap::from(*self).to_json()
    }

    /// Read a `server_timing` object from a JSON response.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, WireError> {
        TimingMap::from_json(v).map(|m| m.timing)
    }
}

/// Finite, non-negative milliseconds within [`MAX_DURATION_NS`] → ns
/// (the schema's conversion, with the wire's range).
fn ms_to_ns(ms: f64) -> Option<u64> {
    // A negative value (or NaN) is refused before rounding could make it zero.
    if ms.is_nan() || ms < 0.0 {
        return None;
    }
    stagetrace_schema::ms_to_ns(ms)
        .and_then(|ns| u64::try_from(ns).ok())
        .filter(|ns| *ns <= MAX_DURATION_NS)
}

/// A timing-map entry given in ms (`infer_ms`, `prev_total_ms`): the value
/// in ms and in ns, or the map's error naming the key.
fn ms_entry(key: &str, value: MapValue<'_>) -> Result<(f64, u64), WireError> {
    const C: Codec = Codec::TimingMap;
    let field = if key == "infer_ms" {
        "infer_ms"
    } else {
        "prev_total_ms"
    };
    let ms = match value {
        MapValue::Unsigned(u) => u as f64,
        MapValue::Float(f) => f,
        MapValue::Negative(_) => return Err(value_err(C, field, "is negative")),
        MapValue::Str(_) | MapValue::Other => return Err(value_err(C, field, "is not a number")),
    };
    let ns = ms_to_ns(ms).ok_or(value_err(C, field, "is negative, NaN or too large"))?;
    Ok((ms, ns))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    // The msgpack halves of these two tests are in `stagetrace-net`
    // (`timing_map.rs`), next to the msgpack codec.

    #[test]
    fn openpi_map_degrades() {
        let json = serde_json::json!({"infer_ms": 7, "other": "x"});
        assert_eq!(
            ServerTiming::from_json(&json).unwrap().infer_ns,
            Some(7_000_000)
        );
    }

    #[test]
    fn map_round_trip_and_rejects() {
        let t = ServerTiming {
            recv_unix_ns: Some(1_700_000_000_000_000_001),
            total_ns: Some(13_000_001),
            queue_ns: Some(1),
            infer_ns: Some(12_345_678),
            pre_ns: None,
            post_ns: Some(0),
            transfer_ns: Some(8_000_000),
            poll_wait_ns: Some(7),
            batch_size: Some(3),
            cache_hit: Some(true),
            host: Default::default(),
            model_ns: Some(12_000_000),
            device_ns: Some(11_000_000),
            accept_wait_ns: Some(5),
            loop_wait_ns: Some(6),
            prev_tx_wait_ns: Some(8),
            recv_at_pickup: true,
        };
        let m = TimingMap {
            timing: t,
            prev_total_ms: Some(30.5),
        };
        assert_eq!(TimingMap::from_json(&m.to_json()).unwrap(), m);
        assert_eq!(
            m.to_json().get("cache"),
            Some(&serde_json::Value::from("hit"))
        );
        assert_eq!(
            m.to_json().get("recv_at_pickup"),
            Some(&serde_json::Value::from(1))
        );
        for bad in [
            serde_json::json!({"recv_at_pickup": 2}),
            serde_json::json!({"recv_at_pickup": "yes"}),
        ] {
            assert!(ServerTiming::from_json(&bad).is_err(), "{bad}");
        }
        // A Python server's integral float batch size is taken.
        let py = serde_json::json!({"batch_size": 8.0, "cache": "miss"});
        let got = ServerTiming::from_json(&py).unwrap();
        assert_eq!((got.batch_size, got.cache_hit), (Some(8), Some(false)));
        let json_bad = [
            serde_json::json!({"batch_size": 0}),
            serde_json::json!({"cache": "HIT"}),
            serde_json::json!({"queue_ns": -3}),
            serde_json::json!({"transfer_ns": 3_600_000_000_001u64}),
            serde_json::json!({"infer_ms": 1e300}),
            serde_json::json!([1, 2]),
        ];
        for b in &json_bad {
            assert!(TimingMap::from_json(b).is_err(), "accepted {b}");
        }
    }
}
