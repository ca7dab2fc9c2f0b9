//! The [`InferTimer`] a handler marks its inference with (on the request's
//! [`RequestMarks`]), and what a relay's handler saw of its downstream call.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use stagetrace_wire::TimingChain;

use super::marks::{RequestMark, RequestMarks};

/// Handed to a request handler so it can say where its inference starts and
/// ends; the server stamps everything else.
///
/// Without any mark, the whole handler counts as `infer` (pre- and
/// post-processing belong to inference: they compete for the same CPU/GPU).
/// [`InferTimer::infer_start`] moves the start of inference later (time
/// before it is `queue`, e.g. the handler's own batcher). Inference's parts:
/// [`InferTimer::pre_done`] (= [`InferTimer::model_start`]) ends
/// pre-processing, [`InferTimer::post_start`] (= [`InferTimer::model_done`])
/// starts post-processing; the model is the time between. With both marks
/// the response carries `pre_ns`, `model_ns` and `post_ns`, which add up to
/// `infer_ns` exactly; with one, its part alone. End the model's mark when
/// its device work is done (synchronise the GPU first), or the device's time
/// lands in `post`. [`InferTimer::set_device_time`] adds the device's own
/// time for the model's work, when the handler has it (CUDA events).
/// [`InferTimer::set_batch_size`] and [`InferTimer::set_cache_hit`] say what
/// a batcher or a result cache did with the request: they travel back in the
/// response's server timing and land on the client's call record
/// (`batch_size`, `cache`).
#[derive(Clone)]
pub struct InferTimer {
    pub(super) inner: Arc<TimerMarks>,
}

pub(super) struct TimerMarks {
    /// Relative to the request's receive stamp.
    pub(super) marks: RequestMarks,
    /// A relay's handler forwarded the request (set once): see
    /// [`InferTimer::set_downstream`].
    pub(super) downstream: OnceLock<Downstream>,
}

/// What a relay's handler saw of the downstream call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Downstream {
    /// The request was handed to the downstream client's send API.
    pub(crate) forward: Instant,
    /// The downstream's whole reply had arrived.
    pub(crate) reply: Instant,
    /// The downstream's `server_timing`, with its own relays.
    pub(crate) chain: TimingChain,
    /// The parent id sent downstream in `traceparent`, when one was sent.
    pub(crate) span_id: Option<[u8; 8]>,
}

impl fmt::Debug for InferTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.inner.marks;
        f.debug_struct("InferTimer")
            .field("infer_start", &m.ns(RequestMark::InferStart))
            .field("pre_done", &m.ns(RequestMark::PreDone))
            .field("post_start", &m.ns(RequestMark::PostStart))
            .field("device_ns", &self.device_ns())
            .field("batch_size", &self.batch_size())
            .field("cache_hit", &self.cache_hit())
            .finish()
    }
}

impl InferTimer {
    pub(crate) fn new(base: Instant) -> Self {
        InferTimer {
            inner: Arc::new(TimerMarks {
                marks: RequestMarks::new(base),
                downstream: OnceLock::new(),
            }),
        }
    }

    /// The instant the marks are relative to: the request's receive stamp.
    pub(crate) fn received(&self) -> Instant {
        self.inner.marks.base()
    }

    /// The marks set so far.
    pub(super) fn marks(&self) -> &RequestMarks {
        &self.inner.marks
    }

    /// Inference starts now: the time before (since the handler started) is
    /// reported as `queue`.
    pub fn infer_start(&self) {
        self.inner.marks.set(RequestMark::InferStart);
    }

    /// Pre-processing is done, the model starts now. The same mark as
    /// [`model_start`](Self::model_start).
    pub fn pre_done(&self) {
        self.inner.marks.set(RequestMark::PreDone);
    }

    /// The model is done, post-processing starts now. The same mark as
    /// [`model_done`](Self::model_done).
    pub fn post_start(&self) {
        self.inner.marks.set(RequestMark::PostStart);
    }

    /// The model starts now: the time from inference's start is `pre`.
    /// The same mark as [`pre_done`](Self::pre_done), named for a handler
    /// that times its model.
    pub fn model_start(&self) {
        self.pre_done();
    }

    /// The model is done now — its device work included: synchronise the
    /// GPU (or read the result) before — and the time to the handler's end
    /// is `post`. The same mark as [`post_start`](Self::post_start).
    pub fn model_done(&self) {
        self.post_start();
    }

    /// The device's own time for the model's work (e.g. the elapsed time
    /// between two CUDA events around it), sent as `device_ns`: a part of
    /// the model's time measured on the device, not a stage of its own. The
    /// last call wins; capped at the wire's limit (one hour).
    pub fn set_device_time(&self, d: std::time::Duration) {
        self.inner.marks.set_device_time(d);
    }

    /// The device time set so far, ns.
    pub fn device_ns(&self) -> Option<u64> {
        self.inner.marks.device_ns()
    }

    /// The request ran in a batch of `n` requests (itself included). Sent as
    /// the server timing's `batch_size`; 0 is ignored, and values above
    /// [`MAX_BATCH_SIZE`](stagetrace_wire::MAX_BATCH_SIZE) are capped to it.
    pub fn set_batch_size(&self, n: usize) {
        self.inner.marks.set_batch_size(n);
    }

    /// A result cache answered the request (`true`: the model did not run)
    /// or missed (`false`). Sent as the server timing's `cache`.
    pub fn set_cache_hit(&self, hit: bool) {
        self.inner.marks.set_cache_hit(hit);
    }

    /// A relay forwarded the request at `forward` and had the downstream's
    /// whole reply at `reply`, with its timing `chain`: the response then
    /// carries the relay's own timing with `chain` nested in it
    /// (`docs/protocol.md`, "Relays"). The first call wins.
    pub(crate) fn set_downstream(&self, d: Downstream) {
        let _ = self.inner.downstream.set(d);
    }

    /// The batch size set so far, if any.
    pub fn batch_size(&self) -> Option<u32> {
        self.inner.marks.batch_size()
    }

    /// The cache outcome set so far, if any.
    pub fn cache_hit(&self) -> Option<bool> {
        self.inner.marks.cache_hit()
    }
}
