//! [`RequestMarks`]: the one table of a request's marks that every
//! stagetrace server keeps — the WebSocket and HTTP servers' [`InferTimer`]
//! and `stagetrace-grpc`'s `RequestTimer` are built on it — and the rule
//! that turns a handler's marks into the timing's `pre` / `model` / `post`.
//!
//! [`InferTimer`]: super::InferTimer

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use stagetrace_wire::{ServerTiming, MAX_BATCH_SIZE, MAX_DURATION_NS};

/// A point on a request's timeline that a server or its handler marks
/// with [`RequestMarks::set`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestMark {
    /// Inference starts: the time before is `queue`.
    InferStart,
    /// Pre-processing is done, the model starts.
    PreDone,
    /// The model is done, post-processing starts.
    PostStart,
    /// The output is ready (inference ends): the time after, to the send,
    /// is `poll_wait`.
    Ready,
    /// A data frame of the request body arrived (the last one set wins).
    BodyData,
    /// The request was handed to its handler.
    HandlerStart,
    /// The response was sent.
    Sent,
}

const MARKS: usize = 7;

impl RequestMark {
    fn index(self) -> usize {
        match self {
            RequestMark::InferStart => 0,
            RequestMark::PreDone => 1,
            RequestMark::PostStart => 2,
            RequestMark::Ready => 3,
            RequestMark::BodyData => 4,
            RequestMark::HandlerStart => 5,
            RequestMark::Sent => 6,
        }
    }
}

/// One request's marks on the server, relative to an instant the server
/// stamped (its `base`: the receive, or the request's head), shared by the
/// server and the handler it hands them to; and what the handler said
/// about its batch, its cache and its device's time.
///
/// A server keeps one per request and stamps its own points into it
/// ([`RequestMark`]); [`fill_handler_parts`](Self::fill_handler_parts) puts what
/// the handler marked into the request's [`ServerTiming`], by the same rule
/// for every transport.
pub struct RequestMarks {
    base: Instant,
    /// ns after `base` + 1 (0 = unset), one per [`RequestMark`].
    marks: [AtomicU64; MARKS],
    /// The device's own time for the model's work, ns + 1 (0 = unset).
    device: AtomicU64,
    /// 0 = unset.
    batch_size: AtomicU32,
    /// 0 = unset, 1 = miss, 2 = hit.
    cache: AtomicU8,
}

impl fmt::Debug for RequestMarks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestMarks")
            .field("infer_start", &self.ns(RequestMark::InferStart))
            .field("pre_done", &self.ns(RequestMark::PreDone))
            .field("post_start", &self.ns(RequestMark::PostStart))
            .field("ready", &self.ns(RequestMark::Ready))
            .field("device_ns", &self.device_ns())
            .field("batch_size", &self.batch_size())
            .field("cache_hit", &self.cache_hit())
            .finish_non_exhaustive()
    }
}

/// ns from `a` to `b` (0 when `b` is before `a`).
pub(crate) fn ns_between(a: Instant, b: Instant) -> u64 {
    u64::try_from(b.saturating_duration_since(a).as_nanos()).unwrap_or(u64::MAX)
}

impl RequestMarks {
    /// No marks yet; they will be relative to `base`.
    pub fn new(base: Instant) -> Self {
        RequestMarks {
            base,
            marks: std::array::from_fn(|_| AtomicU64::new(0)),
            device: AtomicU64::new(0),
            batch_size: AtomicU32::new(0),
            cache: AtomicU8::new(0),
        }
    }

    /// The instant the marks are relative to.
    pub fn base(&self) -> Instant {
        self.base
    }

    /// Marks `mark` now (the last call wins).
    pub fn set(&self, mark: RequestMark) {
        let ns = ns_between(self.base, Instant::now()).saturating_add(1);
        self.marks[mark.index()].store(ns, Ordering::Relaxed);
    }

    /// Marks `mark` at `ns` after the base, for tests that place a mark.
    #[cfg(test)]
    pub(crate) fn set_ns(&self, mark: RequestMark, ns: u64) {
        self.marks[mark.index()].store(ns + 1, Ordering::Relaxed);
    }

    /// `mark`, ns after the base, when set.
    pub fn ns(&self, mark: RequestMark) -> Option<u64> {
        match self.marks[mark.index()].load(Ordering::Relaxed) {
            0 => None,
            v => Some(v - 1),
        }
    }

    /// `mark`, as an instant, when set.
    pub fn at(&self, mark: RequestMark) -> Option<Instant> {
        self.ns(mark)
            .and_then(|ns| self.base.checked_add(Duration::from_nanos(ns)))
    }

    /// The device's own time for the model's work; the last call wins,
    /// capped at the wire's limit (one hour).
    pub fn set_device_time(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos())
            .unwrap_or(u64::MAX)
            .min(MAX_DURATION_NS);
        self.device.store(ns + 1, Ordering::Relaxed);
    }

    /// The device time set so far, ns.
    pub fn device_ns(&self) -> Option<u64> {
        match self.device.load(Ordering::Relaxed) {
            0 => None,
            v => Some(v - 1),
        }
    }

    /// The request ran in a batch of `n` (itself included); 0 is ignored,
    /// values above the wire's [`MAX_BATCH_SIZE`] are capped to it.
    pub fn set_batch_size(&self, n: usize) {
        if n > 0 {
            let n = u32::try_from(n)
                .unwrap_or(MAX_BATCH_SIZE)
                .min(MAX_BATCH_SIZE);
            self.batch_size.store(n, Ordering::Relaxed);
        }
    }

    /// The batch size set so far, if any.
    pub fn batch_size(&self) -> Option<u32> {
        match self.batch_size.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// A result cache answered (`true`) or missed (`false`).
    pub fn set_cache_hit(&self, hit: bool) {
        self.cache.store(if hit { 2 } else { 1 }, Ordering::Relaxed);
    }

    /// The cache outcome set so far, if any.
    pub fn cache_hit(&self) -> Option<bool> {
        match self.cache.load(Ordering::Relaxed) {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        }
    }

    /// Puts what the handler marked into `t`, for an inference from
    /// `start_ns` to `end_ns` after the base: its parts (`pre` up to
    /// [`RequestMark::PreDone`], `model` between it and [`RequestMark::PostStart`],
    /// `post` from there; each mark taken within the inference, a post mark
    /// before the pre mark taken at it, so the parts add up to `infer`),
    /// the device's time, the batch size and the cache outcome.
    pub fn fill_handler_parts(&self, start_ns: u64, end_ns: u64, t: &mut ServerTiming) {
        let within = |mark| self.ns(mark).map(|m| m.clamp(start_ns, end_ns));
        let pre_done = within(RequestMark::PreDone);
        let post_start = within(RequestMark::PostStart).map(|q| q.max(pre_done.unwrap_or(q)));
        t.pre_ns = pre_done.map(|p| p - start_ns);
        t.model_ns = pre_done.zip(post_start).map(|(p, q)| q - p);
        t.post_ns = post_start.map(|q| end_ns - q);
        t.device_ns = self.device_ns();
        t.batch_size = self.batch_size();
        t.cache_hit = self.cache_hit();
    }
}
