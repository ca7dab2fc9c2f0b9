//! The executor side: [`ExecutorServer`] hands each received chunk to the
//! controller as a [`Chunk`] and acknowledges it when the controller calls
//! [`Ticket::started`] (or drops it).

use std::fmt;
use std::time::Instant;

use tokio::net::ToSocketAddrs;
use tokio::sync::{mpsc, oneshot};

use super::{REASON_KEY, STARTED_KEY};
use crate::msg::MsgMap;
use crate::server::{InferTimer, ServerClock};
use crate::ws::{HandlerError, PolicyServer, PolicyServerBuilder, ServeError, ServerHandle};

/// Chunks waiting for the controller, by default: beyond it the executor
/// stops reading (TCP back-pressure) and the wait shows in `exec_wait`.
pub const DEFAULT_QUEUE: usize = 16;

/// An executor speaking the policy server's protocol: chunks in, acks out.
/// Build with [`ExecutorServer::builder`].
#[derive(Debug)]
pub struct ExecutorServer;

impl ExecutorServer {
    /// Start building an executor server.
    pub fn builder() -> ExecutorServerBuilder {
        ExecutorServerBuilder {
            // Every connection's chunk goes straight to the controller's
            // queue: the order of execution is the controller's, not a permit's.
            inner: PolicyServer::builder()
                .max_concurrency(1024)
                .role(stagetrace::record::ServiceRole::Executor),
            queue: DEFAULT_QUEUE,
        }
    }
}

/// Settings of an [`ExecutorServer`].
#[derive(Debug)]
pub struct ExecutorServerBuilder {
    inner: PolicyServerBuilder,
    queue: usize,
}

impl ExecutorServerBuilder {
    /// The map sent to each client on connect.
    pub fn metadata(mut self, metadata: MsgMap) -> Self {
        self.inner = self.inner.metadata(metadata);
        self
    }

    /// The clock that stamps `recv_unix_ns` (default: the host clock; a
    /// skewed one for tests and the demo).
    pub fn clock(mut self, clock: ServerClock) -> Self {
        self.inner = self.inner.clock(clock);
        self
    }

    /// Called once per chunk with what the executor saw (for an exporter).
    pub fn on_request(
        mut self,
        hook: impl Fn(&stagetrace::record::ServerRecord) + Send + Sync + 'static,
    ) -> Self {
        self.inner = self.inner.on_request(hook);
        self
    }

    /// Chunks that may wait for the controller (default [`DEFAULT_QUEUE`]; 0 is 1).
    pub fn queue(mut self, n: usize) -> Self {
        self.queue = n.max(1);
        self
    }

    /// Bind `addr` and serve in a task on the current tokio runtime. The
    /// controller takes the chunks from [`Chunks`]; the handle gives the
    /// address and stops the server.
    pub async fn spawn(
        self,
        addr: impl ToSocketAddrs,
    ) -> Result<(ServerHandle, Chunks), ServeError> {
        let (tx, rx) = mpsc::channel::<Chunk>(self.queue);
        let handler = move |action: MsgMap, timer: InferTimer| {
            let tx = tx.clone();
            async move {
                let (ack, started) = oneshot::channel();
                let chunk = Chunk {
                    action,
                    ticket: Ticket {
                        received: timer.received(),
                        timer,
                        ack: Some(ack),
                    },
                };
                if tx.send(chunk).await.is_err() {
                    return Ok(not_started("the controller stopped taking chunks"));
                }
                Ok::<_, HandlerError>(match started.await {
                    Ok(Outcome::Started) => MsgMap::new().with(STARTED_KEY, true),
                    Ok(Outcome::Dropped(reason)) => not_started(&reason),
                    Err(_) => not_started("the controller dropped the chunk without starting it"),
                })
            }
        };
        let handle = self.inner.spawn(addr, handler).await?;
        Ok((handle, Chunks(rx)))
    }
}

fn not_started(reason: &str) -> MsgMap {
    MsgMap::new()
        .with(STARTED_KEY, false)
        .with(REASON_KEY, reason)
}

/// The chunks the executor received, in arrival order, for the controller.
#[derive(Debug)]
pub struct Chunks(mpsc::Receiver<Chunk>);

impl Chunks {
    /// The next chunk (`None` once the server stopped).
    pub async fn recv(&mut self) -> Option<Chunk> {
        self.0.recv().await
    }

    /// The next chunk, blocking the thread: for a controller loop outside
    /// the async runtime (never call it on a runtime thread).
    pub fn blocking_recv(&mut self) -> Option<Chunk> {
        self.0.blocking_recv()
    }

    /// A chunk if one is waiting.
    pub fn try_recv(&mut self) -> Option<Chunk> {
        self.0.try_recv().ok()
    }
}

/// One received action chunk and the ticket to acknowledge it with.
#[derive(Debug)]
pub struct Chunk {
    /// The chunk's map (without `traceparent` / `tracestate`).
    pub action: MsgMap,
    /// Call [`Ticket::started`] when execution starts.
    pub ticket: Ticket,
}

enum Outcome {
    Started,
    Dropped(String),
}

/// Acknowledges one chunk: [`started`](Ticket::started) when the controller
/// starts executing it (after any wait for the previous action), or
/// [`dropped`](Ticket::dropped). Dropping the ticket unused counts as dropped.
pub struct Ticket {
    received: Instant,
    timer: InferTimer,
    ack: Option<oneshot::Sender<Outcome>>,
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("received", &self.received)
            .field("pending", &self.ack.is_some())
            .finish()
    }
}

impl Ticket {
    /// When the whole chunk had arrived (the executor's receive stamp,
    /// `recv_unix_ns` on the monotonic clock): what the wait is measured from.
    pub fn received(&self) -> Instant {
        self.received
    }

    /// Execution starts now: the ack leaves with the wait since the chunk
    /// arrived (`queue_ns`, the robot's `exec_wait_ms`). Never blocks.
    pub fn started(mut self) {
        self.timer.infer_start();
        if let Some(ack) = self.ack.take() {
            let _ = ack.send(Outcome::Started);
        }
    }

    /// The controller will not execute this chunk (e.g. it is stale or was
    /// merged into the next one): the ack says so with `reason`, and the
    /// robot counts it as a dropped chunk (`stale_dropped`).
    pub fn dropped(mut self, reason: &str) {
        if let Some(ack) = self.ack.take() {
            let _ = ack.send(Outcome::Dropped(reason.to_owned()));
        }
    }
}
