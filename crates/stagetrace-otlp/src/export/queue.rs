//! The messages from the host's threads to the export thread: records on a
//! bounded data queue, flush and shutdown requests on a control channel.

use std::time::Instant;

use crossbeam_channel::Sender;
use stagetrace::{record::CallRecord, record::ServerRecord};

/// One record waiting for export.
pub(super) enum Item {
    Call(Box<CallRecord>),
    Server(Box<ServerRecord>),
}

/// A request to the export thread; it answers on `ack` when done, `true`
/// when everything queued was sent.
pub(super) enum Control {
    /// Send what is queued, no new batch after `deadline`. With `abandon`
    /// (a shutdown flush), what is left then is counted as abandoned;
    /// without, it stays queued for the batches that follow.
    Flush {
        ack: Sender<bool>,
        deadline: Instant,
        abandon: bool,
    },
    /// As a flush with `abandon`, then the thread ends.
    Shutdown {
        ack: Sender<bool>,
        deadline: Instant,
    },
}
