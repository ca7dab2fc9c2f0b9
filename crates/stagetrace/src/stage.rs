//! The canonical stages of one control-loop call (`docs/architecture.md` §1).

use std::fmt;
use std::str::FromStr;

/// A stage a span can be mapped onto.
///
/// `Uplink` and `Downlink` are never spans of their own: they are derived from
/// the client's `Transport` span and the server timing the response carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// Trigger → last frame in the local buffer (client).
    Capture,
    /// Client transport span: request handed to the send API → whole response received.
    Transport,
    /// Request received → inference starts (server, optional).
    Queue,
    /// Inference starts → usable output, pre/post-processing included.
    Infer,
    /// Response decoded → executor acknowledges and starts the action.
    Dispatch,
    /// Inference's pre-processing (data loading, decoding, normalisation),
    /// a part of `infer`: a span inside the `infer` span of a robot that runs
    /// its policy in-process (a server sends its parts in its timing).
    Pre,
    /// The model itself, until its device work is done: a part of `infer`.
    Model,
    /// Inference's post-processing: a part of `infer`.
    Post,
}

impl Stage {
    /// Every stage, in call order.
    pub const ALL: [Stage; 8] = [
        Stage::Capture,
        Stage::Transport,
        Stage::Queue,
        Stage::Infer,
        Stage::Dispatch,
        Stage::Pre,
        Stage::Model,
        Stage::Post,
    ];

    /// The default span name (and `stage = "..."` field value) for this stage.
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Capture => "capture",
            Stage::Transport => "transport",
            Stage::Queue => "queue",
            Stage::Infer => "infer",
            Stage::Dispatch => "dispatch",
            Stage::Pre => "pre",
            Stage::Model => "model",
            Stage::Post => "post",
        }
    }

    /// Index into per-stage arrays (`0..Stage::ALL.len()`).
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error returned when a string names no stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownStage(pub String);

impl fmt::Display for UnknownStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown stage {:?}: use one of capture, transport, queue, infer, dispatch (or infer's parts: pre, model, post)",
            self.0
        )
    }
}

impl std::error::Error for UnknownStage {}

impl FromStr for Stage {
    type Err = UnknownStage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Stage::ALL
            .into_iter()
            .find(|stage| stage.name() == s)
            .ok_or_else(|| UnknownStage(s.to_owned()))
    }
}
