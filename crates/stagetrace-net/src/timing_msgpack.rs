//! The `server_timing` map in msgpack, as an openpi / LingBot-VA response
//! carries it.
//!
//! The map's keys, units and checks are the core's
//! ([`TimingMap`](stagetrace_wire::TimingMap), which also has the JSON
//! form); this file only converts msgpack values to and from its neutral
//! [`MapValue`], so the core's API carries no msgpack type.

use rmpv::Value;
use stagetrace_wire::ServerTiming;
use stagetrace_wire::{
    Codec, EncodedMap, MapValue, TimingChain, TimingMap, WireError, DOWNSTREAM_KEY,
};

/// The msgpack form of the `server_timing` map, on
/// [`TimingMap`](stagetrace_wire::TimingMap) and [`ServerTiming`].
///
/// ```
/// use stagetrace_wire::ServerTiming;
/// use stagetrace_net::TimingMsgpackExt;
///
/// let t = ServerTiming { infer_ns: Some(12_500_000), ..ServerTiming::default() };
/// let map = t.to_msgpack(); // {"infer_ms": 12.5, "infer_ns": 12500000}
/// assert_eq!(ServerTiming::from_msgpack(&map), Ok(t));
/// ```
pub trait TimingMsgpackExt: Sized {
    /// As a msgpack map: string keys, ns as unsigned integers, ms as f64,
    /// with openpi's `infer_ms` when the inference time is known.
    fn to_msgpack(&self) -> Value;

    /// Read a msgpack `server_timing` map. Anything but a map of at most
    /// [`MAX_TIMING_MAP_ENTRIES`](stagetrace_wire::MAX_TIMING_MAP_ENTRIES)
    /// entries with values in range is rejected.
    fn from_msgpack(v: &Value) -> Result<Self, WireError>;
}

impl TimingMsgpackExt for TimingMap {
    fn to_msgpack(&self) -> Value {
        let mut m: Vec<(Value, Value)> = Vec::with_capacity(10);
        m.extend(self.entries().map(|(key, value)| {
            let value = match value {
                MapValue::Unsigned(u) => Value::from(u),
                MapValue::Negative(i) => Value::from(i),
                MapValue::Float(f) => Value::F64(f),
                MapValue::Str(s) => Value::from(s),
                MapValue::Other => Value::Nil,
            };
            (Value::from(key), value)
        }));
        Value::Map(m)
    }

    fn from_msgpack(v: &Value) -> Result<Self, WireError> {
        let Value::Map(entries) = v else {
            return Err(WireError::Syntax {
                codec: Codec::TimingMap,
                reason: "is not a map",
            });
        };
        TimingMap::from_entries(entries.iter().map(|(k, v)| (k.as_str(), map_value(v))))
    }
}

/// A msgpack value as the core's neutral [`MapValue`].
fn map_value(v: &Value) -> MapValue<'_> {
    match v {
        Value::Integer(i) => match (i.as_u64(), i.as_i64()) {
            (Some(u), _) => MapValue::Unsigned(u),
            (None, Some(i)) => MapValue::Negative(i),
            (None, None) => MapValue::Other,
        },
        Value::F32(f) => MapValue::Float(f64::from(*f)),
        Value::F64(f) => MapValue::Float(*f),
        Value::String(s) => s.as_str().map_or(MapValue::Other, MapValue::Str),
        _ => MapValue::Other,
    }
}

/// A msgpack value as the core's [`EncodedMap`], for [`TimingChain::read`].
struct MsgpackMap<'a>(&'a Value);

impl EncodedMap for MsgpackMap<'_> {
    fn entries(&self) -> Option<impl ExactSizeIterator<Item = (Option<&str>, MapValue<'_>)>> {
        let Value::Map(entries) = self.0 else {
            return None;
        };
        Some(entries.iter().map(|(k, v)| (k.as_str(), map_value(v))))
    }

    fn get(&self, key: &str) -> Option<Self> {
        let Value::Map(entries) = self.0 else {
            return None;
        };
        entries
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| MsgpackMap(v))
    }
}

/// A response's `server_timing` with the relays it came through: one
/// `downstream` level per relay (`docs/protocol.md`, "Relays").
impl TimingMsgpackExt for TimingChain {
    fn to_msgpack(&self) -> Value {
        let mut inner = self.map.to_msgpack();
        for relay in self.hops.as_slice().iter().rev() {
            let mut m: Vec<(Value, Value)> = Vec::with_capacity(6);
            m.extend(relay.entries().filter_map(|(k, v)| match v {
                MapValue::Unsigned(u) => Some((Value::from(k), Value::from(u))),
                _ => None,
            }));
            m.push((Value::from(DOWNSTREAM_KEY), inner));
            inner = Value::Map(m);
        }
        inner
    }

    fn from_msgpack(v: &Value) -> Result<Self, WireError> {
        TimingChain::read(&MsgpackMap(v))
    }
}

impl TimingMsgpackExt for ServerTiming {
    fn to_msgpack(&self) -> Value {
        TimingMap::from(*self).to_msgpack()
    }

