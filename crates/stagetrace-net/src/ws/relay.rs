//! A relay (gateway) between robots and a policy server, in the openpi /
//! LingBot-VA WebSocket protocol: [`Relay`].
//!
//! It is a [`PolicyServer`] whose handler forwards each request to the
//! downstream server with a [`PolicyClient`] and answers with the
//! downstream's action. What it adds:
//!
//! - the trace continues: the handler runs under the caller's remote parent,
//!   so the downstream request carries the same trace id, the caller's flags
//!   and `tracestate`, and the relay's transport span as parent;
//! - its own timing, on its own clock (`recv_unix_ns`, `total_ns`,
//!   `transfer_ns`, plus `forward_ns`: received → request handed to the
//!   downstream client, and `reply_ns`: received → the downstream's whole
//!   reply in), with the downstream's `server_timing` nested as
//!   `downstream`. Relays behind relays nest the same way; the client's
//!   record then carries per-hop figures (`hops`), each hop stitched with
//!   its own clock estimate (`docs/protocol.md`, "Relays").
//!
//! Downstream connections are pooled: one per request in flight, at most
//! [`RelayBuilder::max_concurrency`], idle ones kept for the next request.
//! A downstream failure fails the request (the caller gets openpi's text
//! frame and the connection closes); the next request connects anew.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use stagetrace::{record::ServerRecord, record::ServiceRole, StageSpanExt};
use stagetrace_wire::{TimingChain, TimingMap};
use tokio::net::ToSocketAddrs;
use tracing::Instrument;

use super::client::{ClientOptions, PolicyClient};
use super::error::ServeError;
use super::handler::{Handler, HandlerError, HandlerFuture};
use super::server::{PolicyServer, ServerHandle};
use crate::msg::MsgMap;
use crate::server::{Downstream, InferTimer, ServerClock};

/// A relay in the openpi / LingBot-VA WebSocket protocol. Build with
/// [`Relay::builder`].
#[derive(Debug)]
pub struct Relay;

impl Relay {
    /// Start building a relay.
    pub fn builder() -> RelayBuilder {
        RelayBuilder {
            clock: ServerClock::system(),
            options: ClientOptions::default(),
            max_concurrency: 64,
            hook: None,
        }
    }
}

/// Settings of a [`Relay`].
pub struct RelayBuilder {
    clock: ServerClock,
    options: ClientOptions,
    max_concurrency: usize,
    hook: Option<crate::server::RequestHook>,
}

impl fmt::Debug for RelayBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelayBuilder")
            .field("clock", &self.clock)
            .field("options", &self.options)
            .field("max_concurrency", &self.max_concurrency)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

impl RelayBuilder {
    /// The relay's wall clock, stamped into its `recv_unix_ns` (default: the
    /// host clock; tests and the demo skew and drift it).
    pub fn clock(mut self, clock: ServerClock) -> Self {
        self.clock = clock;
        self
    }

    /// Options of the downstream connections (timeouts, message size).
    pub fn client_options(mut self, options: ClientOptions) -> Self {
        self.options = options;
        self
    }

    /// Requests forwarded at once, across upstream connections (default
    /// 64): also the most downstream connections kept. 0 is taken as 1.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n.max(1);
        self
    }

    /// Called once per request with the relay's own timing (see
    /// [`RequestHook`](crate::RequestHook)).
    pub fn on_request(mut self, hook: impl Fn(&ServerRecord) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Connect to the downstream server at `downstream` (a `ws://` URL),
    /// take its metadata (sent on to every upstream client), bind `addr` and
    /// relay in a task on the current tokio runtime.
    pub async fn spawn(
        self,
        addr: impl ToSocketAddrs,
        downstream: &str,
    ) -> Result<ServerHandle, RelayError> {
        let first = PolicyClient::connect_with(downstream, self.options.clone())
            .await
            .map_err(|e| RelayError::Downstream(e.to_string()))?;
        let metadata = first.metadata().clone();
        let forward = Forward {
            url: downstream.to_owned(),
            options: self.options,
            idle: Mutex::new(vec![first]),
            max_idle: self.max_concurrency,
        };
        let mut server = PolicyServer::builder()
            .metadata(metadata)
            .clock(self.clock)
            .max_concurrency(self.max_concurrency)
            .role(ServiceRole::Relay);
        if let Some(hook) = self.hook {
            server = server.on_request(move |r| hook(r));
        }
        server
            .spawn(addr, RelayHandler(Arc::new(forward)))
            .await
            .map_err(RelayError::Serve)
    }
}

/// Why a relay could not start.
#[derive(Debug)]
pub enum RelayError {
    /// The downstream server could not be reached.
    Downstream(String),
    /// Binding or serving failed.
    Serve(ServeError),
}

impl fmt::Display for RelayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RelayError::Downstream(e) => write!(
                f,
                "relay could not reach its downstream policy server ({e}); start it first or check the ws:// URL"
            ),
            RelayError::Serve(e) => write!(f, "relay: {e}"),
        }
    }
}

impl std::error::Error for RelayError {}

struct Forward {
    url: String,
    options: ClientOptions,
    /// Idle downstream connections, at most `max_idle`.
    idle: Mutex<Vec<PolicyClient>>,
    max_idle: usize,
}

impl Forward {
    fn take(&self) -> Option<PolicyClient> {
        self.idle.lock().ok()?.pop()
    }

    fn put_back(&self, client: PolicyClient) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < self.max_idle {
                idle.push(client);
            }
        }
    }

    async fn call(&self, request: MsgMap, timer: InferTimer) -> Result<MsgMap, HandlerError> {
        let mut client = match self.take() {
            Some(c) => c,
            None => PolicyClient::connect_with(&self.url, self.options.clone())
                .await
                .map_err(|e| HandlerError::new(format!("relay: {e}")))?,
        };
        // Handed to the downstream client: the hop's send stamp. The
        // client's own encoding (µs for a control-loop frame) falls in the
        // hop, on the safe side of its bound.
        // The transport span the client would open, opened here to learn
        // its id: the parent id sent downstream, which the relay's record
        // carries so its exported forward span is the downstream's parent.
        let span = tracing::info_span!("transport", peer = self.url.as_str());
        let span_id = span.trace_parent().map(|tp| tp.parent_id);
        let forward = Instant::now();
        let reply = client.infer(&request).instrument(span).await;
        let reply_at = Instant::now();
        let reply = reply.map_err(|e| HandlerError::new(format!("relay: {e}")))?;
        let chain = TimingChain {
            map: TimingMap {
                timing: reply.server_timing.unwrap_or_default(),
                prev_total_ms: reply.prev_total_ms,
            },
            hops: reply.hops,
        };
        timer.set_downstream(Downstream {
            forward,
            reply: reply_at,
            chain,
            span_id,
        });
        self.put_back(client);
        Ok(reply.action)
    }
}

struct RelayHandler(Arc<Forward>);

impl Handler for RelayHandler {
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        let forward = Arc::clone(&self.0);
        Box::pin(async move { forward.call(request, timer).await })
    }
}
