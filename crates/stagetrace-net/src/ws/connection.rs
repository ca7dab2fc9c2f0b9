//! One [`PolicyServer`](super::PolicyServer)'s work: the accept loop and one
//! task per connection that stamps each request, runs the [`Handler`] and
//! answers with the action map plus the `server_timing` map.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use futures_util::{FutureExt, SinkExt, StreamExt};
use rmpv::Value;
use stagetrace::{record::ServerRecord, record::ServiceRole};
use stagetrace_wire::ServerTiming;
use stagetrace_wire::{
    TimingMap, TraceContext, TraceParent, MAX_DURATION_NS, SERVER_TIMING_KEY, TRACEPARENT,
    TRACESTATE,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tokio_tungstenite::WebSocketStream;
use tracing::Instrument;

use super::error::ServeError;
use super::handler::{Handler, HandlerError};
use crate::first_bytes::FirstBytes;
use crate::kernel_rx::KernelRx;
use crate::msg::{MapWriter, MsgMap};
use crate::server::{
    handler_span, server_record, take_context, RequestHook, RequestStamps, ServerClock,
    ServerCounters,
};
use crate::timing_msgpack::TimingMsgpackExt;

/// A server side WebSocket, its stream stamping each message's first byte.
type Ws = WebSocketStream<FirstBytes<KernelRx>>;

/// What a response says about its request besides the action: the
/// caller's trace, the request's `kind`, and the previous response's
/// total and send wait on this connection.
struct Answer<'a> {
    trace_parent: Option<TraceParent>,
    kind: Option<&'a str>,
    prev: Sent,
}

/// What one response on a connection leaves for the next to carry (both
/// `None` before the first).
#[derive(Clone, Copy, Debug, Default)]
struct Sent {
    /// Receive → the response was sent, ms (openpi's `prev_total_ms`).
    total_ms: Option<f64>,
    /// The response was ready (`total` stamped) → its last write was
    /// called: the server's own wait before the kernel had it
    /// (`prev_tx_wait_ns`).
    tx_wait_ns: Option<u64>,
}

/// Called on the connection's task after `total` is stamped and just
/// before the response is written, with the response's index on its
/// connection and the instant `total` ended: a test holds the send up
/// there (a real delay of the real write, which `prev_tx_wait` must show).
#[cfg(test)]
pub(super) type BeforeWrite = Arc<dyn Fn(u64, Instant) + Send + Sync>;

/// What every connection of one server shares: the builder's settings, the
/// handler, the concurrency slots and the counters.
pub(super) struct Shared {
    pub(super) metadata: Vec<u8>,
    pub(super) hook: Option<RequestHook>,
    pub(super) clock: ServerClock,
    pub(super) permits: Semaphore,
    pub(super) max_message_bytes: usize,
    pub(super) handler: Box<dyn Handler>,
    pub(super) counters: Arc<ServerCounters>,
    /// [`PolicyServerBuilder::report_timing`](super::PolicyServerBuilder::report_timing).
    pub(super) report_timing: bool,
    /// [`PolicyServerBuilder::host_figures`](super::PolicyServerBuilder::host_figures).
    pub(super) host_figures: bool,
    /// What this service's records say it is.
    pub(super) role: ServiceRole,
    #[cfg(test)]
    pub(super) before_write: Option<BeforeWrite>,
}

impl Shared {
    /// Accept connections, each in its own task, until `stop` changes or
    /// accepting fails for good.
    pub(super) async fn accept_loop(
        self: Arc<Self>,
        listener: TcpListener,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), ServeError> {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                accepted = listener.accept() => {
                    let (stream, _) = match accepted {
                        Ok(a) => a,
                        // Per-connection failures (e.g. reset before accept) are not fatal.
                        Err(e) if is_transient(&e) => continue,
                        Err(e) => return Err(ServeError::Accept(e)),
                    };
                    let shared = Arc::clone(&self);
                    let stop = stop.clone();
                    conns.spawn(async move { shared.connection(stream, stop).await });
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        conns.shutdown().await;
        Ok(())
    }

    /// One client's connection: handshake, metadata frame, then one request
    /// after another until the client leaves, a request fails or the server
    /// stops.
    async fn connection(&self, stream: TcpStream, mut stop: watch::Receiver<bool>) {
        let Some(mut ws) = self.handshake(stream).await else {
            return;
        };
        self.counters.connections.fetch_add(1, Ordering::Relaxed);
        // Held until this function returns, however the connection ends
        // (close, error, failed request, server stop): the handler's count
        // of open connections never keeps one that left.
        let _connection = self.handler.connect();
        if ws
            .send(Message::Binary(self.metadata.clone().into()))
            .await
            .is_err()
        {
            return;
        }
        let mut prev = Sent::default();
        let mut index = 0u64;
        loop {
            let msg = tokio::select! {
                _ = stop.changed() => break,
                msg = ws.next() => msg,
            };
            // The whole message has arrived: this is the server's receive
            // time; its first byte came with the first read since the last
            // message (a control frame in between restarts that stamp).
            let stamps = RequestStamps::received(&self.clock)
                .first_byte(ws.get_mut().take_first())
                .kernel_rx(ws.get_ref().get_ref().last_rx())
                .with_host(self.host_figures);
            let bytes = match msg {
                Some(Ok(Message::Binary(b))) => b,
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(Message::Text(_))) => {
                    let err = "the openpi protocol expects binary msgpack frames, got a text frame";
                    self.fail(&mut ws, &stamps, None, None, err.to_owned(), Bad::Request)
                        .await;
                    break;
                }
            };
            match self.request(&mut ws, stamps, bytes, prev, index).await {
                Some(sent) => prev = sent,
                None => break,
            }
            index += 1;
        }
    }

