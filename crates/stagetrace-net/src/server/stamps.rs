//! One request's server-side stamps, from receive to send: the
//! [`ServerTiming`] a response carries.

use std::time::Instant;

use stagetrace::thread_sample::ThreadSample;
use stagetrace_wire::{HostFigure, ServerTiming};
use stagetrace_wire::{RelayTiming, TimingChain};

use super::clock::ServerClock;
use super::marks::{ns_between, RequestMark};
use super::timer::InferTimer;

/// One request's server-side stamps, from receive to send.
#[derive(Debug)]
pub(crate) struct RequestStamps {
    pub(crate) recv: Instant,
    pub(crate) recv_unix_ns: u64,
    /// The request's first byte arrived, when the transport saw it.
    first_byte: Option<Instant>,
    handler: Option<(Instant, Instant, InferTimer)>,
    /// The host's counters at receive, when the server sends host figures.
    host: Option<ThreadSample>,
    /// The kernel had the request's last byte this long before the event
    /// loop read it (kernel receive stamps), µs.
    rx_wait_us: Option<u32>,
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
            host: None,
            rx_wait_us: None,
        }
    }

    /// The kernel had the request's last byte at `at` (its receive stamp,
    /// see `kernel_rx`): the receive moves there, so the uplink ends when
    /// the bytes were in, and the wait until the event loop read them is
    /// sent as `rx_wait_ns` (inside `queue`). Call it after
    /// [`first_byte`](Self::first_byte). `None`, or a stamp after the
    /// user-space one, keeps the user-space receive.
    pub(crate) fn kernel_rx(mut self, at: Option<Instant>) -> Self {
        let Some(at) = at.filter(|a| *a <= self.recv) else {
            return self;
        };
        let wait = self.recv - at;
        self.recv = at;
        let wait_ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.recv_unix_ns = self.recv_unix_ns.saturating_sub(wait_ns);
        // A single segment is all in before the first read returns: its
        // transfer is nil, not negative.
        self.first_byte = self.first_byte.map(|f| f.min(at));
        self.rx_wait_us = u32::try_from(wait_ns.saturating_add(500) / 1000).ok();
        self
    }

    /// Samples the host's counters now (at receive), so the response says
    /// what the host did to the request until it is sent; `false` leaves
    /// them out (a few µs per request saved).
    pub(crate) fn with_host(mut self, on: bool) -> Self {
        self.host = on.then(ThreadSample::now);
        self
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
            host: self
                .host
                .map(|at_recv| ThreadSample::now().since(&at_recv))
                .unwrap_or_default(),
            ..ServerTiming::default()
        };
        if self.rx_wait_us.is_some() {
            t.host.set(HostFigure::RxWait, self.rx_wait_us);
        }
        if let Some((start, end, timer)) = &self.handler {
            let start_ns = ns_between(self.recv, *start);
            let end_ns = ns_between(self.recv, *end);
            let marks = timer.marks();
            let infer_from = marks
                .ns(RequestMark::InferStart)
                .map_or(start_ns, |m| m.clamp(start_ns, end_ns));
            t.queue_ns = Some(infer_from);
            t.infer_ns = Some(end_ns - infer_from);
            marks.fill_handler_parts(infer_from, end_ns, &mut t);
        }
        t
    }
}

impl RequestStamps {
    /// For a relay whose handler forwarded the request: the timing chain to
    /// answer with, its own stamps in front of the downstream's chain
    /// (`timing` is [`timing_now`](Self::timing_now)'s). `None` for a plain
    /// server, or when the downstream's chain already holds
    /// [`MAX_HOPS`](stagetrace_wire::MAX_HOPS) relays (the relay then
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
    pub(crate) fn forwarded(&self) -> Option<stagetrace::record::Forwarded> {
        let (_, _, timer) = self.handler.as_ref()?;
        let d = timer.inner.downstream.get()?;
        Some(stagetrace::record::Forwarded {
            span_id: d.span_id,
            forward_ns: ns_between(self.recv, d.forward),
            reply_ns: ns_between(self.recv, d.reply),
        })
    }
}
