//! Server-side pieces shared by the WebSocket server and the HTTP layer: the
//! clock that stamps `recv_unix_ns` (`clock.rs`), the [`InferTimer`] a
//! handler uses to report its pre / infer / post split (`timer.rs`) on the
//! request's marks, the table every server's timer keeps (`marks.rs`), one
//! request's stamps from receive to send (`stamps.rs`), the server's
//! counters (`counters.rs`), the request's trace context and record
//! (`trace.rs`), and the per-request hook.

use std::sync::Arc;

use stagetrace::record::ServerRecord;

mod clock;
mod counters;
mod marks;
mod stamps;
mod timer;
mod trace;

pub use clock::ServerClock;
pub(crate) use counters::ServerCounters;
pub use counters::ServerStats;
pub use marks::{RequestMark, RequestMarks};
pub(crate) use stamps::RequestStamps;
pub(crate) use timer::Downstream;
pub use timer::InferTimer;
pub(crate) use trace::{handler_span, server_record, take_context};

/// Called once per request, after the response was sent (or the request
/// failed), with what the server saw: the trace context the request carried
/// and the server's timing. An exporter (e.g. `stagetrace-otlp`) uses it to
/// draw the server's `queue` / `infer` spans under the client's transport span.
///
/// Runs on the connection's task: keep it short (hand the record to a channel).
pub type RequestHook = Arc<dyn Fn(&ServerRecord) + Send + Sync>;

#[cfg(test)]
mod tests;