    /// The WebSocket handshake on a fresh TCP stream, with the size limits;
    /// `None` when it fails.
    async fn handshake(&self, stream: TcpStream) -> Option<Ws> {
        let _ = stream.set_nodelay(true);
        let config = WebSocketConfig::default()
            .max_message_size(Some(self.max_message_bytes))
            .max_frame_size(Some(self.max_message_bytes));
        let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(
            FirstBytes::new(KernelRx::new(stream)),
            Some(config),
        )
        .await
        else {
            return None;
        };
        // The handshake's bytes are not a request's.
        let _ = ws.get_mut().take_first();
        Some(ws)
    }

    /// One binary request (the `index`-th on its connection), decoded,
    /// handled and answered. What the next response carries of it, or
    /// `None` when the connection is to end (the request failed or the
    /// answer could not be sent).
    async fn request(
        &self,
        ws: &mut Ws,
        mut stamps: RequestStamps,
        bytes: Bytes,
        prev: Sent,
        index: u64,
    ) -> Option<Sent> {
        // Arrays are checked here, before the handler runs (1007 as the
        // Python server answers): a handler never reads an impossible one.
        let mut request = match MsgMap::from_msgpack(&bytes) {
            Ok(m) => m,
            Err(e) => {
                self.fail(ws, &stamps, None, None, e.to_string(), Bad::Request)
                    .await;
                return None;
            }
        };
        drop(bytes);
        let context = self.take_context(&mut request);
        let trace_parent = context.as_ref().map(|c| c.parent);
        let kind = request.get_str("kind").map(str::to_owned);

        let result = self.handle(request, context, &mut stamps).await?;
        let action = match result {
            Ok(a) => a,
            Err(e) => {
                self.fail(
                    ws,
                    &stamps,
                    trace_parent,
                    kind.as_deref(),
                    e.0,
                    Bad::Handler,
                )
                .await;
                return None;
            }
        };
        let answer = Answer {
            trace_parent,
            kind: kind.as_deref(),
            prev,
        };
        self.respond(ws, &stamps, action, answer, index).await
    }

