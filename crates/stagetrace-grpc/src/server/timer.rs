//! [`RequestTimer`]: one request's stamps on the server, from its head to
//! the reply, which the handler marks (inference start and end, an async
//! server's answer for an earlier request) and [`ServerLayer`](crate::tower::ServerLayer)
//! turns into the timing trailer. The marks are `stagetrace-net`'s
//! [`RequestMarks`], the table every stagetrace server keeps; this adds
//! what gRPC's layer stamps and sends (the receive read from the body, the
//! answer for an earlier request, the outcome).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use stagetrace::thread_sample::ThreadSample;
use stagetrace_net::{RequestMark, RequestMarks, ServerClock};
use stagetrace_wire::ServerTiming;
use stagetrace_wire::TraceParent;

use crate::wire::{GrpcTiming, ObsOutcome};

/// Handed to a gRPC handler in its request's extensions
/// ([`RequestTimer::of`]) by [`ServerLayer`](crate::tower::ServerLayer): where its
/// inference starts and ends, and what its reply answers.
///
/// The layer stamps the rest: the request's head, its receive (the whole
/// request read: the body's end, or [`received_now`](Self::received_now)),
/// and the send (the handler's response resolved). Without marks the time
/// from receive to send is `infer` (the Rust servers' rule, as
/// `stagetrace-net`'s `InferTimer`); [`infer_start`](Self::infer_start)
/// moves its start (the time before is `queue`), [`ready`](Self::ready) its
/// end (the time after, to the send, is `poll_wait`), and
/// [`pre_done`](Self::pre_done) / [`post_start`](Self::post_start) report
/// its parts.
///
/// An async server answers one request with the result of another:
/// `GetActions` returns the chunk of an observation sent earlier with
/// `SendObservations`. [`answer_for`](Self::answer_for) makes the reply's
/// timing that observation's — its receive, queue and inference — ending at
/// this reply's send, with its timestep. [`set_outcome`](Self::set_outcome)
/// adds the `stagetrace-obs-bin` trailer; [`skip_timing`](Self::skip_timing)
/// sends no timing at all. Clones share the stamps.
#[derive(Clone)]
pub struct RequestTimer {
    inner: Arc<Stamps>,
}

struct Stamps {
    /// Relative to the request's head, which reached the layer: its first
    /// byte, as near as a tower layer sees it. The layer marks the body's
    /// data frames ([`RequestMark::BodyData`]), the hand-over to the
    /// service inside it, its handler's stack, after waiting for it to be
    /// ready ([`RequestMark::HandlerStart`]), and the send
    /// ([`RequestMark::Sent`]); the handler the rest.
    marks: RequestMarks,
    clock: ServerClock,
    host_figures: bool,
    trace_parent: Option<TraceParent>,
    recv: OnceLock<Recv>,
    skip_timing: AtomicBool,
    answer: Mutex<Option<(RequestTimer, u64)>>,
    outcome: Mutex<Option<ObsOutcome>>,
}

/// The whole request had arrived.
#[derive(Clone, Copy, Debug)]
struct Recv {
    at: Instant,
    unix_ns: u64,
    host: Option<ThreadSample>,
}

impl fmt::Debug for RequestTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestTimer")
            .field("received", &self.inner.recv.get().map(|r| r.at))
            .field("infer_start", &self.mark(RequestMark::InferStart))
            .field("ready", &self.mark(RequestMark::Ready))
            .field("sent", &self.mark(RequestMark::Sent))
            .finish_non_exhaustive()
    }
}

