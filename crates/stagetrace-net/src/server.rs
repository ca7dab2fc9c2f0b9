//! Server-side pieces shared by the WebSocket server and the HTTP layer: the
//! clock that stamps `recv_unix_ns`, the [`InferTimer`] a handler uses to
//! report its pre / infer / post split, and the per-request hook.

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use stagetrace::wire::{RelayTiming, TimingChain, TraceContext};
use stagetrace::{ServerRecord, ServerTiming};

/// Called once per request, after the response was sent (or the request
/// failed), with what the server saw: the trace context the request carried
/// and the server's timing. An exporter (e.g. `stagetrace-otlp`) uses it to
/// draw the server's `queue` / `infer` spans under the client's transport span.
///
/// Runs on the connection's task: keep it short (hand the record to a channel).
pub type RequestHook = Arc<dyn Fn(&ServerRecord) + Send + Sync>;

/// The server's wall clock, as stamped into `recv_unix_ns`.
///
/// [`ServerClock::system`] reads the host clock. [`ServerClock::skewed_ns`]
/// adds a fixed offset, as a machine whose clock is off would report, and
/// [`ServerClock::step_ns`] makes it jump at runtime (an NTP step): the demo
/// and the tests use both to check the client's clock estimation against a
/// known truth. [`ServerClock::drifting`] also runs the clock at a rate of
/// its own (a real oscillator is 5–30 ppm off; tests use far more so a
/// short run covers hours). Clones share the offset.
#[derive(Clone)]
pub struct ServerClock {
    offset_ns: Arc<AtomicI64>,
    /// (host wall time the drift counts from, ns since the epoch; rate ppm).
    drift: Option<(u64, f64)>,
}

impl fmt::Debug for ServerClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerClock")
            .field("offset_ns", &self.offset_ns())
            .field("drift_ppm", &self.drift.map(|(_, ppm)| ppm))
            .finish()
    }
}

fn host_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Default for ServerClock {
    fn default() -> Self {
        ServerClock::system()
    }
}

impl ServerClock {
    /// The host's wall clock.
    pub fn system() -> Self {
        ServerClock::skewed_ns(0)
    }

    /// The host's wall clock plus `offset_ns` (positive: the server's clock is ahead).
    pub fn skewed_ns(offset_ns: i64) -> Self {
        ServerClock {
            offset_ns: Arc::new(AtomicI64::new(offset_ns)),
            drift: None,
        }
    }

    /// The host's wall clock plus `offset_ns` now, running `ppm` parts per
    /// million fast (negative: slow) from now on: after `t` seconds of host
    /// time it is `offset_ns + ppm · t` µs ahead. A non-finite `ppm` is taken
    /// as 0; it is capped at ± 10⁴ ppm.
    pub fn drifting(offset_ns: i64, ppm: f64) -> Self {
        let ppm = if ppm.is_finite() {
            ppm.clamp(-1e4, 1e4)
        } else {
            0.0
        };
        ServerClock {
            drift: Some((host_unix_ns(), ppm)),
            ..ServerClock::skewed_ns(offset_ns)
        }
    }

    /// This clock's offset from the host clock at host wall time `host_ns`
    /// (ns since the epoch): the fixed offset plus the drift so far. What a
    /// test subtracts from a stamp for the truth.
    pub fn offset_at(&self, host_ns: u64) -> i64 {
        let drift = self.drift.map_or(0.0, |(base, ppm)| {
            (i128::from(host_ns) - i128::from(base)) as f64 * ppm * 1e-6
        });
        self.offset_ns().saturating_add(drift.round() as i64)
    }

    /// Make the clock jump by `delta_ns` from now on (every clone sees it).
    pub fn step_ns(&self, delta_ns: i64) {
        self.offset_ns.fetch_add(delta_ns, Ordering::Relaxed);
    }

    /// The current offset from the host clock.
    pub fn offset_ns(&self) -> i64 {
        self.offset_ns.load(Ordering::Relaxed)
    }

    /// Wall time now, ns since the Unix epoch (0 if the host clock is before 1970).
    pub fn now_unix_ns(&self) -> u64 {
        let host = host_unix_ns();
        host.saturating_add_signed(self.offset_at(host))
    }
}

/// Handed to a request handler so it can say where its inference starts and
/// ends; the server stamps everything else.
///
/// Without any mark, the whole handler counts as `infer` (pre- and
/// post-processing belong to inference: they compete for the same CPU/GPU).
/// [`InferTimer::infer_start`] moves the start of inference later (time
/// before it is `queue`, e.g. the handler's own batcher); [`InferTimer::pre_done`]
/// and [`InferTimer::post_start`] report the pre- / post-processing parts.
/// [`InferTimer::set_batch_size`] and [`InferTimer::set_cache_hit`] say what
/// a batcher or a result cache did with the request: they travel back in the
/// response's server timing and land on the client's call record
/// (`batch_size`, `cache`).
#[derive(Clone)]
pub struct InferTimer {
    inner: Arc<TimerMarks>,
}

