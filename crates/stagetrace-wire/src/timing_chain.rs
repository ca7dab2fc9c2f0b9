//! Relays between the client and the policy server: each
//! relay's own stamps ([`RelayTiming`]) and the `server_timing` map nested
//! one level per relay ([`TimingChain`]).
//!
//! A relay answers with its own timing map: `recv_unix_ns`, `total_ns`,
//! `transfer_ns` as any server, plus `forward_ns` (received → request
//! handed to the downstream's send API), `reply_ns` (received → the
//! downstream's whole reply in) and `downstream`, the map the downstream
//! answered with, itself a relay's or the policy server's. Any number of
//! hops compose, up to [`MAX_HOPS`]. The keys and checks are here, with the
//! JSON form; the msgpack form is `stagetrace-net`'s, through
//! [`EncodedMap`] (`docs/protocol.md`, "Relays").

use super::error::{check_len, syntax, value_err, Codec, WireError};
use super::timing::{ServerTiming, MAX_DURATION_NS, MAX_UNIX_NS};
use super::timing_map::{json_value, MapValue, TimingMap};

/// Most relays between a client and the policy server; a deeper chain is
/// rejected (and counted) whole.
pub const MAX_HOPS: usize = 4;
/// Key of the downstream's map inside a relay's `server_timing`.
pub const DOWNSTREAM_KEY: &str = "downstream";
/// HTTP response header of a relay: the whole chain as one line of JSON
/// (the `stagetrace-timing` header carries one level only).
pub const TIMING_CHAIN_HEADER: &str = "stagetrace-timing-chain";
/// Longest [`TIMING_CHAIN_HEADER`] value read: [`MAX_HOPS`] relays' stamps
/// and a policy server's map fit several times over.
pub const MAX_TIMING_CHAIN_HEADER_LEN: usize = 4096;

/// One relay's timing of one request, on the relay's clocks: the wall time
/// it had the whole request and monotonic durations from then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayTiming {
    /// Wall time the whole request was received (relay clock), ns since the epoch.
    pub recv_unix_ns: u64,
    /// Received → reply sent upstream.
    pub total_ns: u64,
    /// The request's first byte → whole request, when the relay saw it.
    pub transfer_ns: Option<u64>,
    /// Received → request handed to the downstream's send API.
    pub forward_ns: u64,
    /// Received → the downstream's whole reply received.
    pub reply_ns: u64,
}

impl RelayTiming {
    /// The relay's own time: received → forwarded plus reply received →
    /// reply sent, on its monotonic clock.
    pub fn own_ns(&self) -> u64 {
        self.total_ns
            .saturating_sub(self.reply_ns.saturating_sub(self.forward_ns))
    }

    /// As the [`ServerTiming`] of the hop that ends at this relay: what
    /// the previous node's clock sample needs (receive time, total, transfer).
    pub fn as_server(&self) -> ServerTiming {
        ServerTiming {
            recv_unix_ns: Some(self.recv_unix_ns),
            total_ns: Some(self.total_ns),
            transfer_ns: self.transfer_ns,
            ..ServerTiming::default()
        }
    }

    /// The relay's own keys, in encoding order (integers, ns).
    pub fn entries(&self) -> impl Iterator<Item = (&'static str, MapValue<'static>)> {
        [
            ("recv_unix_ns", Some(self.recv_unix_ns)),
            ("total_ns", Some(self.total_ns)),
            ("transfer_ns", self.transfer_ns),
            ("forward_ns", Some(self.forward_ns)),
            ("reply_ns", Some(self.reply_ns)),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, MapValue::Unsigned(v))))
    }

    /// Stamps in order and range: `forward ≤ reply ≤ total`, durations ≤
    /// [`MAX_DURATION_NS`], wall time ≤ [`MAX_UNIX_NS`].
    fn check(&self) -> Result<(), WireError> {
        const C: Codec = Codec::TimingMap;
        if self.recv_unix_ns > MAX_UNIX_NS {
            return Err(value_err(C, "recv_unix_ns", "is out of range"));
        }
        if self.total_ns > MAX_DURATION_NS || self.transfer_ns.is_some_and(|t| t > MAX_DURATION_NS)
        {
            return Err(value_err(C, "total_ns", "is out of range"));
        }
        if self.forward_ns > self.reply_ns {
            return Err(value_err(C, "forward_ns", "is after reply_ns"));
        }
        if self.reply_ns > self.total_ns {
            return Err(value_err(C, "reply_ns", "is after total_ns"));
        }
        Ok(())
    }
}

