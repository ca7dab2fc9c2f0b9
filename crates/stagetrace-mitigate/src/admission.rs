//! Admission control: a concurrency limit, a bounded queue with a timeout,
//! and load shedding — so that under overload the calls that are admitted
//! keep a bounded latency and the rest fail fast with a clear error.
//!
//! - [`Admission`] is the semaphore-based core; [`AdmittedHandler`] puts it in
//!   front of a WebSocket policy-server [`Handler`].
//! - [`AdmissionLayer`] is the same policy for HTTP (axum / tower) servers,
//!   built on tower's [`ConcurrencyLimit`] and [`Timeout`] services, shedding
//!   with tower's [`Overloaded`] error (answered `503 Service Unavailable`).
//!
//! Time spent waiting for a slot is reported as the `queue` stage: the
//! request's [`InferTimer`] is marked when it is admitted.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use http::{Request, Response, StatusCode};
use stagetrace_net::ws::HandlerFuture;
use stagetrace_net::{msg::MsgMap, ws::ConnectionGuard, ws::Handler, ws::HandlerError, InferTimer};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::limit::ConcurrencyLimit;
use tower::load_shed::error::Overloaded;
use tower::timeout::{error::Elapsed, Timeout};
use tower::{Service, ServiceExt};

/// Settings of an [`Admission`] / [`AdmissionLayer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Requests served at once (default 1; 0 is taken as 1).
    pub max_concurrency: usize,
    /// Requests that may wait for a slot; one more is shed at once (default 16).
    pub max_queue: usize,
    /// Longest wait for a slot; a request still waiting then is shed (default 100 ms).
    pub queue_timeout: Duration,
    /// HTTP only: longest time the service may take once admitted; past it
    /// the request is answered `504 Gateway Timeout` (default 30 s).
    pub service_timeout: Duration,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            max_concurrency: 1,
            max_queue: 16,
            queue_timeout: Duration::from_millis(100),
            service_timeout: Duration::from_secs(30),
        }
    }
}

impl AdmissionConfig {
    /// Set [`AdmissionConfig::max_concurrency`].
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    /// Set [`AdmissionConfig::max_queue`].
    pub fn max_queue(mut self, n: usize) -> Self {
        self.max_queue = n;
        self
    }

    /// Set [`AdmissionConfig::queue_timeout`].
    pub fn queue_timeout(mut self, d: Duration) -> Self {
        self.queue_timeout = d;
        self
    }

    /// Set [`AdmissionConfig::service_timeout`].
    pub fn service_timeout(mut self, d: Duration) -> Self {
        self.service_timeout = d;
        self
    }
}

/// Why a request was not admitted (it was shed: not run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shed {
    /// `max_queue` requests were already waiting.
    QueueFull {
        /// The configured limit.
        max_queue: usize,
    },
    /// No slot freed up within the queue timeout.
    QueueTimeout {
        /// How long it waited.
        waited: Duration,
    },
}

impl fmt::Display for Shed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shed::QueueFull { max_queue } => write!(
                f,
                "overloaded: request shed, {max_queue} requests already waiting for the model; retry later, or raise AdmissionConfig::max_queue / max_concurrency"
            ),
            Shed::QueueTimeout { waited } => write!(
                f,
                "overloaded: request shed after waiting {:.1} ms for a free slot (queue timeout); retry later, or raise AdmissionConfig::queue_timeout / max_concurrency",
                waited.as_secs_f64() * 1e3
            ),
        }
    }
}

impl std::error::Error for Shed {}

/// What admission control has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    /// Requests admitted.
    pub admitted: u64,
    /// Requests shed because the queue was full.
    pub shed_queue_full: u64,
    /// Requests shed because they waited past the queue timeout.
    pub shed_timeout: u64,
    /// HTTP: admitted requests answered 504 after the service timeout.
    pub service_timeouts: u64,
    /// Requests waiting now.
    pub waiting: u64,
}

impl AdmissionStats {
    /// All shed requests.
    pub fn shed(&self) -> u64 {
        self.shed_queue_full + self.shed_timeout
    }
}

#[derive(Debug, Default)]
struct Counters {
    admitted: AtomicU64,
    shed_queue_full: AtomicU64,
    shed_timeout: AtomicU64,
    service_timeouts: AtomicU64,
    waiting: AtomicUsize,
}

/// Leaves the queue when dropped (also when the waiting future is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct Shared {
    config: AdmissionConfig,
    semaphore: Arc<Semaphore>,
    counters: Counters,
}

impl Shared {
    fn new(config: AdmissionConfig) -> Self {
        let config = config.max_concurrency(config.max_concurrency);
        Shared {
            config,
            semaphore: Arc::new(Semaphore::new(config.max_concurrency)),
            counters: Counters::default(),
        }
    }

