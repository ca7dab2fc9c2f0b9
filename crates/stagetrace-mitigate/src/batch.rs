//! A dynamic batcher for async inference.
//!
//! Requests are queued (bounded); one worker task takes the first waiting
//! request, keeps collecting until it has `max_batch`, or every registered
//! caller has a request in the batch ([`BatchPolicy::AllIn`]: nobody else can
//! join it), or `max_wait` has passed since that first request arrived,
//! drops the requests whose deadline has
//! passed (each is answered with [`BatchError::Expired`], never run), and runs
//! the model once on the rest. Every answer says how long the request waited
//! (`queue_wait`) and how big its batch was, and — when the request came with
//! an [`InferTimer`] — marks the start of inference and the batch size on it,
//! so the server reports the wait as the `queue` stage, the batch run as
//! `infer`, and the batch size, all of which land on the client's record.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stagetrace_net::InferTimer;
use tokio::sync::{mpsc, oneshot};

use crate::callers::{BatchCaller, Callers};
use worker::{worker, Shared};

/// When a batch that is not full runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BatchPolicy {
    /// As soon as every registered caller ([`Batcher::caller`], one per open
    /// connection through [`BatchedHandler`](crate::BatchedHandler)) has a
    /// request in it — no one else can arrive — or when `max_wait` has
    /// passed, whichever is first (default). With no caller registered the
    /// batcher cannot know who may still come and keeps the window.
    #[default]
    AllIn,
    /// Only when `max_wait` has passed: three robots and `max_batch` 6 wait
    /// the whole window on every batch. The policy of the first batcher, kept
    /// to measure against.
    FixedWindow,
}

/// Settings of a [`Batcher`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchConfig {
    /// Largest batch the model is given (default 8; 0 is taken as 1).
    pub max_batch: usize,
    /// Longest time the first request of a batch waits for company (default 5 ms).
    pub max_wait: Duration,
    /// Whether a batch that cannot fill runs before `max_wait` (default
    /// [`BatchPolicy::AllIn`]).
    pub policy: BatchPolicy,
    /// Requests that may wait in the queue; more are refused with
    /// [`BatchError::QueueFull`] (default 1024; 0 is taken as 1).
    pub queue_capacity: usize,
    /// Deadline of each request, counted from [`Batcher::submit`]; a request
    /// still waiting when it passes is answered with [`BatchError::Expired`]
    /// instead of being run (default none).
    pub deadline: Option<Duration>,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_batch: 8,
            max_wait: Duration::from_millis(5),
            policy: BatchPolicy::AllIn,
            queue_capacity: 1024,
            deadline: None,
        }
    }
}

impl BatchConfig {
    /// Set [`BatchConfig::max_batch`].
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.max(1);
        self
    }

    /// Set [`BatchConfig::max_wait`].
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.max_wait = d;
        self
    }

    /// Set [`BatchConfig::policy`].
    pub fn policy(mut self, p: BatchPolicy) -> Self {
        self.policy = p;
        self
    }

    /// Set [`BatchConfig::queue_capacity`].
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.queue_capacity = n.max(1);
        self
    }

    /// Set [`BatchConfig::deadline`].
    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = Some(d);
        self
    }
}

/// One request's answer from a [`Batcher`].
#[derive(Clone, Debug, PartialEq)]
pub struct Batched<O> {
    /// The model's output for this request.
    pub output: O,
    /// Submit → the batch started (the `queue` stage).
    pub queue_wait: Duration,
    /// How long the model ran on the batch (the `infer` stage).
    pub infer: Duration,
    /// How many requests the batch held.
    pub batch_size: usize,
}