struct TimerMarks {
    base: Instant,
    /// ns after `base` + 1 (0 = unset).
    infer_start: AtomicU64,
    pre_done: AtomicU64,
    post_start: AtomicU64,
    /// 0 = unset.
    batch_size: AtomicU32,
    /// 0 = unset, 1 = miss, 2 = hit.
    cache: AtomicU8,
    /// A relay's handler forwarded the request (set once): see
    /// [`InferTimer::set_downstream`].
    downstream: OnceLock<Downstream>,
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
        f.debug_struct("InferTimer")
            .field("infer_start", &self.mark(&self.inner.infer_start))
            .field("pre_done", &self.mark(&self.inner.pre_done))
            .field("post_start", &self.mark(&self.inner.post_start))
            .field("batch_size", &self.batch_size())
            .field("cache_hit", &self.cache_hit())
            .finish()
    }
}

impl InferTimer {
    pub(crate) fn new(base: Instant) -> Self {
        InferTimer {
            inner: Arc::new(TimerMarks {
                base,
                infer_start: AtomicU64::new(0),
                pre_done: AtomicU64::new(0),
                post_start: AtomicU64::new(0),
                batch_size: AtomicU32::new(0),
                cache: AtomicU8::new(0),
                downstream: OnceLock::new(),
            }),
        }
    }

    /// The instant the marks are relative to: the request's receive stamp.
    pub(crate) fn received(&self) -> Instant {
        self.inner.base
    }

