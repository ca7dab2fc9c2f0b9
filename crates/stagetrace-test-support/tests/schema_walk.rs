//! One walk over the schema's figure table through every consumer: a call
//! with every figure is made under a real stage layer, and each figure of
//! the table must appear, with the record's value, in the written record,
//! in the summary window, in `stagetrace-analyze`'s parsed dataset and on
//! the call span `stagetrace-otlp` exports. A figure added to the table and
//! left out of any of them fails here. Calls alternate between a server
//! with full timing and one that reports none (its black box, `ttfb` and
//! `rx`, replaces the split): together they carry every figure, and each
//! consumer must show exactly the figures each record has. Every call's
//! action chunk goes to a remote executor whose ack (its own timing) splits
//! `dispatch` into `exec_tx` and `exec_wait`.
//!
//! Host figures: the robot's own (run-queue wait, CPU stall, the run wait
//! inside capture and dispatch) are read by the layer on every call; the
//! server's share rides in its timing, and the robot's kernel receive
//! stamp and request write on the calls with full timing. The robot's GC
//! time and the action queue's margin are the figures no span can carry
//! (only a language binding's direct call sets them, `DirectCall::set_gc`,
//! `set_action_queue`): they are left out here and walked by the Python
//! package's tests.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::Value;
use opentelemetry_sdk::trace::InMemorySpanExporter;
use stagetrace::{
    record::CallRecord, record::ClockBasis, ExecutorAck, ServerTiming, StageLayer, StageSpanExt,
};
use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_otlp::OtlpExporter;
use stagetrace_schema::Figure;
use stagetrace_test_support::{read_records, read_summaries, spin_for, Collect};
use stagetrace_wire::{Hops, RelayTiming};
use stagetrace_wire::{HostFigure, HostShare};
use tracing::info_span;
use tracing_subscriber::layer::SubscriberExt;

const CALLS: u64 = 6;

/// Whether call `seq` meets the server that reports no timing.
fn silent(seq: u64) -> bool {
    seq % 2 == 1
}

/// One call with every stage: capture, a transport span whose response
/// carries the server's full timing (so the split is estimated) — or, every
/// other call, no timing and the response's first byte — dispatch.
fn call(seq: u64) {
    let _call = info_span!("call", seq = seq).entered();
    // A log line through the timed writer: the call's log_write.
    let mut log = stagetrace::log_writer::TimedWriter::new(std::io::sink());
    std::io::Write::write_all(&mut log, b"capture starts\n").unwrap();
    info_span!("capture").in_scope(|| spin_for(Duration::from_micros(700)));
    let transport = info_span!("transport", peer = "127.0.0.1:9000");
    transport.in_scope(|| {
        spin_for(Duration::from_micros(50)); // encoding, then the write
        if !silent(seq) {
            transport.record_request_written(std::time::Instant::now());
        }
        spin_for(Duration::from_micros(350)); // uplink
        let recv = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        spin_for(Duration::from_millis(2)); // server
        if silent(seq) {
            transport.record_response_first_byte(std::time::Instant::now());
            spin_for(Duration::from_micros(300)); // downlink
            return;
        }
        spin_for(Duration::from_micros(300)); // downlink
                                              // The robot's kernel had the response 100 µs before its read.
        transport.record_response_kernel_rx(std::time::Instant::now());
        spin_for(Duration::from_micros(100));
        transport.record_server_timing(ServerTiming {
            recv_unix_ns: Some(recv),
            total_ns: Some(2_000_000),
            queue_ns: Some(250_000 + seq * 1000),
            infer_ns: Some(1_500_000 + seq * 1000),
            // The chunk held for the robot's poll (LeRobot's async shape).
            poll_wait_ns: Some(100_000),
            // Inference's parts, the device, queue's parts and the server's
            // wait before its previous write (issue 39's figures).
            pre_ns: Some(200_000),
            model_ns: Some(1_100_000 + seq * 1000),
            post_ns: Some(200_000),
            device_ns: Some(1_000_000),
            accept_wait_ns: Some(50_000),
            loop_wait_ns: Some(60_000),
            prev_tx_wait_ns: Some(30_000),
            host: server_host(seq),
            ..ServerTiming::default()
        });
        // Through a gateway: 50 µs in, 50 µs out (`relay`, the `hops` array).
        let mut hops = Hops::new();
        hops.push(RelayTiming {
            recv_unix_ns: recv - 100_000,
            total_ns: 2_200_000,
            transfer_ns: None,
            forward_ns: 50_000,
            reply_ns: 2_150_000,
        });
        transport.record_hops(hops);
    });
    let dispatch = info_span!("dispatch");
    dispatch.in_scope(|| {
        spin_for(Duration::from_micros(100)); // encoding
        let sent = std::time::Instant::now();
        spin_for(Duration::from_micros(300)); // to the executor
        let recv = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let wait = 400_000 + seq * 1000; // behind the previous action
        spin_for(Duration::from_nanos(wait + 100_000));
        spin_for(Duration::from_micros(200)); // the ack's way back
        let timing = ServerTiming {
            recv_unix_ns: Some(recv),
            total_ns: Some(wait + 100_000),
            queue_ns: Some(wait),
            ..ServerTiming::default()
        };
        let mut ack = ExecutorAck::new(
            "ws://127.0.0.1:9100",
            timing,
            sent,
            std::time::Instant::now(),
        );
        if !silent(seq) {
            // Through the gateway too: 30 µs before it forwards the chunk
            // (`exec_relay`), 50 µs before it sends the ack on.
            let mut hops = Hops::new();
            hops.push(RelayTiming {
                recv_unix_ns: recv - 150_000,
                total_ns: wait + 100_000 + 230_000,
                transfer_ns: None,
                forward_ns: 30_000,
                reply_ns: wait + 100_000 + 180_000,
            });
            ack = ack.hops(hops);
        }
        dispatch.record_executor_ack(ack);
    });
    // Time inside the call that no stage explains: the gap.
    spin_for(Duration::from_micros(200));
}