/// Why a request got no output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchError {
    /// The queue already held `capacity` requests: the request was refused.
    QueueFull {
        /// The configured queue capacity.
        capacity: usize,
    },
    /// The request's deadline passed while it waited; it was not run.
    Expired {
        /// How long it had waited.
        waited: Duration,
    },
    /// The model failed the batch (its message, or that it panicked).
    Model(String),
    /// The model returned a different number of outputs than it was given.
    OutputCount {
        /// Batch size.
        expected: usize,
        /// Outputs returned.
        got: usize,
    },
    /// The batcher's worker is gone (its runtime shut down).
    Closed,
    /// [`Batcher::spawn`] was called outside a tokio runtime.
    NoRuntime,
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::QueueFull { capacity } => write!(
                f,
                "batch queue full ({capacity} requests waiting): request refused; raise BatchConfig::queue_capacity or add model capacity"
            ),
            BatchError::Expired { waited } => write!(
                f,
                "request expired after waiting {:.1} ms in the batch queue (deadline passed, not run); raise BatchConfig::deadline or lower the load",
                waited.as_secs_f64() * 1e3
            ),
            BatchError::Model(e) => write!(f, "the batched model failed: {e}"),
            BatchError::OutputCount { expected, got } => write!(
                f,
                "the batched model returned {got} outputs for a batch of {expected}; it must return one output per input, in order"
            ),
            BatchError::Closed => f.write_str(
                "the batcher's worker has stopped (its tokio runtime shut down); create a new Batcher",
            ),
            BatchError::NoRuntime => f.write_str(
                "Batcher::spawn needs a tokio runtime; call it from inside one (e.g. #[tokio::main])",
            ),
        }
    }
}

impl std::error::Error for BatchError {}

/// What a [`Batcher`] has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Requests submitted (accepted into the queue or refused).
    pub submitted: u64,
    /// Batches the model ran.
    pub batches: u64,
    /// Requests the model ran (sum of batch sizes).
    pub batched: u64,
    /// Requests refused because the queue was full.
    pub queue_full: u64,
    /// Requests answered with [`BatchError::Expired`].
    pub expired: u64,
    /// Requests whose caller gave up before their batch started (not run).
    pub cancelled: u64,
    /// Requests failed because their batch failed.
    pub failed: u64,
    /// `by_size[k]` = batches of size `k + 1` (up to `max_batch`).
    pub by_size: Vec<u64>,
    /// Batches that stopped collecting because they held `max_batch` requests.
    pub ran_full: u64,
    /// Batches that stopped collecting because every registered caller had a
    /// request in them ([`BatchPolicy::AllIn`]).
    pub ran_all_in: u64,
    /// Batches that stopped collecting because `max_wait` had passed (or the
    /// batcher was closing).
    pub ran_at_window: u64,
}

impl BatchStats {
    /// Mean batch size (0 before the first batch).
    pub fn mean_batch(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.batched as f64 / self.batches as f64
        }
    }
}

#[derive(Debug)]
struct Counters {
    submitted: AtomicU64,
    batches: AtomicU64,
    batched: AtomicU64,
    queue_full: AtomicU64,
    expired: AtomicU64,
    cancelled: AtomicU64,
    failed: AtomicU64,
    by_size: Vec<AtomicU64>,
    ran_full: AtomicU64,
    ran_all_in: AtomicU64,
    ran_at_window: AtomicU64,
}

impl Counters {
    fn new(max_batch: usize) -> Self {
        Counters {
            submitted: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            batched: AtomicU64::new(0),
            queue_full: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            by_size: (0..max_batch).map(|_| AtomicU64::new(0)).collect(),
            ran_full: AtomicU64::new(0),
            ran_all_in: AtomicU64::new(0),
            ran_at_window: AtomicU64::new(0),
        }
    }

    fn snapshot(&self) -> BatchStats {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BatchStats {
            submitted: ld(&self.submitted),
            batches: ld(&self.batches),
            batched: ld(&self.batched),
            queue_full: ld(&self.queue_full),
            expired: ld(&self.expired),
            cancelled: ld(&self.cancelled),
            failed: ld(&self.failed),
            by_size: self.by_size.iter().map(ld).collect(),
            ran_full: ld(&self.ran_full),
            ran_all_in: ld(&self.ran_all_in),
            ran_at_window: ld(&self.ran_at_window),
        }
    }
}

type Answer<O> = Result<Batched<O>, BatchError>;

struct Job<I, O> {
    input: I,
    enqueued: Instant,
    deadline: Option<Instant>,
    timer: Option<InferTimer>,
    reply: oneshot::Sender<Answer<O>>,
}

