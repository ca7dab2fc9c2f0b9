//! What the exporter hands to an OpenTelemetry exporter, checked with the
//! SDK's in-memory exporter: span names, parents, ids, exact times and
//! attributes from synthetic records.

#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData, SpanExporter};
use stagetrace::record::{SpanTime, Timeline};
use stagetrace::{
    record::CallRecord, record::ClockBasis, record::ServerRecord, ServerTiming, TraceParent,
};
use stagetrace_otlp::OtlpExporter;
use stagetrace_schema::Figure;

const T0: u64 = 1_764_000_000_123_456_789;
const TRACE: [u8; 16] = [
    0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36,
];
const CALL_ID: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
const TRANSPORT_ID: [u8; 8] = [0xa0, 0xb1, 0xc2, 0xd3, 0xe4, 0xf5, 0x06, 0x17];

fn ms(v: f64) -> u64 {
    (v * 1e6) as u64
}

fn at(start_ms: f64, dur_ms: f64) -> Option<SpanTime> {
    Some(SpanTime {
        start_ns: ms(start_ms),
        dur_ns: ms(dur_ms),
    })
}

/// A call: capture 0–3 ms, transport 3–15 (uplink 3–5, queue 5–6, infer
/// 6–13, downlink 13–15), dispatch 15–19, call 20 ms.
fn record() -> CallRecord {
    CallRecord {
        seq: 42,
        ts_unix_ns: T0,
        kind: "infer".into(),
        trace_id: Some(stagetrace_wire::to_lc_hex(&TRACE)),
        figures: [
            (Figure::Capture, 3.0),
            (Figure::Uplink, 2.0),
            (Figure::Queue, 1.0),
            (Figure::Infer, 7.0),
            (Figure::Downlink, 2.0),
            (Figure::Dispatch, 4.0),
            (Figure::Roundtrip, 12.0),
            (Figure::Server, 8.0),
            (Figure::Net, 4.0),
            (Figure::E2e, 20.0),
            (Figure::Gap, 1.0),
            (Figure::Offset, 5.5),
            (Figure::SplitErr, 0.25),
        ]
        .into_iter()
        .map(|(f, v)| (f, ms(v) as i64))
        .chain([(Figure::Observer, 1_500)])
        .collect(),
        clock: Some(ClockBasis::Estimate),
        timeline: Timeline {
            call_start_unix_ns: T0,
            call_dur_ns: ms(20.0),
            capture: at(0.0, 3.0),
            transport: at(3.0, 12.0),
            uplink: at(3.0, 2.0),
            queue: at(5.0, 1.0),
            infer: at(6.0, 7.0),
            downlink: at(13.0, 2.0),
            dispatch: at(15.0, 4.0),
            transport_span_id: Some(TRANSPORT_ID),
            call_span_id: Some(CALL_ID),
            shared_context: false,
            response_first_byte_ns: None,
            ..Timeline::default()
        },
        ..CallRecord::default()
    }
}

