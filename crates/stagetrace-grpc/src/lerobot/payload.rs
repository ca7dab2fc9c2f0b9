//! What the Rust robot and server put in LeRobot's messages: a msgpack
//! observation (timestep, a value the server compares for similarity, the
//! robot's send time, `must_go`, a frame of filler bytes) sent in
//! `Observation` chunks (`TRANSFER_BEGIN` … `TRANSFER_END`, 2 MiB each, as
//! LeRobot sends its pickle), and a msgpack action chunk in `Actions.data`.
//! A LeRobot peer's pickle is its own business: these two talk to each other.

use rmpv::Value;

use crate::proto::{Observation, TransferState};

/// LeRobot's chunk size for a streamed observation.
pub const TRANSFER_CHUNK_BYTES: usize = 2 << 20;

/// Largest observation a server assembles (bounded memory per stream).
pub const MAX_OBSERVATION_BYTES: usize = 32 << 20;

/// Most actions in one chunk read back.
pub const MAX_ACTIONS: usize = 4096;

/// One observation as the robot sends it.
#[derive(Clone, Debug, PartialEq)]
pub struct TimedObservation {
    /// The robot's timestep (LeRobot: the last action executed).
    pub timestep: u64,
    /// The robot's state, compared by the server for similarity.
    pub value: f64,
    /// The robot's wall clock at sending, ns (LeRobot's `timestamp`).
    pub sent_unix_ns: u64,
    /// Queue it whatever the checks say (the robot's action queue is empty).
    pub must_go: bool,
    /// Filler standing for camera frames.
    pub frame: Vec<u8>,
}

/// The actions a `GetActions` reply carries: timesteps `first_timestep ..`.
#[derive(Clone, Debug, PartialEq)]
pub struct ActionChunk {
    /// The first action's timestep (the observation's).
    pub first_timestep: u64,
    /// One value per action.
    pub actions: Vec<f64>,
}

fn field<'a>(m: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    m.iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|e| &e.1)
}

fn encode(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, v);
    out
}

fn decode_map(bytes: &[u8]) -> Option<Vec<(Value, Value)>> {
    let mut rd = bytes;
    match rmpv::decode::read_value_with_max_depth(&mut rd, 16).ok()? {
        Value::Map(m) if rd.is_empty() => Some(m),
        _ => None,
    }
}

impl TimedObservation {
    /// The msgpack bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(&Value::Map(vec![
            (Value::from("timestep"), Value::from(self.timestep)),
            (Value::from("value"), Value::F64(self.value)),
            (Value::from("timestamp_ns"), Value::from(self.sent_unix_ns)),
            (Value::from("must_go"), Value::Boolean(self.must_go)),
            (Value::from("frame"), Value::Binary(self.frame.clone())),
        ]))
    }

    /// Read an observation; `None` when it is not one.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let m = decode_map(bytes)?;
        Some(TimedObservation {
            timestep: field(&m, "timestep")?.as_u64()?,
            value: field(&m, "value")?.as_f64().filter(|v| v.is_finite())?,
            sent_unix_ns: field(&m, "timestamp_ns")?.as_u64()?,
            must_go: field(&m, "must_go")?.as_bool()?,
            frame: match field(&m, "frame") {
                Some(Value::Binary(b)) => b.clone(),
                _ => Vec::new(),
            },
        })
    }

    /// The observation as the stream's messages: one `TRANSFER_END` when
    /// it fits one chunk, else `BEGIN`, `MIDDLE`…, `END` (LeRobot's
    /// `send_bytes_in_chunks`).
    pub fn to_messages(&self) -> Vec<Observation> {
        let bytes = self.to_bytes();
        let n = bytes.len().div_ceil(TRANSFER_CHUNK_BYTES).max(1);
        bytes
            .chunks(TRANSFER_CHUNK_BYTES)
            .enumerate()
            .map(|(i, c)| {
                let state = match i {
                    _ if i + 1 == n => TransferState::TransferEnd,
                    0 => TransferState::TransferBegin,
                    _ => TransferState::TransferMiddle,
                };
                Observation {
                    transfer_state: state as i32,
                    data: c.to_vec(),
                }
            })
            .collect()
    }
}

/// Reassembles an observation from its stream's messages.
#[derive(Debug, Default)]
pub struct Assembler {
    buf: Vec<u8>,
}

/// Why a streamed observation could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssembleError {
    /// More than [`MAX_OBSERVATION_BYTES`].
    TooLarge,
}

impl Assembler {
    /// Add one message; `Ok(true)` when it ended the observation
    /// (`TRANSFER_END`). `BEGIN` starts over, as LeRobot's receiver does.
    pub fn push(&mut self, msg: Observation) -> Result<bool, AssembleError> {
        let state = TransferState::try_from(msg.transfer_state).unwrap_or_default();
        if state == TransferState::TransferBegin {
            self.buf.clear();
        }
        if self.buf.len() + msg.data.len() > MAX_OBSERVATION_BYTES {
            return Err(AssembleError::TooLarge);
        }
        self.buf.extend_from_slice(&msg.data);
        Ok(state == TransferState::TransferEnd)
    }

    /// The bytes assembled.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

impl ActionChunk {
    /// The msgpack bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let actions = self.actions.iter().map(|a| Value::F64(*a)).collect();
        encode(&Value::Map(vec![
            (Value::from("timestep"), Value::from(self.first_timestep)),
            (Value::from("actions"), Value::Array(actions)),
        ]))
    }

    /// Read a chunk; `None` for an empty reply (no chunk) or anything else.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let m = decode_map(bytes)?;
        let Value::Array(a) = field(&m, "actions")? else {
            return None;
        };
        if a.len() > MAX_ACTIONS {
            return None;
        }
        Some(ActionChunk {
            first_timestep: field(&m, "timestep")?.as_u64()?,
            actions: a.iter().map(Value::as_f64).collect::<Option<_>>()?,
        })
    }
}

/// Wall-clock now, ns since the Unix epoch (0 before it).
pub(crate) fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_big_observation_streams_in_chunks_and_reassembles() {
        let obs = TimedObservation {
            timestep: 3,
            value: 0.25,
            sent_unix_ns: 1,
            must_go: true,
            frame: vec![7; TRANSFER_CHUNK_BYTES * 2 + 5],
        };
        let msgs = obs.to_messages();
        let states: Vec<i32> = msgs.iter().map(|m| m.transfer_state).collect();
        assert_eq!(states, [1, 2, 3]);
        let mut a = Assembler::default();
        let ends: Vec<bool> = msgs.into_iter().map(|m| a.push(m).unwrap()).collect();
        assert_eq!(ends, [false, false, true]);
        assert_eq!(TimedObservation::from_bytes(a.bytes()), Some(obs));
        let small = TimedObservation {
            frame: Vec::new(),
            ..TimedObservation::from_bytes(a.bytes()).unwrap()
        };
        assert_eq!(small.to_messages().len(), 1);
        assert_eq!(small.to_messages()[0].transfer_state, 3);
    }

    #[test]
    fn chunks_round_trip_and_an_empty_reply_is_none() {
        let c = ActionChunk {
            first_timestep: 9,
            actions: vec![1.0, 2.5],
        };
        assert_eq!(ActionChunk::from_bytes(&c.to_bytes()), Some(c));
        assert_eq!(ActionChunk::from_bytes(&[]), None);
    }
}