/// A dynamic batcher in front of a model that takes a `Vec` of inputs and
/// returns one output per input, in order.
///
/// ```
/// use std::time::Duration;
/// use stagetrace_mitigate::{BatchConfig, Batcher};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), stagetrace_mitigate::BatchError> {
/// let config = BatchConfig::default().max_batch(4).max_wait(Duration::from_millis(2));
/// let batcher = Batcher::spawn(config, |xs: Vec<u32>| async move {
///     Ok::<_, std::convert::Infallible>(xs.into_iter().map(|x| x * 2).collect())
/// })?;
/// let answer = batcher.submit(21).await?;
/// assert_eq!(answer.output, 42);
/// assert_eq!(answer.batch_size, 1);
/// # Ok(()) }
/// ```
pub struct Batcher<I, O> {
    tx: mpsc::Sender<Job<I, O>>,
    config: BatchConfig,
    counters: Arc<Counters>,
    callers: Arc<Callers>,
}

impl<I, O> Clone for Batcher<I, O> {
    fn clone(&self) -> Self {
        Batcher {
            tx: self.tx.clone(),
            config: self.config,
            counters: Arc::clone(&self.counters),
            callers: Arc::clone(&self.callers),
        }
    }
}

impl<I, O> fmt::Debug for Batcher<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batcher")
            .field("config", &self.config)
            .field("stats", &self.counters.snapshot())
            .field("callers", &self.callers.count())
            .finish()
    }
}

impl<I, O> Batcher<I, O>
where
    I: Send + 'static,
    O: Send + 'static,
{
    /// Start the batcher's worker on the current tokio runtime. The worker
    /// stops when every clone of the batcher is dropped.
    ///
    /// `model` runs one batch at a time (one model, one GPU); its future runs
    /// in a task of its own, so a panic fails that batch, not the batcher.
    pub fn spawn<M, Fut, E>(config: BatchConfig, model: M) -> Result<Self, BatchError>
    where
        M: FnMut(Vec<I>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<O>, E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| BatchError::NoRuntime)?;
        let config = BatchConfig {
            max_batch: config.max_batch.max(1),
            queue_capacity: config.queue_capacity.max(1),
            ..config
        };
        let (tx, rx) = mpsc::channel(config.queue_capacity);
        let counters = Arc::new(Counters::new(config.max_batch));
        let callers = Arc::new(Callers::default());
        let shared = Shared {
            config,
            counters: Arc::clone(&counters),
            callers: Arc::clone(&callers),
        };
        rt.spawn(worker(shared, rx, model));
        Ok(Batcher {
            tx,
            config,
            counters,
            callers,
        })
    }

    /// Register one caller — something that sends at most one request at a
    /// time, such as one robot's control loop — for as long as the returned
    /// guard is held. Under [`BatchPolicy::AllIn`] a batch runs as soon as
    /// every registered caller has a request in it. Register every caller or
    /// none: one that is not registered may find the batch already gone.
    /// [`BatchedHandler`](crate::BatchedHandler) registers each open
    /// connection by itself.
    pub fn caller(&self) -> BatchCaller {
        self.callers.join()
    }

    /// Callers registered now ([`Batcher::caller`]).
    pub fn callers(&self) -> usize {
        self.callers.count()
    }

    /// Queue `input` with the configured deadline and wait for its output.
    pub async fn submit(&self, input: I) -> Answer<O> {
        self.submit_with(input, None, None).await
    }

    /// Queue `input` and wait for its output. `deadline` overrides the
    /// configured one; `timer` (the server's [`InferTimer`] for this request)
    /// gets its inference start and batch size marked when the batch starts,
    /// so the wait is reported as `queue`, the batch as `infer`, and the
    /// client's record carries `batch_size`.
    pub async fn submit_with(
        &self,
        input: I,
        deadline: Option<Instant>,
        timer: Option<&InferTimer>,
    ) -> Answer<O> {
        let enqueued = Instant::now();
        self.counters.submitted.fetch_add(1, Ordering::Relaxed);
        let deadline = deadline.or_else(|| self.config.deadline.map(|d| enqueued + d));
        let (reply, answer) = oneshot::channel();
        let job = Job {
            input,
            enqueued,
            deadline,
            timer: timer.cloned(),
            reply,
        };
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.counters.queue_full.fetch_add(1, Ordering::Relaxed);
                return Err(BatchError::QueueFull {
                    capacity: self.config.queue_capacity,
                });
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(BatchError::Closed),
        }
        answer.await.unwrap_or(Err(BatchError::Closed))
    }

    /// The settings in force.
    pub fn config(&self) -> BatchConfig {
        self.config
    }

    /// Counters so far.
    pub fn stats(&self) -> BatchStats {
        self.counters.snapshot()
    }
}

mod worker;

#[cfg(test)]
mod tests;