fn export(
    builder: stagetrace_otlp::OtlpBuilder,
    f: impl FnOnce(&OtlpExporter),
) -> HashMap<String, SpanData> {
    let mem = InMemorySpanExporter::default();
    let exporter = builder
        .service_name("unit")
        .build_with_exporter(mem.clone())
        .unwrap();
    f(&exporter);
    assert!(exporter.flush(Duration::from_secs(10)));
    let spans = mem.get_finished_spans().unwrap();
    let by_name: HashMap<String, SpanData> = spans
        .iter()
        .map(|s| (s.name.to_string(), s.clone()))
        .collect();
    assert_eq!(
        by_name.len(),
        spans.len(),
        "span names are unique per trace"
    );
    by_name
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn time(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

#[test]
fn a_call_becomes_one_trace_with_the_stage_tree() {
    let rec = record();
    let spans = export(OtlpExporter::builder(), |e| assert!(e.export_call(&rec)));

    let mut names: Vec<&str> = spans.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "call",
            "capture",
            "dispatch",
            "downlink",
            "transport",
            "uplink"
        ],
        "server stages come from the server's exporter, not the client's"
    );

    let trace = TraceId::from_bytes(TRACE);
    for s in spans.values() {
        assert_eq!(
            s.span_context.trace_id(),
            trace,
            "{} is in the call's trace",
            s.name
        );
        assert!(s.span_context.is_sampled());
        assert_eq!(s.instrumentation_scope.name(), "stagetrace");
    }
    let call = &spans["call"];
    let transport = &spans["transport"];
    assert_eq!(call.span_context.span_id(), SpanId::from_bytes(CALL_ID));
    assert_eq!(call.parent_span_id, SpanId::INVALID);
    assert_eq!(
        transport.span_context.span_id(),
        SpanId::from_bytes(TRANSPORT_ID),
        "the transport span has the id sent as traceparent's parent id"
    );
    assert_eq!(transport.span_kind, SpanKind::Client);
    for child in ["capture", "transport", "dispatch"] {
        assert_eq!(
            spans[child].parent_span_id,
            SpanId::from_bytes(CALL_ID),
            "{child}"
        );
    }
    for child in ["uplink", "downlink"] {
        assert_eq!(
            spans[child].parent_span_id,
            SpanId::from_bytes(TRANSPORT_ID),
            "{child}"
        );
    }
    let ids: std::collections::HashSet<SpanId> =
        spans.values().map(|s| s.span_context.span_id()).collect();
    assert_eq!(ids.len(), spans.len(), "span ids are distinct");

    for (name, start, dur) in [
        ("call", 0.0, 20.0),
        ("capture", 0.0, 3.0),
        ("transport", 3.0, 12.0),
        ("uplink", 3.0, 2.0),
        ("downlink", 13.0, 2.0),
        ("dispatch", 15.0, 4.0),
    ] {
        let s = &spans[name];
        assert_eq!(s.start_time, time(T0 + ms(start)), "{name} start");
        assert_eq!(s.end_time, time(T0 + ms(start) + ms(dur)), "{name} end");
    }
}

#[test]
fn attributes_carry_stage_kind_seq_and_every_record_field() {
    let rec = record();
    let spans = export(OtlpExporter::builder(), |e| assert!(e.export_call(&rec)));
    for (name, s) in &spans {
        assert_eq!(
            attr(s, "stagetrace.kind"),
            Some(&Value::from("infer")),
            "{name}"
        );
        assert_eq!(attr(s, "stagetrace.seq"), Some(&Value::I64(42)), "{name}");
        if name != "call" {
            assert_eq!(
                attr(s, "stagetrace.stage"),
                Some(&Value::from(name.clone()))
            );
        }
    }
    let call = &spans["call"];
    for (key, v) in [
        ("stagetrace.e2e_ms", 20.0),
        ("stagetrace.capture_ms", 3.0),
        ("stagetrace.uplink_ms", 2.0),
        ("stagetrace.queue_ms", 1.0),
        ("stagetrace.infer_ms", 7.0),
        ("stagetrace.downlink_ms", 2.0),
        ("stagetrace.dispatch_ms", 4.0),
        ("stagetrace.roundtrip_ms", 12.0),
        ("stagetrace.server_ms", 8.0),
        ("stagetrace.net_ms", 4.0),
        ("stagetrace.gap_ms", 1.0),
        ("stagetrace.offset_ms", 5.5),
        ("stagetrace.split_err_ms", 0.25),
        ("stagetrace.observer_us", 1.5),
    ] {
        assert_eq!(attr(call, key), Some(&Value::F64(v)), "{key}");
    }
    assert_eq!(
        attr(call, "stagetrace.clock"),
        Some(&Value::from("estimate"))
    );
    assert!(
        attr(call, "stagetrace.failed").is_none(),
        "absent fields stay absent"
    );
    assert_eq!(call.status, Status::Unset);

    for name in ["uplink", "downlink"] {
        let s = &spans[name];
        assert_eq!(
            attr(s, "stagetrace.offset_ms"),
            Some(&Value::F64(5.5)),
            "{name}"
        );
        assert_eq!(
            attr(s, "stagetrace.split_err_ms"),
            Some(&Value::F64(0.25)),
            "{name}"
        );
        assert_eq!(
            attr(s, "stagetrace.synthesized"),
            Some(&Value::Bool(true)),
            "{name}"
        );
    }
    assert_eq!(
        attr(&spans["uplink"], "stagetrace.uplink_ms"),
        Some(&Value::F64(2.0))
    );
    assert_eq!(
        attr(&spans["transport"], "stagetrace.net_ms"),
        Some(&Value::F64(4.0))
    );
}