    /// Join the queue, unless it is full.
    fn enqueue(&self) -> Result<Waiting<'_>, Shed> {
        let before = self.counters.waiting.fetch_add(1, Ordering::Relaxed);
        let guard = Waiting(&self.counters.waiting);
        if before >= self.config.max_queue {
            self.counters
                .shed_queue_full
                .fetch_add(1, Ordering::Relaxed);
            return Err(Shed::QueueFull {
                max_queue: self.config.max_queue,
            });
        }
        Ok(guard)
    }

    fn timed_out(&self, since: Instant) -> Shed {
        self.counters.shed_timeout.fetch_add(1, Ordering::Relaxed);
        Shed::QueueTimeout {
            waited: since.elapsed(),
        }
    }

    fn stats(&self) -> AdmissionStats {
        let c = &self.counters;
        AdmissionStats {
            admitted: c.admitted.load(Ordering::Relaxed),
            shed_queue_full: c.shed_queue_full.load(Ordering::Relaxed),
            shed_timeout: c.shed_timeout.load(Ordering::Relaxed),
            service_timeouts: c.service_timeouts.load(Ordering::Relaxed),
            waiting: c.waiting.load(Ordering::Relaxed) as u64,
        }
    }
}

/// Semaphore-based admission control; clones share the limit and counters.
///
/// ```
/// use std::time::Duration;
/// use stagetrace_mitigate::{Admission, AdmissionConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let adm = Admission::new(AdmissionConfig::default().max_concurrency(1).max_queue(0));
/// let first = adm.admit().await.unwrap();
/// assert!(adm.admit().await.is_err()); // no slot, no queue: shed
/// drop(first);
/// assert!(adm.admit().await.is_ok());
/// assert_eq!(adm.stats().shed_queue_full, 1);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Admission {
    shared: Arc<Shared>,
}

/// A slot held by an admitted request; dropping it frees the slot.
#[derive(Debug)]
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    /// How long the request waited for the slot.
    pub waited: Duration,
}

impl Admission {
    /// Admission control with these settings.
    pub fn new(config: AdmissionConfig) -> Self {
        Admission {
            shared: Arc::new(Shared::new(config)),
        }
    }

    /// Wait for a slot (up to the queue timeout), or be shed.
    pub async fn admit(&self) -> Result<Admitted, Shed> {
        let since = Instant::now();
        let shared = &self.shared;
        // Fast path: a free slot and nobody waiting (tokio's semaphore is FIFO).
        if let Ok(p) = Arc::clone(&shared.semaphore).try_acquire_owned() {
            shared.counters.admitted.fetch_add(1, Ordering::Relaxed);
            return Ok(Admitted {
                _permit: p,
                waited: Duration::ZERO,
            });
        }
        let _queued = shared.enqueue()?;
        let acquire = Arc::clone(&shared.semaphore).acquire_owned();
        match tokio::time::timeout(shared.config.queue_timeout, acquire).await {
            Ok(Ok(p)) => {
                shared.counters.admitted.fetch_add(1, Ordering::Relaxed);
                Ok(Admitted {
                    _permit: p,
                    waited: since.elapsed(),
                })
            }
            // The semaphore is never closed; treat it like a timeout anyway.
            Ok(Err(_)) | Err(_) => Err(shared.timed_out(since)),
        }
    }

    /// The settings in force.
    pub fn config(&self) -> AdmissionConfig {
        self.shared.config
    }

    /// Counters so far.
    pub fn stats(&self) -> AdmissionStats {
        self.shared.stats()
    }
}

/// A policy-server [`Handler`] behind [`Admission`]: shed requests are
/// answered with the [`Shed`] message as the server's error, never run.
///
/// Give the [`PolicyServer`](stagetrace_net::ws::PolicyServer) a
/// `max_concurrency` at least `max_concurrency + max_queue` of this handler,
/// so that waiting happens here — bounded and timed — rather than in the
/// server's own unbounded queue.
pub struct AdmittedHandler<H> {
    inner: Arc<H>,
    admission: Admission,
}

impl<H> fmt::Debug for AdmittedHandler<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmittedHandler")
            .field("admission", &self.admission)
            .finish_non_exhaustive()
    }
}

impl<H: Handler> AdmittedHandler<H> {
    /// Put `inner` behind `admission`.
    pub fn new(inner: H, admission: Admission) -> Self {
        AdmittedHandler {
            inner: Arc::new(inner),
            admission,
        }
    }

    /// The admission control (clones share counters).
    pub fn admission(&self) -> &Admission {
        &self.admission
    }
}

