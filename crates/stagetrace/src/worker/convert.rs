//! One queued call → its [`CallRecord`]: the figure computation. Stage times
//! from the call's accumulators, the server timing stitched onto the
//! client's timeline (`crate::clock`), the gap, the observer's own cost,
//! warm-up and deadline lateness. Integer nanoseconds throughout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::call_state::{CallState, PackedTiming, StageAcc, TransportAcc};
use crate::clock::{Anchor, ClientTimes, ClockMode, Stitched, Stitcher};
use crate::executor::ExecAcc;
use crate::health::Health;
use crate::hop_record::HopFigures;
use crate::message::RawCall;
use crate::record::{CacheOutcome, CallRecord, SpanTime, Timeline};
use crate::stage::Stage;
use crate::stamp::Calibration;
use crate::summary::{DeadlineObs, DeadlineTracker};
use stagetrace_schema::{Figure, HostCount};
use stagetrace_wire::{Hops, ServerTiming};
use stagetrace_wire::{HostFigure, HostShare};

/// Turns queued calls into records; keeps what spans calls: the per-peer
/// clock estimates, the deadline ticks and the warm-up clock.
#[derive(Debug)]
pub(crate) struct Converter {
    stitcher: Stitcher,
    deadline: Option<DeadlineTracker>,
    warmup_calls: u64,
    warmup_duration: Option<Duration>,
    first_start: Option<Instant>,
    /// The layer's counters (clamped splits, empty calls).
    health: Arc<Health>,
    /// The latest drift estimate of a peer's clock (ppm, ± ppm), for the
    /// summaries: it is a property of the clocks, not of one call.
    drift: Option<(f64, f64)>,
}

impl Converter {
    pub(crate) fn new(
        clock_mode: ClockMode,
        deadline: Option<DeadlineTracker>,
        warmup_calls: u64,
        warmup_duration: Option<Duration>,
        health: Arc<Health>,
    ) -> Self {
        Converter {
            stitcher: Stitcher::new(clock_mode),
            deadline,
            warmup_calls,
            warmup_duration,
            first_start: None,
            health,
            drift: None,
        }
    }

    /// The latest drift estimate of a peer's clock: (ppm, ± ppm).
    pub(crate) fn drift(&self) -> Option<(f64, f64)> {
        self.drift
    }