#[test]
fn server_spans_join_the_clients_transport_span() {
    let recv = T0 + ms(5.0);
    let server = ServerRecord {
        trace_parent: TraceParent::new(TRACE, TRANSPORT_ID, true),
        kind: "infer".into(),
        timing: ServerTiming {
            recv_unix_ns: Some(recv),
            total_ns: Some(ms(8.0)),
            queue_ns: Some(ms(1.0)),
            infer_ns: Some(ms(7.0)),
            pre_ns: Some(ms(0.5)),
            post_ns: None,
            ..ServerTiming::default()
        },
        error: None,
        ..ServerRecord::default()
    };
    let spans = export(OtlpExporter::builder(), |e| {
        assert!(e.export_server(&server))
    });
    let mut names: Vec<&str> = spans.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["infer", "queue"]);
    for s in spans.values() {
        assert_eq!(s.span_context.trace_id(), TraceId::from_bytes(TRACE));
        assert_eq!(s.parent_span_id, SpanId::from_bytes(TRANSPORT_ID));
        assert!(s.parent_span_is_remote);
        assert_eq!(s.span_kind, SpanKind::Server);
    }
    assert_eq!(spans["queue"].start_time, time(recv));
    assert_eq!(spans["queue"].end_time, time(recv + ms(1.0)));
    assert_eq!(spans["infer"].start_time, time(recv + ms(1.0)));
    assert_eq!(spans["infer"].end_time, time(recv + ms(8.0)));
    assert_eq!(
        attr(&spans["infer"], "stagetrace.infer_ms"),
        Some(&Value::F64(7.0))
    );
    assert_eq!(
        attr(&spans["infer"], "stagetrace.pre_ms"),
        Some(&Value::F64(0.5))
    );
    assert_eq!(
        attr(&spans["infer"], "stagetrace.server_ms"),
        Some(&Value::F64(8.0))
    );
    assert_eq!(
        attr(&spans["queue"], "stagetrace.stage"),
        Some(&Value::from("queue"))
    );
}

#[test]
fn a_server_request_without_context_gets_a_trace_of_its_own() {
    let server = ServerRecord {
        trace_parent: None,
        kind: "reset".into(),
        timing: ServerTiming {
            recv_unix_ns: Some(T0),
            total_ns: Some(ms(2.0)),
            infer_ns: Some(ms(1.5)),
            ..ServerTiming::default()
        },
        error: Some("model not loaded".into()),
        ..ServerRecord::default()
    };
    let spans = export(OtlpExporter::builder(), |e| {
        assert!(e.export_server(&server))
    });
    let root = &spans["request"];
    let infer = &spans["infer"];
    assert_eq!(root.parent_span_id, SpanId::INVALID);
    assert_eq!(infer.parent_span_id, root.span_context.span_id());
    assert_eq!(infer.span_context.trace_id(), root.span_context.trace_id());
    assert!(!infer.parent_span_is_remote);
    assert_eq!(infer.status, Status::error("model not loaded"));
    assert_eq!(root.end_time, time(T0 + ms(2.0)));
}

