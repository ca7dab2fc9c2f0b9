//! Calls timed without spans (`stagetrace::direct`, what the Python package
//! uses): the same record as a call made of spans, the same queue (full =
//! dropped and counted, never blocking), the same counters.
#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stagetrace::direct::{DirectTransport, Mark};
use stagetrace::{
    clock::ClockMode, record::CallRecord, sink::RecordSink, ServerTiming, Stage, StageLayer,
    StageSpanExt,
};
use stagetrace_schema::Figure;
use stagetrace_test_support::{spin_for, Collect};
use tracing::info_span;
use tracing_subscriber::prelude::*;

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// What the server says of a request it spent 1 ms on, received just now.
fn timing() -> ServerTiming {
    ServerTiming {
        recv_unix_ns: Some(now_unix_ns()),
        total_ns: Some(1_000_000),
        queue_ns: Some(100_000),
        infer_ns: Some(800_000),
        ..ServerTiming::default()
    }
}

fn keys(rec: &CallRecord) -> BTreeSet<String> {
    let v: serde_json::Value = serde_json::from_str(&rec.to_json_line()).unwrap();
    v.as_object().unwrap().keys().cloned().collect()
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_direct_call_writes_the_record_a_call_of_spans_writes() {
    let collect = Collect::default();
    let (layer, guard) = StageLayer::builder()
        .clock_mode(ClockMode::Trusted)
        .warmup_calls(0)
        .sink(collect.sink())
        .build()
        .unwrap();
    let direct = layer.direct_calls();
    let subscriber = tracing_subscriber::registry().with(layer);
    // The call made of spans: capture, transport with the server's timing,
    // dispatch with a sub-stage inside it.
    let tp_spans = tracing::subscriber::with_default(subscriber, || {
        let _call = info_span!("call", kind = "infer", seq = 7).entered();
        info_span!("capture").in_scope(|| spin_for(MS));
        let transport = info_span!("transport", peer = "ws://policy");
        let tp = transport.in_scope(|| {
            spin_for(MS);
            transport.record_server_timing(timing());
            spin_for(MS);
            transport.trace_parent().unwrap()
        });
        drop(transport);
        info_span!("dispatch").in_scope(|| {
            info_span!("stage", stage = "dispatch").in_scope(|| spin_for(MS));
        });
        tp
    });
    // The same call, timed directly.
    let mut call = direct.start(Some("infer"), Some(8));
    let host_figures = direct.host_figures();
    let t = Mark::of_stage(Stage::Capture, host_figures);
    spin_for(MS);
    call.add_stage(Stage::Capture, t, false);
    let mut transport = DirectTransport::start(Some("ws://policy"));
    spin_for(MS);
    transport.record_server_timing(timing());
    spin_for(MS);
    let tp_direct = call.trace_parent(Some(&transport));
    call.add_transport(&transport, false);
    let outer = Mark::of_stage(Stage::Dispatch, host_figures);
    let inner = Mark::of_stage(Stage::Dispatch, host_figures);
    spin_for(MS);
    call.add_stage(Stage::Dispatch, inner, true);
    call.add_stage(Stage::Dispatch, outer, false);
    direct.submit(&call);
    let summary = guard.finish();

    let rs = collect.records();
    assert_eq!(rs.len(), 2);
    let (spans, timed) = (&rs[0], &rs[1]);
    assert_eq!((spans.seq, timed.seq), (7, 8));
    assert_eq!(keys(spans), keys(timed));
    for r in [spans, timed] {
        assert_eq!(r.kind, "infer");
        assert!(r.get(Figure::Uplink).is_some(), "{}", r.to_json_line());
        // Nested dispatch: counted twice in dispatch, once in the gap.
        assert!(r.get(Figure::Dispatch).unwrap() >= 2_000_000);
        assert!(r.get(Figure::Gap).unwrap() >= 0);
    }
    // The traceparent names the record's trace and the transport's own id.
    assert_eq!(
        format!("{:032x}", u128::from_be_bytes(tp_direct.trace_id)),
        timed.trace_id.clone().unwrap()
    );
    assert_eq!(tp_direct.flags, tp_spans.flags);
    assert_ne!(tp_direct.trace_id, tp_spans.trace_id);
    assert_eq!(summary.calls, 2);
    assert_eq!((summary.queue_drops, summary.ignored_spans), (0, 0));
}

/// A sink that holds the worker in its first `on_record` until released.
struct Stall {
    entered: mpsc::Sender<()>,
    release: mpsc::Receiver<()>,
    first: bool,
}

impl RecordSink for Stall {
    fn on_record(&mut self, _rec: &CallRecord) {
        if std::mem::take(&mut self.first) {
            let _ = self.entered.send(());
            let _ = self.release.recv_timeout(Duration::from_secs(30));
        }
    }
}

#[test]
fn a_full_queue_drops_direct_calls_and_counts_them_without_blocking() {
    const CAPACITY: usize = 4;
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let (layer, guard) = StageLayer::builder()
        .queue_capacity(CAPACITY)
        .warmup_calls(0)
        .sink(Box::new(Stall {
            entered: entered_tx,
            release: release_rx,
            first: true,
        }))
        .build()
        .unwrap();
    let direct = layer.direct_calls();
    let one = || {
        let mut c = direct.start(Some("step"), None);
        c.add_stage(Stage::Capture, Mark::now(), false);
        direct.submit(&c);
    };
    one();
    // The worker now sits in the sink: the queue holds CAPACITY calls, the
    // rest are dropped at once.
    entered.recv_timeout(Duration::from_secs(30)).unwrap();
    for _ in 0..CAPACITY + 10 {
        one();
    }
    direct.count_ignored_stage();
    direct.count_rejected_header();
    direct.count_rejected_header();
    release.send(()).unwrap();
    let summary = guard.finish();
    assert_eq!(summary.calls, 1 + CAPACITY as u64);
    assert_eq!(summary.queue_drops, 10);
    assert_eq!((summary.ignored_spans, summary.rejected_headers), (1, 2));
}

/// A direct call made while a server handles a request continues the
/// caller's trace (its id and known flags), as a call span under
/// `remote_parent_span` does; its transport's relays reach the record.
#[test]
fn a_direct_call_continues_a_remote_parent_and_carries_its_transports_relays() {
    let collect = Collect::default();
    let (layer, guard) = StageLayer::builder()
        .clock_mode(ClockMode::Trusted)
        .warmup_calls(0)
        .sink(collect.sink())
        .build()
        .unwrap();
    let direct = layer.direct_calls();
    let caller =
        stagetrace::TraceParent::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-fe")
            .unwrap();
    let mut call = direct.start_continuing(Some(caller), Some("infer"), Some(1));
    let mut transport = DirectTransport::start(Some("ws://gateway"));
    spin_for(MS);
    let t = timing();
    transport.record_server_timing(t);
    let mut hops = stagetrace_wire::Hops::new();
    hops.push(stagetrace_wire::RelayTiming {
        recv_unix_ns: t.recv_unix_ns.unwrap() - 200_000,
        total_ns: 1_500_000,
        transfer_ns: None,
        forward_ns: 100_000,
        reply_ns: 1_300_000,
    });
    transport.record_hops(hops);
    spin_for(MS);
    let tp = call.trace_parent(Some(&transport));
    call.add_transport(&transport, false);
    direct.submit(&call);
    // Without a parent: a trace of its own.
    let own = direct.start_continuing(None, Some("infer"), Some(2));
    direct.submit(&own);
    guard.finish();

    let rs = collect.records();
    assert_eq!(rs.len(), 2);
    assert_eq!(
        rs[0].trace_id.as_deref(),
        Some("0af7651916cd43dd8448eb211c80319c")
    );
    // The caller's known flags (sampled 0, random 1), unknown bits cleared.
    assert_eq!((tp.trace_id, tp.flags), (caller.trace_id, 0x02));
    assert_ne!(tp.parent_id, caller.parent_id);
    // The relay's own time: 100 µs in + 200 µs out.
    assert_eq!(rs[0].get(Figure::Relay), Some(300_000));
    assert_eq!(rs[0].hops.len(), 2);
    assert_ne!(rs[1].trace_id, rs[0].trace_id);
    assert!(rs[1].hops.is_empty());
}
