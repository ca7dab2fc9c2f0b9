//! The batcher's worker: how a batch is collected (the policy: full, every
//! caller in, or the window) and how it runs, one at a time.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use stagetrace_net::InferTimer;
use tokio::sync::{mpsc, oneshot};

use super::{Answer, BatchConfig, BatchError, BatchPolicy, Batched, Counters, Job};
use crate::callers::Callers;

/// What the worker shares with the batcher's handles.
pub(super) struct Shared {
    pub(super) config: BatchConfig,
    pub(super) counters: Arc<Counters>,
    pub(super) callers: Arc<Callers>,
}

impl Shared {
    /// Every registered caller has a live request in `jobs`: nobody else can
    /// arrive. A request whose caller gave up does not count (its caller
    /// may already have left, or may send again).
    fn all_in<I, O>(&self, jobs: &[Job<I, O>]) -> bool {
        if self.config.policy != BatchPolicy::AllIn {
            return false;
        }
        let callers = self.callers.count();
        callers > 0 && jobs.iter().filter(|j| !j.reply.is_closed()).count() >= callers
    }
}

/// Why a batch stopped collecting.
enum Ran {
    Full,
    AllIn,
    Window,
}

/// Collect the batch that `first` opens into `jobs`; never past the window.
async fn collect<I, O>(
    shared: &Shared,
    rx: &mut mpsc::Receiver<Job<I, O>>,
    first: Job<I, O>,
    jobs: &mut Vec<Job<I, O>>,
) -> Ran {
    let config = &shared.config;
    // The window opens when the first request arrived, not when the
    // worker got to it: a request that already waited does not wait again.
    let window_end = tokio::time::Instant::from_std(first.enqueued + config.max_wait);
    jobs.push(first);
    loop {
        if jobs.len() >= config.max_batch {
            return Ran::Full;
        }
        match rx.try_recv() {
            Ok(j) => {
                jobs.push(j);
                continue;
            }
            Err(mpsc::error::TryRecvError::Disconnected) => return Ran::Window,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        if shared.all_in(jobs) {
            return Ran::AllIn;
        }
        tokio::select! {
            got = rx.recv() => match got {
                Some(j) => jobs.push(j),
                None => return Ran::Window,
            },
            // A caller left: the batch may now hold everyone still there.
            () = shared.callers.left(), if config.policy == BatchPolicy::AllIn => {}
            () = tokio::time::sleep_until(window_end) => return Ran::Window,
        }
    }
}

/// The requests of one batch still wanted: their inputs, and when each
/// was queued with where its answer goes.
struct Live<I, O> {
    inputs: Vec<I>,
    replies: Vec<(Instant, oneshot::Sender<Answer<O>>)>,
}

/// Runs batches, one at a time, until every handle is gone: collects one
/// (the policy's), runs the model on the requests still wanted, answers
/// them.
pub(super) async fn worker<I, O, M, Fut, E>(
    shared: Shared,
    mut rx: mpsc::Receiver<Job<I, O>>,
    mut model: M,
) where
    I: Send + 'static,
    O: Send + 'static,
    M: FnMut(Vec<I>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Vec<O>, E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    let config = shared.config;
    let counters = Arc::clone(&shared.counters);
    let mut jobs: Vec<Job<I, O>> = Vec::with_capacity(config.max_batch);
    let mut timers: Vec<InferTimer> = Vec::with_capacity(config.max_batch);
    while let Some(first) = rx.recv().await {
        let why = match collect(&shared, &mut rx, first, &mut jobs).await {
            Ran::Full => &counters.ran_full,
            Ran::AllIn => &counters.ran_all_in,
            Ran::Window => &counters.ran_at_window,
        };

        let start = Instant::now();
        let live = start_batch(&counters, &mut jobs, &mut timers, start);
        let n = live.replies.len();
        if n == 0 {
            continue;
        }
        count_batch(&counters, why, n);
        let result = run_model(&mut model, live.inputs, n).await;
        let infer = start.elapsed();
        answer(&counters, live.replies, result, start, infer);
    }
}

/// The batch starts at `start`: drops from `jobs` the requests whose
/// caller gave up or whose deadline passed (answered, counted), marks the
/// others' inference start and batch size on their timers.
fn start_batch<I, O>(
    counters: &Counters,
    jobs: &mut Vec<Job<I, O>>,
    timers: &mut Vec<InferTimer>,
    start: Instant,
) -> Live<I, O> {
    let mut inputs = Vec::with_capacity(jobs.len());
    let mut replies = Vec::with_capacity(jobs.len());
    for job in jobs.drain(..) {
        if job.reply.is_closed() {
            counters.cancelled.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if job.deadline.is_some_and(|d| d <= start) {
            counters.expired.fetch_add(1, Ordering::Relaxed);
            let waited = start.saturating_duration_since(job.enqueued);
            let _ = job.reply.send(Err(BatchError::Expired { waited }));
            continue;
        }
        if let Some(t) = &job.timer {
            t.infer_start();
        }
        inputs.push(job.input);
        replies.push((job.enqueued, job.reply));
        timers.extend(job.timer);
    }
    let n = replies.len();
    for t in timers.drain(..) {
        t.set_batch_size(n);
    }
    Live { inputs, replies }
}

/// A batch of `n` runs, stopped collecting for `why`.
fn count_batch(counters: &Counters, why: &AtomicU64, n: usize) {
    counters.batches.fetch_add(1, Ordering::Relaxed);
    why.fetch_add(1, Ordering::Relaxed);
    counters.batched.fetch_add(n as u64, Ordering::Relaxed);
    if let Some(c) = counters.by_size.get(n - 1) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The model's outputs for `inputs` (`n` of them, one each), run on a task
/// of its own so that a panic is an error, not the worker's end.
async fn run_model<I, O, M, Fut, E>(
    model: &mut M,
    inputs: Vec<I>,
    n: usize,
) -> Result<Vec<O>, BatchError>
where
    O: Send + 'static,
    M: FnMut(Vec<I>) -> Fut,
    Fut: Future<Output = Result<Vec<O>, E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    let run = tokio::spawn(model(inputs));
    match run.await {
        Ok(Ok(outs)) if outs.len() == n => Ok(outs),
        Ok(Ok(outs)) => Err(BatchError::OutputCount {
            expected: n,
            got: outs.len(),
        }),
        Ok(Err(e)) => Err(BatchError::Model(e.to_string())),
        Err(e) if e.is_panic() => Err(BatchError::Model("the model panicked".into())),
        Err(_) => Err(BatchError::Closed),
    }
}

/// Answers each request of the batch that started at `start` and ran for
/// `infer`: its output, or the batch's error (counted).
fn answer<O>(
    counters: &Counters,
    replies: Vec<(Instant, oneshot::Sender<Answer<O>>)>,
    result: Result<Vec<O>, BatchError>,
    start: Instant,
    infer: std::time::Duration,
) {
    let n = replies.len();
    match result {
        Ok(outs) => {
            for ((enqueued, reply), output) in replies.into_iter().zip(outs) {
                let _ = reply.send(Ok(Batched {
                    output,
                    queue_wait: start.saturating_duration_since(enqueued),
                    infer,
                    batch_size: n,
                }));
            }
        }
        Err(e) => {
            counters.failed.fetch_add(n as u64, Ordering::Relaxed);
            for (_, reply) in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
