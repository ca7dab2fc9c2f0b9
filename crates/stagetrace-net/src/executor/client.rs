//! The robot side: [`ExecutorClient::dispatch`] sends an action chunk in the
//! `dispatch` span and attaches the executor's ack to the call.

use stagetrace::{ExecutorAck, StageSpanExt};
use stagetrace_wire::ServerTiming;
use tracing::Span;

use super::{REASON_KEY, STARTED_KEY};
use crate::msg::MsgMap;
use crate::ws::{ClientError, ClientOptions, PolicyClient};

/// The executor's answer to one chunk.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ack {
    /// The executor started the chunk (`false`: it dropped it).
    pub started: bool,
    /// Why it did not start it, when it says.
    pub reason: Option<String>,
    /// The executor's timing: `recv_unix_ns` (its clock), `queue_ns` = the
    /// wait from the whole chunk to the start, `total_ns` to the ack's send.
    pub timing: Option<ServerTiming>,
}

/// Sends action chunks to a remote executor ([`ExecutorServer`](super::ExecutorServer)
/// or any executor answering as `docs/protocol.md` says) and records when
/// each one started on the call.
#[derive(Debug)]
pub struct ExecutorClient {
    inner: PolicyClient,
}

impl ExecutorClient {
    /// Connect (default options) and receive the executor's metadata frame.
    pub async fn connect(url: &str) -> Result<Self, ClientError> {
        ExecutorClient::connect_with(url, ClientOptions::default()).await
    }

    /// Connect with options (`call_timeout` bounds one chunk → ack).
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self, ClientError> {
        Ok(ExecutorClient {
            inner: PolicyClient::connect_with(url, options).await?,
        })
    }

    /// Connect again (after a failed dispatch broke the connection).
    pub async fn reconnect(&mut self) -> Result<(), ClientError> {
        self.inner.reconnect().await
    }

    /// True while the connection is usable.
    pub fn is_connected(&self) -> bool {
        self.inner.is_connected()
    }

    /// Send one action chunk and wait for the executor's ack.
    ///
    /// Runs in a `dispatch` span (the current one when it is a `dispatch`
    /// span, else a new child of the current span), sends its
    /// `traceparent`, and hands the ack's timing with this client's stamps
    /// to the call ([`StageSpanExt::record_executor_ack`]): the record's
    /// `dispatch_ms` then ends when the executor started the chunk, split
    /// into `exec_tx_ms` and `exec_wait_ms` (through gateways, `exec_relay_ms`
    /// is their forwarding time inside `exec_tx_ms`). A chunk the executor dropped
    /// counts as `stale_dropped` and keeps the span's own dispatch time. On
    /// timeout, disconnect or an executor error the call is flagged failed
    /// and the connection dropped (call [`reconnect`](Self::reconnect)).
    pub async fn dispatch(&mut self, chunk: &MsgMap) -> Result<Ack, ClientError> {
        let (span, x) = self.inner.exchange(chunk, dispatch_span).await?;
        let started = x.reply.get(STARTED_KEY).and_then(|v| v.as_bool()) == Some(true);
        let reason = x.reply.get_str(REASON_KEY).map(str::to_owned);
        // Through gateways the chain also holds their stamps: the executor's
        // own map is the innermost one, as for a policy call, and each hop
        // is stitched with its own offset.
        let hops = x.timing.as_ref().map(|c| c.hops).unwrap_or_default();
        let timing = x.timing.map(|c| c.map.timing).filter(|t| !t.is_empty());
        if !started {
            span.record_stale_dropped(1);
        } else if let Some(t) = timing {
            let ack = ExecutorAck::new(self.inner.url(), t, x.sent, x.received)
                .first_bytes(x.sent_first_byte, x.first_byte)
                .hops(hops);
            span.record_executor_ack(ack);
        }
        Ok(Ack {
            started,
            reason,
            timing,
        })
    }

    /// Close the connection politely.
    pub async fn close(self) {
        self.inner.close().await;
    }
}

/// The span a dispatch runs in: the current span when it is a `dispatch`
/// span (the app opened it), otherwise a new one, child of the current.
fn dispatch_span() -> Span {
    let current = Span::current();
    if current.metadata().is_some_and(|m| m.name() == "dispatch") {
        current
    } else {
        tracing::info_span!("dispatch")
    }
}