#[test]
fn server_stages_are_drawn_by_the_client_only_when_asked_or_degraded() {
    let rec = record();
    let spans = export(
        OtlpExporter::builder().synthesized_server_spans(true),
        |e| assert!(e.export_call(&rec)),
    );
    for (name, start, dur) in [("queue", 5.0, 1.0), ("infer", 6.0, 7.0)] {
        let s = &spans[name];
        assert_eq!(s.parent_span_id, SpanId::from_bytes(TRANSPORT_ID), "{name}");
        assert_eq!(s.start_time, time(T0 + ms(start)), "{name}");
        assert_eq!(s.end_time, time(T0 + ms(start) + ms(dur)), "{name}");
        assert_eq!(attr(s, "stagetrace.synthesized"), Some(&Value::Bool(true)));
    }

    // An unmodified server that only reports infer_ms exports nothing itself.
    let mut degraded = record();
    degraded.clock = Some(ClockBasis::Degraded);
    degraded.timeline.queue = None;
    degraded.figures.set(Figure::Queue, None);
    let spans = export(OtlpExporter::builder(), |e| {
        assert!(e.export_call(&degraded))
    });
    assert!(spans.contains_key("infer"));
    assert!(!spans.contains_key("queue"));
    assert_eq!(
        spans["infer"].parent_span_id,
        SpanId::from_bytes(TRANSPORT_ID)
    );
}

#[test]
fn local_inference_hangs_under_the_call() {
    let mut rec = record();
    rec.timeline.transport = None;
    rec.timeline.uplink = None;
    rec.timeline.downlink = None;
    rec.timeline.transport_span_id = None;
    rec.timeline.queue = None;
    rec.timeline.infer = at(3.0, 12.0);
    let spans = export(OtlpExporter::builder(), |e| assert!(e.export_call(&rec)));
    let mut names: Vec<&str> = spans.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["call", "capture", "dispatch", "infer"]);
    assert_eq!(spans["infer"].parent_span_id, SpanId::from_bytes(CALL_ID));
    assert_eq!(spans["infer"].end_time, time(T0 + ms(15.0)));
}

#[test]
fn a_failed_call_is_an_error_and_a_bare_record_still_has_its_times() {
    let rec = CallRecord {
        seq: 7,
        ts_unix_ns: 1_764_000_000_500_000_000,
        kind: "call".into(),
        figures: [(Figure::E2e, 12_500_000)].into_iter().collect(),
        failed: Some(true),
        error: Some("timeout".into()),
        ..CallRecord::default()
    };
    let spans = export(OtlpExporter::builder(), |e| assert!(e.export_call(&rec)));
    assert_eq!(spans.len(), 1);
    let call = &spans["call"];
    assert_eq!(call.status, Status::error("timeout"));
    assert_eq!(attr(call, "stagetrace.failed"), Some(&Value::Bool(true)));
    assert_eq!(
        attr(call, "stagetrace.error"),
        Some(&Value::from("timeout"))
    );
    assert_eq!(call.start_time, time(1_764_000_000_500_000_000));
    assert_eq!(call.end_time, time(1_764_000_000_512_500_000));
    assert_ne!(call.span_context.trace_id(), TraceId::INVALID);
}

#[test]
fn stats_count_what_was_exported() {
    let rec = record();
    let mem = InMemorySpanExporter::default();
    let exporter = OtlpExporter::builder()
        .batch_size(10)
        .build_with_exporter(mem.clone())
        .unwrap();
    for seq in 0..25 {
        let mut r = rec.clone();
        r.seq = seq;
        assert!(exporter.export_call(&r));
    }
    assert!(exporter.flush(Duration::from_secs(10)));
    let stats = exporter.stats();
    assert_eq!(stats.queued_records, 25);
    assert_eq!(stats.exported_records, 25);
    assert_eq!(stats.exported_spans, 25 * 6);
    assert_eq!(stats.dropped_records, 0);
    assert_eq!(stats.failed_exports, 0);
    assert_eq!(stats.collector_ok, Some(true));
    assert_eq!(mem.get_finished_spans().unwrap().len(), 25 * 6);
}