/// The server's host share: every figure, times in µs.
fn server_host(seq: u64) -> HostShare {
    let us = u32::try_from(seq).unwrap();
    HostShare::default()
        .with(HostFigure::RunWait, 120 + us)
        .with(HostFigure::CpuStall, 80 + us)
        .with(HostFigure::Gc, 40 + us)
        .with(HostFigure::RxWait, 30 + us)
        .with(HostFigure::InvoluntarySwitches, 2)
        .with(HostFigure::MinorFaults, 5)
        .with(HostFigure::MajorFaults, 1)
        .with(HostFigure::GcCollections, 1)
}

/// The robot's host figures the layer reads itself, on every call where
/// the host offers them (CPU stall needs the kernel's PSI).
fn robot_host(f: Figure) -> bool {
    match f {
        Figure::RunWait | Figure::CaptureRunWait | Figure::DispatchRunWait | Figure::LogWrite => {
            true
        }
        Figure::CpuStall => std::path::Path::new("/proc/pressure/cpu").exists(),
        _ => false,
    }
}

/// Figures only a language binding's direct call sets (the robot's GC
/// time, the action queue's margin): no span carries them.
fn binding_only(f: Figure) -> bool {
    matches!(f, Figure::Gc | Figure::Margin)
}

/// Whether `key` is an object key anywhere in `v`.
fn has_key(v: &serde_json::Value, key: &str) -> bool {
    match v {
        serde_json::Value::Object(m) => m.iter().any(|(k, v)| k == key || has_key(v, key)),
        serde_json::Value::Array(a) => a.iter().any(|v| has_key(v, key)),
        _ => false,
    }
}

/// A figure in ms, as the record writes it (µs resolution).
fn written_ms(f: Figure, ns: i64) -> f64 {
    f.to_unit(ns) * f.unit().ns() as f64 / 1e6
}