/// The relays a response came through, outermost (the client's) first; at
/// most [`MAX_HOPS`]. `Copy` and fixed-size, so it travels on the call's
/// state without allocating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hops {
    len: u8,
    hops: [RelayTiming; MAX_HOPS],
}

impl Hops {
    /// No relay.
    pub fn new() -> Self {
        Hops::default()
    }

    /// Append the next relay downstream; `false` (and nothing added) when
    /// [`MAX_HOPS`] are already there.
    pub fn push(&mut self, hop: RelayTiming) -> bool {
        let i = usize::from(self.len);
        let Some(slot) = self.hops.get_mut(i) else {
            return false;
        };
        *slot = hop;
        self.len += 1;
        true
    }

    /// The relays, outermost first.
    pub fn as_slice(&self) -> &[RelayTiming] {
        &self.hops[..usize::from(self.len).min(MAX_HOPS)]
    }

    /// How many relays.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// True without a relay.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A `server_timing` map in some self-describing encoding, as
/// [`TimingChain::read`] walks it: one level's entries, and the nested
/// `downstream` map of the same encoding.
pub trait EncodedMap: Sized {
    /// The entries of this map (keys that are strings; others `None`), or
    /// `None` when the value is not a map.
    fn entries(&self) -> Option<impl ExactSizeIterator<Item = (Option<&str>, MapValue<'_>)>>;

    /// The value of `key` in this map, when it is there (the first one).
    fn get(&self, key: &str) -> Option<Self>;
}

/// A response's whole `server_timing`: the policy server's map (innermost)
/// and the relays on the way, outermost first.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TimingChain {
    /// The policy server's timing map (the innermost level).
    pub map: TimingMap,
    /// The relays between the client and the policy server.
    pub hops: Hops,
}

impl From<TimingMap> for TimingChain {
    fn from(map: TimingMap) -> Self {
        TimingChain {
            map,
            hops: Hops::new(),
        }
    }
}

/// Integer ns of a relay key: the same rules as the timing map's `*_ns`.
fn ns_value(name: &'static str, v: MapValue<'_>) -> Result<u64, WireError> {
    const C: Codec = Codec::TimingMap;
    match v {
        MapValue::Unsigned(u) => Ok(u),
        MapValue::Float(f) if f.is_finite() && f >= 0.0 && f <= MAX_UNIX_NS as f64 => {
            Ok(f.round() as u64)
        }
        MapValue::Float(_) => Err(value_err(C, name, "is negative, NaN or too large")),
        MapValue::Negative(_) => Err(value_err(C, name, "is negative")),
        MapValue::Str(_) | MapValue::Other => Err(value_err(C, name, "is not a number")),
    }
}

impl TimingChain {
    /// Read a `server_timing` map and the maps nested in it: a level with a
    /// `downstream` key is a relay's (`recv_unix_ns`, `total_ns`,
    /// `forward_ns`, `reply_ns` required, in order), the level without one
    /// the policy server's. More than [`MAX_HOPS`] relays, a relay's stamp
    /// missing or out of order, or any level a [`TimingMap`] rejects, rejects
    /// the whole map. At most `MAX_HOPS + 1` levels are read, whatever the
    /// input's depth.
    pub fn read<M: EncodedMap>(root: &M) -> Result<Self, WireError> {
        const C: Codec = Codec::TimingMap;
        let mut hops = Hops::new();
        let mut level: Option<M> = None;
        for _ in 0..=MAX_HOPS {
            let cur = level.as_ref().unwrap_or(root);
            let entries = cur.entries().ok_or(syntax(C, "is not a map"))?;
            let map = TimingMap::from_entries(entries)?;
            let Some(down) = cur.get(DOWNSTREAM_KEY) else {
                return Ok(TimingChain { map, hops });
            };
            let (mut forward, mut reply) = (None, None);
            for (key, value) in cur.entries().ok_or(syntax(C, "is not a map"))? {
                match key {
                    Some("forward_ns") => forward = Some(ns_value("forward_ns", value)?),
                    Some("reply_ns") => reply = Some(ns_value("reply_ns", value)?),
                    _ => {}
                }
            }
            let t = map.timing;
            let relay = RelayTiming {
                recv_unix_ns: t.recv_unix_ns.ok_or(value_err(
                    C,
                    "recv_unix_ns",
                    "is missing in a relay's map",
                ))?,
                total_ns: t.total_ns.ok_or(value_err(
                    C,
                    "total_ns",
                    "is missing in a relay's map",
                ))?,
                transfer_ns: t.transfer_ns,
                forward_ns: forward.ok_or(value_err(C, "forward_ns", "is missing"))?,
                reply_ns: reply.ok_or(value_err(C, "reply_ns", "is missing"))?,
            };
            relay.check()?;
            if !hops.push(relay) {
                break;
            }
            level = Some(down);
        }
        Err(syntax(C, "nests more relays than MAX_HOPS"))
    }