#[test]
fn spans_leave_on_the_interval_without_a_flush() {
    let mem = InMemorySpanExporter::default();
    let exporter = OtlpExporter::builder()
        .export_interval(Duration::from_millis(50))
        .build_with_exporter(mem.clone())
        .unwrap();
    assert!(exporter.export_call(&record()));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while mem.get_finished_spans().unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "batch never sent on its interval"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(mem.get_finished_spans().unwrap().len(), 6);
}

/// The in-memory exporter, minus its reset on shutdown (so the spans sent
/// while shutting down can be inspected afterwards).
#[derive(Debug)]
struct KeepOnShutdown(InMemorySpanExporter);

impl SpanExporter for KeepOnShutdown {
    async fn export(&self, batch: Vec<SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.export(batch).await
    }
}

#[test]
fn dropping_the_exporter_sends_what_is_queued() {
    let mem = InMemorySpanExporter::default();
    let exporter = OtlpExporter::builder()
        .export_interval(Duration::from_secs(3600))
        .build_with_exporter(KeepOnShutdown(mem.clone()))
        .unwrap();
    let clone = exporter.clone();
    assert!(exporter.export_call(&record()));
    drop(exporter);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        mem.get_finished_spans().unwrap().is_empty(),
        "a clone keeps the thread"
    );
    drop(clone);
    assert_eq!(mem.get_finished_spans().unwrap().len(), 6);
}

#[test]
fn with_a_shared_context_only_the_synthesized_spans_are_exported() {
    // The app's tracing-opentelemetry layer exports call, capture, transport,
    // dispatch (and local inference); stagetrace adds uplink and downlink
    // under the app's transport span, and the record rides on them.
    let mut rec = record();
    rec.timeline.shared_context = true;
    let spans = export(OtlpExporter::builder(), |e| assert!(e.export_call(&rec)));
    let mut names: Vec<&str> = spans.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["downlink", "uplink"]);
    for s in spans.values() {
        assert_eq!(s.span_context.trace_id(), TraceId::from_bytes(TRACE));
        assert_eq!(s.parent_span_id, SpanId::from_bytes(TRANSPORT_ID));
    }
    let up = &spans["uplink"];
    assert_eq!(up.start_time, time(T0 + ms(3.0)));
    assert_eq!(attr(up, "stagetrace.e2e_ms"), Some(&Value::F64(20.0)));
    let keys: Vec<&str> = up.attributes.iter().map(|kv| kv.key.as_str()).collect();
    let mut unique = keys.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(keys.len(), unique.len(), "no attribute twice: {keys:?}");

    // A degraded server exports nothing: its infer is drawn here too.
    rec.clock = Some(ClockBasis::Degraded);
    let spans = export(OtlpExporter::builder(), |e| assert!(e.export_call(&rec)));
    assert!(spans.contains_key("infer"));
    assert!(!spans.contains_key("call") && !spans.contains_key("capture"));

    // No transport: nothing of ours to add.
    rec.timeline.transport = None;
    let spans = export(OtlpExporter::builder(), |e| assert!(e.export_call(&rec)));
    assert!(spans.is_empty(), "{:?}", spans.keys());
}

/// Every figure of the schema table, when the record has it, is an
/// attribute of the exported call span under its record name and unit.
#[test]
fn every_figure_of_the_table_reaches_the_call_span() {
    let mut rec = record();
    for (i, f) in Figure::ALL.into_iter().enumerate() {
        // Distinct values, one per figure, with sub-unit digits to check rounding.
        rec.set(f, (i as i64 + 1) * 1_234_567);
    }
    let spans = export(OtlpExporter::builder(), |e| assert!(e.export_call(&rec)));
    let call = &spans["call"];
    for f in Figure::ALL {
        let key = format!("stagetrace.{}", f.field());
        let want = f.to_unit(rec.get(f).unwrap());
        assert_eq!(attr(call, &key), Some(&Value::F64(want)), "{key}");
    }
}