    /// One queued call → its public record (plus its deadline observation).
    /// `cal` turns stamps into time, `anchor` places them on the wall clock.
    pub(crate) fn convert(
        &mut self,
        raw: &RawCall,
        cal: Calibration,
        anchor: &Anchor,
    ) -> (CallRecord, Option<DeadlineObs>) {
        let s = &raw.state;
        let start = cal.instant(s.start);
        let end = cal.instant(raw.end);
        let e2e_ns = cal.ns(raw.end.ticks_since(s.start));
        let call_start_unix_ns = anchor.to_unix_ns(start);
        let mut rec = CallRecord {
            seq: s.seq.unwrap_or(s.ordinal),
            ts_unix_ns: call_start_unix_ns,
            kind: if s.kind.is_empty() {
                "call".to_owned()
            } else {
                s.kind.as_str().to_owned()
            },
            trace_id: Some(format!("{:032x}", s.trace_id)),
            ..CallRecord::default()
        };
        rec.set(Figure::E2e, to_i64(e2e_ns));
        let mut tl = Timeline {
            call_start_unix_ns,
            call_dur_ns: e2e_ns,
            capture: placed(s, cal, Stage::Capture),
            dispatch: placed(s, cal, Stage::Dispatch),
            call_span_id: Some(s.span_id.to_be_bytes()),
            dispatch_span_id: (s.dispatch_span_id != 0).then(|| s.dispatch_span_id.to_be_bytes()),
            shared_context: s.shared_context,
            ..Timeline::default()
        };
        rec.figures
            .set(Figure::Capture, total(s, cal, Stage::Capture));
        rec.figures
            .set(Figure::Dispatch, total(s, cal, Stage::Dispatch));
        let exec_ack_ns = match &s.executor {
            Some(ack) => self.executor_split(ack, &mut rec, tl.dispatch, start, anchor),
            None => 0,
        };
        let rx_wait_ns = match &s.transport {
            Some(t) => self.transport(s, t, cal, anchor, &mut rec, &mut tl),
            None => 0,
        };
        // No server timing split them: the app's own queue and infer spans.
        if rec.get(Figure::Queue).is_none() {
            rec.figures.set(Figure::Queue, total(s, cal, Stage::Queue));
            tl.queue = placed(s, cal, Stage::Queue);
        }
        if rec.get(Figure::Infer).is_none() {
            rec.figures.set(Figure::Infer, total(s, cal, Stage::Infer));
            tl.infer = placed(s, cal, Stage::Infer);
        }
        // Inference's parts timed in-process (a robot running its policy
        // itself), where no server sent its own.
        for (stage, figure) in [
            (Stage::Pre, Figure::Pre),
            (Stage::Model, Figure::Model),
            (Stage::Post, Figure::Post),
        ] {
            if rec.get(figure).is_none() {
                rec.figures.set(figure, total(s, cal, stage));
            }
        }
        let outside_ns = exec_ack_ns.saturating_add(rx_wait_ns);
        self.gap_and_flags(raw, cal, e2e_ns, outside_ns, &mut rec);
        let first = *self.first_start.get_or_insert(start);
        let warm_by_time = self.warmup_duration.is_some_and(|d| start < first + d);
        if s.ordinal < self.warmup_calls || warm_by_time {
            rec.warmup = Some(true);
        }
        let obs = self.deadline.as_mut().map(|d| d.observe(start, end));
        if let Some(o) = obs {
            rec.set(Figure::Late, o.late_ns);
            rec.deadline_miss = Some(o.late_ns > 0);
        }
        rec.timeline = tl;
        (rec, obs)
    }

    /// A remote executor's ack → dispatch's split (`exec_tx`, `exec_relay`,
    /// `exec_wait`, `exec_ack` and the executor's clock); returns `exec_ack`
    /// (ns), the ack's way back: after the dispatch span, so part
    /// of the gap.
    fn executor_split(
        &mut self,
        ack: &ExecAcc,
        rec: &mut CallRecord,
        dispatch: Option<SpanTime>,
        start: Instant,
        anchor: &Anchor,
    ) -> u64 {
        let x = super::exec_ack::split(&mut self.stitcher, ack, dispatch, start, anchor);
        if x.clamped {
            Health::bump(&self.health.clamped);
        }
        if x.rejected {
            Health::bump(&self.health.rejected_headers);
        }
        for (figure, value) in x.figures() {
            rec.figures.set(figure, value);
        }
        x.exec_ack_ns.map_or(0, |v| v.max(0) as u64)
    }

