//! The messages from the host's threads to the export thread: records on a
//! bounded data queue, flush and shutdown requests on a control channel.

use crossbeam_channel::Sender;
use stagetrace::{CallRecord, ServerRecord};

/// One record waiting for export.
pub(super) enum Item {
    Call(Box<CallRecord>),
    Server(Box<ServerRecord>),
}

/// A request to the export thread; it answers on the sender when done.
pub(super) enum Control {
    Flush(Sender<()>),
    Shutdown(Sender<()>),
}