/// A server that reports no timing: capture 0–3 ms, transport 3–15 with the
/// response's first byte at 11 ms (ttfb 8, rx 4), dispatch 15–19.
fn silent_record() -> CallRecord {
    let mut rec = record();
    rec.figures = [
        (Figure::Capture, 3.0),
        (Figure::Dispatch, 4.0),
        (Figure::Roundtrip, 12.0),
        (Figure::Ttfb, 8.0),
        (Figure::Rx, 4.0),
        (Figure::E2e, 20.0),
        (Figure::Gap, 1.0),
    ]
    .into_iter()
    .map(|(f, v)| (f, ms(v) as i64))
    .collect();
    rec.clock = None;
    let tl = &mut rec.timeline;
    (tl.uplink, tl.queue, tl.infer, tl.downlink) = (None, None, None, None);
    tl.response_first_byte_ns = Some(ms(11.0));
    rec
}

#[test]
fn a_silent_servers_roundtrip_is_a_labelled_black_box_never_inference() {
    let rec = silent_record();
    let spans = export(
        OtlpExporter::builder().synthesized_server_spans(true),
        |e| assert!(e.export_call(&rec)),
    );
    let mut names: Vec<&str> = spans.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "call",
            "capture",
            "dispatch",
            "rx",
            "transport",
            stagetrace_otlp::BLACK_BOX_SPAN,
        ]
    );
    let transport = spans["transport"].span_context.span_id();
    let b = &spans[stagetrace_otlp::BLACK_BOX_SPAN];
    let rx = &spans["rx"];
    for s in [b, rx] {
        assert_eq!(s.parent_span_id, transport);
        assert_eq!(attr(s, "stagetrace.synthesized"), Some(&Value::Bool(true)));
    }
    assert_eq!(
        (b.start_time, b.end_time),
        (time(T0 + ms(3.0)), time(T0 + ms(11.0)))
    );
    assert_eq!(
        (rx.start_time, rx.end_time),
        (time(T0 + ms(11.0)), time(T0 + ms(15.0)))
    );
    assert_eq!(attr(b, "stagetrace.ttfb_ms"), Some(&Value::F64(8.0)));
    assert_eq!(attr(rx, "stagetrace.rx_ms"), Some(&Value::F64(4.0)));
    assert_eq!(
        attr(b, "stagetrace.black_box"),
        Some(&Value::from(stagetrace_schema::BLACK_BOX_NOTE))
    );
    // The call span carries both figures with the rest of the record.
    assert_eq!(
        attr(&spans["call"], "stagetrace.ttfb_ms"),
        Some(&Value::F64(8.0))
    );
}

const DISPATCH_ID: [u8; 8] = [0xd1; 8];
const FORWARD_ID: [u8; 8] = [0xf0, 1, 2, 3, 4, 5, 6, 7];

/// `record()` through one gateway: transport 3–15 ms, hops client →
/// gateway 3–4, gateway → server 4.5–5, server → gateway 13–13.5, gateway
/// → client 14–15; dispatch 15–19 to a remote executor: the chunk 15–16,
/// its wait 16–17.5, the ack 17.5–19.
fn relayed_record() -> CallRecord {
    let mut rec = record();
    let hop = |up: f64, down: f64| stagetrace::hop_record::HopFigures {
        up_ns: Some(ms(up) as i64),
        down_ns: Some(ms(down) as i64),
        net_ns: Some(ms(up + down) as i64),
        offset_ns: Some(ms(300.0) as i64),
        err_ns: Some(ms(0.1) as i64),
        ..stagetrace::hop_record::HopFigures::default()
    };
    rec.hops = vec![hop(1.0, 1.0), hop(0.5, 0.5)];
    let tl = &mut rec.timeline;
    tl.hops[0] = stagetrace::record::HopTime {
        up: at(3.0, 1.0),
        down: at(14.0, 1.0),
    };
    tl.hops[1] = stagetrace::record::HopTime {
        up: at(4.5, 0.5),
        down: at(13.0, 0.5),
    };
    tl.dispatch_span_id = Some(DISPATCH_ID);
    for (f, v) in [
        (Figure::Dispatch, 2.5),
        (Figure::ExecTx, 1.0),
        (Figure::ExecWait, 1.5),
        (Figure::ExecAck, 1.5),
    ] {
        rec.set(f, ms(v) as i64);
    }
    rec
}