fn ns_between(a: Instant, b: Instant) -> u64 {
    u64::try_from(b.saturating_duration_since(a).as_nanos()).unwrap_or(u64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The data is plain values: a panic elsewhere leaves nothing half-written.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RequestTimer {
    pub(crate) fn new(
        head: Instant,
        clock: ServerClock,
        host_figures: bool,
        trace_parent: Option<TraceParent>,
    ) -> Self {
        RequestTimer {
            inner: Arc::new(Stamps {
                marks: RequestMarks::new(head),
                clock,
                host_figures,
                trace_parent,
                recv: OnceLock::new(),
                skip_timing: AtomicBool::new(false),
                answer: Mutex::new(None),
                outcome: Mutex::new(None),
            }),
        }
    }

    /// The timer [`ServerLayer`](crate::tower::ServerLayer) put into `request`'s
    /// extensions (`None` when the server has no such layer).
    pub fn of<T>(request: &tonic::Request<T>) -> Option<RequestTimer> {
        request.extensions().get::<RequestTimer>().cloned()
    }

    /// The caller's `traceparent`, when it sent a valid one.
    pub fn trace_parent(&self) -> Option<TraceParent> {
        self.inner.trace_parent
    }

    fn set(&self, mark: RequestMark) {
        self.inner.marks.set(mark);
    }

    fn mark(&self, mark: RequestMark) -> Option<Instant> {
        self.inner.marks.at(mark)
    }

    /// The whole request has arrived now (a client stream's last message,
    /// when the handler stops reading there). The first stamp wins: the
    /// layer's own at the request body's end, or this one.
    pub fn received_now(&self) {
        let at = Instant::now();
        let _ = self.inner.recv.get_or_init(|| Recv {
            at,
            unix_ns: self.inner.clock.now_unix_ns(),
            host: self.inner.host_figures.then(ThreadSample::now),
        });
    }

    /// A data frame of the request body arrived now.
    pub(crate) fn data_arrived(&self) {
        self.set(RequestMark::BodyData);
    }

    /// The service inside the layer was ready and the request is handed to
    /// it now: its handler starts. A request that came in before waited for
    /// it (`accept_wait`, in `queue`).
    pub(crate) fn handler_started(&self) {
        self.set(RequestMark::HandlerStart);
    }

    /// Inference starts now: the time since the receive is `queue`.
    pub fn infer_start(&self) {
        self.set(RequestMark::InferStart);
    }

    /// Pre-processing is done, the model starts now.
    pub fn pre_done(&self) {
        self.set(RequestMark::PreDone);
    }

    /// The model is done, post-processing starts now.
    pub fn post_start(&self) {
        self.set(RequestMark::PostStart);
    }

    /// The output is ready now (inference ends): the time from here to the
    /// reply's send is `poll_wait` (waiting for the client's poll, padding,
    /// serialisation).
    pub fn ready(&self) {
        self.set(RequestMark::Ready);
    }

    /// The request ran in a batch of `n` (itself included): sent as
    /// `batch_size`; 0 is ignored, larger than the wire's limit capped.
    pub fn set_batch_size(&self, n: usize) {
        self.inner.marks.set_batch_size(n);
    }

    /// A result cache answered (`true`) or missed (`false`): sent as `cache`.
    pub fn set_cache_hit(&self, hit: bool) {
        self.inner.marks.set_cache_hit(hit);
    }

    /// This reply carries the result of the request `earlier` timed (an
    /// observation whose chunk a `GetActions` returns): its timing trailer
    /// is `earlier`'s receive, queue and inference, ending at this reply's
    /// send, with `timestep`. The latest call wins.
    pub fn answer_for(&self, earlier: &RequestTimer, timestep: u64) {
        *lock(&self.inner.answer) = Some((earlier.clone(), timestep));
    }

    /// Send `outcome` in the `stagetrace-obs-bin` trailer.
    pub fn set_outcome(&self, outcome: ObsOutcome) {
        *lock(&self.inner.outcome) = Some(outcome);
    }

    /// Send no timing trailer for this request (the LeRobot server's
    /// `SendObservations`, whose timing travels with the chunk; an empty
    /// `GetActions`).
    pub fn skip_timing(&self) {
        self.inner.skip_timing.store(true, Ordering::Relaxed);
    }

    /// The handler's response resolved now: the send stamp.
    pub(crate) fn sent_now(&self) {
        self.set(RequestMark::Sent);
    }

    pub(crate) fn outcome(&self) -> Option<ObsOutcome> {
        *lock(&self.inner.outcome)
    }

    /// The trailer's timing and the trace it belongs to, `None` when
    /// skipped: this request's own, or the one it answers.
    pub(crate) fn reply_timing(&self) -> Option<(GrpcTiming, Option<TraceParent>)> {
        if self.inner.skip_timing.load(Ordering::Relaxed) {
            return None;
        }
        let sent = self.mark(RequestMark::Sent).unwrap_or_else(Instant::now);
        let answer = lock(&self.inner.answer).clone();
        Some(match answer {
            Some((earlier, ts)) => (
                GrpcTiming {
                    timing: earlier.timing_at(sent),
                    timestep: Some(ts),
                },
                earlier.trace_parent(),
            ),
            None => (
                GrpcTiming {
                    timing: self.timing_at(sent),
                    timestep: None,
                },
                self.trace_parent(),
            ),
        })
    }

    /// When the whole request had arrived: the stamp taken, else (a handler
    /// that never read the body's end) its last data frame, else its head.
    fn recv(&self) -> Recv {
        if let Some(r) = self.inner.recv.get() {
            return *r;
        }
        let at = self
            .mark(RequestMark::BodyData)
            .unwrap_or(self.inner.marks.base());
        let back = ns_between(at, Instant::now());
        Recv {
            at,
            unix_ns: self.inner.clock.now_unix_ns().saturating_sub(back),
            host: None,
        }
    }

    /// The timing of this request, sent at `sent`.
    fn timing_at(&self, sent: Instant) -> ServerTiming {
        let recv = self.recv();
        let after_recv = |mark| self.mark(mark).map(|m| m.max(recv.at).min(sent));
        let ready = after_recv(RequestMark::Ready);
        // The whole request was in before its handler started: it waited
        // for one (a concurrency limit, a busy pool inside the layer).
        let accepted = self
            .mark(RequestMark::HandlerStart)
            .filter(|h| *h > recv.at)
            .map(|h| h.min(sent));
        // Inference starts no earlier than the handler did.
        let start = after_recv(RequestMark::InferStart)
            .unwrap_or(recv.at)
            .max(accepted.unwrap_or(recv.at))
            .min(ready.unwrap_or(sent));
        let end = ready.unwrap_or(sent);
        let head = self.inner.marks.base();
        let mut t = ServerTiming {
            recv_unix_ns: Some(recv.unix_ns),
            total_ns: Some(ns_between(recv.at, sent)),
            transfer_ns: Some(ns_between(head, recv.at)),
            queue_ns: Some(ns_between(recv.at, start)),
            accept_wait_ns: accepted.map(|h| ns_between(recv.at, h.min(start))),
            infer_ns: Some(ns_between(start, end)),
            poll_wait_ns: ready.map(|r| ns_between(r, sent)),
            host: recv
                .host
                .map(|h| ThreadSample::now().since(&h))
                .unwrap_or_default(),
            ..ServerTiming::default()
        };
        // The handler's parts, batch and cache, by the rule every server
        // keeps (on the marks' own clock: ns after the head).
        let (start_ns, end_ns) = (ns_between(head, start), ns_between(head, end));
        self.inner
            .marks
            .fill_handler_parts(start_ns, end_ns, &mut t);
        t
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn an_answer_carries_the_earlier_requests_stamps_to_this_send() {
        let skew = 5_000_000_000;
        let obs = RequestTimer::new(Instant::now(), ServerClock::skewed_ns(skew), false, None);
        spin(Duration::from_millis(2));
        obs.received_now();
        let recv = obs.inner.recv.get().unwrap().at;
        spin(Duration::from_millis(3));
        obs.infer_start();
        spin(Duration::from_millis(4));
        obs.ready();
        let poll = RequestTimer::new(Instant::now(), ServerClock::system(), false, None);
        spin(Duration::from_millis(2));
        poll.answer_for(&obs, 9);
        poll.sent_now();
        let (t, _) = poll.reply_timing().unwrap();
        assert_eq!(t.timestep, Some(9));
        let s = t.timing;
        let ms = |ns: Option<u64>| ns.unwrap() as f64 / 1e6;
        assert!(ms(s.transfer_ns) >= 2.0, "{s:?}");
        assert!(ms(s.queue_ns) >= 3.0 && ms(s.infer_ns) >= 4.0, "{s:?}");
        assert!(ms(s.poll_wait_ns) >= 2.0, "{s:?}");
        // The parts add up to the total on one clock.
        let parts = s.queue_ns.unwrap() + s.infer_ns.unwrap() + s.poll_wait_ns.unwrap();
        assert_eq!(parts, s.total_ns.unwrap());
        // The receive is on the (skewed) server clock.
        let host_now = ServerClock::system().now_unix_ns();
        let age = ns_between(recv, Instant::now());
        let truth = host_now - age + skew as u64;
        assert!(s.recv_unix_ns.unwrap().abs_diff(truth) < 1_000_000, "{s:?}");
    }

    #[test]
    fn a_handler_that_started_late_waited_and_the_parts_add_up_to_infer() {
        let t = RequestTimer::new(Instant::now(), ServerClock::system(), false, None);
        t.received_now();
        spin(Duration::from_millis(2));
        t.handler_started();
        spin(Duration::from_millis(1));
        t.pre_done();
        spin(Duration::from_millis(3));
        t.post_start();
        spin(Duration::from_millis(1));
        t.sent_now();
        let s = t.reply_timing().unwrap().0.timing;
        let ns = |v: Option<u64>| v.unwrap();
        // The wait for the handler is the whole queue (no infer_start mark):
        // inference starts with the handler, not with the arrival.
        assert!(ns(s.accept_wait_ns) >= 2_000_000, "{s:?}");
        assert_eq!(s.accept_wait_ns, s.queue_ns);
        assert_eq!(ns(s.queue_ns) + ns(s.infer_ns), ns(s.total_ns));
        assert_eq!(
            ns(s.pre_ns) + ns(s.model_ns) + ns(s.post_ns),
            ns(s.infer_ns),
            "{s:?}"
        );
        assert!(ns(s.model_ns) >= 3_000_000, "{s:?}");
        // A handler started before the request was whole (tonic reads a
        // unary body after the hand-over) waited for nothing.
        let t = RequestTimer::new(Instant::now(), ServerClock::system(), false, None);
        t.handler_started();
        spin(Duration::from_millis(1));
        t.received_now();
        t.sent_now();
        let s = t.reply_timing().unwrap().0.timing;
        assert_eq!((s.accept_wait_ns, s.queue_ns), (None, Some(0)));
    }

    #[test]
    fn without_marks_the_handler_is_infer_and_skip_sends_nothing() {
        let t = RequestTimer::new(Instant::now(), ServerClock::system(), false, None);
        t.received_now();
        spin(Duration::from_millis(1));
        t.sent_now();
        let (g, _) = t.reply_timing().unwrap();
        assert_eq!(g.timing.queue_ns, Some(0));
        assert_eq!(g.timing.infer_ns, g.timing.total_ns);
        assert_eq!(g.timing.poll_wait_ns, None);
        t.skip_timing();
        assert!(t.reply_timing().is_none());
    }
}