    /// The chain with `relay` in front (a relay answering upstream); `None`
    /// when it would exceed [`MAX_HOPS`] (the relay then sends its own
    /// timing alone).
    pub fn behind(&self, relay: RelayTiming) -> Option<Self> {
        let mut hops = Hops::new();
        if !hops.push(relay) {
            return None;
        }
        for h in self.hops.as_slice() {
            if !hops.push(*h) {
                return None;
            }
        }
        Some(TimingChain {
            map: self.map,
            hops,
        })
    }

    /// As a JSON object, nested one level per relay.
    pub fn to_json(&self) -> serde_json::Value {
        let mut inner = self.map.to_json();
        for relay in self.hops.as_slice().iter().rev() {
            let mut m = serde_json::Map::new();
            for (k, v) in relay.entries() {
                if let MapValue::Unsigned(u) = v {
                    m.insert(k.into(), serde_json::Value::from(u));
                }
            }
            m.insert(DOWNSTREAM_KEY.into(), inner);
            inner = serde_json::Value::Object(m);
        }
        inner
    }

    /// Read a JSON `server_timing` object with its nested relays.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, WireError> {
        TimingChain::read(&JsonMap(v))
    }

    /// The [`TIMING_CHAIN_HEADER`] value: [`to_json`](Self::to_json) on one line.
    pub fn to_header(&self) -> String {
        self.to_json().to_string()
    }

    /// Read a [`TIMING_CHAIN_HEADER`] value (untrusted bytes): at most
    /// [`MAX_TIMING_CHAIN_HEADER_LEN`] bytes of JSON, then as
    /// [`from_json`](Self::from_json). Never panics.
    pub fn from_header_bytes(input: &[u8]) -> Result<Self, WireError> {
        const C: Codec = Codec::TimingMap;
        check_len(C, input.len(), MAX_TIMING_CHAIN_HEADER_LEN)?;
        let v: serde_json::Value =
            serde_json::from_slice(input).map_err(|_| syntax(C, "is not JSON"))?;
        TimingChain::from_json(&v)
    }
}

/// A JSON value as an [`EncodedMap`].
struct JsonMap<'a>(&'a serde_json::Value);

