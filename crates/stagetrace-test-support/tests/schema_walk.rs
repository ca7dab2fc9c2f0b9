//! One walk over the schema's figure table through every consumer: a call
//! with every figure is made under a real stage layer, and each figure of
//! the table must appear, with the record's value, in the written record,
//! in the summary window, in `stagetrace-analyze`'s parsed dataset and on
//! the call span `stagetrace-otlp` exports. A figure added to the table and
//! left out of any of them fails here.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::Value;
use opentelemetry_sdk::trace::InMemorySpanExporter;
use stagetrace::{CallRecord, ClockBasis, Figure, ServerTiming, StageLayer, StageSpanExt};
use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_otlp::OtlpExporter;
use stagetrace_test_support::{read_records, read_summaries, spin_for, Collect};
use tracing::info_span;
use tracing_subscriber::layer::SubscriberExt;

const CALLS: u64 = 5;

/// One call with every stage: capture, a transport span whose response
/// carries the server's full timing (so the split is estimated), dispatch.
fn call(seq: u64) {
    let _call = info_span!("call", seq = seq).entered();
    info_span!("capture").in_scope(|| spin_for(Duration::from_micros(700)));
    let transport = info_span!("transport", peer = "127.0.0.1:9000");
    transport.in_scope(|| {
        spin_for(Duration::from_micros(400)); // uplink
        let recv = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        spin_for(Duration::from_millis(2)); // server
        spin_for(Duration::from_micros(300)); // downlink
        transport.record_server_timing(ServerTiming {
            recv_unix_ns: Some(recv),
            total_ns: Some(2_000_000),
            queue_ns: Some(250_000 + seq * 1000),
            infer_ns: Some(1_500_000 + seq * 1000),
            ..ServerTiming::default()
        });
    });
    info_span!("dispatch").in_scope(|| spin_for(Duration::from_micros(500)));
    // Time inside the call that no stage explains: the gap.
    spin_for(Duration::from_micros(200));
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
    for r in &records {
        assert_eq!(r.clock, Some(ClockBasis::Estimate), "{r:?}");
        let json: serde_json::Value = serde_json::from_str(&r.to_json_line()).unwrap();
        for f in Figure::ALL {
            let ns = r
                .get(f)
                .unwrap_or_else(|| panic!("record without {f}: {r:?}"));
            assert_eq!(json[f.field()].as_f64(), Some(f.to_unit(ns)), "{f}");
        }
    }

    // 2. The summary window: call-time figures as distributions whose exact
    //    extremes are the records' own; the others in their sections.
    let windows = read_summaries(dir.path());
    assert_eq!(windows.last().unwrap().window, "cumulative");
    let summary_json: serde_json::Value = serde_json::from_str(&cumulative.to_json_line()).unwrap();
    for f in Figure::ALL {
        let values: Vec<i64> = records.iter().map(|r| r.get(f).unwrap()).collect();
        if f.is_call_time() {
            let s = cumulative
                .stages
                .get(f.name())
                .unwrap_or_else(|| panic!("summary without {f}: {}", cumulative.to_json_line()));
            assert_eq!(s.count, CALLS, "{f}");
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
    let clock = cumulative.clock.unwrap();
    assert_eq!(clock.calls, CALLS);
    let last_rec = records.iter().max_by_key(|r| r.seq).unwrap();
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
            let want = written_ms(f, r.get(f).unwrap());
            let got = ds
                .value(f, i)
                .unwrap_or_else(|| panic!("analyze did not read {f} of seq {}", r.seq));
            // Columns are f32: equal to the written value at f32 precision.
            assert_eq!(got as f32, want as f32, "{f} of seq {}", r.seq);
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
            assert_eq!(got, Some(Value::F64(f.to_unit(r.get(f).unwrap()))), "{key}");
        }
    }
}