    /// The transport span: its roundtrip and first byte on the call's
    /// timeline, the server's timing stitched onto it (or, from a server
    /// that reports none, the first byte's cut), retries summed. Returns
    /// the robot's `rx_wait` (ns, 0 without a kernel stamp): the roundtrip
    /// ends when the kernel had the response, and the time until the app
    /// read it goes to the gap, not the downlink.
    fn transport(
        &mut self,
        s: &CallState,
        t: &TransportAcc,
        cal: Calibration,
        anchor: &Anchor,
        rec: &mut CallRecord,
        tl: &mut Timeline,
    ) -> u64 {
        let start = cal.instant(s.start);
        let mut span = SpanTime {
            start_ns: cal.ns(t.start.ticks_since(s.start)),
            dur_ns: cal.ns(t.end.ticks_since(t.start)),
        };
        tl.transport = Some(span);
        tl.transport_span_id = Some(t.span_id.to_be_bytes());
        let t_start_at = cal.instant(t.start);
        let mut t_end_at = cal.instant(t.end);
        // The kernel had the response's last byte before the app read it:
        // the exchange ends there; the app's wait is the robot's rx_wait.
        let kernel_end = t
            .stamps
            .kernel_rx
            .filter(|k| (t_start_at..=t_end_at).contains(k));
        let rx_wait_ns = kernel_end.map_or(0, |k| ns_since(k, t_end_at));
        if let Some(k) = kernel_end {
            rec.set(Figure::RxWait, to_i64(rx_wait_ns));
            t_end_at = k;
            span.dur_ns = span.dur_ns.saturating_sub(rx_wait_ns);
        }
        rec.set(Figure::Roundtrip, to_i64(span.dur_ns));
        // The robot's own time before the kernel had the request: inside
        // the uplink, not the network's. One attempt only: a retry's
        // write is not the first span's.
        let written = t
            .stamps
            .request_written
            .filter(|w| (t_start_at..=t_end_at).contains(w));
        if let (Some(w), true) = (written, s.stages[Stage::Transport.index()].count <= 1) {
            rec.set(Figure::TxWait, to_i64(ns_since(t_start_at, w)));
        }
        // The first byte on the call's timeline; a stamp outside the
        // transport span is kept off it (the stitch counts it). A response
        // in one segment is all in before its first read: its first byte
        // is then the kernel's stamp too.
        let first_byte = t
            .stamps
            .first_byte
            .filter(|fb| (t_start_at..=cal.instant(t.end)).contains(fb))
            .map(|fb| fb.min(t_end_at));
        tl.response_first_byte_ns = first_byte.map(|fb| ns_since(start, fb));
        let timing = t.timing.as_ref().map(PackedTiming::unpack);
        if let Some(timing) = timing {
            rec.batch_size = timing.batch_size;
            rec.cache = timing.cache_hit.map(CacheOutcome::from_hit);
            set_host(&timing.host, true, rec);
        }
        if let Some(timing) = timing.filter(ServerTiming::has_times) {
            let client = ClientTimes {
                send_unix_ns: anchor.to_unix_ns(t_start_at),
                recv_unix_ns: anchor.to_unix_ns(t_end_at),
                first_byte_unix_ns: t
                    .stamps
                    .first_byte
                    .map(|fb| anchor.to_unix_ns(kernel_end.map_or(fb, |k| fb.min(k)))),
                request_first_byte_unix_ns: t
                    .stamps
                    .request_first_byte
                    .map(|at| anchor.to_unix_ns(at)),
            };
            let direct = Hops::new();
            let relays = s.relays.as_deref().unwrap_or(&direct);
            let (st, hops) =
                self.stitcher
                    .stitch_hops(t.stamps.peer.as_str(), client, relays, &timing);
            self.place_stitched(&st, hops, relays, span, rec, tl);
        }
        let all = s.stages[Stage::Transport.index()];
        if !timing.is_some_and(|t| t.has_times()) && all.count <= 1 {
            // No server timing: the first byte cuts the black box in two,
            // the wait for it (server and network unsplit) and the
            // response's transfer, both on this clock (ttfb + rx =
            // roundtrip). Never drawn as queue or infer.
            if let Some(fb_ns) = tl.response_first_byte_ns {
                let end_ns = span.start_ns.saturating_add(span.dur_ns);
                rec.set(Figure::Ttfb, to_i64(fb_ns.saturating_sub(span.start_ns)));
                rec.set(Figure::Rx, to_i64(end_ns.saturating_sub(fb_ns)));
            }
        }
        if all.count > 1 {
            // Retries: the roundtrip is every attempt; the split is the stitched one.
            rec.set(
                Figure::Roundtrip,
                to_i64(cal.ns(all.sum_ticks).saturating_sub(rx_wait_ns)),
            );
        }
        rx_wait_ns
    }