impl EncodedMap for JsonMap<'_> {
    fn entries(&self) -> Option<impl ExactSizeIterator<Item = (Option<&str>, MapValue<'_>)>> {
        let serde_json::Value::Object(m) = self.0 else {
            return None;
        };
        Some(m.iter().map(|(k, v)| (Some(k.as_str()), json_value(v))))
    }

    fn get(&self, key: &str) -> Option<Self> {
        self.0.as_object()?.get(key).map(JsonMap)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn relay(recv: u64) -> RelayTiming {
        RelayTiming {
            recv_unix_ns: recv,
            total_ns: 9_000_000,
            transfer_ns: Some(1_000),
            forward_ns: 200_000,
            reply_ns: 8_700_000,
        }
    }

    fn server() -> TimingMap {
        TimingMap::from(ServerTiming {
            recv_unix_ns: Some(1_700_000_000_000_000_000),
            total_ns: Some(5_000_000),
            infer_ns: Some(4_000_000),
            queue_ns: Some(0),
            ..ServerTiming::default()
        })
    }

    #[test]
    fn nested_relays_round_trip_outermost_first() {
        let inner = TimingChain::from(server());
        let one = inner.behind(relay(2)).unwrap();
        let two = one.behind(relay(1)).unwrap();
        assert_eq!(two.hops.len(), 2);
        assert_eq!(two.hops.as_slice()[0].recv_unix_ns, 1);
        let json = two.to_json();
        assert_eq!(json["downstream"]["downstream"]["infer_ns"], 4_000_000);
        assert_eq!(TimingChain::from_json(&json).unwrap(), two);
        // As the HTTP header: one line, read back the same.
        let header = two.to_header();
        assert!(!header.contains('\n') && header.len() < MAX_TIMING_CHAIN_HEADER_LEN);
        assert_eq!(
            TimingChain::from_header_bytes(header.as_bytes()).unwrap(),
            two
        );
        assert!(TimingChain::from_header_bytes(b"{\"recv_unix_ns\": 1,").is_err());
        let long = format!(
            "{{\"pad\": \"{}\"}}",
            "x".repeat(MAX_TIMING_CHAIN_HEADER_LEN)
        );
        assert!(TimingChain::from_header_bytes(long.as_bytes()).is_err());
        // A plain server map is a chain without hops.
        assert_eq!(TimingChain::from_json(&server().to_json()).unwrap(), inner);
        assert_eq!(relay(0).own_ns(), 9_000_000 - 8_500_000);
    }

    #[test]
    fn too_deep_or_broken_relays_are_rejected() {
        let mut chain = TimingChain::from(server());
        for i in 0..MAX_HOPS {
            chain = chain.behind(relay(i as u64)).unwrap();
        }
        assert!(chain.behind(relay(9)).is_none());
        let ok = chain.to_json();
        assert!(TimingChain::from_json(&ok).is_ok());
        let deeper = serde_json::json!({
            "recv_unix_ns": 1, "total_ns": 3, "forward_ns": 1, "reply_ns": 2, "downstream": ok
        });
        assert!(TimingChain::from_json(&deeper).is_err());
        let bad = [
            // A relay without its stamps.
            serde_json::json!({"recv_unix_ns": 1, "total_ns": 3, "downstream": {}}),
            // Out of order.
            serde_json::json!({"recv_unix_ns": 1, "total_ns": 3, "forward_ns": 2, "reply_ns": 1, "downstream": {}}),
            serde_json::json!({"recv_unix_ns": 1, "total_ns": 3, "forward_ns": 1, "reply_ns": 4, "downstream": {}}),
            serde_json::json!({"recv_unix_ns": 1, "total_ns": 3, "forward_ns": -1, "reply_ns": 2, "downstream": {}}),
            serde_json::json!({"recv_unix_ns": 1, "total_ns": 3, "forward_ns": "1", "reply_ns": 2, "downstream": {}}),
            // The downstream is not a map.
            serde_json::json!({"recv_unix_ns": 1, "total_ns": 3, "forward_ns": 1, "reply_ns": 2, "downstream": 7}),
            serde_json::json!({"recv_unix_ns": 1, "total_ns": 3, "forward_ns": 1, "reply_ns": 2, "downstream": {"total_ns": -1}}),
        ];
        for b in &bad {
            assert!(TimingChain::from_json(b).is_err(), "accepted {b}");
        }
        // A relay whose downstream sent no timing: one hop, an empty server map.
        let empty = serde_json::json!({"recv_unix_ns": 1, "total_ns": 3, "forward_ns": 1, "reply_ns": 2, "downstream": {}});
        let c = TimingChain::from_json(&empty).unwrap();
        assert_eq!((c.hops.len(), c.map.timing.is_empty()), (1, true));
    }
}
