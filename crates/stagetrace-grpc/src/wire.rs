//! What travels in gRPC metadata (`docs/protocol.md`): the caller's trace
//! context in the request, and in the response's trailers the server's
//! timing (`stagetrace-timing-bin`) and, for an async server's
//! `SendObservations`, what it did with the observation
//! (`stagetrace-obs-bin`). Both are msgpack maps, the same bytes the Python
//! package (`stagetrace.grpc`, `stagetrace.lerobot`) reads and writes.
//!
//! Parsers take untrusted bytes: at most [`MAX_TRAILER_BYTES`], no panic, an
//! error the caller counts.

use std::fmt;

use rmpv::Value;
use stagetrace_net::TimingMsgpackExt;
use stagetrace_wire::ServerTiming;
use stagetrace_wire::{TimingMap, WireError};

/// Trailing metadata key of the server's timing map (msgpack; a `-bin` key:
/// base64 on the HTTP/2 wire, bytes in the metadata API).
pub const TIMING_KEY: &str = "stagetrace-timing-bin";

/// Trailing metadata key of `SendObservations`: what the server did with the
/// observation ([`ObsOutcome`], msgpack).
pub const OUTCOME_KEY: &str = "stagetrace-obs-bin";

/// Key of the timestep an async server's timing map answers (the
/// observation whose chunk the reply carries); not a timing field, so
/// other readers ignore it.
pub const TIMESTEP_KEY: &str = "timestep";

/// Largest trailer value read, decoded bytes: a full timing map (64
/// entries, the core's limit) is under 2 KiB.
pub const MAX_TRAILER_BYTES: usize = 4096;

/// Nesting read in a trailer, in rmpv's steps (a string value in a map
/// takes five): both maps are flat.
const MAX_DEPTH: usize = 12;

/// The server's timing as a gRPC trailer carries it: the `server_timing`
/// map, with the timestep it answers when an async server sent one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrpcTiming {
    /// The timing fields.
    pub timing: ServerTiming,
    /// The observation's timestep the reply answers (`GetActions`), when sent.
    pub timestep: Option<u64>,
}

/// What an async server did with one observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Put in the one-slot queue (maybe pushing out an older one).
    Queued,
    /// Skipped: too close to the last observation the policy ran on.
    SkippedSimilar,
    /// Skipped: its timestep was already predicted.
    SkippedPredicted,
}

impl Disposition {
    /// The word on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Queued => "queued",
            Disposition::SkippedSimilar => "skipped_similar",
            Disposition::SkippedPredicted => "skipped_predicted",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "queued" => Some(Disposition::Queued),
            "skipped_similar" => Some(Disposition::SkippedSimilar),
            "skipped_predicted" => Some(Disposition::SkippedPredicted),
            _ => None,
        }
    }
}

/// The `stagetrace-obs-bin` trailer of `SendObservations`: `{obs,
/// timestep, replaced}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObsOutcome {
    /// What the server did with it.
    pub disposition: Disposition,
    /// The observation's timestep (absent when the server could not read one).
    pub timestep: Option<u64>,
    /// The timestep of the queued observation this one pushed out.
    pub replaced: Option<u64>,
}

/// Why a trailer was not read. Counted as a rejected header; the call
/// itself goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrailerError {
    /// Longer than [`MAX_TRAILER_BYTES`].
    TooLong(usize),
    /// Not one msgpack value, or bytes after it.
    NotMsgpack,
    /// A msgpack value that is not a map.
    NotAMap,
    /// A field with a value of the wrong kind or out of range.
    BadField(&'static str),
    /// The timing map failed the core's checks.
    Timing(WireError),
}

impl fmt::Display for TrailerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrailerError::TooLong(n) => write!(
                f,
                "gRPC trailer of {n} bytes is longer than {MAX_TRAILER_BYTES}; the server sends more than a timing map"
            ),
            TrailerError::NotMsgpack => f.write_str(
                "gRPC trailer is not one msgpack value; the server must send msgpack bytes (docs/protocol.md)",
            ),
            TrailerError::NotAMap => f.write_str("gRPC trailer is msgpack but not a map"),
            TrailerError::BadField(k) => write!(f, "gRPC trailer field `{k}` has a wrong value"),
            TrailerError::Timing(e) => write!(f, "gRPC timing trailer rejected: {e}"),
        }
    }
}

impl std::error::Error for TrailerError {}

fn to_bytes(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, v);
    out
}

fn read_map(bytes: &[u8]) -> Result<Vec<(Value, Value)>, TrailerError> {
    if bytes.len() > MAX_TRAILER_BYTES {
        return Err(TrailerError::TooLong(bytes.len()));
    }
    let mut rd = bytes;
    let v = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH)
        .map_err(|_| TrailerError::NotMsgpack)?;
    if !rd.is_empty() {
        return Err(TrailerError::NotMsgpack);
    }
    match v {
        Value::Map(m) => Ok(m),
        _ => Err(TrailerError::NotAMap),
    }
}

/// A non-negative integer field, absent or nil as `None`.
fn opt_u64(m: &[(Value, Value)], key: &'static str) -> Result<Option<u64>, TrailerError> {
    match m
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|e| &e.1)
    {
        None | Some(Value::Nil) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or(TrailerError::BadField(key)),
    }
}