#[test]
fn relayed_hops_and_the_executors_hops_are_spans_of_their_own_where_the_record_puts_them() {
    let rec = relayed_record();
    let spans = export(OtlpExporter::builder(), |e| assert!(e.export_call(&rec)));
    let id = |name: &str| spans[name].span_context.span_id();
    let dispatch = SpanId::from_bytes(DISPATCH_ID);
    assert_eq!(
        id("dispatch"),
        dispatch,
        "the dispatch span has the id sent to the executor"
    );
    for (name, parent, start, dur, hop) in [
        ("uplink client → gateway", id("uplink"), 3.0, 1.0, Some(0)),
        ("uplink gateway → server", id("uplink"), 4.5, 0.5, Some(1)),
        (
            "downlink server → gateway",
            id("downlink"),
            13.0,
            0.5,
            Some(1),
        ),
        (
            "downlink gateway → client",
            id("downlink"),
            14.0,
            1.0,
            Some(0),
        ),
        ("uplink client → executor", dispatch, 15.0, 1.0, None),
        ("ack executor → client", dispatch, 17.5, 1.5, None),
    ] {
        let s = &spans[name];
        assert_eq!(s.parent_span_id, parent, "{name}");
        assert_eq!(s.start_time, time(T0 + ms(start)), "{name} start");
        assert_eq!(s.end_time, time(T0 + ms(start) + ms(dur)), "{name} end");
        assert_eq!(
            attr(s, "stagetrace.synthesized"),
            Some(&Value::Bool(true)),
            "{name}"
        );
        assert_eq!(
            attr(s, "stagetrace.hop").cloned(),
            hop.map(Value::I64),
            "{name}"
        );
    }
    assert_eq!(
        attr(&spans["uplink gateway → server"], "stagetrace.hop.up_ms"),
        Some(&Value::F64(0.5))
    );
    assert_eq!(
        attr(&spans["uplink client → executor"], "stagetrace.exec_tx_ms"),
        Some(&Value::F64(1.0))
    );
    assert_eq!(spans.len(), 12);
}

