//! Who can still send a [`Batcher`](crate::Batcher) a request: the callers
//! registered with it — one per open connection when it serves through
//! [`BatchedHandler`](crate::BatchedHandler), or one per in-process caller
//! holding a [`BatchCaller`] — each with at most one request waiting at a
//! time. When all of them are already in the batch nobody else can join it,
//! so waiting out the rest of the window would only add latency.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// The count of registered callers, shared by a batcher's clones and its worker.
#[derive(Debug, Default)]
pub(crate) struct Callers {
    count: AtomicUsize,
    /// Woken when a caller leaves: the batch being collected may now hold
    /// everyone who is left.
    left: Notify,
}

impl Callers {
    pub(crate) fn join(self: &Arc<Self>) -> BatchCaller {
        self.count.fetch_add(1, Ordering::AcqRel);
        BatchCaller {
            callers: Arc::clone(self),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Completes once a caller has left since the last time it completed
    /// (`notify_one` keeps one wake-up for a worker not yet waiting, so a
    /// leave between the worker's check and its wait is never missed).
    pub(crate) async fn left(&self) {
        self.left.notified().await;
    }
}

/// One registered caller of a [`Batcher`](crate::Batcher)
/// ([`Batcher::caller`](crate::Batcher::caller)): while it is held, the
/// batcher counts on one more request that can arrive; dropping it says
/// this caller sends no more. A caller has at most one request waiting at
/// a time (a robot's closed control loop, one WebSocket connection).
pub struct BatchCaller {
    callers: Arc<Callers>,
}

impl fmt::Debug for BatchCaller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchCaller")
            .field("registered", &self.callers.count())
            .finish()
    }
}

impl Drop for BatchCaller {
    fn drop(&mut self) {
        self.callers.count.fetch_sub(1, Ordering::AcqRel);
        self.callers.left.notify_one();
    }
}
