//! The [`Batcher`] as a WebSocket policy-server [`Handler`].

use std::fmt;

use stagetrace_net::ws::HandlerFuture;
use stagetrace_net::{msg::MsgMap, ws::ConnectionGuard, ws::Handler, ws::HandlerError, InferTimer};

use crate::batch::Batcher;

/// A policy-server [`Handler`] that sends every request through a
/// [`Batcher`] of maps; expired or refused requests are answered with the
/// batcher's error, never run.
///
/// The request's wait is reported as `queue`, the batch run as `infer` and
/// the batch size as `batch_size` (the batcher marks the request's
/// [`InferTimer`]); all three travel back in the response's server timing,
/// not in the answer, so output digests see only the action. Each open
/// connection is registered with the batcher as one caller
/// ([`Batcher::caller`]) until it closes, so a batch that holds a request
/// from every connection runs at once ([`BatchPolicy::AllIn`](crate::BatchPolicy)).
/// The server
/// should allow as many concurrent requests as may wait together
/// (`PolicyServerBuilder::max_concurrency`), or they queue before reaching
/// the batcher and never share a batch.
pub struct BatchedHandler {
    batcher: Batcher<MsgMap, MsgMap>,
}

impl fmt::Debug for BatchedHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchedHandler")
            .field("batcher", &self.batcher)
            .finish()
    }
}

impl BatchedHandler {
    /// Serve requests through `batcher`.
    pub fn new(batcher: Batcher<MsgMap, MsgMap>) -> Self {
        BatchedHandler { batcher }
    }

    /// The batcher (clones share its queue and counters).
    pub fn batcher(&self) -> &Batcher<MsgMap, MsgMap> {
        &self.batcher
    }
}

impl Handler for BatchedHandler {
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        let batcher = self.batcher.clone();
        Box::pin(async move {
            let answer = batcher
                .submit_with(request, None, Some(&timer))
                .await
                .map_err(HandlerError::new)?;
            Ok(answer.output)
        })
    }

    fn connect(&self) -> ConnectionGuard {
        ConnectionGuard::new(self.batcher.caller())
    }
}