impl<H: Handler> Handler for AdmittedHandler<H> {
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        let inner = Arc::clone(&self.inner);
        let admission = self.admission.clone();
        Box::pin(async move {
            let slot = admission.admit().await.map_err(HandlerError::new)?;
            // Waiting for the slot was `queue`; inference starts now.
            timer.infer_start();
            let out = inner.call(request, timer).await;
            drop(slot);
            out
        })
    }

    // A batcher inside still counts the connections it may hear from.
    fn connect(&self) -> ConnectionGuard {
        self.inner.connect()
    }
}

/// Admission control for HTTP servers: a tower [`Layer`](tower::Layer) over
/// tower's [`ConcurrencyLimit`] and [`Timeout`], with a bounded, timed queue
/// in front; shed requests get `503 Service Unavailable` (tower's
/// [`Overloaded`], with the [`Shed`] message as the body), service timeouts
/// `504 Gateway Timeout`.
///
/// Put it *inside* `stagetrace_net::tower::TimingLayer` so the wait is reported as
/// `queue` (axum: `.layer(admission).layer(TimingLayer::new())`).
///
/// ```
/// use axum::{routing::post, Router};
/// use stagetrace_mitigate::tower::AdmissionLayer;
/// use stagetrace_mitigate::AdmissionConfig;
/// use stagetrace_net::tower::TimingLayer;
///
/// let admission = AdmissionLayer::new(AdmissionConfig::default().max_concurrency(2));
/// let app: Router = Router::new()
///     .route("/infer", post(|body: axum::body::Bytes| async move { body }))
///     .layer(admission.clone())
///     .layer(TimingLayer::new());
/// assert_eq!(admission.stats().admitted, 0);
/// ```
#[derive(Clone, Debug)]
pub struct AdmissionLayer {
    shared: Arc<Shared>,
}

impl AdmissionLayer {
    /// A layer with these settings; every service it wraps shares one limit.
    pub fn new(config: AdmissionConfig) -> Self {
        AdmissionLayer {
            shared: Arc::new(Shared::new(config)),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> AdmissionStats {
        self.shared.stats()
    }
}

impl<S> tower::Layer<S> for AdmissionLayer {
    type Service = AdmissionService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AdmissionService {
            inner: Timeout::new(inner, self.shared.config.service_timeout),
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`AdmissionLayer`] produces.
#[derive(Clone)]
pub struct AdmissionService<S> {
    inner: Timeout<S>,
    shared: Arc<Shared>,
}

impl<S> fmt::Debug for AdmissionService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionService")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

fn text_response(status: StatusCode, msg: String) -> Response<Body> {
    let mut r = Response::new(Body::from(msg));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn shed_response(shed: &Shed) -> Response<Body> {
    // tower's load-shed error names the condition; ours says what to do.
    text_response(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{}: {shed}", Overloaded::new()),
    )
}

impl<S> Service<Request<Body>> for AdmissionService<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Never wait here: the server stamps the receive time after this, so
        // a wait before it would be reported as uplink instead of queue.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        let mut limited =
            ConcurrencyLimit::with_semaphore(self.inner.clone(), Arc::clone(&shared.semaphore));
        Box::pin(async move {
            let since = Instant::now();
            let wait = tokio::time::timeout(shared.config.queue_timeout, limited.ready());
            let ready = if shared.semaphore.available_permits() > 0 {
                // A free slot: no queueing (a lost race still waits at most
                // the queue timeout).
                wait.await
            } else {
                let _queued = match shared.enqueue() {
                    Ok(q) => q,
                    Err(shed) => return Ok(shed_response(&shed)),
                };
                wait.await
            };
            match ready {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Ok(text_response(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("admission: inner service not ready: {e}"),
                    ))
                }
                Err(_) => return Ok(shed_response(&shared.timed_out(since))),
            }
            shared.counters.admitted.fetch_add(1, Ordering::Relaxed);
            if let Some(timer) = req.extensions().get::<InferTimer>() {
                timer.infer_start();
            }
            match limited.call(req).await {
                Ok(resp) => Ok(resp),
                Err(e) if e.is::<Elapsed>() => {
                    shared
                        .counters
                        .service_timeouts
                        .fetch_add(1, Ordering::Relaxed);
                    Ok(text_response(
                        StatusCode::GATEWAY_TIMEOUT,
                        format!(
                            "the model took longer than the service timeout ({:?}); raise AdmissionConfig::service_timeout or lower the load",
                            shared.config.service_timeout
                        ),
                    ))
                }
                Err(e) => Ok(text_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("request failed: {e}"),
                )),
            }
        })
    }
}
