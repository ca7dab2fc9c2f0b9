//! The WebSocket policy server's outside: [`PolicyServer`]'s builder and the
//! [`ServerHandle`] of a running server (why one stops is `error`).
//! What it does with each connection is in `connection`.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use stagetrace::{record::ServerRecord, record::ServiceRole};
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::{watch, Semaphore};

use super::connection::Shared;
use super::error::ServeError;
use super::handler::Handler;
use super::limits::DEFAULT_MAX_MESSAGE_BYTES;
use crate::msg::MsgMap;
use crate::server::{RequestHook, ServerClock, ServerCounters, ServerStats};

/// A policy server speaking the openpi / LingBot-VA WebSocket protocol, with
/// stagetrace's server timing in every response. Build with
/// [`PolicyServer::builder`].
#[derive(Debug)]
pub struct PolicyServer;

impl PolicyServer {
    /// Start building a server.
    pub fn builder() -> PolicyServerBuilder {
        PolicyServerBuilder {
            metadata: MsgMap::new(),
            hook: None,
            clock: ServerClock::system(),
            max_concurrency: 1,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            report_timing: true,
            host_figures: true,
            role: ServiceRole::PolicyServer,
            #[cfg(test)]
            before_write: None,
        }
    }
}

/// Settings of a [`PolicyServer`].
pub struct PolicyServerBuilder {
    metadata: MsgMap,
    hook: Option<RequestHook>,
    clock: ServerClock,
    max_concurrency: usize,
    max_message_bytes: usize,
    report_timing: bool,
    host_figures: bool,
    role: ServiceRole,
    #[cfg(test)]
    before_write: Option<super::connection::BeforeWrite>,
}

impl fmt::Debug for PolicyServerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyServerBuilder")
            .field("metadata_entries", &self.metadata.len())
            .field("hook", &self.hook.is_some())
            .field("clock", &self.clock)
            .field("max_concurrency", &self.max_concurrency)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("report_timing", &self.report_timing)
            .field("host_figures", &self.host_figures)
            .field("role", &self.role)
            .finish()
    }
}

impl PolicyServerBuilder {
    /// What the records handed to the hook say this service is (a relay
    /// or an executor built on this server).
    pub(crate) fn role(mut self, role: ServiceRole) -> Self {
        self.role = role;
        self
    }

    /// Run `hold` on the connection's task between the `total` stamp and
    /// each response's write (see `connection::BeforeWrite`).
    #[cfg(test)]
    pub(super) fn before_write(
        mut self,
        hold: impl Fn(u64, std::time::Instant) + Send + Sync + 'static,
    ) -> Self {
        self.before_write = Some(Arc::new(hold));
        self
    }

    /// The map sent to each client on connect (openpi's policy metadata).
    pub fn metadata(mut self, metadata: MsgMap) -> Self {
        self.metadata = metadata;
        self
    }

    /// Called once per request with what the server saw (see [`RequestHook`]).
    pub fn on_request(mut self, hook: impl Fn(&ServerRecord) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// The clock that stamps `recv_unix_ns` (default: the host clock).
    pub fn clock(mut self, clock: ServerClock) -> Self {
        self.clock = clock;
        self
    }

    /// How many requests may run the handler at once, across connections
    /// (default 1: one model, one request at a time). Waiting for a slot is
    /// reported as `queue`. 0 is taken as 1.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    /// Largest request accepted, in bytes (default [`DEFAULT_MAX_MESSAGE_BYTES`]).
    pub fn max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = n.max(1024);
        self
    }

    /// Whether responses carry the `server_timing` map (default `true`).
    /// `false` answers as an unmodified openpi server without it does — the
    /// request is still stamped and reported to the hook — so a client
    /// shows what it can tell without: the black box cut at the first byte
    /// (`ttfb`, `rx`).
    pub fn report_timing(mut self, on: bool) -> Self {
        self.report_timing = on;
        self
    }

    /// Whether the server timing carries what the host did to each request
    /// — run-queue wait, CPU stall, involuntary switches, page faults of the
    /// thread that handled it (`docs/protocol.md`, "Host figures"; default
    /// `true`, where the kernel offers them). `false` saves their few µs
    /// per request.
    pub fn host_figures(mut self, on: bool) -> Self {
        self.host_figures = on;
        self
    }

    /// Bind `addr` and serve until an accept error.
    pub async fn serve<H: Handler>(
        self,
        addr: impl ToSocketAddrs,
        handler: H,
    ) -> Result<(), ServeError> {
        tokio::runtime::Handle::try_current().map_err(|_| ServeError::NoRuntime)?;
        let listener = TcpListener::bind(addr).await.map_err(ServeError::Bind)?;
        let (_tx, rx) = watch::channel(false);
        self.into_shared(handler).accept_loop(listener, rx).await
    }

    /// Bind `addr` and serve in a task on the current tokio runtime; the
    /// handle gives the bound address (bind port 0 for a free one) and stops it.
    pub async fn spawn<H: Handler>(
        self,
        addr: impl ToSocketAddrs,
        handler: H,
    ) -> Result<ServerHandle, ServeError> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| ServeError::NoRuntime)?;
        let listener = TcpListener::bind(addr).await.map_err(ServeError::Bind)?;
        let local_addr = listener.local_addr().map_err(ServeError::Bind)?;
        let (stop, rx) = watch::channel(false);
        let shared = self.into_shared(handler);
        let counters = Arc::clone(&shared.counters);
        let task = rt.spawn(async move { shared.accept_loop(listener, rx).await });
        Ok(ServerHandle {
            local_addr,
            stop,
            task,
            counters,
        })
    }

    fn into_shared<H: Handler>(self, handler: H) -> Arc<Shared> {
        Arc::new(Shared {
            metadata: self.metadata.to_msgpack(),
            hook: self.hook,
            clock: self.clock,
            permits: Semaphore::new(self.max_concurrency),
            max_message_bytes: self.max_message_bytes,
            handler: Box::new(handler),
            counters: Arc::new(ServerCounters::default()),
            report_timing: self.report_timing,
            host_figures: self.host_figures,
            role: self.role,
            #[cfg(test)]
            before_write: self.before_write,
        })
    }
}

/// A running server started with [`PolicyServerBuilder::spawn`].
///
/// Dropping the handle stops the server, like [`ServerHandle::shutdown`]
/// without waiting: keep it for as long as the server should run.
#[derive(Debug)]
#[must_use = "dropping the handle stops the server"]
pub struct ServerHandle {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
    counters: Arc<ServerCounters>,
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The `ws://` URL of the server.
    pub fn url(&self) -> String {
        format!("ws://{}", self.local_addr)
    }

    /// Requests, failures and rejected headers so far.
    pub fn stats(&self) -> ServerStats {
        self.counters.snapshot()
    }

    /// Stop accepting and close every connection (in-flight requests are
    /// dropped: their clients see a disconnect).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
