//! The message from the app thread to the worker (`docs/architecture.md` §4):
//! when a call closes, the layer (or the direct API) moves the call's state
//! into one fixed-size [`Msg`] and `try_send`s it on a bounded channel.

use crate::call_state::CallState;
use crate::stamp::Stamp;

/// One finished call, as queued to the worker.
#[derive(Clone, Debug)]
pub(crate) struct RawCall {
    pub(crate) state: CallState,
    pub(crate) end: Stamp,
    pub(crate) panicking: bool,
}

/// Messages to the worker.
// Boxing the call would allocate on the app thread; the queue's slots are
// preallocated at this size instead.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Msg {
    Call(RawCall),
    /// Drain, write the cumulative summary, reply, exit.
    Shutdown,
}