    fn from_msgpack(v: &Value) -> Result<Self, WireError> {
        TimingMap::from_msgpack(v).map(|m| m.timing)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use stagetrace_wire::MAX_TIMING_MAP_ENTRIES;

    // The JSON halves of these two tests are in `stagetrace` (`wire/timing_map.rs`).

    #[test]
    fn a_relay_chain_round_trips_and_a_deep_one_is_rejected() {
        use stagetrace_wire::{RelayTiming, MAX_HOPS};
        let relay = RelayTiming {
            recv_unix_ns: 1_700_000_000_000_000_000,
            total_ns: 9_000_000,
            transfer_ns: None,
            forward_ns: 100_000,
            reply_ns: 8_000_000,
        };
        let mut chain = TimingChain::from(TimingMap::from(ServerTiming {
            infer_ns: Some(5_000_000),
            ..ServerTiming::default()
        }));
        for _ in 0..MAX_HOPS {
            chain = chain.behind(relay).unwrap();
        }
        let v = chain.to_msgpack();
        assert_eq!(TimingChain::from_msgpack(&v).unwrap(), chain);
        // The JSON form reads the same.
        assert_eq!(TimingChain::from_json(&chain.to_json()).unwrap(), chain);
        let deeper = Value::Map(vec![
            (Value::from("recv_unix_ns"), Value::from(1)),
            (Value::from("total_ns"), Value::from(3)),
            (Value::from("forward_ns"), Value::from(1)),
            (Value::from("reply_ns"), Value::from(2)),
            (Value::from("downstream"), v),
        ]);
        assert!(TimingChain::from_msgpack(&deeper).is_err());
        // A downstream that is no map is rejected, not ignored.
        let bad = Value::Map(vec![
            (Value::from("recv_unix_ns"), Value::from(1)),
            (Value::from("total_ns"), Value::from(3)),
            (Value::from("forward_ns"), Value::from(1)),
            (Value::from("reply_ns"), Value::from(2)),
            (Value::from("downstream"), Value::from("x")),
        ]);
        assert!(TimingChain::from_msgpack(&bad).is_err());
    }

    #[test]
    fn openpi_map_degrades() {
        let openpi = Value::Map(vec![
            (Value::from("infer_ms"), Value::F64(12.5)),
            (Value::from("prev_total_ms"), Value::F64(40.0)),
        ]);
        let m = TimingMap::from_msgpack(&openpi).unwrap();
        assert_eq!(
            m.timing,
            ServerTiming {
                infer_ns: Some(12_500_000),
                ..Default::default()
            }
        );
        assert_eq!(m.prev_total_ms, Some(40.0));
        assert!(m.timing.is_degraded());
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
            poll_wait_ns: Some(7),
            transfer_ns: Some(41_000_000),
            batch_size: Some(3),
            cache_hit: Some(true),
            host: Default::default(),
            model_ns: Some(12_000_000),
            device_ns: Some(11_500_000),
            accept_wait_ns: Some(2),
            loop_wait_ns: Some(3),
            prev_tx_wait_ns: Some(4),
            recv_at_pickup: true,
        };
        let m = TimingMap {
            timing: t,
            prev_total_ms: Some(30.5),
        };
        assert_eq!(TimingMap::from_msgpack(&m.to_msgpack()).unwrap(), m);
        let mp = t.to_msgpack();
        assert_eq!(mp.as_map().map(|m| m[0].0.as_str()), Some(Some("infer_ms")));
        let bad = [
            Value::from(3),
            Value::Map(vec![(Value::from("total_ns"), Value::from(-1))]),
            Value::Map(vec![(Value::from("total_ns"), Value::F64(f64::NAN))]),
            Value::Map(vec![(Value::from("infer_ms"), Value::F64(-0.5))]),
            Value::Map(vec![(Value::from("infer_ms"), Value::F64(f64::INFINITY))]),
            Value::Map(vec![(Value::from("infer_ms"), Value::from("12"))]),
            Value::Map(vec![(Value::from("total_ns"), Value::from(u64::MAX))]),
            Value::Map(vec![(Value::from("recv_unix_ns"), Value::from(u64::MAX))]),
            Value::Map(vec![(Value::Nil, Value::Nil); MAX_TIMING_MAP_ENTRIES + 1]),
            Value::Map(vec![(Value::from("batch_size"), Value::from(0))]),
            Value::Map(vec![(Value::from("batch_size"), Value::from(-2))]),
            Value::Map(vec![(Value::from("batch_size"), Value::F64(2.5))]),
            Value::Map(vec![(Value::from("batch_size"), Value::from(u64::MAX))]),
            Value::Map(vec![(Value::from("batch_size"), Value::from("4"))]),
            Value::Map(vec![(Value::from("cache"), Value::from("warm"))]),
            Value::Map(vec![(Value::from("cache"), Value::Boolean(true))]),
            Value::Map(vec![(Value::from("total_ns"), Value::from("hit"))]),
        ];
        for b in &bad {
            assert!(TimingMap::from_msgpack(b).is_err(), "accepted {b:?}");
        }
        let keys: Vec<_> = m
            .to_msgpack()
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.clone()))
            .collect();
        assert!(keys.contains(&("batch_size".into(), Value::from(3))));
        assert!(keys.contains(&("cache".into(), Value::from("hit"))));
    }
}