#[test]
fn every_figure_of_the_table_reaches_every_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let spans = InMemorySpanExporter::default();
    let exporter = OtlpExporter::builder()
        .service_name("schema-walk")
        .build_with_exporter(spans.clone())
        .unwrap();
    let kept = Collect::default();
    let (layer, guard) = StageLayer::builder()
        .output_dir(dir.path())
        .target_hz(100.0)
        .sink(kept.sink())
        .sink(Box::new(exporter.clone()))
        .build()
        .unwrap();
    // The host's CPU stall comes from a sampler (every 100 ms, started by
    // `build`): a call gets it once two samples precede it.
    std::thread::sleep(stagetrace::host::STALL_SAMPLE_PERIOD * 3);
    // The app wraps its log writer at set-up, before its first call.
    let _ = stagetrace::log_writer::timed(std::io::sink);
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        for seq in 0..CALLS {
            call(seq);
            std::thread::sleep(Duration::from_millis(3));
        }
    });
    let cumulative = guard.finish();
    assert!(exporter.flush(Duration::from_secs(10)));

    // 1. The written record: every figure, in the files as in the sink.
    let records = read_records(dir.path());
    assert_eq!(records.len() as u64, CALLS);
    let in_memory: Vec<String> = kept
        .records()
        .iter()
        .map(CallRecord::to_json_line)
        .collect();
    let in_files: Vec<String> = records.iter().map(CallRecord::to_json_line).collect();
    assert_eq!(in_files, in_memory);
    let missing: Vec<Figure> = Figure::ALL
        .into_iter()
        .filter(|&f| !binding_only(f) && records.iter().all(|r| r.get(f).is_none()))
        .collect();
    assert!(missing.is_empty(), "no record with {missing:?}");
    for r in &records {
        let clock = (!silent(r.seq)).then_some(ClockBasis::Estimate);
        assert_eq!(r.clock, clock, "{r:?}");
        let black_box = [Figure::Ttfb, Figure::Rx];
        let json: serde_json::Value = serde_json::from_str(&r.to_json_line()).unwrap();
        for f in Figure::ALL {
            // Full timing: every figure but the black box; none: the
            // black box and what needs no policy server (never queue or
            // infer; the executor has its own clock).
            let expected = (!binding_only(f) && black_box.contains(&f) == silent(r.seq)
                || robot_host(f)
                || matches!(
                    f,
                    Figure::Capture
                        | Figure::Dispatch
                        | Figure::ExecTx
                        | Figure::ExecWait
                        | Figure::ExecAck
                        | Figure::ExecOffset
                        | Figure::ExecErr
                        | Figure::Roundtrip
                        | Figure::E2e
                        | Figure::Gap
                        | Figure::Observer
                        | Figure::Late
                ))
                && (f != Figure::CpuStall || robot_host(f));
            // The server's send wait comes with the next answer: absent on
            // the last answered call.
            let expected = if f == Figure::ServerTxWait {
                !silent(r.seq) && (r.seq + 1..CALLS).any(|s| !silent(s))
            } else {
                expected
            };
            assert_eq!(r.get(f).is_some(), expected, "{f} of seq {}: {r:?}", r.seq);
            assert_eq!(
                json[f.field()].as_f64(),
                r.get(f).map(|ns| f.to_unit(ns)),
                "{f}"
            );
        }
    }

    // The per-hop `hops` array: on every call through the gateway, in the
    // file as in memory (the comparison above), two hops each.
    for r in &records {
        assert_eq!(r.hops.len(), if silent(r.seq) { 0 } else { 2 }, "{r:?}");
    }

    // 2. The summary window: call-time figures as distributions whose exact
    //    extremes are the records' own; the others in their sections.
    let windows = read_summaries(dir.path());
    assert_eq!(windows.last().unwrap().window, "cumulative");
    let summary_json: serde_json::Value = serde_json::from_str(&cumulative.to_json_line()).unwrap();
    for f in Figure::ALL.into_iter().filter(|&f| !binding_only(f)) {
        let values: Vec<i64> = records.iter().filter_map(|r| r.get(f)).collect();
        if f.is_call_time() {
            let s = cumulative
                .stages
                .get(f.name())
                .unwrap_or_else(|| panic!("summary without {f}: {}", cumulative.to_json_line()));
            assert_eq!(s.count, values.len() as u64, "{f}");
            assert_eq!(s.min, written_ms(f, *values.iter().min().unwrap()), "{f}");
            assert_eq!(s.max, written_ms(f, *values.iter().max().unwrap()), "{f}");
        } else {
            assert!(
                has_key(&summary_json, f.field()),
                "summary without {}: {summary_json}",
                f.field()
            );
        }
    }
    // The executor's clock apart from the policy server's, in the table too.
    let exec_clock = cumulative.executor_clock.unwrap();
    assert_eq!(exec_clock.calls, CALLS);
    assert!(cumulative.table().contains("executor clock: offset"));
    let clock = cumulative.clock.unwrap();
    assert_eq!(clock.calls, CALLS / 2);
    let last_rec = records
        .iter()
        .filter(|r| !silent(r.seq))
        .max_by_key(|r| r.seq)
        .unwrap();
    assert_eq!(
        clock.offset_ms.last,
        written_ms(Figure::Offset, last_rec.get(Figure::Offset).unwrap())
    );

    // 3. Analyze's dataset: every figure, by call, in ms.
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("records-")
        })
        .collect();
    let ds = Dataset::load(&files, LoadOptions::default()).unwrap();
    assert_eq!(ds.len() as u64, CALLS);
    for i in 0..ds.len() {
        let r = records.iter().find(|r| r.seq == ds.seq(i)).unwrap();
        for f in Figure::ALL {
            let want = r.get(f).map(|ns| written_ms(f, ns) as f32);
            // Columns are f32: equal to the written value at f32 precision.
            let got = ds.value(f, i).map(|v| v as f32);
            assert_eq!(got, want, "analyze's {f} of seq {}", r.seq);
        }
    }

    // 4. The exported call span: every figure as `stagetrace.<field>`.
    let finished = spans.get_finished_spans().unwrap();
    for r in &records {
        let trace = r.trace_id.clone().unwrap();
        let call = finished
            .iter()
            .find(|s| s.name == "call" && s.span_context.trace_id().to_string() == trace)
            .unwrap_or_else(|| panic!("no call span for trace {trace}"));
        for f in Figure::ALL {
            let key = format!("stagetrace.{}", f.field());
            let got = call
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.clone());
            let want = r.get(f).map(|ns| Value::F64(f.to_unit(ns)));
            assert_eq!(got, want, "{key}");
        }
        let hops = call
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "stagetrace.hops")
            .map(|kv| kv.value.to_string());
        let want =
            (!r.hops.is_empty()).then(|| stagetrace::hop_record::HopFigures::list_to_json(&r.hops));
        assert_eq!(hops, want, "stagetrace.hops");
        // The dispatch span carries the executor's split of it.
        let dispatch = finished
            .iter()
            .find(|s| s.name == "dispatch" && s.span_context.trace_id().to_string() == trace)
            .unwrap_or_else(|| panic!("no dispatch span for trace {trace}"));
        for f in [Figure::Dispatch, Figure::ExecTx, Figure::ExecWait] {
            let key = format!("stagetrace.{}", f.field());
            let got = dispatch
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.clone());
            assert_eq!(got, r.get(f).map(|ns| Value::F64(f.to_unit(ns))), "{key}");
        }
    }
}