impl GrpcTiming {
    /// The msgpack bytes: the `server_timing` map, plus `timestep` when set.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = self.timing.to_msgpack();
        if let (Value::Map(m), Some(ts)) = (&mut v, self.timestep) {
            m.push((Value::from(TIMESTEP_KEY), Value::from(ts)));
        }
        to_bytes(&v)
    }

    /// Read a timing trailer's bytes. The map's keys and checks are the
    /// core's ([`TimingMap`]); `timestep`, when present, is a non-negative
    /// integer.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TrailerError> {
        let m = read_map(bytes)?;
        let timestep = opt_u64(&m, TIMESTEP_KEY)?;
        let map = TimingMap::from_msgpack(&Value::Map(m)).map_err(TrailerError::Timing)?;
        Ok(GrpcTiming {
            timing: map.timing,
            timestep,
        })
    }
}

impl ObsOutcome {
    /// The msgpack bytes, keys in the Python package's order.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(3);
        m.push((
            Value::from("timestep"),
            self.timestep.map_or(Value::Nil, Value::from),
        ));
        m.push((Value::from("obs"), Value::from(self.disposition.as_str())));
        if let Some(r) = self.replaced {
            m.push((Value::from("replaced"), Value::from(r)));
        }
        to_bytes(&Value::Map(m))
    }

    /// Read an outcome trailer's bytes: `obs` is one of the three words,
    /// `timestep` and `replaced` non-negative integers (or absent).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TrailerError> {
        let m = read_map(bytes)?;
        let disposition = m
            .iter()
            .find(|(k, _)| k.as_str() == Some("obs"))
            .and_then(|(_, v)| v.as_str())
            .and_then(Disposition::parse)
            .ok_or(TrailerError::BadField("obs"))?;
        Ok(ObsOutcome {
            disposition,
            timestep: opt_u64(&m, "timestep")?,
            replaced: opt_u64(&m, "replaced")?,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn timing_with_a_timestep_round_trips() {
        let t = GrpcTiming {
            timing: ServerTiming {
                recv_unix_ns: Some(1_700_000_000_000_000_000),
                total_ns: Some(9_000_000),
                queue_ns: Some(1_000_000),
                infer_ns: Some(5_000_000),
                poll_wait_ns: Some(3_000_000),
                ..ServerTiming::default()
            },
            timestep: Some(42),
        };
        assert_eq!(GrpcTiming::from_bytes(&t.to_bytes()), Ok(t));
        let plain = GrpcTiming {
            timestep: None,
            ..t
        };
        assert_eq!(GrpcTiming::from_bytes(&plain.to_bytes()), Ok(plain));
    }

    #[test]
    fn outcomes_round_trip() {
        for o in [
            ObsOutcome {
                disposition: Disposition::Queued,
                timestep: Some(7),
                replaced: Some(6),
            },
            ObsOutcome {
                disposition: Disposition::SkippedPredicted,
                timestep: Some(7),
                replaced: None,
            },
            ObsOutcome {
                disposition: Disposition::SkippedSimilar,
                timestep: None,
                replaced: None,
            },
        ] {
            assert_eq!(ObsOutcome::from_bytes(&o.to_bytes()), Ok(o));
        }
    }

    #[test]
    fn malformed_trailers_are_errors_not_panics() {
        let map = |k: &str, v: Value| to_bytes(&Value::Map(vec![(Value::from(k), v)]));
        // A map of one entry whose key is cut short.
        assert_eq!(
            GrpcTiming::from_bytes(b"\x81\xa4ti"),
            Err(TrailerError::NotMsgpack)
        );
        assert_eq!(
            GrpcTiming::from_bytes(&to_bytes(&Value::from(3))),
            Err(TrailerError::NotAMap)
        );
        assert!(matches!(
            GrpcTiming::from_bytes(&map("total_ns", Value::from(-1))),
            Err(TrailerError::Timing(_))
        ));
        assert_eq!(
            GrpcTiming::from_bytes(&map("timestep", Value::from(-3))),
            Err(TrailerError::BadField("timestep"))
        );
        assert_eq!(
            GrpcTiming::from_bytes(&vec![0x90; MAX_TRAILER_BYTES + 1]),
            Err(TrailerError::TooLong(MAX_TRAILER_BYTES + 1))
        );
        // A lying length: a map of 2^32-1 entries in five bytes.
        assert_eq!(
            GrpcTiming::from_bytes(b"\xdf\xff\xff\xff\xff"),
            Err(TrailerError::NotMsgpack)
        );
        let mut trailing = to_bytes(&Value::Map(vec![]));
        trailing.push(0);
        assert_eq!(
            GrpcTiming::from_bytes(&trailing),
            Err(TrailerError::NotMsgpack)
        );
        assert_eq!(
            ObsOutcome::from_bytes(&map("obs", Value::from("eaten"))),
            Err(TrailerError::BadField("obs"))
        );
        // Nested deeper than a flat map: not read.
        let deep = (0..10).fold(Value::Nil, |v, _| Value::Array(vec![v]));
        assert_eq!(
            GrpcTiming::from_bytes(&map("x", deep)),
            Err(TrailerError::NotMsgpack)
        );
    }
}