    /// The server's timing, stitched (`st`, through `relays`), onto the
    /// transport `span`: its figures, each relay's hop, and where they fall
    /// on the call's timeline.
    fn place_stitched(
        &mut self,
        st: &Stitched,
        hops: Vec<HopFigures>,
        relays: &Hops,
        span: SpanTime,
        rec: &mut CallRecord,
        tl: &mut Timeline,
    ) {
        // The relays' own time, each on its own clock.
        let relay: Option<i64> = hops
            .iter()
            .filter_map(|h| h.relay_ns)
            .reduce(i64::saturating_add);
        rec.figures.set(Figure::Relay, relay);
        super::hop_spans::place(span, &hops, relays.as_slice(), &mut tl.hops);
        rec.hops = hops;
        self.stitched(st, rec);
        place_split(st, span, tl);
    }

    /// The stitched figures of a call, its clock basis and step, and the
    /// peer's drift for the summaries.
    fn stitched(&mut self, st: &Stitched, rec: &mut CallRecord) {
        if st.clamped {
            Health::bump(&self.health.clamped);
        }
        if st.rejected_first_byte {
            Health::bump(&self.health.rejected_headers);
        }
        let f = &mut rec.figures;
        f.set(
            Figure::Roundtrip,
            st.roundtrip_ns.or(f.get(Figure::Roundtrip)),
        );
        for (figure, value) in st.figures() {
            f.set(figure, value);
        }
        rec.clock = st.basis;
        rec.clock_step = st.clock_step.then_some(true);
        if let Some(d) = st.drift_ppm.zip(st.drift_err_ppm) {
            self.drift = Some(d);
        } else if st.clock_step {
            // The step reset the drift history with the window.
            self.drift = None;
        }
    }

    /// The gap (time inside the call no top-level stage covers, plus the
    /// executor ack's way back and the robot's wait to read a response the
    /// kernel already had: `outside_ns`), the observer's own cost, failure, the
    /// output digest and stale drops.
    fn gap_and_flags(
        &mut self,
        raw: &RawCall,
        cal: Calibration,
        e2e_ns: u64,
        outside_ns: u64,
        rec: &mut CallRecord,
    ) {
        let s = &raw.state;
        let stage_spans: u32 = s.stages.iter().map(|a| a.count).sum();
        if stage_spans == 0 {
            Health::bump(&self.health.empty_calls);
        }
        let covered_ns = cal.ns(s.covered_ticks);
        if covered_ns > e2e_ns {
            // Overlapping top-level stage spans (concurrent tasks) cover more than the call.
            Health::bump(&self.health.clamped);
            rec.set(Figure::Gap, 0);
        } else {
            rec.set(
                Figure::Gap,
                to_i64((e2e_ns - covered_ns).saturating_add(outside_ns).min(e2e_ns)),
            );
        }
        rec.set(Figure::Observer, to_i64(cal.ns(s.observer_ticks)));
        if let Some(reason) = s.failed {
            rec.failed = Some(true);
            rec.error = Some(reason.to_owned());
        } else if raw.panicking {
            rec.failed = Some(true);
            rec.error = Some("panic".to_owned());
        }
        rec.output_digest = s.digest.map(|d| format!("{d:016x}"));
        rec.stale_dropped = (s.stale_dropped > 0).then_some(s.stale_dropped);
        if let Some((margin_ns, dry_ticks)) = s.action_queue {
            rec.set(Figure::Margin, margin_ns);
            rec.dry_ticks = Some(dry_ticks);
        }
        set_host(&s.host, false, rec);
        // The robot's own log writing (a timed writer): no server figure.
        if let Some(ns) = s.host.get_ns(HostFigure::LogWrite) {
            rec.set(Figure::LogWrite, to_i64(ns));
        }
        for (figure, stage) in [
            (Figure::CaptureRunWait, Stage::Capture),
            (Figure::DispatchRunWait, Stage::Dispatch),
        ] {
            if let Some(ns) = s.stage_run_wait(stage) {
                rec.set(figure, to_i64(ns));
            }
        }
    }
}