#[test]
fn a_gateways_record_is_its_relay_span_under_the_callers_transport_and_its_forward_span() {
    let recv = T0 + ms(4.0);
    let gateway = ServerRecord {
        trace_parent: TraceParent::new(TRACE, TRANSPORT_ID, true),
        kind: "infer".into(),
        timing: ServerTiming {
            recv_unix_ns: Some(recv),
            total_ns: Some(ms(10.0)),
            infer_ns: Some(ms(10.0)),
            ..ServerTiming::default()
        },
        role: stagetrace::record::ServiceRole::Relay,
        forward: Some(stagetrace::record::Forwarded {
            span_id: Some(FORWARD_ID),
            forward_ns: ms(0.5),
            reply_ns: ms(9.5),
        }),
        ..ServerRecord::default()
    };
    let spans = export(OtlpExporter::builder(), |e| {
        let hook = e.server_hook();
        hook(&gateway);
    });
    let mut names: Vec<&str> = spans.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["forward", "relay"]);
    let (relay, forward) = (&spans["relay"], &spans["forward"]);
    assert_eq!(relay.span_context.trace_id(), TraceId::from_bytes(TRACE));
    assert_eq!(relay.parent_span_id, SpanId::from_bytes(TRANSPORT_ID));
    assert!(relay.parent_span_is_remote);
    assert_eq!(relay.span_kind, SpanKind::Server);
    assert_eq!(
        (relay.start_time, relay.end_time),
        (time(recv), time(recv + ms(10.0)))
    );
    assert_eq!(
        forward.span_context.span_id(),
        SpanId::from_bytes(FORWARD_ID),
        "the forward span has the id the gateway sent downstream"
    );
    assert_eq!(forward.parent_span_id, relay.span_context.span_id());
    assert!(!forward.parent_span_is_remote);
    assert_eq!(forward.span_kind, SpanKind::Client);
    assert_eq!(
        (forward.start_time, forward.end_time),
        (time(recv + ms(0.5)), time(recv + ms(9.5)))
    );
    // Its own time: 0.5 ms in, 0.5 ms out.
    assert_eq!(attr(relay, "stagetrace.relay_ms"), Some(&Value::F64(1.0)));
    assert_eq!(attr(relay, "stagetrace.role"), Some(&Value::from("relay")));
}

#[test]
fn an_executors_record_is_its_wait_under_the_robots_dispatch_span() {
    let recv = T0 + ms(16.0);
    let executor = ServerRecord {
        trace_parent: TraceParent::new(TRACE, DISPATCH_ID, true),
        kind: "call".into(),
        timing: ServerTiming {
            recv_unix_ns: Some(recv),
            total_ns: Some(ms(1.6)),
            queue_ns: Some(ms(1.5)),
            infer_ns: Some(ms(0.1)),
            ..ServerTiming::default()
        },
        role: stagetrace::record::ServiceRole::Executor,
        ..ServerRecord::default()
    };
    let spans = export(OtlpExporter::builder(), |e| {
        assert!(e.export_server(&executor))
    });
    let names: Vec<&str> = spans.keys().map(String::as_str).collect();
    assert_eq!(names, ["exec_wait"]);
    let wait = &spans["exec_wait"];
    assert_eq!(wait.span_context.trace_id(), TraceId::from_bytes(TRACE));
    assert_eq!(wait.parent_span_id, SpanId::from_bytes(DISPATCH_ID));
    assert!(wait.parent_span_is_remote);
    assert_eq!(
        (wait.start_time, wait.end_time),
        (time(recv), time(recv + ms(1.5)))
    );
    assert_eq!(
        attr(wait, "stagetrace.exec_wait_ms"),
        Some(&Value::F64(1.5))
    );
    assert_eq!(
        attr(wait, "stagetrace.role"),
        Some(&Value::from("executor"))
    );
}

#[test]
fn a_gateway_that_failed_before_forwarding_is_one_relay_span_with_the_error() {
    let gateway = ServerRecord {
        trace_parent: TraceParent::new(TRACE, TRANSPORT_ID, true),
        kind: "infer".into(),
        timing: ServerTiming {
            recv_unix_ns: Some(T0),
            total_ns: Some(ms(2.0)),
            ..ServerTiming::default()
        },
        error: Some("relay: policy server refused the connection".into()),
        role: stagetrace::record::ServiceRole::Relay,
        forward: None,
    };
    let spans = export(OtlpExporter::builder(), |e| {
        assert!(e.export_server(&gateway))
    });
    let names: Vec<&str> = spans.keys().map(String::as_str).collect();
    assert_eq!(names, ["relay"]);
    let relay = &spans["relay"];
    assert_eq!(relay.parent_span_id, SpanId::from_bytes(TRANSPORT_ID));
    assert_eq!(
        relay.status,
        Status::error("relay: policy server refused the connection")
    );
    // Never forwarded: all of it was its own time.
    assert_eq!(attr(relay, "stagetrace.relay_ms"), Some(&Value::F64(2.0)));
}
