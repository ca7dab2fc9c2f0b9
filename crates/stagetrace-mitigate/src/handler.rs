//! The [`Batcher`] as a WebSocket policy-server [`Handler`].

use std::fmt;

use stagetrace_net::ws::HandlerFuture;
use stagetrace_net::{Handler, HandlerError, InferTimer, MsgMap};

use crate::batch::Batcher;

/// The response entry that carries the batch size, when
/// [`BatchedHandler::report_batch_size`] is on. A client that records output
/// digests should remove it first ([`BatchedHandler::take_batch_size`]): it
/// describes how the answer was computed, not the answer.
pub const BATCH_SIZE_KEY: &str = "stagetrace_batch";

/// A policy-server [`Handler`] that sends every request through a
/// [`Batcher`] of maps; expired or refused requests are answered with the
/// batcher's error, never run.
///
/// The request's wait is reported as `queue` and the batch run as `infer`
/// (the batcher marks the request's [`InferTimer`]). The server should allow
/// as many concurrent requests as may wait together
/// (`PolicyServerBuilder::max_concurrency`), or they queue before reaching
/// the batcher and never share a batch.
pub struct BatchedHandler {
    batcher: Batcher<MsgMap, MsgMap>,
    report_batch_size: bool,
}

impl fmt::Debug for BatchedHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchedHandler")
            .field("batcher", &self.batcher)
            .field("report_batch_size", &self.report_batch_size)
            .finish()
    }
}

impl BatchedHandler {
    /// Serve requests through `batcher`.
    pub fn new(batcher: Batcher<MsgMap, MsgMap>) -> Self {
        BatchedHandler {
            batcher,
            report_batch_size: false,
        }
    }

    /// Add the batch size to each response under [`BATCH_SIZE_KEY`] (default off).
    pub fn report_batch_size(mut self, on: bool) -> Self {
        self.report_batch_size = on;
        self
    }

    /// The batcher (clones share its queue and counters).
    pub fn batcher(&self) -> &Batcher<MsgMap, MsgMap> {
        &self.batcher
    }

    /// Remove [`BATCH_SIZE_KEY`] from a response and return the batch size.
    pub fn take_batch_size(action: &mut MsgMap) -> Option<u64> {
        action.remove(BATCH_SIZE_KEY).and_then(|v| v.as_u64())
    }
}

impl Handler for BatchedHandler {
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        let batcher = self.batcher.clone();
        let report = self.report_batch_size;
        Box::pin(async move {
            let answer = batcher
                .submit_with(request, None, Some(&timer))
                .await
                .map_err(HandlerError::new)?;
            let mut out = answer.output;
            if report {
                out.insert(BATCH_SIZE_KEY, answer.batch_size as u64);
            }
            Ok(out)
        })
    }
}