/// The robot's host figures, in [`HOST_TIMES`] order.
const ROBOT_HOST: [Figure; 4] = [
    Figure::RunWait,
    Figure::CpuStall,
    Figure::Gc,
    Figure::RxWait,
];
/// The policy server's host figures, in [`HOST_TIMES`] order.
const SERVER_HOST: [Figure; 4] = [
    Figure::ServerRunWait,
    Figure::ServerCpuStall,
    Figure::ServerGc,
    Figure::ServerRxWait,
];
/// The time figures of a host share the record carries.
const HOST_TIMES: [HostFigure; 4] = [
    HostFigure::RunWait,
    HostFigure::CpuStall,
    HostFigure::Gc,
    HostFigure::RxWait,
];

/// One end's host share (`server`: the policy server's) onto the record's
/// figures and counts for that end; an absent figure stays absent.
fn set_host(share: &HostShare, server: bool, rec: &mut CallRecord) {
    let figures = if server { SERVER_HOST } else { ROBOT_HOST };
    for (figure, host) in figures.into_iter().zip(HOST_TIMES) {
        if let Some(ns) = share.get_ns(host) {
            rec.set(figure, to_i64(ns));
        }
    }
    for (count, host) in HostCount::ALL.into_iter().zip(HOST_COUNTS) {
        *rec.host_counts.slot(server, count) = share.get(host);
    }
}

/// The counts of a host share, in [`HostCount::ALL`] order.
const HOST_COUNTS: [HostFigure; HostCount::ALL.len()] = [
    HostFigure::InvoluntarySwitches,
    HostFigure::MinorFaults,
    HostFigure::MajorFaults,
    HostFigure::GcCollections,
    HostFigure::VoluntarySwitches,
];

/// `earlier` → `later` in ns (0 when `later` is not after it).
fn ns_since(earlier: Instant, later: Instant) -> u64 {
    u64::try_from(later.saturating_duration_since(earlier).as_nanos()).unwrap_or(u64::MAX)
}

/// A figure from integer ns: durations fit i64 for 292 years.
fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The summed time of `stage`'s spans in the call, `None` without one.
fn total(s: &CallState, cal: Calibration, stage: Stage) -> Option<i64> {
    let a: StageAcc = s.stages[stage.index()];
    (a.count > 0).then(|| to_i64(cal.ns(a.sum_ticks)))
}

/// `stage` on the call's timeline: from its first span's start, for the
/// summed time of its spans.
fn placed(s: &CallState, cal: Calibration, stage: Stage) -> Option<SpanTime> {
    let a: StageAcc = s.stages[stage.index()];
    (a.count > 0).then(|| SpanTime {
        start_ns: cal.ns(a.first_start_ticks),
        dur_ns: cal.ns(a.sum_ticks),
    })
}

/// The stitched split on the timeline: uplink from the transport's start,
/// then queue and infer, the downlink ending with the transport.
fn place_split(st: &Stitched, span: SpanTime, tl: &mut Timeline) {
    let ns = |v: i64| v.max(0) as u64;
    let t_end = span.start_ns.saturating_add(span.dur_ns);
    let mut cursor = span.start_ns;
    if let Some(up) = st.uplink_ns {
        tl.uplink = Some(SpanTime {
            start_ns: span.start_ns,
            dur_ns: ns(up),
        });
        cursor = span.start_ns.saturating_add(ns(up));
    }
    if let Some(q) = st.queue_ns {
        tl.queue = Some(SpanTime {
            start_ns: cursor,
            dur_ns: ns(q),
        });
        cursor = cursor.saturating_add(ns(q));
    }
    if let Some(i) = st.infer_ns {
        tl.infer = Some(SpanTime {
            start_ns: cursor,
            dur_ns: ns(i),
        });
        cursor = cursor.saturating_add(ns(i));
    }
    if let Some(p) = st.poll_wait_ns {
        tl.poll_wait = Some(SpanTime {
            start_ns: cursor,
            dur_ns: ns(p),
        });
    }
    if let Some(down) = st.downlink_ns {
        tl.downlink = Some(SpanTime {
            start_ns: t_end.saturating_sub(ns(down)),
            dur_ns: ns(down),
        });
    }
}