    /// Run the handler on `request` once a concurrency slot is free, under
    /// the caller's trace context, and stamp its start and end. `None` when
    /// the slots are closed.
    async fn handle(
        &self,
        request: MsgMap,
        context: Option<TraceContext>,
        stamps: &mut RequestStamps,
    ) -> Option<Result<MsgMap, HandlerError>> {
        let timer = stamps.timer();
        let Ok(permit) = self.permits.acquire().await else {
            return None;
        };
        // Under the caller's context: the calls the handler makes
        // continue its trace.
        let span = handler_span(context);
        let start = Instant::now();
        // A panicking handler fails its request (openpi answers an
        // exception the same way) instead of silently dropping the connection.
        let call = span.in_scope(|| self.handler.call(request, timer.clone()));
        let result = AssertUnwindSafe(call.instrument(span))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Err(HandlerError::new("the policy handler panicked")));
        let end = Instant::now();
        drop(permit);
        stamps.handled(start, end, timer);
        Some(result)
    }

    /// Send the handler's `action` with the `server_timing` map and report
    /// the request to the hook. What the next response carries of this
    /// one, or `None` when the send failed.
    async fn respond(
        &self,
        ws: &mut Ws,
        stamps: &RequestStamps,
        mut action: MsgMap,
        answer: Answer<'_>,
        index: u64,
    ) -> Option<Sent> {
        action.remove(SERVER_TIMING_KEY);
        let mut out = MapWriter::with_capacity(action.encoded_len_hint());
        out.entries(action.entries());
        drop(action);
        // Stamp `total` as late as possible: only the timing map itself is
        // encoded after it. From here to the last write's call is the
        // server's own send wait, which only the next response can carry.
        let ready = Instant::now();
        let timing = ServerTiming {
            prev_tx_wait_ns: answer.prev.tx_wait_ns,
            ..stamps.timing_at(ready)
        };
        let map = TimingMap {
            timing,
            prev_total_ms: answer.prev.total_ms,
        };
        if self.report_timing {
            // A relay nests the downstream's timing in its own.
            match stamps.relayed(&timing) {
                Some(chain) => out.entry(SERVER_TIMING_KEY, &chain.to_msgpack()),
                None => out.entry(SERVER_TIMING_KEY, &map.to_msgpack()),
            }
        }
        let frame = Message::Binary(out.finish());
        ws.get_mut().begin_send();
        #[cfg(test)]
        if let Some(hold) = &self.before_write {
            hold(index, ready);
        }
        // Only the test's hold reads the index.
        #[cfg(not(test))]
        let _ = index;
        let sent = ws.send(frame).await;
        let written = ws.get_mut().end_send();
        let total_ms = stamps.recv.elapsed().as_secs_f64() * 1e3;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let error = sent.as_ref().err().map(|e| format!("send failed: {e}"));
        if error.is_some() {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
        }
        let mut record = server_record(answer.trace_parent, answer.kind, timing, error);
        record.forward = stamps.forwarded();
        self.emit(record);
        let tx_wait_ns = written.map(|w| {
            let ns = u64::try_from(w.saturating_duration_since(ready).as_nanos());
            ns.unwrap_or(u64::MAX).min(MAX_DURATION_NS)
        });
        sent.is_ok().then_some(Sent {
            total_ms: Some(total_ms),
            tx_wait_ns,
        })
    }

    /// Remove every `traceparent` / `tracestate` entry from the request and
    /// take the trace context from them, as from HTTP header lines (a
    /// repeated key is a repeated header; a value that is neither a string
    /// nor bytes is malformed). Rejections are counted.
    fn take_context(&self, request: &mut MsgMap) -> Option<TraceContext> {
        let parents = remove_all(request, TRACEPARENT);
        let states = remove_all(request, TRACESTATE);
        if parents.is_empty() && states.is_empty() {
            return None;
        }
        let parents: Vec<&[u8]> = parents.iter().map(value_bytes).collect();
        let states: Vec<&[u8]> = states.iter().map(value_bytes).collect();
        take_context(&self.counters, TraceContext::extract(&parents, &states))
    }

    async fn fail(
        &self,
        ws: &mut Ws,
        stamps: &RequestStamps,
        trace_parent: Option<TraceParent>,
        kind: Option<&str>,
        error: String,
        bad: Bad,
    ) {
        let timing = stamps.timing_now();
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        // The text frame carries the whole message (openpi's client raises
        // it); the close code says whose fault it was.
        let _ = ws.send(Message::text(error.clone())).await;
        let close = match bad {
            Bad::Request => CloseFrame {
                code: CloseCode::Invalid,
                reason: close_reason(&error).into(),
            },
            Bad::Handler => CloseFrame {
                code: CloseCode::Error,
                reason: "request failed".into(),
            },
        };
        let _ = ws.close(Some(close)).await;
        let mut record = server_record(trace_parent, kind, timing, Some(error));
        record.forward = stamps.forwarded();
        self.emit(record);
    }

    fn emit(&self, mut record: ServerRecord) {
        record.role = self.role;
        if let Some(hook) = &self.hook {
            hook(&record);
        }
    }
}

/// A trace context entry's bytes: a string or bytes; anything else reads as
/// empty, which no valid header is (rejected like a malformed one).
fn value_bytes(v: &Value) -> &[u8] {
    match v {
        Value::String(s) => s.as_bytes(),
        Value::Binary(b) => b,
        _ => &[],
    }
}

/// Every value of `key`, in wire order, removed from `map` (at most the
/// map's own length).
fn remove_all(map: &mut MsgMap, key: &str) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(v) = map.remove(key) {
        out.push(v);
    }
    out
}

/// Whose fault a failed request was.
#[derive(Clone, Copy, Debug)]
enum Bad {
    /// The peer sent something that is not a request (WebSocket 1007).
    Request,
    /// The handler failed or panicked (1011, as openpi).
    Handler,
}

/// `error` cut to fit a close frame's reason (123 bytes of UTF-8).
fn close_reason(error: &str) -> String {
    let mut end = error.len().min(120);
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    error[..end].to_owned()
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    )
}
