//! [`ExecutorAck`]: what a remote executor's acknowledgement of an action
//! chunk tells the call's `dispatch` stage (`docs/stages.md`, "dispatch").
//!
//! An executor that receives chunks over the network answers each with the
//! same timing a policy server sends ([`ServerTiming`]): `recv_unix_ns` when
//! the whole chunk had arrived (its own clock), `queue_ns` the wait until the
//! action started (blocked by the previous action), `total_ns` until the ack
//! left, `transfer_ns` the chunk's first byte → whole chunk. The client adds
//! its own stamps (chunk sent, ack received) and hands both to the call with
//! [`StageSpanExt::record_executor_ack`](crate::StageSpanExt::record_executor_ack).
//! The worker then ends `dispatch` at the executor's start, estimated with
//! the executor's own clock offset (one estimate per executor, as for a
//! policy server), and splits it into `exec_tx` and `exec_wait`.

use std::time::Instant;

use crate::inline_str::{InlineStr, PEER_LEN};
use stagetrace_wire::{Hops, ServerTiming};

/// One acknowledged action chunk: the executor's timing and the client's
/// stamps of the exchange. Build with [`ExecutorAck::new`].
#[derive(Clone, Copy, Debug)]
pub struct ExecutorAck<'a> {
    pub(crate) peer: &'a str,
    pub(crate) timing: ServerTiming,
    pub(crate) sent: Instant,
    pub(crate) acked: Instant,
    pub(crate) sent_first_byte: Option<Instant>,
    pub(crate) ack_first_byte: Option<Instant>,
    pub(crate) hops: Hops,
}

impl<'a> ExecutorAck<'a> {
    /// The executor `peer` (its URL: the layer keeps one clock-offset
    /// estimate per peer) acknowledged with `timing`; the client handed the
    /// chunk to the send API at `sent` and had the whole ack at `acked`.
    pub fn new(peer: &'a str, timing: ServerTiming, sent: Instant, acked: Instant) -> Self {
        ExecutorAck {
            peer,
            timing,
            sent,
            acked,
            sent_first_byte: None,
            ack_first_byte: None,
            hops: Hops::new(),
        }
    }

    /// The gateways the chunk and its ack came through (outermost first,
    /// from the ack's timing chain): each hop is then stitched with its own
    /// clock offset, as a policy call's, and their forwarding time becomes
    /// `exec_relay` (part of `exec_tx`).
    pub fn hops(mut self, hops: Hops) -> Self {
        self.hops = hops;
        self
    }

    /// When the chunk's first byte left and the ack's first byte arrived, as
    /// the transport stamped them: the clock estimate then leaves the
    /// transfers out of the offset, as for a policy call (`docs/clocks.md`).
    pub fn first_bytes(mut self, sent: Option<Instant>, acked: Option<Instant>) -> Self {
        self.sent_first_byte = sent;
        self.ack_first_byte = acked;
        self
    }
}

/// The acknowledgement as the call keeps it (`Copy`, no allocation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExecAcc {
    pub(crate) peer: InlineStr<PEER_LEN>,
    pub(crate) timing: ServerTiming,
    pub(crate) sent: Instant,
    pub(crate) acked: Instant,
    pub(crate) sent_first_byte: Option<Instant>,
    pub(crate) ack_first_byte: Option<Instant>,
    pub(crate) hops: Hops,
}

impl From<ExecutorAck<'_>> for ExecAcc {
    fn from(a: ExecutorAck<'_>) -> Self {
        let mut peer = InlineStr::new();
        peer.set(a.peer);
        ExecAcc {
            peer,
            timing: a.timing,
            sent: a.sent,
            acked: a.acked,
            sent_first_byte: a.sent_first_byte,
            ack_first_byte: a.ack_first_byte,
            hops: a.hops,
        }
    }
}