    fn set(&self, slot: &AtomicU64) {
        let ns = u64::try_from(self.inner.base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        slot.store(ns + 1, Ordering::Relaxed);
    }

    fn mark(&self, slot: &AtomicU64) -> Option<u64> {
        match slot.load(Ordering::Relaxed) {
            0 => None,
            v => Some(v - 1),
        }
    }

    /// Inference starts now: the time before (since the handler started) is
    /// reported as `queue`.
    pub fn infer_start(&self) {
        self.set(&self.inner.infer_start);
    }

    /// Pre-processing is done, the model starts now.
    pub fn pre_done(&self) {
        self.set(&self.inner.pre_done);
    }

    /// The model is done, post-processing starts now.
    pub fn post_start(&self) {
        self.set(&self.inner.post_start);
    }

    /// The request ran in a batch of `n` requests (itself included). Sent as
    /// the server timing's `batch_size`; 0 is ignored, and values above
    /// [`MAX_BATCH_SIZE`](stagetrace::wire::MAX_BATCH_SIZE) are capped to it.
    pub fn set_batch_size(&self, n: usize) {
        if n > 0 {
            let max = stagetrace::wire::MAX_BATCH_SIZE;
            let n = u32::try_from(n).unwrap_or(max).min(max);
            self.inner.batch_size.store(n, Ordering::Relaxed);
        }
    }

    /// A result cache answered the request (`true`: the model did not run)
    /// or missed (`false`). Sent as the server timing's `cache`.
    pub fn set_cache_hit(&self, hit: bool) {
        self.inner
            .cache
            .store(if hit { 2 } else { 1 }, Ordering::Relaxed);
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
        match self.inner.batch_size.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// The cache outcome set so far, if any.
    pub fn cache_hit(&self) -> Option<bool> {
        match self.inner.cache.load(Ordering::Relaxed) {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        }
    }
}

fn ns_between(a: Instant, b: Instant) -> u64 {
    u64::try_from(b.saturating_duration_since(a).as_nanos()).unwrap_or(u64::MAX)
}

/// One request's server-side stamps, from receive to send.
#[derive(Debug)]
pub(crate) struct RequestStamps {
    pub(crate) recv: Instant,
    pub(crate) recv_unix_ns: u64,
    /// The request's first byte arrived, when the transport saw it.
    first_byte: Option<Instant>,
    handler: Option<(Instant, Instant, InferTimer)>,
}

impl RequestStamps {
    /// Stamp the receive time now: call it when the whole request has arrived.
    pub(crate) fn received(clock: &ServerClock) -> Self {
        let recv = Instant::now();
        RequestStamps {
            recv,
            recv_unix_ns: clock.now_unix_ns(),
            first_byte: None,
            handler: None,
        }
    }

    /// The request's first byte arrived at `at` (before the receive time):
    /// sent as `transfer_ns`, so the client's clock estimate can leave the
    /// request's transfer out. `None` (or a stamp after the receive time)
    /// sends no `transfer_ns`.
    pub(crate) fn first_byte(mut self, at: Option<Instant>) -> Self {
        self.first_byte = at.filter(|a| *a <= self.recv);
        self
    }

    /// A timer for a handler that starts now (its marks are relative to `recv`).
    pub(crate) fn timer(&self) -> InferTimer {
        InferTimer::new(self.recv)
    }

    /// The handler ran from `start` to `end`.
    pub(crate) fn handled(&mut self, start: Instant, end: Instant, timer: InferTimer) {
        self.handler = Some((start, end, timer));
    }

    /// The timing to send, with `total` ending now (just before the send).
    pub(crate) fn timing_now(&self) -> ServerTiming {
        self.timing_at(Instant::now())
    }

    pub(crate) fn timing_at(&self, send: Instant) -> ServerTiming {
        let mut t = ServerTiming {
            recv_unix_ns: Some(self.recv_unix_ns),
            total_ns: Some(ns_between(self.recv, send)),
            transfer_ns: self.first_byte.map(|f| ns_between(f, self.recv)),
            ..ServerTiming::default()
        };
        if let Some((start, end, timer)) = &self.handler {
            let start_ns = ns_between(self.recv, *start);
            let end_ns = ns_between(self.recv, *end);
            let infer_from = timer
                .mark(&timer.inner.infer_start)
                .map_or(start_ns, |m| m.clamp(start_ns, end_ns));
            t.queue_ns = Some(infer_from);
            t.infer_ns = Some(end_ns - infer_from);
            if let Some(pre) = timer.mark(&timer.inner.pre_done) {
                t.pre_ns = Some(pre.clamp(infer_from, end_ns) - infer_from);
            }
            if let Some(post) = timer.mark(&timer.inner.post_start) {
                t.post_ns = Some(end_ns - post.clamp(infer_from, end_ns));
            }
            t.batch_size = timer.batch_size();
            t.cache_hit = timer.cache_hit();
        }
        t
    }
}

impl RequestStamps {
    /// For a relay whose handler forwarded the request: the timing chain to
    /// answer with, its own stamps in front of the downstream's chain
    /// (`timing` is [`timing_now`](Self::timing_now)'s). `None` for a plain
    /// server, or when the downstream's chain already holds
    /// [`MAX_HOPS`](stagetrace::wire::MAX_HOPS) relays (the relay then
    /// answers with its own timing alone).
    pub(crate) fn relayed(&self, timing: &ServerTiming) -> Option<TimingChain> {
        let (_, _, timer) = self.handler.as_ref()?;
        let d = timer.inner.downstream.get()?;
        let relay = RelayTiming {
            recv_unix_ns: timing.recv_unix_ns?,
            total_ns: timing.total_ns?,
            transfer_ns: timing.transfer_ns,
            forward_ns: ns_between(self.recv, d.forward),
            reply_ns: ns_between(self.recv, d.reply),
        };
        // Stamps taken in order on one monotonic clock; a total read before
        // the reply (it cannot be) would only shorten the relay's own time.
        let relay = RelayTiming {
            reply_ns: relay.reply_ns.min(relay.total_ns),
            forward_ns: relay.forward_ns.min(relay.reply_ns.min(relay.total_ns)),
            ..relay
        };
        d.chain.behind(relay)
    }
}

impl RequestStamps {
    /// For a relay whose handler forwarded the request: its downstream call
    /// as the relay's record tells it (`None` for a plain server).
    pub(crate) fn forwarded(&self) -> Option<stagetrace::Forwarded> {
        let (_, _, timer) = self.handler.as_ref()?;
        let d = timer.inner.downstream.get()?;
        Some(stagetrace::Forwarded {
            span_id: d.span_id,
            forward_ns: ns_between(self.recv, d.forward),
            reply_ns: ns_between(self.recv, d.reply),
        })
    }
}

/// Process-wide counters of a server, readable from its handle.
#[derive(Debug, Default)]
pub(crate) struct ServerCounters {
    pub(crate) requests: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) rejected_headers: AtomicU64,
    pub(crate) connections: AtomicU64,
}

impl ServerCounters {
    pub(crate) fn snapshot(&self) -> ServerStats {
        ServerStats {
            connections: self.connections.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            rejected_headers: self.rejected_headers.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn reject_header(&self) {
        self.rejected_headers.fetch_add(1, Ordering::Relaxed);
        stagetrace::count_rejected_header();
    }
}

/// What a server has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections accepted (WebSocket) — 0 for the HTTP layer.
    pub connections: u64,
    /// Requests answered or failed.
    pub requests: u64,
    /// Requests whose handler failed or whose message was malformed.
    pub failed: u64,
    /// Trace context headers rejected (ignored, counted): a malformed or
    /// repeated `traceparent`, a malformed `tracestate` or one sent without a
    /// `traceparent`, a `tracestate` with a repeated key (its later members
    /// dropped).
    pub rejected_headers: u64,
}

/// The trace context of one request, from all its `traceparent` values and
/// `tracestate` lines in the order received (W3C Trace Context Level 2: see
/// [`TraceContext::extract`]); each rejected header is counted.
pub(crate) fn take_context(
    counters: &ServerCounters,
    traceparents: &[&[u8]],
    tracestates: &[&[u8]],
) -> Option<TraceContext> {
    let found = TraceContext::extract(traceparents, tracestates);
    for _ in 0..found.rejected() {
        counters.reject_header();
    }
    found.context
}

/// The span a request's handler runs in: under the caller's context, so the
/// calls it makes continue the trace; no span (the current one stays) when
/// the request carried none.
pub(crate) fn handler_span(context: Option<TraceContext>) -> tracing::Span {
    context.map_or_else(tracing::Span::none, stagetrace::remote_parent_span)
}

/// Build the record handed to the hook.
pub(crate) fn server_record(
    trace_parent: Option<stagetrace::wire::TraceParent>,
    kind: Option<&str>,
    timing: ServerTiming,
    error: Option<String>,
) -> ServerRecord {
    ServerRecord {
        trace_parent,
        kind: kind
            .filter(|k| !k.is_empty() && k.len() <= 64)
            .unwrap_or("call")
            .to_owned(),
        timing,
        error,
        ..ServerRecord::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn skew_and_step_move_the_wall_clock() {
        let c = ServerClock::skewed_ns(250_000_000);
        let host = ServerClock::system();
        let d = c.now_unix_ns() as i64 - host.now_unix_ns() as i64;
        assert!((d - 250_000_000).abs() < 50_000_000, "{d}");
        let clone = c.clone();
        clone.step_ns(2_000_000_000);
        assert_eq!(c.offset_ns(), 2_250_000_000);
    }

    #[test]
    fn marks_split_the_handler_time() {
        let clock = ServerClock::system();
        let mut s = RequestStamps::received(&clock);
        let timer = s.timer();
        let start = s.recv + Duration::from_millis(1);
        let end = s.recv + Duration::from_millis(11);
        // Marks set "by hand" at known offsets.
        timer.inner.pre_done.store(3_000_000 + 1, Ordering::Relaxed);
        timer
            .inner
            .post_start
            .store(9_000_000 + 1, Ordering::Relaxed);
        s.handled(start, end, timer);
        let t = s.timing_at(s.recv + Duration::from_millis(12));
        assert_eq!(t.total_ns, Some(12_000_000));
        assert_eq!(t.queue_ns, Some(1_000_000));
        assert_eq!(t.infer_ns, Some(10_000_000));
        assert_eq!(t.pre_ns, Some(2_000_000));
        assert_eq!(t.post_ns, Some(2_000_000));
        assert_eq!((t.batch_size, t.cache_hit), (None, None));
        assert_eq!(t.transfer_ns, None);
    }

    #[test]
    fn the_first_byte_gives_the_request_transfer() {
        let clock = ServerClock::system();
        let s = RequestStamps::received(&clock);
        let at = s.recv - Duration::from_micros(8_250);
        let s = s.first_byte(Some(at));
        assert_eq!(s.timing_at(s.recv).transfer_ns, Some(8_250_000));
        // A stamp after the receive time is no transfer.
        let s = s.first_byte(Some(Instant::now() + Duration::from_secs(1)));
        assert_eq!(s.timing_at(s.recv).transfer_ns, None);
    }

    #[test]
    fn batch_size_and_cache_outcome_reach_the_timing() {
        let clock = ServerClock::system();
        let mut s = RequestStamps::received(&clock);
        let timer = s.timer();
        timer.set_batch_size(0); // ignored
        assert_eq!(timer.batch_size(), None);
        timer.set_batch_size(6);
        timer.set_cache_hit(false);
        timer.set_cache_hit(true); // the last word wins
        let end = s.recv + Duration::from_millis(2);
        s.handled(s.recv, end, timer.clone());
        let t = s.timing_at(end);
        assert_eq!((t.batch_size, t.cache_hit), (Some(6), Some(true)));
        // Through the header a client parses.
        let back = ServerTiming::parse_timing_header(&t.to_timing_header()).unwrap();
        assert_eq!(back, t);
        timer.set_batch_size(usize::MAX);
        assert_eq!(timer.batch_size(), Some(stagetrace::wire::MAX_BATCH_SIZE));
    }
}
