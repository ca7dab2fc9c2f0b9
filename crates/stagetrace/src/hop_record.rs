//! The record's per-hop figures: one [`HopFigures`] per
//! hop between the client and the policy server when the call went through
//! relays, written as the record's `hops` array (`docs/stages.md`, "Hops").
//!
//! A neutral module: the clock stitching fills it, the record writes and
//! reads it; it imports neither.

use serde::de::{Error, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use stagetrace_schema::MAX_HOPS_READ;
use stagetrace_schema::{ms_to_ns, Figure, HOP_KEYS as KEYS};

// One hop per relay plus the last one to the policy server.
const _: () = assert!(MAX_HOPS_READ == stagetrace_wire::MAX_HOPS + 1);

/// One hop of the path, from the node before it (the client, or a relay)
/// to the node at its end (a relay, or the policy server), and that node's
/// own time. Integer ns; the record writes ms (µs resolution).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HopFigures {
    /// The previous node sends → this node has the whole request,
    /// clock-corrected with this hop's offset.
    pub up_ns: Option<i64>,
    /// This node sends its reply → the previous node has it whole.
    pub down_ns: Option<i64>,
    /// `up + down`: the hop's network time, exact without clock sync (the
    /// previous node's forward → reply span less this node's total).
    pub net_ns: Option<i64>,
    /// A relay's own time (received → forwarded plus reply received →
    /// reply sent, its monotonic clock); absent for the policy server, whose
    /// time is `server_ms`.
    pub relay_ns: Option<i64>,
    /// This node's clock − the previous node's, as estimated from this
    /// hop's stamps (the path's `offset_ms` is the sum).
    pub offset_ns: Option<i64>,
    /// ± bound on `up` / `down` (and on `offset`): this hop's own; the
    /// path's `split_err_ms` is the sum.
    pub err_ns: Option<i64>,
    /// Frequency error of this node's clock against the previous node's, ppm,
    /// once estimated.
    pub drift_ppm: Option<f64>,
    /// ± bound on `drift_ppm` (the fit's standard error times its
    /// coverage factor, at least 2 ppm), with it.
    pub drift_err_ppm: Option<f64>,
}

impl HopFigures {
    /// A record's `hops` array as the record writes it (a JSON array), for
    /// sinks that carry it as one value (an OTLP attribute).
    pub fn list_to_json(hops: &[HopFigures]) -> String {
        // Serialising numbers cannot fail.
        serde_json::to_string(hops).unwrap_or_default()
    }

    fn ms_slots(&self) -> [Option<i64>; 6] {
        [
            self.up_ns,
            self.down_ns,
            self.net_ns,
            self.relay_ns,
            self.offset_ns,
            self.err_ns,
        ]
    }

    fn slot(&mut self, i: usize) -> Option<&mut Option<i64>> {
        match i {
            0 => Some(&mut self.up_ns),
            1 => Some(&mut self.down_ns),
            2 => Some(&mut self.net_ns),
            3 => Some(&mut self.relay_ns),
            4 => Some(&mut self.offset_ns),
            5 => Some(&mut self.err_ns),
            _ => None,
        }
    }
}

impl Serialize for HopFigures {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (key, v) in KEYS.iter().zip(self.ms_slots()) {
            if let Some(ns) = v {
                // The same unit and rounding as every `_ms` figure.
                map.serialize_entry(key, &Figure::Net.to_unit(ns))?;
            }
        }
        for (key, v) in KEYS[6..].iter().zip([self.drift_ppm, self.drift_err_ppm]) {
            if let Some(d) = v.filter(|d| d.is_finite()) {
                map.serialize_entry(key, &((d * 1000.0).round() / 1000.0))?;
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for HopFigures {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(HopVisitor)
    }
}

struct HopVisitor;

impl<'de> Visitor<'de> for HopVisitor {
    type Value = HopFigures;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("one entry of a record's hops array (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HopFigures, A::Error> {
        let mut out = HopFigures::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let Some(i) = KEYS.iter().position(|k| *k == key) else {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            };
            let v: f64 = map.next_value()?;
            if i >= 6 {
                // A bound is never negative.
                if !(v.is_finite() && v.abs() <= 1e6 && (i == 6 || v >= 0.0)) {
                    return Err(A::Error::custom(format_args!(
                        "hops: {} out of range",
                        KEYS[i]
                    )));
                }
                *(if i == 6 {
                    &mut out.drift_ppm
                } else {
                    &mut out.drift_err_ppm
                }) = Some(v);
                continue;
            }
            // Only the hop's offset may be negative; a bound is one day at most.
            let ns = ms_to_ns(v)
                .filter(|ns| (i == 4 || *ns >= 0) && ns.abs() <= 86_400_000_000_000)
                .ok_or_else(|| A::Error::custom(format_args!("hops: {} out of range", KEYS[i])))?;
            if let Some(slot) = out.slot(i) {
                *slot = Some(ns);
            }
        }
        Ok(out)
    }
}

/// Read a record's `hops` array: at most [`MAX_HOPS_READ`] entries.
pub(crate) struct HopsSeed;

impl<'de> serde::de::DeserializeSeed<'de> for HopsSeed {
    type Value = Vec<HopFigures>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for HopsSeed {
    type Value = Vec<HopFigures>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an array of at most {MAX_HOPS_READ} hop entries")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(MAX_HOPS_READ);
        while let Some(h) = seq.next_element::<HopFigures>()? {
            if out.len() == MAX_HOPS_READ {
                return Err(A::Error::custom("hops: too many entries"));
            }
            out.push(h);
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_round_trips_in_ms() {
        let h = HopFigures {
            up_ns: Some(3_001_000),
            down_ns: Some(1_000_000),
            net_ns: Some(4_001_000),
            relay_ns: Some(250_000),
            offset_ns: Some(-80_000_000),
            err_ns: Some(120_000),
            drift_ppm: Some(199.5),
            drift_err_ppm: Some(2.25),
        };
        let json = serde_json::to_string(&h).unwrap();
        assert!(json.contains("\"up_ms\":3.001"), "{json}");
        assert_eq!(serde_json::from_str::<HopFigures>(&json).unwrap(), h);
        assert!(serde_json::from_str::<HopFigures>(r#"{"up_ms": -1}"#).is_err());
        assert!(serde_json::from_str::<HopFigures>(r#"{"drift_ppm": 1e300}"#).is_err());
        assert!(serde_json::from_str::<HopFigures>(r#"{"drift_err_ppm": -1}"#).is_err());
    }
}
